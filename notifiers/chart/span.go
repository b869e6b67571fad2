package chart

// The time layout of a verdict's chart, shared by this package's PNG and
// daemon/web's pages: the spans the curves are fetched over, and whether
// they are drawn on one continuous time axis or the baseline beside the
// incident.

import (
	"math"
	"slices"
	"time"

	"github.com/whyslow/whyslow/verdict"
)

// MaxContinuous is the longest span the curves are drawn over on one time
// axis; a baseline further back is drawn beside the incident instead.
const MaxContinuous = 3 * time.Hour

// LeadIn returns v's windows each with a lead-in as long as the window (at
// least 5 minutes, at most an hour), so that a chart shows how the
// incident came on, not only the window the triage compared. A window
// without times stays as it is.
func LeadIn(v *verdict.Verdict) (incident, baseline verdict.Window) {
	lead := func(w verdict.Window) verdict.Window {
		if w.Start.IsZero() || !w.End.After(w.Start) {
			return w
		}
		l := min(max(w.End.Sub(w.Start), 5*time.Minute), time.Hour)
		return verdict.Window{Start: w.Start.Add(-l), End: w.End}
	}
	return lead(v.Incident), lead(v.Baseline)
}

// ContinuousSpan is the one span that holds both chart windows (from
// LeadIn), when it is no longer than MaxContinuous: the curves are then
// fetched and drawn over it on one continuous time axis.
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

// ContinuousStep is the range query step over a continuous span: 240
// samples across it, at least a second.
func ContinuousStep(span verdict.Window) time.Duration {
	return max(span.End.Sub(span.Start)/240, time.Second).Round(time.Second)
}

// BreakGaps puts a gap (NaN) between samples further apart than three
// times the usual interval: over the hour between a baseline and an
// incident a source (a bundle keeps only the windows) may have no
// samples, and a line across that hour would draw data that is not there.
func BreakGaps(pts []Point) []Point {
	if len(pts) < 3 {
		return pts
	}
	gaps := make([]time.Duration, 0, len(pts)-1)
	for i := 1; i < len(pts); i++ {
		gaps = append(gaps, pts[i].T.Sub(pts[i-1].T))
	}
	slices.Sort(gaps)
	usual := gaps[len(gaps)/2]
	out := make([]Point, 0, len(pts)+4)
	for i, p := range pts {
		if i > 0 && p.T.Sub(pts[i-1].T) > 3*usual {
			out = append(out, Point{T: pts[i-1].T.Add(usual), V: math.NaN()})
		}
		out = append(out, p)
	}
	return out
}
