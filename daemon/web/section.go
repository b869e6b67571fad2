package web

import (
	"context"
	"time"

	"github.com/whyslow/whyslow/notifiers/chart"
	"github.com/whyslow/whyslow/query"
	"github.com/whyslow/whyslow/verdict"
)

// Section lays out v in full with its curves, read from m (the range
// queries of the Slack chart, over ChartWindows); onset (zero: none) is
// marked on them. Without m, or when no curve has data, the section says
// why there are none.
func Section(ctx context.Context, m query.Metrics, v *verdict.Verdict, onset time.Time) VerdictSection {
	if m == nil {
		return Verdict(v, nil, "No curves: the metrics behind this verdict were not at hand.")
	}
	inc, base := ChartWindows(v)
	o := chart.Options{Engine: v.Engine}
	if span, ok := ContinuousSpan(inc, base); ok {
		// One time axis from before the baseline to the incident's end:
		// one range query over it all, no second (baseline) window.
		inc, base = span, verdict.Window{}
		o.Step = max(span.End.Sub(span.Start)/240, time.Second).Round(time.Second)
	}
	data, err := chart.Build(ctx, m, v.Scope.Selector, inc, base, o)
	if err != nil {
		return Verdict(v, nil, "No curves: "+err.Error())
	}
	return Verdict(v, Charts(data, v.Incident, v.Baseline, onset), "")
}

// MaxContinuous is the longest span the curves are drawn over on one time
// axis; a baseline further back is drawn beside the incident instead.
const MaxContinuous = 3 * time.Hour

// ContinuousSpan is the one span that holds both chart windows (from
// ChartWindows), when it is no longer than MaxContinuous: the curves are
// then fetched and drawn over it on one continuous time axis.
func ContinuousSpan(incident, baseline verdict.Window) (verdict.Window, bool) {
	if !incident.End.After(incident.Start) {
		return verdict.Window{}, false
	}
	span := incident
	if baseline.End.After(baseline.Start) {
		if baseline.Start.Before(span.Start) {
			span.Start = baseline.Start
		}
		if baseline.End.After(span.End) {
			span.End = baseline.End
		}
	}
	if span.End.Sub(span.Start) > MaxContinuous {
		return verdict.Window{}, false
	}
	return span, true
}
