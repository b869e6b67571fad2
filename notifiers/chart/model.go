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
	"time"
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
	// Log says the axis is logarithmic (LogAbove): Lo > 0, ticks at 1, 2
	// or 5 × 10^k.
	Log bool
}

// Frac is where v (in the axis' unit) lies on the axis: 0 at Lo, 1 at Hi.
// On a log axis a value at or below zero lies at Lo.
func (a Axis) Frac(v float64) float64 {
	if a.Log {
		if !(v > a.Lo) {
			return 0
		}
		return (math.Log10(v) - math.Log10(a.Lo)) / (math.Log10(a.Hi) - math.Log10(a.Lo))
	}
	return (v - a.Lo) / (a.Hi - a.Lo)
}

// LogAbove is the spread of a panel's values (highest over lowest) above
// which its value axis is logarithmic: a TTFT ×1000 over its baseline
// leaves the baseline a flat line on zero on a linear axis.
const LogAbove = 20

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
// panel's display unit: logarithmic (logAxis) when every value is above
// zero and the highest is more than LogAbove times the lowest, else linear
// from zero (valueAxis).
func ValueAxis(p Panel) Axis {
	mult, unit := scale(p)
	lo, hi := 0.0, 0.0
	minPos, allPos := math.Inf(1), true
	for _, s := range [][]Point{p.Incident, p.Baseline} {
		for _, pt := range Finite(s) {
			v := pt.V * mult
			lo, hi = math.Min(lo, v), math.Max(hi, v)
			if v > 0 {
				minPos = math.Min(minPos, v)
			} else {
				allPos = false
			}
		}
	}
	if hi == 0 && lo == 0 {
		hi = 1
	}
	var a Axis
	if allPos && hi > LogAbove*minPos && !(unit == "%" && hi*1.1 > 100) {
		a = logAxis(minPos, hi, unit)
	} else {
		a = valueAxis(lo, hi, unit)
	}
	a.Mult = mult
	return a
}

// logAxis spans the 1, 2 or 5 × 10^k at or below lo to the one at or above
// 10% over hi, ticked at 1, 2 and 5 × 10^k, or at powers of ten (every
// other one over many decades) when those are more than maxYTicks.
func logAxis(lo, hi float64, unit string) Axis {
	a := Axis{Lo: roundDown125(lo), Hi: roundUp125(hi * 1.1), Unit: unit, Mult: 1, Log: true}
	var all, decades []float64
	for k := math.Floor(math.Log10(a.Lo)); k <= math.Ceil(math.Log10(a.Hi)); k++ {
		p := math.Pow(10, k)
		for _, m := range []float64{1, 2, 5} {
			v := m * p
			if v >= a.Lo*(1-1e-9) && v <= a.Hi*(1+1e-9) {
				all = append(all, v)
				if m == 1 {
					decades = append(decades, v)
				}
			}
		}
	}
	ts := all
	if len(ts) > maxYTicks {
		ts = decades
	}
	for len(ts) > maxYTicks {
		var half []float64
		for i := 0; i < len(ts); i += 2 {
			half = append(half, ts[i])
		}
		ts = half
	}
	for _, v := range ts {
		dec := max(0, -int(math.Floor(math.Log10(v)+1e-9)))
		a.Ticks = append(a.Ticks, Tick{V: v, Label: tickLabel(v, dec, unit)})
	}
	return a
}

// roundDown125 is the largest 1, 2 or 5 × 10^k at or below v (> 0).
func roundDown125(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)+1e-9))
	for _, m := range []float64{5, 2, 1} {
		if m*p <= v*(1+1e-9) {
			return m * p
		}
	}
	return p
}

// roundUp125 is the smallest 1, 2 or 5 × 10^k at or above v (> 0).
func roundUp125(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)-1e-9))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v*(1-1e-9) {
			return m * p
		}
	}
	return 10 * p
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

// clockSteps are the steps of a clock-time axis: round minutes and hours.
var clockSteps = []time.Duration{time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute,
	30 * time.Minute, time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour}

// TimeTick is one tick of a clock-time axis.
type TimeTick struct {
	T     time.Time
	Label string
}

// ClockTicks are the ticks of a time axis from start to end: at whole
// multiples (in UTC) of the smallest of clockSteps that leaves at most 7,
// labelled "15:04" (with the date, "Jan 2 15:04", where a day starts).
func ClockTicks(start, end time.Time) []TimeTick {
	if !end.After(start) {
		return nil
	}
	span := end.Sub(start)
	step := clockSteps[len(clockSteps)-1]
	for _, s := range clockSteps {
		if span/s < maxXTicks {
			step = s
			break
		}
	}
	var out []TimeTick
	for t := start.UTC().Truncate(step); !t.After(end); t = t.Add(step) {
		if t.Before(start) {
			continue
		}
		label := t.Format("15:04")
		if t.Hour() == 0 && t.Minute() == 0 && step >= time.Hour {
			label = t.Format("Jan 2 15:04")
		}
		out = append(out, TimeTick{T: t, Label: label})
	}
	return out
}
