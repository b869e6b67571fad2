package diagnose

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"

	"github.com/whyslow/whyslow/query"
	"github.com/whyslow/whyslow/rules"
	"github.com/whyslow/whyslow/verdict"
)

// NVIDIA Dynamo's frontend is the HTTP entry point in front of the
// workers: its TTFT and inter-token latency are what clients feel, and
// the difference from the worker's is time outside the engine (routing,
// the router's queue, the response path). Names: ai-dynamo/dynamo
// lib/runtime/src/metrics/prometheus_names.rs (frontend_service, prefix
// dynamo_frontend), histograms registered in lib/llm/src/http/service/
// metrics.rs with the label `model`.
const (
	frontendTTFT = "dynamo_frontend_time_to_first_token_seconds"
	frontendITL  = "dynamo_frontend_inter_token_latency_seconds"
	// SourceDynamoFrontend marks headline rows read from the frontend.
	SourceDynamoFrontend = "dynamo_frontend"
	// outsideSignal is the headline row of frontend minus worker TTFT.
	outsideSignal = "ttft_outside_engine"
)

// clientSignals are the headline rows the frontend replaces: the same
// statistics the engine's maps compute, over the frontend's families
// ($s: the frontend's selector, $w: the window, $r: its last minutes).
var clientSignals = []struct{ signal, expr string }{
	{"ttft_p95", `histogram_quantile(0.95, sum by (le) (rate(` + frontendTTFT + `_bucket{$s}[$w])))`},
	{"ttft_mean", `sum(rate(` + frontendTTFT + `_sum{$s}[$w])) / (sum(rate(` + frontendTTFT + `_count{$s}[$w])) > 0)`},
	{"ttft_mean_recent", `sum(rate(` + frontendTTFT + `_sum{$s}[$r])) / (sum(rate(` + frontendTTFT + `_count{$s}[$r])) > 0)`},
	{"tpot_p95", `histogram_quantile(0.95, sum by (le) (rate(` + frontendITL + `_bucket{$s}[$w])))`},
	{"tpot_mean", `sum(rate(` + frontendITL + `_sum{$s}[$w])) / (sum(rate(` + frontendITL + `_count{$s}[$w])) > 0)`},
}

// clientView is the frontend's reading of the headline's latencies.
type clientView struct {
	now, base map[string]float64
}

// frontendSelector turns the scope's labels into the frontend's: the
// frontend labels the model `model` (the engines `model_name`) and runs in
// the workers' namespace; pod, instance and engine labels are the
// workers' and never match it.
func frontendSelector(scope map[string]string) (sel string, hasModel bool) {
	var parts []string
	for _, k := range []string{"model_name", "model"} {
		if v, ok := scope[k]; ok && !hasModel {
			parts = append(parts, "model="+strconv.Quote(v))
			hasModel = true
		}
	}
	if v, ok := scope["namespace"]; ok {
		parts = append(parts, "namespace="+strconv.Quote(v))
	}
	return strings.Join(parts, ","), hasModel
}

// readClientView reads the frontend's TTFT and inter-token latency at both
// windows (one query each). nil, with the reason, when the frontend's
// series do not answer for this scope: no requests in a window, or several
// models behind it and a scope that names none.
func readClientView(ctx context.Context, opts *Options, scope map[string]string, win string, baseAt time.Time) (*clientView, string) {
	sel, hasModel := frontendSelector(scope)
	// The persistence range the maps' {{.Recent}} reads (rules.RecentWindow).
	recent := win
	if d, err := model.ParseDuration(win); err == nil && time.Duration(d) > rules.RecentWindow {
		recent = model.Duration(rules.RecentWindow).String()
	}
	build := func(models bool) string {
		var parts []string
		for _, c := range clientSignals {
			e := strings.NewReplacer("$s", sel, "$w", win, "$r", recent).Replace(c.expr)
			parts = append(parts, `label_replace(`+e+`, "signal", "`+c.signal+`", "", "")`)
		}
		if models {
			parts = append(parts, `label_replace(count(count by (model) (last_over_time(`+frontendTTFT+`_count{`+sel+`}[`+win+`]))), "signal", "models", "", "")`)
		}
		return strings.Join(parts, " or ")
	}
	read := func(expr string, at time.Time) (map[string]float64, error) {
		return signalValues(ctx, opts.Metrics, expr, at)
	}
	now, err := read(build(!hasModel), opts.At)
	if err != nil {
		return nil, "the query failed: " + err.Error()
	}
	if n := now["models"]; n > 1 {
		return nil, fmt.Sprintf("the frontend serves %.0f models and the scope names none (model_name)", n)
	}
	delete(now, "models")
	base, err := read(build(false), baseAt)
	if err != nil {
		return nil, "the query failed: " + err.Error()
	}
	if _, ok := now["ttft_mean"]; !ok {
		return nil, "no requests in the incident window"
	}
	if _, ok := base["ttft_mean"]; !ok {
		return nil, "no requests in the baseline window"
	}
	return &clientView{now: now, base: base}, ""
}

// applyClientView makes the frontend's values the headline's TTFT and
// inter-token rows (what clients feel; the worker's stay in the evidence
// and the walk), adds the frontend-minus-worker TTFT mean as time outside
// the engine after them, and drops the client_view gap. engineNow and engineBase are
// the worker's signals.
func applyClientView(v *verdict.Verdict, cv *clientView, engineNow, engineBase map[string]float64) {
	replaced := map[string]bool{}
	at := -1
	for i := range v.Headline {
		c := &v.Headline[i]
		now, base := valuePtr(cv.now, c.Signal), valuePtr(cv.base, c.Signal)
		if now == nil && base == nil {
			continue
		}
		replaced[c.Signal] = true
		c.Now, c.Baseline, c.Ratio = now, base, nil
		if now != nil && base != nil && *base != 0 {
			r := *now / *base
			c.Ratio = &r
		}
		// The noise and the buckets were measured on the worker's series.
		c.Noise, c.NowBucket, c.BaselineBucket = nil, nil, nil
		c.Title += ", as the Dynamo frontend sees it"
		c.Source = SourceDynamoFrontend
		at = i
	}
	gaps := v.DataGaps[:0]
	for _, g := range v.DataGaps {
		if g.Signal != "client_view" {
			gaps = append(gaps, g)
		}
	}
	v.DataGaps = gaps
	if !replaced["ttft_mean"] {
		return
	}
	out := verdict.Comparison{Signal: outsideSignal, Unit: "seconds", Source: SourceDynamoFrontend,
		Title: "TTFT outside the engine (Dynamo frontend minus worker mean: routing, router queue)"}
	if fn, wn := valuePtr(cv.now, "ttft_mean"), valuePtr(engineNow, "ttft_mean"); fn != nil && wn != nil {
		d := *fn - *wn
		out.Now = &d
	}
	if fb, wb := valuePtr(cv.base, "ttft_mean"), valuePtr(engineBase, "ttft_mean"); fb != nil && wb != nil {
		d := *fb - *wb
		out.Baseline = &d
	}
	if out.Now != nil && out.Baseline != nil && *out.Baseline > 0 {
		r := *out.Now / *out.Baseline
		out.Ratio = &r
	}
	v.Headline = append(v.Headline[:at+1], append([]verdict.Comparison{out}, v.Headline[at+1:]...)...)
}

// signalValues runs expr, a union of label_replace'd parts, and returns
// each part's finite value by its "signal" label.
func signalValues(ctx context.Context, m query.Metrics, expr string, at time.Time) (map[string]float64, error) {
	v, _, err := m.Query(ctx, expr, at)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, s := range v {
		if f := float64(s.Value); !math.IsNaN(f) && !math.IsInf(f, 0) {
			out[string(s.Metric["signal"])] = f
		}
	}
	return out, nil
}
