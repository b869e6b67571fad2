package accuracy

import (
	"context"

	"github.com/whyslow/whyslow/testbed/fluid"
)

func init() { extraModels["fluid"] = fluidModel{} }

// fluidModel is testbed/fluid, the fluid queueing engine model written
// separately from testbed/sim.
type fluidModel struct{}

func (fluidModel) Name() string { return "fluid" }

func (fluidModel) Scenarios() []string {
	var out []string
	for _, s := range fluid.Scenarios() {
		out = append(out, s.Name)
	}
	return out
}

func (fluidModel) Compounds() []string { return fluid.CompoundPairs() }

func (fluidModel) Record(ctx context.Context, d Draw) (*Instance, error) {
	b, err := fluid.Record(ctx, fluid.Options{Scenario: d.Scenario, Seed: d.Seed, Names: d.Names, GPUSeries: d.GPUSeries,
		Wide: d.Wide, Trim: true})
	if err != nil {
		return nil, err
	}
	return fluidInstance(b, d), nil
}

// unobservable names an instance whose fault no exported series can show:
// vLLM V0 has no "error" finish reason, so server-side failures show only in
// the API server's http_requests_total, which some instances do not export.
func unobservable(d Draw, t fluid.Truth) string {
	if len(t.Causes) != 1 || t.Causes[0] != "request_errors" || d.Names != "v0" {
		return ""
	}
	if om, ok := t.Params["omitted_families"].([]string); ok {
		for _, f := range om {
			if f == "http_requests_total" {
				return "errors only in http_requests_total, which this instance does not export"
			}
		}
	}
	return ""
}

func fluidInstance(b *fluid.Bundle, d Draw) *Instance {
	inc, t := b.Incident, b.Truth
	win := func(w fluid.Window) WindowTruth {
		return WindowTruth{TTFT: w.TTFTMean, Queue: w.QueueMean, Prefill: w.PrefillMean, Outside: w.OutsideMean,
			ITL: w.ITLMean, E2E: w.E2EMean, ErrorRate: w.ErrorRate}
	}
	a := t.ITLAttribution
	return newInstance(b.Metrics, incidentOf{inc.At, inc.Window, inc.Baseline, inc.Selector, inc.GPU,
		inc.Scheduler.ChunkedPrefill, inc.Scheduler.MaxNumBatchedTokens, inc.Scheduler.MaxNumSeqs},
		Truth{Engine: "vllm", Causes: t.Causes, Magnitude: t.Magnitude, Band: t.Band, Params: t.Params,
			Base: win(t.Observed.Baseline), Inc: recentOf(win(t.Observed.Incident), t.Observed.Recent.TTFTMean, t.Observed.Recent.ITLMean),
			ITL:          ITLTruth{Batch: a.Batch, Context: a.Context, Prefill: a.Prefill, Clock: a.Clock, Total: a.Total},
			Unobservable: unobservable(d, t)})
}
