package web

import (
	"math"
	"strconv"

	"github.com/whyslow/whyslow/notifiers/render"
	"github.com/whyslow/whyslow/verdict"
)

// PredictionsView is the verdict's "Predicted effect of the fixes"
// (whatif): one row per fix in the verdict's order (best predicted TTFT
// p95 first), each with a before/after bar for TTFT p95 and inter-token
// p95. The daemon computes predictions apart from the triage, so the
// section also has a state without any: computing, or why there are none.
type PredictionsView struct {
	// Computing says a prediction is being computed (Message says since
	// when); the page reloads itself and shows it when it is done.
	Computing bool
	// Message is why there is no prediction ("no prediction: missing
	// series …") or that one is being computed; "" with rows.
	Message string
	// Stale says the rows are for an earlier verdict of the incident
	// ("" when they are for the one shown).
	Stale string
	// Notes are the model's notes (what the changes are against, the
	// calibration, a poor fit, none helps), as every rendering has them.
	Notes     []string
	NoneHelps string
	PoorFit   bool
	Fixes     []FixRow
	Declined  []string
}

// FixRow is one fix's predicted effect.
type FixRow struct {
	Fix     string
	Trade   string
	PoorFit bool
	Bars    []PredictedBar
}

// PredictedBar is a p95 before the fix (the model of the incident) and
// with it, as bars on one scale per metric (the largest value of any row),
// with the replay seeds' range as a line across the "after" bar.
type PredictedBar struct {
	Metric string
	// Text is "2m26s → 10.9 s (−93%, seeds 10.1 s–11.8 s)".
	Text string
	// BeforeW and AfterW are the bars' widths, LowX and HighX the seeds'
	// range, in the bar's 0–200 viewBox units.
	BeforeW, AfterW string
	LowX, HighX     string
	// Change is "better", "worse" or "same" (within verdict.PredictedUnchanged).
	Change string
}

// barUnits is the width of a predicted bar's viewBox.
const barUnits = 200

// Predictions lays out p (nil: nil).
func Predictions(p *verdict.Predicted) *PredictionsView {
	if p == nil {
		return nil
	}
	out := &PredictionsView{PoorFit: p.PoorFit, NoneHelps: p.NoneHelps}
	lines := render.PredictionsOf(&verdict.Verdict{Predicted: p})
	if p.Missing != "" {
		out.Message = p.Missing
		return out
	}
	out.Notes, out.Declined = lines.Notes, lines.Declined
	before := verdict.PredictedValues{}
	if p.Incident != nil {
		before = *p.Incident
	}
	// One scale per metric over every row, so the rows compare.
	scaleTTFT, scaleITL := before.TTFTP95, before.ITLP95
	for _, f := range p.Fixes {
		scaleTTFT = math.Max(scaleTTFT, math.Max(f.TTFTP95.Median, f.TTFTP95.High))
		scaleITL = math.Max(scaleITL, math.Max(f.ITLP95.Median, f.ITLP95.High))
	}
	for _, f := range p.Fixes {
		out.Fixes = append(out.Fixes, FixRow{Fix: f.Fix, Trade: f.Trade, PoorFit: p.PoorFit, Bars: []PredictedBar{
			predictedBar("TTFT p95", before.TTFTP95, f.TTFTP95, scaleTTFT),
			predictedBar("inter-token p95", before.ITLP95, f.ITLP95, scaleITL),
		}})
	}
	return out
}

func predictedBar(metric string, before float64, r verdict.PredictedRange, scale float64) PredictedBar {
	w := func(x float64) string {
		if scale <= 0 || math.IsNaN(x) || x <= 0 {
			return "0"
		}
		return strconv.FormatFloat(barUnits*math.Min(x/scale, 1), 'f', 1, 64)
	}
	b := PredictedBar{Metric: metric, Text: render.PredictedChange(before, r), BeforeW: w(before), AfterW: w(r.Median),
		LowX: w(r.Low), HighX: w(r.High), Change: "same"}
	switch {
	case before <= 0:
	case r.Median < before*(1-verdict.PredictedUnchanged):
		b.Change = "better"
	case r.Median > before*(1+verdict.PredictedUnchanged):
		b.Change = "worse"
	}
	return b
}
