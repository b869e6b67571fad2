package whatif

import (
	"context"
	"errors"
	"fmt"

	"github.com/whyslow/whyslow/diagnose"
	"github.com/whyslow/whyslow/query"
	"github.com/whyslow/whyslow/rules"
	"github.com/whyslow/whyslow/verdict"
)

// ForVerdict predicts the catalogue for the verdict v (`why --predict`,
// the daemon's incident page): the triage of v's windows again over m with
// every signal value (Explain), the model fitted to it, and each fix
// replayed. rss are the rulesets of v's engine (the first is the engine's
// own); given is the scheduler the caller knows (incident.yaml, the
// daemon's config; zero: unknown). Missing series and a triage with too
// little data are said in the result (Missing), not an error. It ends at
// ctx's end between two fixes: a fix's replays are bounded themselves.
func ForVerdict(ctx context.Context, m query.Metrics, rss []*rules.Ruleset, v *verdict.Verdict, given rules.Scheduler) (*verdict.Predicted, error) {
	if v.Status == verdict.StatusInsufficientData || v.Engine == "" {
		return &verdict.Predicted{Missing: "no prediction: the triage had too little data"}, nil
	}
	if len(rss) == 0 {
		return nil, fmt.Errorf("predict: no ruleset for engine %q", v.Engine)
	}
	o := diagnose.Options{Metrics: m, Rulesets: rss, Engine: v.Engine, At: v.Incident.End,
		Window: v.Incident.End.Sub(v.Incident.Start), Baseline: v.Incident.End.Sub(v.Baseline.End),
		Selector: v.Scope.Selector, Scheduler: given, Explain: true}
	if v.GPU != nil {
		o.GPU = v.GPU.Class
	}
	ev, err := diagnose.Run(ctx, o)
	if err != nil {
		return nil, err
	}
	model, err := FromVerdict(ctx, m, rss[0], ev, given)
	var me *MissingError
	switch {
	case errors.As(err, &me):
		return &verdict.Predicted{Missing: me.Error()}, nil
	case err != nil:
		return nil, err
	}
	return model.VerdictWithin(ctx)
}
