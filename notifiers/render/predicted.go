package render

import (
	"fmt"
	"math"
	"strings"

	"github.com/whyslow/whyslow/verdict"
)

// PredictedHeading is the heading of the predictions (`why --predict`) in
// every rendering.
const PredictedHeading = "Predicted effect of the fixes"

// Predictions is the predictions of a verdict (`why --predict`) as the
// renderings show them: notes on the model (what the changes are against,
// a poor fit, no fix predicted to help), one line per fix in the verdict's
// order (best predicted TTFT p95 first), then the fixes the data could not
// support. Nil when the verdict has none.
type Predictions struct {
	Notes    []string
	Fixes    []string
	Declined []string
	// NoneHelps is the verdict's "no catalogued fix is predicted to help:
	// …" (also the last of Notes), "" when a fix helps.
	NoneHelps string
}

// PredictionsOf is v's predictions for the renderings; nil without them.
func PredictionsOf(v *verdict.Verdict) *Predictions {
	p := v.Predicted
	if p == nil {
		return nil
	}
	out := &Predictions{}
	if p.Missing != "" {
		out.Notes = append(out.Notes, p.Missing)
		return out
	}
	before := verdict.PredictedValues{}
	if p.Incident != nil {
		before = *p.Incident
	}
	note := "the engine fitted to this incident, replayed with each fix (best TTFT p95 first); " +
		"changes against the model of the incident"
	if p.PoorFit {
		note = "POOR FIT: " + note + ", scaled to the observed values"
	}
	out.Notes = append(out.Notes, note)
	if p.Calibration != "" {
		out.Notes = append(out.Notes, "calibration: "+p.Calibration)
	}
	if p.NoneHelps != "" {
		out.NoneHelps = p.NoneHelps
		out.Notes = append(out.Notes, p.NoneHelps)
	}
	for _, f := range p.Fixes {
		line := f.Fix + ": TTFT p95 " + PredictedChange(before.TTFTP95, f.TTFTP95) +
			", inter-token " + PredictedChange(before.ITLP95, f.ITLP95)
		if f.Trade != "" {
			// "trades TTFT for inter-token latency: …": the numbers are on the line already
			trade, _, _ := strings.Cut(f.Trade, ":")
			line += "; " + trade
		}
		if p.PoorFit {
			line += "; poor fit"
		}
		out.Fixes = append(out.Fixes, line)
	}
	for _, d := range p.Declined {
		out.Declined = append(out.Declined, d.Fix+": not predicted: "+d.Reason)
	}
	return out
}

// PredictedChange is "2m26s → 10.9 s (−93%)": the value before (the model
// of the incident, omitted when unknown), the predicted median, its change
// and, when the replay seeds differ by 5% or more, their range.
func PredictedChange(before float64, r verdict.PredictedRange) string {
	s := FormatSeconds(r.Median)
	if before > 0 {
		s = FormatSeconds(before) + " → " + s
	}
	var extra []string
	if before > 0 {
		extra = append(extra, signedPercent(100*(r.Median/before-1)))
	}
	// a spread under 5% of the median is noise, as in `whyslow whatif`
	if lo, hi := FormatSeconds(r.Low), FormatSeconds(r.High); lo != hi && r.Median > 0 && (r.High-r.Low)/r.Median >= 0.05 {
		extra = append(extra, "seeds "+lo+"–"+hi)
	}
	if len(extra) > 0 {
		s += " (" + strings.Join(extra, ", ") + ")"
	}
	return s
}

// signedPercent is a change in whole percent with its sign: "−93%",
// "+7%", "±0%".
func signedPercent(p float64) string {
	r := math.Round(p)
	switch {
	case r < 0:
		return fmt.Sprintf("−%.0f%%", -r)
	case r > 0:
		return fmt.Sprintf("+%.0f%%", r)
	}
	return "±0%"
}
