package web

import (
	"context"
	"time"

	"github.com/whyslow/whyslow/notifiers/chart"
	"github.com/whyslow/whyslow/query"
	"github.com/whyslow/whyslow/rulesets"
	"github.com/whyslow/whyslow/verdict"
)

// Section lays out v in full with its curves, read from m (the range
// queries of the Slack chart, over chart.LeadIn); onset (zero: none) is
// marked on them; maps give the panels' series (nil: the shipped maps).
// Without m, or when no curve has data, the section says why there are
// none.
func Section(ctx context.Context, m query.Metrics, v *verdict.Verdict, onset time.Time, maps *rulesets.Maps) VerdictSection {
	if m == nil {
		return Verdict(v, nil, "No curves: the metrics behind this verdict were not at hand.")
	}
	inc, base := chart.LeadIn(v)
	o := chart.Options{Engine: v.Engine, Maps: maps}
	if span, ok := chart.ContinuousSpan(inc, base); ok {
		// One time axis from before the baseline to the incident's end:
		// one range query over it all, no second (baseline) window.
		inc, base = span, verdict.Window{}
		o.Step = chart.ContinuousStep(span)
	}
	data, err := chart.Build(ctx, m, v.Scope.Selector, inc, base, o)
	if err != nil {
		return Verdict(v, nil, "No curves: "+err.Error())
	}
	if base.Start.IsZero() {
		// One span: a line per target the verdict names, as on the PNG.
		data.Span = inc
		if err := chart.AddReplicas(ctx, m, &data, v.Targets, o.Step); err != nil {
			return Verdict(v, nil, "No curves: "+err.Error())
		}
	}
	return Verdict(v, Charts(data, v.Incident, v.Baseline, onset), "")
}
