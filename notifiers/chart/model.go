package chart

// The chart model: what a panel's picture is, apart from how it is drawn.
// Both renderers draw from it: this package's PNG (render.go) and
// daemon/web's inline SVG. It holds every rule about the curves and the
// axes: a curve's runs between gaps (Segments, Finite), the display unit of
// a panel's values (ms below a second, % for fractions), the value axis'
// range with its ticks and their labels, and the time axis' ticks and
// their labels. A renderer maps Axis.Frac onto its pixels or user units
// and draws; it computes no range, tick or label of its own.

import (
	"math"
	"strconv"
)

// Tick is one tick of an axis: where it is, in the axis' unit, and its
// label.
type Tick struct {
	V     float64
	Label string
}

// Axis is one axis of a panel: its range and ticks in the axis' unit.
type Axis struct {
	// Lo and Hi are the ends of the axis.
	Lo, Hi float64
	// Ticks are the ticks in Lo..Hi, in order.
	Ticks []Tick
	// Unit is the unit the axis is in: "ms", "s" or "%" (values in
	// seconds or fractions scaled by Mult), else the panel's unit; for the
	// time axis, minutes.
	Unit string
	// Mult turns a sample's value into the axis' unit (1000 for seconds
	// shown in ms, 100 for fractions shown in %; 1 for the time axis).
	Mult float64
	// Title names a time axis ("minutes into window").
	Title string
}

// Frac is where v (in the axis' unit) lies on the axis: 0 at Lo, 1 at Hi.
func (a Axis) Frac(v float64) float64 { return (v - a.Lo) / (a.Hi - a.Lo) }

// Tick counts: the value axis has 4 to 6 ticks, the time axis at most 7.
const minYTicks, maxYTicks, maxXTicks = 4, 6, 7

// Segments splits points at NaN/Inf values: the runs a line can be drawn
// through (a gap has no place on the axes; an SVG path would break on it).
func Segments(pts []Point) [][]Point {
	var out [][]Point
	var cur []Point
	for _, p := range pts {
		if !finite(p.V) {
			if len(cur) > 0 {
				out = append(out, cur)
			}
			cur = nil
			continue
		}
		cur = append(cur, p)
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// Finite drops NaN and infinite samples (gaps in a curve, not values).
func Finite(pts []Point) []Point {
	out := make([]Point, 0, len(pts))
	for _, p := range pts {
		if finite(p.V) {
			out = append(out, p)
		}
	}
	return out
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// scale picks the display unit of a panel: ms for sub-second latencies, %
// for fractions.
func scale(p Panel) (float64, string) {
	switch p.Unit {
	case UnitSeconds:
		hi := 0.0
		for _, s := range [][]Point{p.Incident, p.Baseline} {
			for _, pt := range Finite(s) {
				hi = math.Max(hi, pt.V)
			}
		}
		if hi < 1 {
			return 1000, "ms"
		}
		return 1, "s"
	case UnitFraction:
		return 100, "%"
	}
	return 1, p.Unit
}

// ValueAxis is the value axis of a panel over both its curves, in the
// panel's display unit (see valueAxis).
func ValueAxis(p Panel) Axis {
	mult, unit := scale(p)
	lo, hi := 0.0, 0.0
	for _, s := range [][]Point{p.Incident, p.Baseline} {
		for _, pt := range Finite(s) {
			lo, hi = math.Min(lo, pt.V*mult), math.Max(hi, pt.V*mult)
		}
	}
	if hi == 0 && lo == 0 {
		hi = 1
	}
	a := valueAxis(lo, hi, unit)
	a.Mult = mult
	return a
}

// valueAxis spans 0 (or below, for negative values) to 10% above the
// highest value, at most 100%, with 4 to 6 ticks at multiples of 1, 2 or 5
// × 10^k: when the step leaves fewer, the axis grows to the next tick.
func valueAxis(lo, hi float64, unit string) Axis {
	lo = math.Min(lo, 0)
	hi *= 1.1
	if unit == "%" && hi > 100 {
		hi = 100
	}
	if !(hi > lo) {
		hi = lo + 1
	}
	step := niceStep(hi-lo, maxYTicks)
	ts, dec := ticks(lo, hi, step)
	if len(ts) < minYTicks {
		hi = (math.Floor(hi/step+1e-9) + float64(minYTicks-len(ts))) * step
		ts, dec = ticks(lo, hi, step)
	}
	a := Axis{Lo: lo, Hi: hi, Unit: unit, Mult: 1}
	for _, v := range ts {
		a.Ticks = append(a.Ticks, Tick{V: v, Label: tickLabel(v, dec, unit)})
	}
	return a
}

// timeSteps are the time axis' tick steps, in seconds: round seconds,
// minutes and hours (never 8m20s); past a day, 1, 2 or 5 × 10^k days.
var timeSteps = []float64{1, 2, 5, 10, 30, 60, 120, 300, 600, 900, 1200, 1800, 3600, 2 * 3600, 3 * 3600, 6 * 3600, 12 * 3600, 24 * 3600}

// TimeAxis spans 0..span minutes exactly, with at most 7 ticks at the
// smallest of timeSteps that leaves no more. Its labels are in minutes,
// in hours when the step is an hour or more, in seconds when it is under
// half a minute; Title says which.
func TimeAxis(span float64) Axis {
	if !(span > 0) {
		span = 1
	}
	least := span * 60 / maxXTicks * (1 + 1e-9)
	step := 0.0
	for _, s := range timeSteps {
		if s > least {
			step = s
			break
		}
	}
	if step == 0 {
		step = niceStep(span/(24*60), maxXTicks) * 24 * 3600
	}
	step /= 60 // minutes
	per, title := 1.0, "minutes into window"
	switch {
	case step >= 60:
		per, title = 60, "hours into window"
	case step < 0.5:
		per, title = 1.0/60, "seconds into window"
	}
	ts, _ := ticks(0, span, step)
	_, dec := ticks(0, 0, step/per)
	a := Axis{Lo: 0, Hi: span, Unit: "minutes", Mult: 1, Title: title}
	for _, v := range ts {
		a.Ticks = append(a.Ticks, Tick{V: v, Label: number(v/per, dec)})
	}
	return a
}

// niceStep is the smallest step of 1, 2 or 5 × 10^k that puts at most n
// ticks on a span: span/step < n.
func niceStep(span float64, n int) float64 {
	if !(span > 0) || math.IsInf(span, 0) {
		return 1
	}
	least := span / float64(n) * (1 + 1e-9)
	p := math.Pow(10, math.Floor(math.Log10(least)))
	for {
		for _, m := range []float64{1, 2, 5} {
			if m*p > least {
				return m * p
			}
		}
		p *= 10
	}
}

// ticks are the multiples of step in lo..hi, with the decimals their labels
// need.
func ticks(lo, hi, step float64) ([]float64, int) {
	const eps = 1e-9
	var out []float64
	for k := math.Ceil(lo/step - eps); k <= math.Floor(hi/step+eps); k++ {
		v := k * step
		if v == 0 {
			v = 0 // not -0
		}
		out = append(out, v)
	}
	return out, max(0, -int(math.Floor(math.Log10(step)+eps)))
}

// number formats a tick rounded to its decimals, without trailing zeros
// ("2.5", "3", not "2.50", "3.00").
func number(v float64, decimals int) string {
	p := math.Pow(10, float64(decimals))
	v = math.Round(v*p) / p
	if v == 0 {
		v = 0 // not -0
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// tickLabel formats a value-axis tick in the display unit.
func tickLabel(v float64, decimals int, unit string) string {
	s := number(v, decimals)
	switch unit {
	case "ms", "s":
		return s + " " + unit
	case "%":
		return s + "%"
	}
	return s
}
