package accuracy

import (
	"context"
	"time"

	"github.com/whyslow/whyslow/rules"
	"github.com/whyslow/whyslow/testbed/sim"
)

// simModel is testbed/sim, the discrete-event engine model.
type simModel struct{}

func (simModel) Name() string { return "sim" }

func (simModel) Scenarios() []string {
	var out []string
	for _, s := range sim.Scenarios() {
		out = append(out, s.Name)
	}
	return out
}

func (simModel) Compounds() []string {
	var out []string
	for _, p := range sim.CompoundPairs() {
		out = append(out, p[0]+"+"+p[1])
	}
	return out
}

func (simModel) Record(ctx context.Context, d Draw) (*Instance, error) {
	b, err := sim.Record(ctx, sim.Options{Scenario: d.Scenario, Seed: d.Seed, Names: d.Names, GPUSeries: d.GPUSeries,
		Wide: d.Wide, Trim: true})
	if err != nil {
		return nil, err
	}
	return simInstance(b), nil
}

// simInstance converts a sim bundle.
func simInstance(b *sim.Bundle) *Instance {
	inc, t := b.Incident, b.Truth
	win := func(w sim.WindowStats) WindowTruth {
		return WindowTruth{TTFT: w.TTFTMean, Queue: w.QueueMean, Prefill: w.PrefillMean, Outside: w.OutsideMean,
			ITL: w.ITLMean, E2E: w.E2EMean, ErrorRate: w.ErrorRate}
	}
	a := t.ITLAttribution
	return newInstance(b.Metrics, incidentOf{inc.At, inc.Window, inc.Baseline, inc.Selector, inc.GPU,
		inc.Scheduler.ChunkedPrefill, inc.Scheduler.MaxNumBatchedTokens, inc.Scheduler.MaxNumSeqs},
		Truth{Engine: "vllm", Causes: t.Causes, Magnitude: t.Magnitude, Band: t.Band, Params: t.Params,
			Base: tailOf(win(t.Observed.Baseline), t.Observed.P95[0]),
			Inc:  tailOf(recentOf(win(t.Observed.Incident), t.Observed.Recent.TTFTMean, t.Observed.Recent.ITLMean), t.Observed.P95[1]),
			ITL:  ITLTruth{Batch: a.Batch, Context: a.Context, Prefill: a.Prefill, Clock: a.Clock, Total: a.Total}})
}

// tailOf adds a window's 95th percentiles to its truth.
func tailOf(w WindowTruth, p sim.TailStats) WindowTruth {
	w.TTFTP95, w.ITLP95 = p.TTFT, p.ITL
	return w
}

// incidentOf is what a model's incident.yaml says, in the models' shared
// shape.
type incidentOf struct {
	at               time.Time
	window, baseline time.Duration
	selector, gpu    string
	chunked          bool
	budget, maxSeqs  int
}

// newInstance assembles an instance; a healthy truth's band is "none".
func newInstance(metrics []byte, in incidentOf, t Truth) *Instance {
	if len(t.Causes) == 0 {
		t.Band = "none"
	}
	return &Instance{Metrics: metrics, At: in.at, Window: in.window, Baseline: in.baseline,
		Selector: in.selector, GPU: in.gpu,
		Scheduler: rules.Scheduler{Known: in.budget > 0, ChunkedPrefill: in.chunked, MaxNumBatchedTokens: in.budget,
			MaxNumSeqs: in.maxSeqs, Source: "incident"},
		Truth: t}
}

// recentOf adds the last minutes' means to the incident window's truth.
func recentOf(w WindowTruth, ttft, itl float64) WindowTruth {
	w.TTFTRecent, w.ITLRecent = ttft, itl
	return w
}
