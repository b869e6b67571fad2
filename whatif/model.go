package whatif

import (
	"context"

	"github.com/whyslow/whyslow/diagnose"
	"github.com/whyslow/whyslow/query"
	"github.com/whyslow/whyslow/rules"
	"github.com/whyslow/whyslow/verdict"
)

// Scheduler resolves the incident's scheduler: the given settings
// (incident.yaml) when known, else the engine's configuration gauges, else
// the engine's default for the verdict's GPU (rs's scheduler_defaults).
func Scheduler(rs *rules.Ruleset, v *verdict.Verdict, given rules.Scheduler) rules.Scheduler {
	f := rules.Facts{Engine: v.Engine, Scheduler: given, Now: map[string]float64{}}
	if v.GPU != nil && v.GPU.Class != "" {
		f.GPU = rules.GPU{Class: v.GPU.Class, MemoryGiB: diagnose.GPUMemoryGiB(v.GPU.Class)}
	}
	for _, s := range v.Signals {
		if s.Now != nil {
			f.Now[s.Name] = *s.Now
		}
	}
	return rs.ResolveScheduler(f)
}

// FromVerdict reads the inputs behind v (triaged with Explain over m with
// rs) and builds the model.
func FromVerdict(ctx context.Context, m query.Metrics, rs *rules.Ruleset, v *verdict.Verdict, given rules.Scheduler) (*Model, error) {
	in, err := Read(ctx, v, Scheduler(rs, v, given), Source{Metrics: m, Ruleset: rs, Selector: v.Scope.Selector})
	if err != nil {
		return nil, err
	}
	return Build(in)
}
