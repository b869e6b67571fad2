// Package chart draws the picture on-call engineers look at before reading:
// TTFT p95, ITL/TPOT p95, KV-cache usage, queue depth, request rate,
// preemptions and failed requests (with a line per target on the KV-cache
// panel when the verdict names several), on one clock-time axis from
// before the baseline to the incident's end with both windows shaded
// (span.go), or,
// for a baseline over MaxContinuous back, the incident window drawn over
// the baseline window, as one PNG. Build fetches the curves with
// range queries from any query.Metrics; the chart model (model.go) holds
// every rule about the curves' gaps, the axes, their ticks and labels, for
// this PNG and daemon/web's SVG alike; Render draws it (render.go) with
// the standard library's image packages, golang.org/x/image/vector's
// antialiasing rasterizer and basicfont's 7×13 bitmap font: no TrueType
// fonts and no plotting library in the binary.
package chart

// docs/img/kv_pressure.png is `whyslow why --bundle
// testdata/incidents/kv_pressure --chart ...`: go generate ./cmd/whyslow
// rewrites it, and cmd/whyslow's docs test checks it.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/model"

	"github.com/whyslow/whyslow/query"
	"github.com/whyslow/whyslow/rulesets"
	"github.com/whyslow/whyslow/verdict"
)

// Units of a panel.
const (
	UnitSeconds  = "seconds"
	UnitFraction = "fraction"
	UnitCount    = "requests"
	UnitRate     = "req/s"
	UnitPreempt  = "preemptions/s"
	UnitMHz      = "MHz"
)

// Point is one sample of a curve.
type Point struct {
	T time.Time
	V float64
}

// Panel is one of the chart's plots: a curve over the incident window and
// the same curve over the baseline window.
type Panel struct {
	// Title names the signal, e.g. "TTFT p95".
	Title string
	// Unit is UnitSeconds, UnitFraction or UnitCount.
	Unit string
	// Query is the PromQL expression the curves came from ("" if none had data).
	Query string
	// Incident and Baseline are the samples in time order.
	Incident []Point
	Baseline []Point
	// Replicas are the curve per target over Data.Span, for the verdict's
	// targets (ForVerdict; the KV-cache panel, when the verdict names
	// several targets); empty otherwise.
	Replicas []Replica
}

// Replica is one target's curve of a panel.
type Replica struct {
	// Name is the target's label values, joined by "/".
	Name   string
	Points []Point
}

// Data is everything the chart shows.
type Data struct {
	// Title is drawn above the panels.
	Title string
	// Incident and Baseline are the two windows; without Span, x is time
	// since each window's start, so the curves lie on top of each other.
	Incident verdict.Window
	Baseline verdict.Window
	// Span, when set, is the one span the curves were fetched over (in
	// Panel.Incident, with gaps where the source had none; Panel.Baseline
	// is empty): they are drawn on one clock-time axis over it, the
	// Incident and Baseline windows shaded on it.
	Span verdict.Window
	// Onset is when the incident opened, marked on a Span chart (zero:
	// not marked).
	Onset time.Time
	// Panels are drawn two to a row.
	Panels []Panel
}

// Options tune Build. Zero values get defaults.
type Options struct {
	// Step is the range query resolution (default: the window / 120, at
	// least 1s).
	Step time.Duration
	// RateWindow is the range of rate() for the quantiles (default 1m, at
	// least 4 steps).
	RateWindow time.Duration
	// Engine puts that engine's metric names first (vllm, sglang, trtllm);
	// empty or auto: the verdict's.
	Engine string
	// Onset is when the incident opened (the daemon's incident), marked
	// on ForVerdict's chart when it lies on its time axis; zero: none.
	Onset time.Time
}

// signal is one panel's definition: alternative expressions, first with
// data wins. %s is the metric selector's braces content, %r the rate range.
type signal struct {
	title string
	unit  string
	exprs []engineExpr
	// optional: a panel without data is left out, not drawn empty (a
	// signal some engines' maps lack).
	optional bool
}

// engineExpr is one alternative and the engine whose map gave it.
type engineExpr struct{ engine, expr string }

// quantile95 is the p95 of a histogram family over the selector.
func quantile95(family string) string {
	return `histogram_quantile(0.95, sum by (le) (rate(` + family + `_bucket{%s}[%r])))`
}

// signals are the panels over the series of every engine's map
// (`chart:`), in the engine list's order, the preemption rate as each
// engine's map defines it (its signal preemption_rate), and the failed
// requests (1 − its success_rate; left out for an engine whose map has no
// success_rate, as SGLang's: no data there is not 0% failed). Built on
// first use: it compiles every engine's ruleset, which a command that
// draws no chart does not need (a third of a small `why --bundle`).
var signals = sync.OnceValue(func() []signal {
	return append(panels(rulesets.Chart()), fromSignal("Preemptions /s", UnitPreempt, "preemption_rate", nil),
		optional(fromSignal("Failed requests (1 - success rate)", UnitFraction, "success_rate", func(q string) string { return "1 - (" + q + ")" })),
		// The GPU counters where the targets' GPUs export them (whyslow's
		// NVML collector or dcgm-exporter), joined to the targets by the map.
		optional(fromSignal("GPU SM clock (MHz, slowest busy GPU)", UnitMHz, "sm_clock", nil)),
		optional(fromSignal("GPU DRAM bandwidth (busiest GPU)", UnitFraction, "dram_bw", nil)))
})

func optional(s signal) signal {
	s.optional = true
	return s
}

// fromSignal is a panel over a signal of every shipped engine map that
// defines it, rendered with the chart's placeholders for the selector and
// the rate range and passed through wrap when not nil (an engine without
// the signal adds no alternative).
func fromSignal(title, unit, name string, wrap func(string) string) signal {
	s := signal{title: title, unit: unit}
	rss, err := rulesets.All()
	if err != nil {
		return s // TestShippedRulesets fails on this; the panel says no data
	}
	for _, rs := range rss {
		sig := rs.Signal(name)
		if sig == nil {
			continue
		}
		if q, err := sig.Render("%s", "%r", nil); err == nil {
			if wrap != nil {
				q = wrap(q)
			}
			s.exprs = append(s.exprs, engineExpr{rs.Engine, q})
		}
	}
	return s
}

func panels(maps []rulesets.Panels) []signal {
	out := []signal{{title: "TTFT p95", unit: UnitSeconds}, {title: "ITL / TPOT p95", unit: UnitSeconds},
		{title: kvTitle, unit: UnitFraction}, {title: "Queue depth (waiting requests)", unit: UnitCount},
		{title: "Request rate (first tokens/s)", unit: UnitRate}}
	add := func(i int, engine string, names []string, expr func(string) string) {
		for _, n := range names {
			out[i].exprs = append(out[i].exprs, engineExpr{engine, expr(n)})
		}
	}
	for _, m := range maps {
		add(0, m.Engine, m.TTFT, quantile95)
		add(1, m.Engine, m.ITL, quantile95)
		add(2, m.Engine, m.KVUsage, func(n string) string { return `max(` + n + `{%s})` })
		add(3, m.Engine, m.Queue, func(n string) string { return `sum(` + n + `{%s})` })
		// Every request that got its first token is counted once by the
		// TTFT histogram: its rate is the rate requests are served at.
		add(4, m.Engine, m.TTFT, func(n string) string { return `sum(rate(` + n + `_count{%s}[%r]))` })
	}
	return out
}

// Queries returns the PromQL alternatives of every panel for a selector
// (label matchers without braces), for docs and tests.
func Queries(selector string, o Options) map[string][]string {
	o = o.withDefaults(time.Hour)
	out := map[string][]string{}
	for _, s := range signals() {
		for _, e := range orderFor(s.exprs, o.Engine) {
			out[s.title] = append(out[s.title], expand(e, selector, o.RateWindow))
		}
	}
	return out
}

func (o Options) withDefaults(window time.Duration) Options {
	if o.Step <= 0 {
		o.Step = max(window/120, time.Second).Round(time.Second)
	}
	if o.RateWindow <= 0 {
		o.RateWindow = time.Minute
	}
	o.RateWindow = max(o.RateWindow, 4*o.Step)
	return o
}

func expand(expr, selector string, rate time.Duration) string {
	return strings.NewReplacer("%s", selector, "%r", model.Duration(rate).String()).Replace(expr)
}

// orderFor puts the engine's own metric names first, keeping the order
// otherwise.
func orderFor(exprs []engineExpr, engine string) []string {
	own := slices.Clone(exprs)
	sort.SliceStable(own, func(i, j int) bool { return own[i].engine == engine && own[j].engine != engine })
	out := make([]string, len(own))
	for i, e := range own {
		out[i] = e.expr
	}
	return out
}

// Build runs the range queries for selector over both windows and returns
// the chart data. A panel with no data in either window stays empty; an
// error is returned only when no panel got any data and a query failed.
func Build(ctx context.Context, m query.Metrics, selector string, incident, baseline verdict.Window, o Options) (Data, error) {
	if m == nil {
		return Data{}, errors.New("build chart: no metrics source")
	}
	if !incident.End.After(incident.Start) {
		return Data{}, fmt.Errorf("build chart: empty incident window %s..%s", incident.Start.Format(time.RFC3339), incident.End.Format(time.RFC3339))
	}
	o = o.withDefaults(incident.End.Sub(incident.Start))
	d := Data{Incident: incident, Baseline: baseline}
	var firstErr error
	haveData := false
	for _, s := range signals() {
		p := Panel{Title: s.title, Unit: s.unit}
		for _, e := range orderFor(s.exprs, o.Engine) {
			expr := expand(e, selector, o.RateWindow)
			inc, err := queryRange(ctx, m, expr, incident, o.Step)
			if err != nil {
				if ctx.Err() != nil {
					return Data{}, fmt.Errorf("build chart: %w", ctx.Err())
				}
				if firstErr == nil {
					firstErr = fmt.Errorf("build chart: query %s: %w", expr, err)
				}
				continue
			}
			var base []Point
			if baseline.End.After(baseline.Start) {
				if base, err = queryRange(ctx, m, expr, baseline, o.Step); err != nil && firstErr == nil {
					firstErr = fmt.Errorf("build chart: query %s: %w", expr, err)
				}
			}
			if len(inc) == 0 && len(base) == 0 {
				continue
			}
			p.Query, p.Incident, p.Baseline = expr, inc, base
			haveData = true
			break
		}
		if s.optional && p.Query == "" {
			continue
		}
		d.Panels = append(d.Panels, p)
	}
	if !haveData && firstErr != nil {
		return Data{}, firstErr
	}
	return d, nil
}

// ForVerdict builds the chart of a verdict, titled with its scope and
// status: its scope from before the baseline to the incident's end on one
// time axis (LeadIn, ContinuousSpan, as on the daemon's pages) when that
// span fits, else over its incident and baseline windows side by side.
func ForVerdict(ctx context.Context, m query.Metrics, v *verdict.Verdict, o Options) (Data, error) {
	if v == nil {
		return Data{}, errors.New("build chart: nil verdict")
	}
	if o.Engine == "" || o.Engine == "auto" {
		o.Engine = v.Engine
	}
	inc, base := LeadIn(v)
	span, continuous := ContinuousSpan(inc, base)
	var d Data
	var err error
	if continuous {
		if o.Step <= 0 {
			o.Step = ContinuousStep(span)
		}
		d, err = Build(ctx, m, v.Scope.Selector, span, verdict.Window{}, o)
		if err != nil {
			return Data{}, err
		}
		d.Span, d.Incident, d.Baseline = span, v.Incident, v.Baseline
		for i := range d.Panels {
			d.Panels[i].Incident = BreakGaps(d.Panels[i].Incident)
		}
		if err := AddReplicas(ctx, m, &d, v.Targets, o.Step); err != nil {
			return Data{}, err
		}
		if !o.Onset.Before(span.Start) && !o.Onset.After(span.End) {
			d.Onset = o.Onset
		}
	} else if d, err = Build(ctx, m, v.Scope.Selector, v.Incident, v.Baseline, o); err != nil {
		return Data{}, err
	}
	d.Title = title(v)
	return d, nil
}

// PNGFunc returns a function that renders a verdict's chart as PNG from m,
// the onset marked when the incident opened: the Slack receiver's chart
// source.
func PNGFunc(m query.Metrics, o Options) func(ctx context.Context, v *verdict.Verdict, opened time.Time) ([]byte, error) {
	return func(ctx context.Context, v *verdict.Verdict, opened time.Time) ([]byte, error) {
		o := o
		o.Onset = opened
		d, err := ForVerdict(ctx, m, v, o)
		if err != nil {
			return nil, err
		}
		return PNG(d)
	}
}

func title(v *verdict.Verdict) string {
	scope := v.Scope.Selector
	if scope == "" {
		scope = "all targets"
	}
	s := scope
	if v.Status != "" {
		s += " — " + string(v.Status)
		if v.Severity != "" && v.Severity != verdict.SeverityNone {
			s += " (" + string(v.Severity) + ")"
		}
	}
	if !v.Incident.End.IsZero() {
		s += fmt.Sprintf(" — incident %s–%s UTC vs baseline %s earlier",
			v.Incident.Start.UTC().Format("15:04"), v.Incident.End.UTC().Format("15:04"),
			model.Duration(v.Incident.End.Sub(v.Baseline.End)))
	}
	return s
}

// kvTitle is the KV-cache panel's title: AddReplicas finds it by it.
const kvTitle = "KV-cache usage (max over targets)"

// maxReplicas is the most per-target lines a panel draws: the verdict's
// worst targets, in its order.
const maxReplicas = 4

// AddReplicas adds per-target curves to the KV-cache panel (a max over
// targets: "max(" its query) of a Span chart (d.Span set), for the targets the verdict
// names when it names two or more: the same query grouped by the labels
// the targets share, each series kept when it is one of them. A query
// error other than the context's leaves the panel without them.
func AddReplicas(ctx context.Context, m query.Metrics, d *Data, targets []verdict.Target, step time.Duration) error {
	var keys []string
	var want []map[string]string
	seen := map[string]bool{}
	for _, t := range targets {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(t.Labels)) {
			parts = append(parts, k+"="+t.Labels[k])
		}
		if id := strings.Join(parts, ","); len(t.Labels) > 0 && !seen[id] {
			seen[id] = true
			want = append(want, t.Labels)
		}
	}
	if len(want) < 2 {
		return nil
	}
	for k := range want[0] {
		if !model.LabelName(k).IsValid() {
			continue
		}
		shared := true
		for _, l := range want[1:] {
			if _, ok := l[k]; !ok {
				shared = false
			}
		}
		if shared {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	sort.Strings(keys)
	want = want[:min(len(want), maxReplicas)]
	for i, p := range d.Panels {
		if p.Title != kvTitle || !strings.HasPrefix(p.Query, "max(") {
			continue
		}
		expr := "max by (" + strings.Join(keys, ", ") + ") " + strings.TrimPrefix(p.Query, "max")
		mat, _, err := m.QueryRange(ctx, expr, d.Span.Start, d.Span.End, step)
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("build chart: %w", ctx.Err())
			}
			continue
		}
		for _, t := range want {
			for _, ss := range mat {
				if !matches(ss.Metric, t, keys) || len(ss.Values) == 0 {
					continue
				}
				r := Replica{}
				for _, k := range keys {
					r.Name = strings.TrimPrefix(r.Name+"/"+t[k], "/")
				}
				for _, sp := range ss.Values {
					r.Points = append(r.Points, Point{T: sp.Timestamp.Time(), V: float64(sp.Value)})
				}
				r.Points = BreakGaps(r.Points)
				d.Panels[i].Replicas = append(d.Panels[i].Replicas, r)
				break
			}
		}
	}
	return nil
}

// matches says a series has the target's value of every key.
func matches(m model.Metric, target map[string]string, keys []string) bool {
	for _, k := range keys {
		if string(m[model.LabelName(k)]) != target[k] {
			return false
		}
	}
	return true
}

// queryRange runs one range query and returns its first series' points.
func queryRange(ctx context.Context, m query.Metrics, expr string, w verdict.Window, step time.Duration) ([]Point, error) {
	mat, _, err := m.QueryRange(ctx, expr, w.Start, w.End, step)
	if err != nil {
		return nil, err
	}
	for _, ss := range mat {
		if len(ss.Values) == 0 {
			continue
		}
		pts := make([]Point, 0, len(ss.Values))
		for _, sp := range ss.Values {
			pts = append(pts, Point{T: sp.Timestamp.Time(), V: float64(sp.Value)})
		}
		return pts, nil
	}
	return nil, nil
}
