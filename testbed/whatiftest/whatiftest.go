// Package whatiftest validates whyslow whatif (issue 28) against the
// request-level engine model: for an injected fault, each catalogued fix
// is applied inside testbed/reqsim (the ground truth) and predicted by
// whatif from the recorded telemetry alone.
package whatiftest

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/whyslow/whyslow/collectors/bundle"
	"github.com/whyslow/whyslow/collectors/store"
	"github.com/whyslow/whyslow/diagnose"
	"github.com/whyslow/whyslow/rules"
	"github.com/whyslow/whyslow/rulesets"
	"github.com/whyslow/whyslow/testbed/reqsim"
	"github.com/whyslow/whyslow/whatif"
)

// Case is one fix catalogued for the rig: how whatif and reqsim spell it.
type Case struct {
	Name    string
	Predict func(b *reqsim.Bundle) whatif.Fix
	Truth   func(b *reqsim.Bundle) reqsim.Fix
}

// Catalogue is the fixes every incident is tried with.
var Catalogue = []Case{
	{"replicas×2", func(*reqsim.Bundle) whatif.Fix { return whatif.Fix{ReplicasFactor: 2} },
		func(*reqsim.Bundle) reqsim.Fix { return reqsim.Fix{ReplicasFactor: 2} }},
	{"replicas×0.75", func(*reqsim.Bundle) whatif.Fix { return whatif.Fix{ReplicasFactor: 0.75} },
		func(*reqsim.Bundle) reqsim.Fix { return reqsim.Fix{ReplicasFactor: 0.75} }},
	{"budget×2", func(b *reqsim.Bundle) whatif.Fix { return whatif.Fix{MaxNumBatchedTokens: 2 * b.MaxNumBatchedTokens} },
		func(b *reqsim.Bundle) reqsim.Fix { return reqsim.Fix{MaxNumBatchedTokens: 2 * b.MaxNumBatchedTokens} }},
	{"budget÷4", func(b *reqsim.Bundle) whatif.Fix { return whatif.Fix{MaxNumBatchedTokens: b.MaxNumBatchedTokens / 4} },
		func(b *reqsim.Bundle) reqsim.Fix { return reqsim.Fix{MaxNumBatchedTokens: b.MaxNumBatchedTokens / 4} }},
	{"max_num_seqs=32", func(*reqsim.Bundle) whatif.Fix { return whatif.Fix{MaxNumSeqs: 32} },
		func(*reqsim.Bundle) reqsim.Fix { return reqsim.Fix{MaxNumSeqs: 32} }},
	{"kv×2", func(*reqsim.Bundle) whatif.Fix { return whatif.Fix{KVFactor: 2} },
		func(*reqsim.Bundle) reqsim.Fix { return reqsim.Fix{KVFactor: 2} }},
	{"prefix restored", func(*reqsim.Bundle) whatif.Fix { return whatif.Fix{RestorePrefix: true} },
		func(*reqsim.Bundle) reqsim.Fix { return reqsim.Fix{RestorePrefix: true} }},
	{"clocks restored", func(*reqsim.Bundle) whatif.Fix { return whatif.Fix{RestoreClock: true} },
		func(*reqsim.Bundle) reqsim.Fix { return reqsim.Fix{RestoreClock: true} }},
	{"rebalanced", func(*reqsim.Bundle) whatif.Fix { return whatif.Fix{Rebalance: true} },
		func(*reqsim.Bundle) reqsim.Fix { return reqsim.Fix{Rebalance: true} }},
	{"prompt cap budget/2", func(b *reqsim.Bundle) whatif.Fix { return whatif.Fix{PromptCap: b.MaxNumBatchedTokens / 2} },
		func(b *reqsim.Bundle) reqsim.Fix { return reqsim.Fix{PromptCap: b.MaxNumBatchedTokens / 2} }},
}

// Pair is one (incident, fix) comparison.
type Pair struct {
	Scenario, Engine, Band, Fix string
	Seed                        int64
	// Magnitude is the fault's drawn magnitude (reqsim Truth.Magnitude).
	Magnitude float64
	// Truth: the incident's exact p95s without and with the fix.
	TruthTTFT, TruthITL, FixedTTFT, FixedITL float64
	// Prediction: the model's incident p95s (the replay of the incident's
	// own inputs, calibrated to the telemetry) and the predicted ones.
	ObsTTFT, ObsITL, PredTTFT, PredITL float64
	// PredTTFTLow … PredITLHigh are the predictions' ranges over the
	// replay seeds.
	PredTTFTLow, PredTTFTHigh, PredITLLow, PredITLHigh float64
	// Declined says why whatif predicted nothing ("" when it did).
	Declined string
	Fit      string
	// Poor says the calibration fell outside its band; ScaleTTFT and
	// ScaleITL are observed over replayed (read through the buckets), R2
	// the step-time fit's.
	Poor                    bool
	ScaleTTFT, ScaleITL, R2 float64
}

// Direction is -1 better, +1 worse, 0 unchanged within whatif.Unchanged.
func Direction(before, after float64) int {
	switch d := after/before - 1; {
	case d < -whatif.Unchanged:
		return -1
	case d > whatif.Unchanged:
		return 1
	}
	return 0
}

// RightTTFT and RightITL say the predicted direction is the truth's.
func (p Pair) RightTTFT() bool {
	return Direction(p.TruthTTFT, p.FixedTTFT) == Direction(p.ObsTTFT, p.PredTTFT)
}
func (p Pair) RightITL() bool {
	return Direction(p.TruthITL, p.FixedITL) == Direction(p.ObsITL, p.PredITL)
}

// ErrTTFT and ErrITL are the relative errors of the predicted p95s.
func (p Pair) ErrTTFT() float64 { return math.Abs(p.PredTTFT/p.FixedTTFT - 1) }
func (p Pair) ErrITL() float64  { return math.Abs(p.PredITL/p.FixedITL - 1) }

// Incident records one instance, triages it, builds the model and returns
// the pairs of every catalogued fix.
func Incident(ctx context.Context, o reqsim.Options, cases []Case) ([]Pair, error) {
	b, err := reqsim.Record(ctx, o)
	if err != nil {
		return nil, err
	}
	model, fitErr := predictor(ctx, b)
	var out []Pair
	for _, c := range cases {
		p := Pair{Scenario: o.Scenario, Engine: b.Engine, Band: b.Truth.Band, Fix: c.Name, Seed: o.Seed,
			Magnitude: b.Truth.Magnitude, TruthTTFT: b.Truth.Inc.TTFTP95, TruthITL: b.Truth.Inc.ITLP95}
		fo := o
		fo.Fix = c.Truth(b)
		fb, err := reqsim.Record(ctx, fo)
		if err != nil {
			return nil, err
		}
		p.FixedTTFT, p.FixedITL = fb.Truth.Inc.TTFTP95, fb.Truth.Inc.ITLP95
		if model != nil {
			p.Fit, p.Poor = model.Fit.String(), model.Poor()
			p.ScaleTTFT, p.ScaleITL, p.R2 = model.ScaleTTFT, model.ScaleITL, model.Fit.R2
		}
		if fitErr != nil {
			p.Declined = fitErr.Error()
			out = append(out, p)
			continue
		}
		pr, err := model.Predict(c.Predict(b))
		if err != nil {
			p.Declined = err.Error()
			out = append(out, p)
			continue
		}
		p.ObsTTFT, p.ObsITL = model.Incident.TTFTP95, model.Incident.ITLP95
		p.PredTTFT, p.PredITL = pr.TTFTP95.Median, pr.ITLP95.Median
		p.PredTTFTLow, p.PredTTFTHigh = pr.TTFTP95.Low, pr.TTFTP95.High
		p.PredITLLow, p.PredITLHigh = pr.ITLP95.Low, pr.ITLP95.High
		out = append(out, p)
	}
	return out, nil
}

// Order is one incident's fix order: the fix the verdict puts first (the
// lowest predicted TTFT p95 of whatif.Catalogue, `why --predict`) against
// the fix that is best inside the engine model (the lowest TTFT p95 with
// the fix applied, every catalogued fix tried, declined ones too).
type Order struct {
	Scenario, Engine, Band string
	Seed                   int64
	// Declined says why the verdict has no predictions ("" when it has).
	Declined string
	// Predicted is the verdict's first fix; Best the truth's.
	Predicted, Best string
	// NoneHelps says the verdict predicts no fix to help: it puts none
	// first.
	NoneHelps bool
	// Truth is each catalogued fix's true incident TTFT p95 with it
	// applied; Unfixed the incident's own.
	Truth   map[string]float64
	Unfixed float64
	// Pred is each predicted fix's TTFT p95 (the median over the seeds);
	// Model the model's incident.
	Pred  map[string]float64
	Model float64
}

// Right says the verdict's first fix is the truth's best; a verdict that
// predicts no fix to help is right when no fix truly lowers the TTFT p95
// by more than whatif.Unchanged.
func (o Order) Right() bool {
	if o.Declined != "" {
		return false
	}
	if o.NoneHelps {
		return !o.TruthHelps()
	}
	return o.Predicted == o.Best
}

// TruthHelps says the truth's best fix lowers the incident's TTFT p95 by
// more than whatif.Unchanged.
func (o Order) TruthHelps() bool { return o.Truth[o.Best] < o.Unfixed*(1-whatif.Unchanged) }

// Close says the verdict's first fix is within whatif.Unchanged of the
// truth's best TTFT p95: as good as the best, the two told apart by
// less than what the model calls unchanged. A verdict that predicts no
// fix to help is close only when it is right.
func (o Order) Close() bool {
	if o.Declined != "" {
		return false
	}
	if o.NoneHelps {
		return o.Right()
	}
	best, got := o.Truth[o.Best], o.Truth[o.Predicted]
	return got <= best*(1+whatif.Unchanged)
}

// FixOrder records one instance, builds the verdict's predictions as `why
// --predict` does and applies every fix of the verdict's catalogue inside
// the engine model.
func FixOrder(ctx context.Context, o reqsim.Options) (Order, error) {
	b, err := reqsim.Record(ctx, o)
	if err != nil {
		return Order{}, err
	}
	out := Order{Scenario: o.Scenario, Engine: b.Engine, Band: b.Truth.Band, Seed: o.Seed,
		Unfixed: b.Truth.Inc.TTFTP95, Truth: map[string]float64{}}
	model, err := predictor(ctx, b)
	if err != nil {
		out.Declined = err.Error()
		return out, nil
	}
	pv := model.Verdict()
	if len(pv.Fixes) == 0 {
		out.Declined = "every fix declined"
		return out, nil
	}
	out.Predicted, out.NoneHelps = pv.Fixes[0].Fix, pv.NoneHelps != ""
	out.Pred, out.Model = map[string]float64{}, pv.Incident.TTFTP95
	for _, f := range pv.Fixes {
		out.Pred[f.Fix] = f.TTFTP95.Median
	}
	s := model.In.Scheduler
	for _, f := range whatif.Catalogue(whatif.Fix{MaxNumBatchedTokens: s.MaxNumBatchedTokens, MaxNumSeqs: s.MaxNumSeqs}) {
		fo := o
		fo.Fix = reqsim.Fix(f) // the same fields: the truth applies what the model predicts
		fb, err := reqsim.Record(ctx, fo)
		if err != nil {
			return Order{}, err
		}
		name := f.String()
		out.Truth[name] = fb.Truth.Inc.TTFTP95
		if out.Best == "" || out.Truth[name] < out.Truth[out.Best] {
			out.Best = name
		}
	}
	return out, nil
}

// OrderReport tabulates the fix orders per engine: the share of incidents
// whose verdict puts the truth's best fix first, and the share whose
// first fix is as good as the best within whatif.Unchanged; then each
// miss.
func OrderReport(orders []Order) string {
	var b strings.Builder
	sort.SliceStable(orders, func(i, j int) bool { return orders[i].Seed < orders[j].Seed })
	per := map[string][]Order{}
	for _, o := range orders {
		per[o.Engine] = append(per[o.Engine], o)
		per["all"] = append(per["all"], o)
	}
	keys := make([]string, 0, len(per))
	for k := range per {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Fprintf(&b, "%-8s %9s %5s %12s %12s %10s\n", "engine", "incidents", "decl", "best first", "within 10%", "none helps")
	for _, k := range keys {
		var n, decl, right, near, none int
		for _, o := range per[k] {
			if o.Declined != "" {
				decl++
				continue
			}
			n++
			if o.NoneHelps {
				none++
			}
			if o.Right() {
				right++
			}
			if o.Close() {
				near++
			}
		}
		pct := func(x int) string {
			if n == 0 {
				return "-"
			}
			return fmt.Sprintf("%d/%d %.0f%%", x, n, 100*float64(x)/float64(n))
		}
		fmt.Fprintf(&b, "%-8s %9d %5d %12s %12s %10d\n", k, n+decl, decl, pct(right), pct(near), none)
	}
	for _, o := range orders {
		switch {
		case o.Declined != "":
			fmt.Fprintf(&b, "declined: %s %s seed %#x: %s\n", o.Scenario, o.Engine, o.Seed, o.Declined)
		case o.NoneHelps:
			verdict := "right"
			if !o.Right() {
				verdict = "miss"
			}
			fmt.Fprintf(&b, "none helps (%s): %s %s %s seed %#x: truth best %s (%.3gs, predicted %s), unfixed %.3gs (model %.3gs)\n",
				verdict, o.Scenario, o.Engine, o.Band, o.Seed, o.Best, o.Truth[o.Best], predictedOrDeclined(o.Pred, o.Best), o.Unfixed, o.Model)
		case !o.Right():
			fmt.Fprintf(&b, "miss: %s %s %s seed %#x: verdict first %s (true TTFT p95 %.3gs, predicted %.3gs), "+
				"best %s (%.3gs, predicted %s), unfixed %.3gs (model %.3gs)\n",
				o.Scenario, o.Engine, o.Band, o.Seed, o.Predicted, o.Truth[o.Predicted], o.Pred[o.Predicted],
				o.Best, o.Truth[o.Best], predictedOrDeclined(o.Pred, o.Best), o.Unfixed, o.Model)
		}
	}
	return b.String()
}

// predictedOrDeclined is a fix's predicted TTFT p95, or "declined".
func predictedOrDeclined(pred map[string]float64, fix string) string {
	if x, ok := pred[fix]; ok {
		return fmt.Sprintf("%.3gs", x)
	}
	return "declined"
}

// predictor triages the bundle as `whyslow whatif --bundle` does and
// builds the model.
func predictor(ctx context.Context, b *reqsim.Bundle) (*whatif.Model, error) {
	st, err := store.Open(store.Options{})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	if _, err := bundle.ReadMetrics(ctx, "metrics.om", b.Metrics, st); err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	rss, err := rulesets.Shipped().For(b.Engine)
	if err != nil {
		return nil, err
	}
	given := rules.Scheduler{Known: true, ChunkedPrefill: b.ChunkedPrefill, MaxNumBatchedTokens: b.MaxNumBatchedTokens,
		MaxNumSeqs: b.MaxNumSeqs, Source: "incident"}
	v, err := diagnose.Run(ctx, diagnose.Options{Metrics: st, Rulesets: rss, Engine: b.Engine, At: b.At, Window: b.Window,
		Baseline: b.Baseline, Selector: b.Selector, GPU: b.GPU, Scheduler: given, Explain: true})
	if err != nil {
		return nil, err
	}
	return whatif.FromVerdict(ctx, st, rss[0], v, given)
}
