package detect

import (
	"fmt"
	"iter"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Engine is one engine's part of the built-in signals: the `detector:`
// section of its signal map (rulesets/README.md). The detector joins the
// engines' parts with `or`, in the engine list's order, so one trigger
// works against any engine. Placeholders as in Trigger.Expr, plus $target
// (a target's labels) and $scopeonly (the scope labels a target's series
// take from its engine series).
type Engine struct {
	// Name is the map's engine.
	Name string `yaml:"-"`
	// TTFT and ITL are the histogram families of time to first token and
	// inter-token latency, newest name first; `name{matchers}` adds label
	// matchers to the family's selectors.
	TTFT []string `yaml:"ttft"`
	ITL  []string `yaml:"itl"`
	// Queue are the waiting-queue gauges.
	Queue []string `yaml:"queue"`
	// Success are PromQL, by $by: the share of finished requests the
	// engine did not fail (a client abort is not a failure).
	Success []string `yaml:"success"`
	// SuccessVolume are PromQL, by $by: the finished requests over $window.
	SuccessVolume []string `yaml:"success_volume"`
	// HTTP are the API server's status counters, for engines whose finish
	// reasons cannot tell a failure from a client abort.
	HTTP []HTTPCounter `yaml:"http"`
	// Requests are the finished-requests counters: with TTFT's _count,
	// where the engine's history starts (HistorySeries).
	Requests []string `yaml:"requests"`
}

// HTTPCounter is an API server's request counter. Its series carry no
// scope labels: each takes them from the engine series of its target.
type HTTPCounter struct {
	// Counter is the metric name, e.g. http_requests_total.
	Counter string `yaml:"counter"`
	// Errors selects the server's failures (`status=~"5.."`); Requests
	// the requests counted (may be empty: all).
	Errors   string `yaml:"errors"`
	Requests string `yaml:"requests"`
	// EngineSeries is a gauge of the engine's, one series per target and
	// scope, that lends the counter its scope labels.
	EngineSeries string `yaml:"engine_series"`
}

// ParseEngine reads the `detector:` section of an engine's signal map.
func ParseEngine(name string, mapYAML []byte) (Engine, error) {
	var doc struct {
		Detector Engine `yaml:"detector"`
	}
	if err := yaml.Unmarshal(mapYAML, &doc); err != nil {
		return Engine{}, fmt.Errorf("engine %s: detector: %w", name, err)
	}
	doc.Detector.Name = name
	return doc.Detector, nil
}

// ReadEngines reads the `detector:` section of each engine's map, in the
// order given (rulesets.Maps.Files: the shipped maps and a user's).
func ReadEngines(maps iter.Seq2[string, []byte]) ([]Engine, error) {
	var out []Engine
	for name, b := range maps {
		e, err := ParseEngine(name, b)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// HistorySeries are the series whose presence marks an engine's history
// (the request counts the built-in triggers read: TTFT's _count, then the
// finished-requests counters), with $sel for the selector's matchers.
func HistorySeries(engines []Engine) []string {
	var out []string
	for _, e := range engines {
		for _, f := range e.TTFT {
			out = append(out, Selector(f, "_count"))
		}
	}
	for _, e := range engines {
		for _, r := range e.Requests {
			out = append(out, Selector(r, ""))
		}
	}
	return out
}

// templates are the built-in signals' PromQL over a set of engines.
type templates struct {
	expr, volume, mean map[string]string
}

// Built-in signals with a request count (for MinRequests) and with a mean
// (for MeanRatio); the templates are empty without engines.
var (
	withVolume = map[string]bool{SignalTTFTP95: true, SignalTPOTP95: true, SignalSuccessRate: true}
	withMean   = map[string]bool{SignalTTFTP95: true, SignalTPOTP95: true}
)

// buildTemplates joins the engines' parts into the built-in signals.
func buildTemplates(engines []Engine) templates {
	var ttft, itl, queue, success, successVol, http []string
	for _, e := range engines {
		ttft = append(ttft, e.TTFT...)
		itl = append(itl, e.ITL...)
		queue = append(queue, e.Queue...)
		success = append(success, e.Success...)
		successVol = append(successVol, e.SuccessVolume...)
		for _, h := range e.HTTP {
			http = append(http, `(1 - `+httpScoped(h.Counter, h.Errors, h.EngineSeries)+` / `+httpScoped(h.Counter, h.Requests, h.EngineSeries)+`)`)
		}
	}
	tm := templates{expr: map[string]string{}, volume: map[string]string{}, mean: map[string]string{}}
	if len(ttft) > 0 {
		tm.expr[SignalTTFTP95] = histQuantile(ttft)
		tm.mean[SignalTTFTP95] = histMean(ttft)
		tm.volume[SignalTTFTP95] = histVolume(ttft)
	}
	if len(itl) > 0 {
		tm.expr[SignalTPOTP95] = histQuantile(itl)
		tm.mean[SignalTPOTP95] = histMean(itl)
		tm.volume[SignalTPOTP95] = tm.volume[SignalTTFTP95]
	}
	if len(queue) > 0 {
		tm.expr[SignalQueueGrowth] = joinEach(queue, func(sel func(string) string) string { return `sum by ($by) (deriv(` + sel("") + `[$window]))` })
	}
	// Server-side failures only, the lower of the engine's own success
	// rate and its API server's.
	engine, api := strings.Join(success, " or "), strings.Join(http, " or ")
	switch {
	case engine != "" && api != "":
		tm.expr[SignalSuccessRate] = `((` + engine + `) < (` + api + `)) or (` + api + `) or (` + engine + `)`
	case engine != "" || api != "":
		tm.expr[SignalSuccessRate] = engine + api
	}
	if len(successVol) > 0 {
		tm.volume[SignalSuccessRate] = strings.Join(successVol, " or ")
	}
	return tm
}

// Selector renders a family (`name` or `name{matchers}`) with a suffix
// (`_count`) as a vector selector over $sel and the family's matchers.
func Selector(family, suffix string) string {
	name, extra, _ := strings.Cut(family, "{")
	sel := "$sel"
	if extra = strings.TrimSuffix(extra, "}"); extra != "" {
		sel += " " + extra
	}
	return name + suffix + "{" + sel + "}"
}

// joinEach renders each family and joins them with `or`: the first
// present wins. render gets the family's selector for a suffix.
func joinEach(families []string, render func(sel func(suffix string) string) string) string {
	parts := make([]string, len(families))
	for i, f := range families {
		parts[i] = render(func(suffix string) string { return Selector(f, suffix) })
	}
	return strings.Join(parts, " or ")
}

// histQuantile is the p95 of the first histogram present among families.
func histQuantile(families []string) string {
	return `histogram_quantile(0.95, sum by (le, $by) (` +
		joinEach(families, func(sel func(string) string) string { return `rate(` + sel("_bucket") + `[$window])` }) + `))`
}

// histMean is the exact mean (rate of _sum over rate of _count) of the
// first histogram present among families.
func histMean(families []string) string {
	return joinEach(families, func(sel func(string) string) string {
		return "(sum by ($by) (rate(" + sel("_sum") + "[$window])) / sum by ($by) (rate(" + sel("_count") + "[$window])))"
	})
}

// histVolume counts the observations of the first histogram present.
func histVolume(families []string) string {
	return joinEach(families, func(sel func(string) string) string { return `sum by ($by) (increase(` + sel("_count") + `[$window]))` })
}

// httpScoped is rate(counter{match}) per scope: each series takes the
// scope labels of the engine series of its target (the same pod and
// instance: the API server's counters come with the engine's scrape);
// series without a target label are left out rather than matched to
// every scope.
func httpScoped(counter, match, engineSeries string) string {
	return `sum by ($by) (rate(` + counter + `{` + match + `}[$window]) * on ($target) group_left ($scopeonly) ` + oneScopeTargets(engineSeries) + `)`
}

// oneScopeTargets is one series per target that serves exactly one scope,
// with the scope's labels: a target that serves several (one server for
// two models) cannot say whose its HTTP errors were.
func oneScopeTargets(engineSeries string) string {
	scoped := `max by ($target, $by) (` + engineSeries + `{$sel instance=~".+"})`
	return `(` + scoped + ` and on ($target) (count by ($target) (` + scoped + `) == 1))`
}
