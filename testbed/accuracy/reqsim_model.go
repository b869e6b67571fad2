package accuracy

import (
	"context"

	"github.com/whyslow/whyslow/testbed/reqsim"
)

func init() { extraModels["reqsim"] = reqsimModel{} }

// reqsimModel is testbed/reqsim, the request-level discrete-event engine
// model written independently of testbed/sim and testbed/fluid. Each
// instance renders one engine drawn from its seed (vLLM V1, SGLang or
// TensorRT-LLM); Draw.Names picks the vLLM name generation ("v0": the 0.10
// era with the deprecated names beside the new ones) and SGLang's old
// inter-token histogram name; Draw.GPUSeries picks the GPU exporters.
type reqsimModel struct{}

func (reqsimModel) Name() string { return "reqsim" }

func (reqsimModel) Scenarios() []string {
	var out []string
	for _, s := range reqsim.Scenarios() {
		out = append(out, s.Name)
	}
	return out
}

func (reqsimModel) Compounds() []string { return reqsim.CompoundPairs() }

func (reqsimModel) Record(ctx context.Context, d Draw) (*Instance, error) {
	b, err := reqsim.Record(ctx, reqsim.Options{Scenario: d.Scenario, Seed: d.Seed, Names: d.Names,
		GPUSeries: d.GPUSeries, Wide: d.Wide})
	if err != nil {
		return nil, err
	}
	t := b.Truth
	win := func(w reqsim.WindowStats) WindowTruth {
		return WindowTruth{TTFT: w.TTFT, Queue: w.Queue, Prefill: w.Prefill, Outside: w.Outside, ITL: w.ITL, E2E: w.E2E,
			ErrorRate: w.ErrorRate, TTFTRecent: w.TTFTRecent, ITLRecent: w.ITLRecent, TTFTP95: w.TTFTP95, ITLP95: w.ITLP95}
	}
	return newInstance(b.Metrics, incidentOf{b.At, b.Window, b.Baseline, b.Selector, b.GPU, b.ChunkedPrefill,
		b.MaxNumBatchedTokens, b.MaxNumSeqs},
		Truth{Engine: b.Engine, Causes: t.Causes, Magnitude: t.Magnitude, Band: t.Band, Params: t.Params,
			Base: win(t.Base), Inc: win(t.Inc),
			ITL:          ITLTruth{Batch: t.ITL.Batch, Context: t.ITL.Context, Prefill: t.ITL.Prefill, Clock: t.ITL.Clock, Total: t.ITL.Total},
			Unobservable: t.Unobservable}), nil
}
