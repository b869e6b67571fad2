package diagnose

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/whyslow/whyslow/query"
	"github.com/whyslow/whyslow/rules"
	"github.com/whyslow/whyslow/verdict"
)

// NVIDIA Dynamo's frontend is the HTTP entry point in front of the
// workers: its TTFT and inter-token latency are what clients feel, and
// the difference from the worker's is time outside the engine (routing,
// the router's queue, the response path). The rulebook reads its
// histograms as the signals that are `frontend_of` the worker's
// (rules.Signal.FrontendOf, names cited there); this file decides whether
// they answer for the scope and puts them in the headline.
const (
	frontendTTFT = "dynamo_frontend_time_to_first_token_seconds"
	frontendITL  = "dynamo_frontend_inter_token_latency_seconds"
	// SourceDynamoFrontend marks headline rows read from the frontend.
	SourceDynamoFrontend = "dynamo_frontend"
	// outsideSignal is the headline row of frontend minus worker TTFT.
	outsideSignal = "ttft_outside_engine"
)

// frontendModels says why the frontend's series do not answer for the
// scope: several models behind it and a scope that names none (their
// histograms would be summed). "" when they answer.
func frontendModels(ctx context.Context, opts *Options, scope map[string]string, win string) string {
	sel, hasModel := rules.FrontendSelector(scope)
	if hasModel {
		return ""
	}
	v, _, err := opts.Metrics.Query(ctx, `count(count by (model) (last_over_time(`+frontendTTFT+`_count{`+sel+`}[`+win+`])))`, opts.At)
	if err != nil {
		return "the query failed: " + err.Error()
	}
	if n, ok := scalar(v); ok && n > 1 {
		return fmt.Sprintf("the frontend serves %.0f models and the scope names none (model_name)", n)
	}
	return ""
}

// frontendOf returns the ruleset's frontend reading of a signal, or nil.
func frontendOf(rs *rules.Ruleset, signal string) *rules.Signal {
	for _, s := range rs.Signals {
		if s.FrontendOf == signal {
			return s
		}
	}
	return nil
}

// frontendRequests says which window has no frontend requests (its TTFT
// mean is missing), or "".
func frontendRequests(rs *rules.Ruleset, now, base map[string]float64) string {
	f := frontendOf(rs, "ttft_mean")
	if f == nil {
		return "the ruleset does not read the frontend"
	}
	if _, ok := now[f.Name]; !ok {
		return "no requests in the incident window"
	}
	if _, ok := base[f.Name]; !ok {
		return "no requests in the baseline window"
	}
	return ""
}

// dropFrontend removes the frontend's readings from the windows' values:
// when they do not answer for the scope, neither the gate nor the rules
// may read them.
func dropFrontend(rs *rules.Ruleset, values ...map[string]float64) {
	for _, s := range rs.Signals {
		if s.FrontendOf != "" {
			for _, m := range values {
				delete(m, s.Name)
			}
		}
	}
}

// applyClientView makes the frontend's values the headline's TTFT and
// inter-token rows (what clients feel; the worker's stay in the evidence
// and the walk), with the frontend's own noise, adds the frontend-minus-
// worker TTFT mean as time outside the engine after them, and drops the
// client_view gap. now, base and z hold the worker's and the frontend's
// signals.
func applyClientView(v *verdict.Verdict, rs *rules.Ruleset, now, base, z map[string]float64) {
	replaced := map[string]bool{}
	at := -1
	for i := range v.Headline {
		c := &v.Headline[i]
		f := frontendOf(rs, c.Signal)
		if f == nil {
			continue
		}
		fNow, fBase := valuePtr(now, f.Name), valuePtr(base, f.Name)
		if fNow == nil && fBase == nil {
			continue
		}
		replaced[c.Signal] = true
		c.Now, c.Baseline, c.Ratio = fNow, fBase, nil
		if fNow != nil && fBase != nil && *fBase != 0 {
			r := *fNow / *fBase
			c.Ratio = &r
		}
		// The buckets were read from the worker's series.
		c.Noise, c.NowBucket, c.BaselineBucket = valuePtr(z, f.Name), nil, nil
		c.Title += ", as the Dynamo frontend sees it"
		c.Source = SourceDynamoFrontend
		at = i
	}
	v.DataGaps = dropGap(v.DataGaps, "client_view")
	if !replaced["ttft_mean"] {
		return
	}
	fMean := frontendOf(rs, "ttft_mean").Name
	out := verdict.Comparison{Signal: outsideSignal, Unit: "seconds", Source: SourceDynamoFrontend,
		Title: "TTFT outside the engine (Dynamo frontend minus worker mean: routing, router queue)"}
	if fn, wn := valuePtr(now, fMean), valuePtr(now, "ttft_mean"); fn != nil && wn != nil {
		d := *fn - *wn
		out.Now = &d
	}
	if fb, wb := valuePtr(base, fMean), valuePtr(base, "ttft_mean"); fb != nil && wb != nil {
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
