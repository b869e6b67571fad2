package web

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/whyslow/whyslow/notifiers/chart"
	"github.com/whyslow/whyslow/notifiers/render"
	"github.com/whyslow/whyslow/verdict"
)

// The chart geometry, in SVG user units (the viewBox; the page scales it).
const (
	chartWidth  = 640
	chartHeight = 240
	plotLeft    = 60
	plotRight   = 12
	plotTop     = 28
	plotBottom  = 30
	segmentGap  = 18
)

// ChartView is one panel of the chart (TTFT p95, ITL p95, KV-cache usage,
// queue depth) drawn as inline SVG: the baseline on the left and the
// incident on the right, each its window shaded after a lead-in, on one
// value axis, with the onset marked; and the same numbers as text (Alt,
// Summary, Rows).
type ChartView struct {
	// ID is unique on the page (for aria-labelledby).
	ID    string
	Title string
	Query string
	// Empty says neither window had data.
	Empty bool
	// Width and Height are the viewBox.
	Width, Height int
	Baseline      Segment
	Incident      Segment
	YTicks        []Tick
	// PlotTop, PlotBottom and PlotHeight place the plot area; TickX is
	// the value labels' right edge, LabelY the window labels' baseline,
	// AxisY the time labels', OnsetY the onset label's, CenterX/Y the
	// middle (for "no data").
	PlotTop, PlotBottom, PlotHeight string
	TickX, LabelY, AxisY, OnsetY    string
	CenterX, CenterY                string
	// BaselineLevel is the y of the baseline window's mean, drawn across
	// the incident segment for comparison ("" without a baseline).
	BaselineLevel string
	// Onset marks when the incident opened, when that is on the incident
	// segment.
	Onset *Marker
	// Alt is the chart in words (the SVG's description).
	Alt     string
	Summary []SummaryRow
	// Rows are every sample drawn, by offset from its window's start
	// (negative in the lead-in).
	Rows []DataRow
	// Continuous says the panel is one time axis from before the baseline
	// to the incident's end (both windows shaded on it, XTicks at round
	// clock times), not the baseline beside the incident.
	Continuous bool
	XTicks     []XTick
	// Replicas are a line per target the verdict names (continuous
	// panels; chart.AddReplicas), each with its name at LabelY.
	Replicas []ReplicaLine
}

// ReplicaLine is one target's curve of a continuous panel.
type ReplicaLine struct {
	Name, Class, LabelY string
	Paths               []string
}

// XTick is a time-axis tick of a continuous panel.
type XTick struct {
	X, Label string
}

// Segment is one side of a panel: a span of time with the window it leads
// up to shaded.
type Segment struct {
	// Label names the window and its clock times ("incident 10:00–10:05
	// UTC"); Start and End label the span's edges on the time axis.
	Label, Start, End string
	// X0, X1 are the span's edges; ShadeX and ShadeWidth the window's;
	// LabelX is where the label ends (the window's right edge: the windows
	// end their spans), or starts when LabelAnchor is "start".
	X0, X1, ShadeX, ShadeWidth, LabelX string
	LabelAnchor                        string
	// Paths are the curve's SVG path data, one per run without gaps.
	Paths []string
	// Points counts the samples drawn.
	Points int
}

// Tick is a value-axis tick.
type Tick struct {
	Y     string
	Label string
}

// Marker is a vertical line on the incident segment.
type Marker struct {
	X, Label string
}

// SummaryRow is one window's numbers in the summary table.
type SummaryRow struct {
	Window, Mean, Peak, PeakAt, Change string
}

// DataRow is the samples at one offset from the windows' starts.
type DataRow struct {
	Offset, Baseline, Incident string
}

// Charts lays out the chart data as one ChartView per panel. The data
// spans chart.LeadIn; incident and baseline are the verdict's windows,
// shaded and summed up; onset is when the incident opened (zero: not
// marked).
//
// Data fetched over one span (Section with chart.ContinuousSpan: no baseline
// window in d) is drawn on one continuous time axis.
func Charts(d chart.Data, incident, baseline verdict.Window, onset time.Time) []ChartView {
	out := make([]ChartView, 0, len(d.Panels))
	for i, p := range d.Panels {
		if d.Baseline.Start.IsZero() && d.Baseline.End.IsZero() && d.Incident.End.After(d.Incident.Start) {
			out = append(out, continuousView(d, p, i, incident, baseline, onset))
			continue
		}
		out = append(out, panelView(d, p, i, incident, baseline, onset))
	}
	return out
}

// continuousView draws one panel on one time axis over d.Incident (the
// whole span): the curve, the baseline and incident windows shaded, the
// baseline window's mean across the plot, the onset, and ticks at round
// clock times.
func continuousView(d chart.Data, p chart.Panel, i int, incident, baseline verdict.Window, onset time.Time) ChartView {
	unit := tickUnit(p.Unit)
	const bottom = chartHeight - plotBottom
	cv := ChartView{ID: "chart-" + strconv.Itoa(i), Title: p.Title, Query: p.Query, Width: chartWidth, Height: chartHeight,
		PlotTop: coord(plotTop), PlotBottom: coord(bottom), PlotHeight: coord(bottom - plotTop),
		TickX: coord(plotLeft - 6), LabelY: coord(plotTop - 8), AxisY: coord(bottom + 16), OnsetY: coord(bottom + 27),
		CenterX: coord((plotLeft + chartWidth - plotRight) / 2), CenterY: coord((plotTop + bottom) / 2), Continuous: true}
	drawn := chart.Finite(p.Incident)
	cv.Empty = len(drawn) == 0
	a := axis{d.Incident.Start, d.Incident.End, plotLeft, chartWidth - plotRight}
	y := cv.valueAxis(chart.ValueAxis(chart.Panel{Unit: p.Unit, Incident: p.Incident}), plotTop, bottom)
	for _, t := range chart.ClockTicks(d.Incident.Start, d.Incident.End) {
		cv.XTicks = append(cv.XTicks, XTick{X: coord(a.x(t.T)), Label: t.Label})
	}
	// The baseline side only shades its window; the one curve is the
	// incident side's, over the whole axis.
	cv.Baseline = segment("baseline", a, baseline, nil, y)
	cv.Incident = segment("incident", a, incident, chart.BreakGaps(p.Incident), y)
	for i, r := range p.Replicas {
		s := segment(r.Name, a, d.Incident, r.Points, y)
		cv.Replicas = append(cv.Replicas, ReplicaLine{Name: r.Name, Class: "line-replica-" + strconv.Itoa(i%4), Paths: s.Paths,
			LabelY: coord(plotTop + 26 + 13*float64(i))})
	}
	cv.Baseline.Start, cv.Baseline.End, cv.Incident.Start, cv.Incident.End = "", "", "", ""
	// The baseline is on the left: its label runs right from its window.
	cv.Baseline.LabelX, cv.Baseline.LabelAnchor = coord(a.x(baseline.Start)+4), "start"
	if baseline.Start.IsZero() && baseline.End.IsZero() {
		cv.Baseline.ShadeWidth = "0.0"
	}
	base, inc := within(drawn, baseline), within(drawn, incident)
	if baseline.Start.IsZero() && baseline.End.IsZero() {
		base = nil
	}
	if m, ok := mean(base); ok {
		cv.BaselineLevel = coord(y(m))
	}
	if !onset.IsZero() && !onset.Before(d.Incident.Start) && !onset.After(d.Incident.End) {
		cv.Onset = &Marker{X: coord(a.x(onset)), Label: "opened " + onset.UTC().Format("15:04:05")}
	}
	cv.Summary = summary(base, inc, unit)
	cv.Rows = dataRows(base, inc, baseline.Start, incident.Start, unit)
	cv.Alt = altText(p.Title, cv.Summary, cv.Empty)
	return cv
}

// tickUnit is the unit the axis and tables format a panel's values in.
func tickUnit(unit string) string {
	switch unit {
	case chart.UnitSeconds:
		return render.UnitSeconds
	case chart.UnitFraction:
		return render.UnitFraction
	case chart.UnitRate, chart.UnitPreempt, chart.UnitMHz:
		return unit
	}
	return render.UnitCount
}

// axis maps a span of time onto x0..x1.
// valueAxis sets the view's value ticks and log-scale title from the
// chart model's axis and returns where a value lies on the plot.
func (cv *ChartView) valueAxis(ya chart.Axis, plotTop, bottom float64) func(float64) float64 {
	yAt := func(frac float64) float64 { return bottom - (bottom-plotTop)*frac }
	for _, t := range ya.Ticks {
		cv.YTicks = append(cv.YTicks, Tick{Y: coord(yAt(ya.Frac(t.V))), Label: t.Label})
	}
	if ya.Log {
		cv.Title += " (log scale)"
	}
	return func(v float64) float64 { return yAt(ya.Frac(v * ya.Mult)) }
}

type axis struct {
	start, end time.Time
	x0, x1     float64
}

func (a axis) x(t time.Time) float64 {
	span := a.end.Sub(a.start)
	if span <= 0 {
		return a.x0
	}
	x := a.x0 + (a.x1-a.x0)*float64(t.Sub(a.start))/float64(span)
	return math.Min(math.Max(x, a.x0), a.x1)
}

func panelView(d chart.Data, p chart.Panel, i int, incident, baseline verdict.Window, onset time.Time) ChartView {
	unit := tickUnit(p.Unit)
	const bottom = chartHeight - plotBottom
	cv := ChartView{ID: "chart-" + strconv.Itoa(i), Title: p.Title, Query: p.Query, Width: chartWidth, Height: chartHeight,
		PlotTop: coord(plotTop), PlotBottom: coord(bottom), PlotHeight: coord(bottom - plotTop),
		TickX: coord(plotLeft - 6), LabelY: coord(plotTop - 8), AxisY: coord(bottom + 16), OnsetY: coord(bottom + 27),
		CenterX: coord((plotLeft + chartWidth - plotRight) / 2), CenterY: coord((plotTop + bottom) / 2)}
	drawnB, drawnI := chart.Finite(p.Baseline), chart.Finite(p.Incident)
	cv.Empty = len(drawnB) == 0 && len(drawnI) == 0

	// The two spans share the plot width in proportion to their length.
	bLen, iLen := d.Baseline.End.Sub(d.Baseline.Start), d.Incident.End.Sub(d.Incident.Start)
	if bLen <= 0 {
		bLen = iLen
	}
	plotW := float64(chartWidth - plotLeft - plotRight - segmentGap)
	bW := plotW * float64(bLen) / float64(bLen+iLen)
	bAxis := axis{d.Baseline.Start, d.Baseline.End, plotLeft, plotLeft + bW}
	iAxis := axis{d.Incident.Start, d.Incident.End, plotLeft + bW + segmentGap, chartWidth - plotRight}

	// The value axis is the chart model's, as on the PNG: the curves
	// are drawn in its unit (ms, s, %), its ticks are gridlines.
	y := cv.valueAxis(chart.ValueAxis(p), plotTop, bottom)
	cv.Baseline = segment("baseline", bAxis, baseline, p.Baseline, y)
	cv.Incident = segment("incident", iAxis, incident, p.Incident, y)
	base, inc := within(drawnB, baseline), within(drawnI, incident)
	if m, ok := mean(base); ok {
		cv.BaselineLevel = coord(y(m))
	}
	if !onset.IsZero() && !onset.Before(d.Incident.Start) && !onset.After(d.Incident.End) && iLen > 0 {
		cv.Onset = &Marker{X: coord(iAxis.x(onset)), Label: "opened " + onset.UTC().Format("15:04:05")}
	}
	cv.Summary = summary(base, inc, unit)
	cv.Rows = dataRows(drawnB, drawnI, baseline.Start, incident.Start, unit)
	cv.Alt = altText(p.Title, cv.Summary, cv.Empty)
	return cv
}

// segment draws one side's curve on its axis, with window shaded.
func segment(name string, a axis, window verdict.Window, pts []chart.Point, y func(float64) float64) Segment {
	s := Segment{X0: coord(a.x0), X1: coord(a.x1), LabelX: coord(a.x1 - 4), ShadeX: coord(a.x0), ShadeWidth: coord(a.x1 - a.x0),
		LabelAnchor: "end"}
	if window.Start.IsZero() && window.End.IsZero() {
		s.Label = name
		return s
	}
	sx0, sx1 := a.x(window.Start), a.x(window.End)
	s.ShadeX, s.ShadeWidth, s.LabelX = coord(sx0), coord(sx1-sx0), coord(sx1-4)
	s.Start, s.End = a.start.UTC().Format("15:04"), a.end.UTC().Format("15:04")
	s.Label = name + " " + window.Start.UTC().Format("15:04") + "–" + window.End.UTC().Format("15:04") + " UTC"
	for _, run := range chart.Segments(pts) {
		var b strings.Builder
		for i, pt := range run {
			cmd := "L"
			if i == 0 {
				cmd = "M"
			}
			fmt.Fprintf(&b, "%s%s,%s", cmd, coord(a.x(pt.T)), coord(y(pt.V)))
		}
		if len(run) == 1 {
			// A lone sample is a dot: a zero-length line with round caps.
			b.WriteString("h0.01")
		}
		s.Paths = append(s.Paths, b.String())
		s.Points += len(run)
	}
	return s
}

// within keeps the samples inside w (all of them when w is unknown).
func within(pts []chart.Point, w verdict.Window) []chart.Point {
	if w.Start.IsZero() && w.End.IsZero() {
		return pts
	}
	out := make([]chart.Point, 0, len(pts))
	for _, p := range pts {
		if !p.T.Before(w.Start) && !p.T.After(w.End) {
			out = append(out, p)
		}
	}
	return out
}

// coord formats an SVG coordinate to one decimal.
func coord(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) }

func mean(pts []chart.Point) (float64, bool) {
	if len(pts) == 0 {
		return 0, false
	}
	sum := 0.0
	for _, p := range pts {
		sum += p.V
	}
	return sum / float64(len(pts)), true
}

func peak(pts []chart.Point) chart.Point {
	best := pts[0]
	for _, p := range pts[1:] {
		if p.V > best.V {
			best = p
		}
	}
	return best
}

// summary is each window's mean and peak, and the incident's mean against
// the baseline's.
func summary(base, inc []chart.Point, unit string) []SummaryRow {
	var rows []SummaryRow
	bMean, bOK := mean(base)
	for _, w := range []struct {
		name string
		pts  []chart.Point
	}{{"baseline", base}, {"incident", inc}} {
		m, ok := mean(w.pts)
		if !ok {
			rows = append(rows, SummaryRow{Window: w.name, Mean: "no data"})
			continue
		}
		pk := peak(w.pts)
		r := SummaryRow{Window: w.name, Mean: render.FormatValue(m, unit), Peak: render.FormatValue(pk.V, unit),
			PeakAt: pk.T.UTC().Format("15:04:05")}
		if w.name == "incident" && bOK && bMean != 0 {
			r.Change = render.FormatRatio(m / bMean)
		}
		rows = append(rows, r)
	}
	return rows
}

// altText says what the chart shows, for screen readers and text browsers.
func altText(title string, rows []SummaryRow, empty bool) string {
	if empty {
		return title + ": no data in either window."
	}
	parts := make([]string, 0, len(rows))
	for _, r := range rows {
		s := r.Window + " mean " + r.Mean
		if r.Peak != "" {
			s += ", peak " + r.Peak + " at " + r.PeakAt + " UTC"
		}
		if r.Change != "" {
			s += " (" + r.Change + " the baseline)"
		}
		parts = append(parts, s)
	}
	return title + ": " + strings.Join(parts, "; ") + "."
}

// dataRows lines up both sides' samples by their offset from their
// window's start.
func dataRows(base, inc []chart.Point, baseStart, incStart time.Time, unit string) []DataRow {
	type pair struct{ b, i string }
	byOffset := map[time.Duration]*pair{}
	var order []time.Duration
	add := func(pts []chart.Point, start time.Time, set func(*pair, string)) {
		for _, p := range pts {
			off := p.T.Sub(start).Round(time.Second)
			pr, ok := byOffset[off]
			if !ok {
				pr = &pair{}
				byOffset[off] = pr
				order = append(order, off)
			}
			set(pr, render.FormatValue(p.V, unit))
		}
	}
	add(base, baseStart, func(p *pair, s string) { p.b = s })
	add(inc, incStart, func(p *pair, s string) { p.i = s })
	slices.Sort(order)
	rows := make([]DataRow, 0, len(order))
	for _, off := range order {
		pr := byOffset[off]
		rows = append(rows, DataRow{Offset: offsetText(off), Baseline: orDash(pr.b), Incident: orDash(pr.i)})
	}
	return rows
}

// offsetText renders an offset as +m:ss or −m:ss.
func offsetText(d time.Duration) string {
	sign := "+"
	if d < 0 {
		sign, d = "−", -d
	}
	s := int(d / time.Second)
	return fmt.Sprintf("%s%d:%02d", sign, s/60, s%60)
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}
