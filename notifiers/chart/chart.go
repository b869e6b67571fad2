// Package chart draws the picture on-call engineers look at before reading:
// TTFT p95, ITL/TPOT p95, KV-cache usage and queue depth, the incident window
// drawn over the baseline window, as one PNG. Build fetches the curves with
// range queries from any triage.Metrics; Render draws them with gonum/plot.
package chart

// docs/img/kv_pressure.png is `whyslow why --bundle
// testdata/incidents/kv_pressure --chart ...`: go generate ./cmd/whyslow
// rewrites it, and cmd/whyslow's docs test checks it.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/whyslow/whyslow/triage"
)

// Units of a panel.
const (
	UnitSeconds  = "seconds"
	UnitFraction = "fraction"
	UnitCount    = "requests"
)

// Point is one sample of a curve.
type Point struct {
	T time.Time
	V float64
}

// Panel is one of the chart's plots: a curve over the incident window and
// the same curve over the baseline window.
type Panel struct {
	// Title names the signal, e.g. "TTFT p95".
	Title string
	// Unit is UnitSeconds, UnitFraction or UnitCount.
	Unit string
	// Query is the PromQL expression the curves came from ("" if none had data).
	Query string
	// Incident and Baseline are the samples in time order.
	Incident []Point
	Baseline []Point
}

// Data is everything the chart shows.
type Data struct {
	// Title is drawn above the panels.
	Title string
	// Incident and Baseline are the two windows; x is time since each
	// window's start, so the curves lie on top of each other.
	Incident triage.Window
	Baseline triage.Window
	// Panels are drawn in a 2×2 grid, row by row.
	Panels []Panel
}

// Size of the rendered PNG.
const (
	Width  = 1200
	Height = 800
	dpi    = 96
)

var (
	incidentColor = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	baselineColor = color.RGBA{R: 0x80, G: 0x80, B: 0x80, A: 0xff}
)

// Render draws d as a PNG of Width×Height pixels into w.
func Render(w io.Writer, d Data) error {
	if len(d.Panels) == 0 {
		return errors.New("render chart: no panels")
	}
	cols := 2
	if len(d.Panels) == 1 {
		cols = 1
	}
	rows := (len(d.Panels) + cols - 1) / cols
	grid := make([][]*plot.Plot, rows)
	for r := range grid {
		grid[r] = make([]*plot.Plot, cols)
	}
	for i, p := range d.Panels {
		pl, err := panelPlot(d, p, i == 0)
		if err != nil {
			return fmt.Errorf("render chart: panel %q: %w", p.Title, err)
		}
		grid[i/cols][i%cols] = pl
	}
	px := func(n float64) vg.Length { return vg.Length(n) * vg.Inch / dpi }
	img := vgimg.NewWith(vgimg.UseWH(px(Width), px(Height)), vgimg.UseDPI(dpi))
	dc := draw.New(img)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	title := d.Title
	if title == "" {
		title = "whyslow: incident vs baseline"
	}
	sty := draw.TextStyle{Color: color.Black, Font: font.From(plot.DefaultFont, 15), XAlign: draw.XCenter, YAlign: draw.YTop,
		Handler: plot.DefaultTextHandler}
	dc.FillText(sty, vg.Point{X: dc.Min.X + (dc.Max.X-dc.Min.X)/2, Y: dc.Max.Y - px(8)}, title)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: px(24), PadY: px(20), PadTop: px(40), PadBottom: px(10), PadLeft: px(10), PadRight: px(16)}
	canvases := plot.Align(grid, tiles, dc)
	for r := range grid {
		for c := range grid[r] {
			if grid[r][c] != nil {
				grid[r][c].Draw(canvases[r][c])
			}
		}
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(w); err != nil {
		return fmt.Errorf("render chart: write png: %w", err)
	}
	return nil
}

// PNG renders d and returns the bytes.
func PNG(d Data) ([]byte, error) {
	var b bytes.Buffer
	if err := Render(&b, d); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// scale picks the display unit of a panel: ms for sub-second latencies, %
// for fractions.
func scale(p Panel) (float64, string) {
	switch p.Unit {
	case UnitSeconds:
		hi := 0.0
		for _, s := range [][]Point{p.Incident, p.Baseline} {
			for _, pt := range s {
				if !math.IsNaN(pt.V) && !math.IsInf(pt.V, 0) {
					hi = math.Max(hi, pt.V)
				}
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

func panelPlot(d Data, p Panel, legend bool) (*plot.Plot, error) {
	pl := plot.New()
	mult, unit := scale(p)
	pl.Title.Text = p.Title
	if len(p.Incident) == 0 && len(p.Baseline) == 0 {
		pl.Title.Text += " (no data)"
	}
	pl.Y.Label.Text = unit
	pl.X.Label.Text = "minutes into window"
	pl.Y.Min = 0
	pl.X.Tick.Marker, pl.Y.Tick.Marker = cleanTicks{}, cleanTicks{}
	pl.Add(plotter.NewGrid())
	span := d.Incident.End.Sub(d.Incident.Start)
	if bs := d.Baseline.End.Sub(d.Baseline.Start); bs > span {
		span = bs
	}
	if span > 0 {
		pl.X.Min, pl.X.Max = 0, span.Minutes()
	}
	type curve struct {
		name  string
		pts   []Point
		start time.Time
		col   color.Color
		dash  []vg.Length
		width vg.Length
	}
	curves := []curve{
		{"baseline", p.Baseline, d.Baseline.Start, baselineColor, []vg.Length{vg.Points(4), vg.Points(3)}, vg.Points(1.5)},
		{"incident", p.Incident, d.Incident.Start, incidentColor, nil, vg.Points(2)},
	}
	ymax := 0.0
	for _, c := range curves {
		first := true
		for _, seg := range Segments(c.pts) {
			xys := make(plotter.XYs, len(seg))
			for i, pt := range seg {
				xys[i] = plotter.XY{X: pt.T.Sub(c.start).Minutes(), Y: pt.V * mult}
				ymax = math.Max(ymax, xys[i].Y)
			}
			l, err := plotter.NewLine(xys)
			if err != nil {
				return nil, err
			}
			l.Color, l.Dashes, l.Width = c.col, c.dash, c.width
			pl.Add(l)
			if first && legend {
				pl.Legend.Add(c.name, l)
			}
			first = false
		}
	}
	if ymax == 0 {
		ymax = 1
	}
	pl.Y.Max = ymax * 1.1
	if p.Unit == UnitFraction && pl.Y.Max > 100 {
		pl.Y.Max = 100
	}
	pl.Legend.Top = true
	pl.Legend.Left = true
	return pl, nil
}

// cleanTicks are gonum's default ticks labelled without trailing zeros
// ("2.5", not "2.50").
type cleanTicks struct{}

// Ticks implements plot.Ticker.
func (cleanTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = strconv.FormatFloat(ts[i].Value, 'f', -1, 64)
		}
	}
	return ts
}

// Segments splits points at NaN/Inf values: the runs a line can be drawn
// through (plotter lines reject them; an SVG path would break on them).
func Segments(pts []Point) [][]Point {
	var out [][]Point
	var cur []Point
	for _, p := range pts {
		if math.IsNaN(p.V) || math.IsInf(p.V, 0) {
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

// Options tune Build. Zero values get defaults.
type Options struct {
	// Step is the range query resolution (default: the window / 120, at
	// least 1s).
	Step time.Duration
	// RateWindow is the range of rate() for the quantiles (default 1m, at
	// least 4 steps).
	RateWindow time.Duration
	// Engine puts that engine's metric names first (vllm, sglang, trtllm);
	// empty or auto: the verdict's.
	Engine string
}

// signal is one panel's definition: alternative expressions, first with
// data wins. %s is the metric selector's braces content, %r the rate range.
type signal struct {
	title string
	unit  string
	exprs []string
}

// quantile95 is the p95 of a histogram family over the selector.
func quantile95(family string) string {
	return `histogram_quantile(0.95, sum by (le) (rate(` + family + `_bucket{%s}[%r])))`
}

// signals are the four panels, with the metric names of every engine
// (the names in docs/engines.md §7, old names after new ones).
var signals = []signal{
	{"TTFT p95", UnitSeconds, []string{
		quantile95("vllm:time_to_first_token_seconds"),
		quantile95("sglang:time_to_first_token_seconds"),
		quantile95("trtllm_time_to_first_token_seconds"),
	}},
	{"ITL / TPOT p95", UnitSeconds, []string{
		quantile95("vllm:inter_token_latency_seconds"),
		quantile95("vllm:time_per_output_token_seconds"),
		quantile95("sglang:inter_token_latency_seconds"),
		quantile95("sglang:time_per_output_token_seconds"),
		quantile95("trtllm_time_per_output_token_seconds"),
	}},
	{"KV-cache usage (max over targets)", UnitFraction, []string{
		`max(vllm:kv_cache_usage_perc{%s})`,
		`max(vllm:gpu_cache_usage_perc{%s})`,
		`max(sglang:token_usage{%s})`,
		`max(trtllm_kv_cache_utilization{%s})`,
	}},
	{"Queue depth (waiting requests)", UnitCount, []string{
		`sum(vllm:num_requests_waiting{%s})`,
		`sum(sglang:num_queue_reqs{%s})`,
		`sum(trtllm_server_queue_length{%s})`,
	}},
}

// Queries returns the PromQL alternatives of every panel for a selector
// (label matchers without braces), for docs and tests.
func Queries(selector string, o Options) map[string][]string {
	o = o.withDefaults(time.Hour)
	out := map[string][]string{}
	for _, s := range signals {
		for _, e := range orderFor(s.exprs, o.Engine) {
			out[s.title] = append(out[s.title], expand(e, selector, o.RateWindow))
		}
	}
	return out
}

func (o Options) withDefaults(window time.Duration) Options {
	if o.Step <= 0 {
		o.Step = max(window/120, time.Second).Round(time.Second)
	}
	if o.RateWindow <= 0 {
		o.RateWindow = time.Minute
	}
	o.RateWindow = max(o.RateWindow, 4*o.Step)
	return o
}

func expand(expr, selector string, rate time.Duration) string {
	return strings.NewReplacer("%s", selector, "%r", model.Duration(rate).String()).Replace(expr)
}

// orderFor puts the engine's own metric names first, keeping the order
// otherwise.
func orderFor(exprs []string, engine string) []string {
	out := append([]string(nil), exprs...)
	if engine == "" {
		return out
	}
	own := func(e string) bool { return strings.Contains(e, "("+engine+":") || strings.Contains(e, "("+engine+"_") }
	sort.SliceStable(out, func(i, j int) bool { return own(out[i]) && !own(out[j]) })
	return out
}

// Build runs the range queries for selector over both windows and returns
// the chart data. A panel with no data in either window stays empty; an
// error is returned only when no panel got any data and a query failed.
func Build(ctx context.Context, m triage.Metrics, selector string, incident, baseline triage.Window, o Options) (Data, error) {
	if m == nil {
		return Data{}, errors.New("build chart: no metrics source")
	}
	if !incident.End.After(incident.Start) {
		return Data{}, fmt.Errorf("build chart: empty incident window %s..%s", incident.Start.Format(time.RFC3339), incident.End.Format(time.RFC3339))
	}
	o = o.withDefaults(incident.End.Sub(incident.Start))
	d := Data{Incident: incident, Baseline: baseline}
	var firstErr error
	haveData := false
	for _, s := range signals {
		p := Panel{Title: s.title, Unit: s.unit}
		for _, e := range orderFor(s.exprs, o.Engine) {
			expr := expand(e, selector, o.RateWindow)
			inc, err := queryRange(ctx, m, expr, incident, o.Step)
			if err != nil {
				if ctx.Err() != nil {
					return Data{}, fmt.Errorf("build chart: %w", ctx.Err())
				}
				if firstErr == nil {
					firstErr = fmt.Errorf("build chart: query %s: %w", expr, err)
				}
				continue
			}
			var base []Point
			if baseline.End.After(baseline.Start) {
				if base, err = queryRange(ctx, m, expr, baseline, o.Step); err != nil && firstErr == nil {
					firstErr = fmt.Errorf("build chart: query %s: %w", expr, err)
				}
			}
			if len(inc) == 0 && len(base) == 0 {
				continue
			}
			p.Query, p.Incident, p.Baseline = expr, inc, base
			haveData = true
			break
		}
		d.Panels = append(d.Panels, p)
	}
	if !haveData && firstErr != nil {
		return Data{}, firstErr
	}
	return d, nil
}

// ForVerdict builds the chart of a verdict: its scope over its incident and
// baseline windows, titled with its scope and status.
func ForVerdict(ctx context.Context, m triage.Metrics, v *triage.Verdict, o Options) (Data, error) {
	if v == nil {
		return Data{}, errors.New("build chart: nil verdict")
	}
	if o.Engine == "" || o.Engine == "auto" {
		o.Engine = v.Engine
	}
	d, err := Build(ctx, m, v.Scope.Selector, v.Incident, v.Baseline, o)
	if err != nil {
		return Data{}, err
	}
	d.Title = title(v)
	return d, nil
}

// PNGFunc returns a function that renders a verdict's chart as PNG from m:
// the Slack receiver's chart source.
func PNGFunc(m triage.Metrics, o Options) func(ctx context.Context, v *triage.Verdict) ([]byte, error) {
	return func(ctx context.Context, v *triage.Verdict) ([]byte, error) {
		d, err := ForVerdict(ctx, m, v, o)
		if err != nil {
			return nil, err
		}
		return PNG(d)
	}
}

func title(v *triage.Verdict) string {
	scope := v.Scope.Selector
	if scope == "" {
		scope = "all targets"
	}
	s := scope
	if v.Status != "" {
		s += " — " + string(v.Status)
		if v.Severity != "" && v.Severity != triage.SeverityNone {
			s += " (" + string(v.Severity) + ")"
		}
	}
	if !v.Incident.End.IsZero() {
		s += fmt.Sprintf(" — incident %s–%s UTC vs baseline %s earlier",
			v.Incident.Start.UTC().Format("15:04"), v.Incident.End.UTC().Format("15:04"),
			model.Duration(v.Incident.End.Sub(v.Baseline.End)))
	}
	return s
}

// queryRange runs one range query and returns its first series' points.
func queryRange(ctx context.Context, m triage.Metrics, expr string, w triage.Window, step time.Duration) ([]Point, error) {
	mat, _, err := m.QueryRange(ctx, expr, w.Start, w.End, step)
	if err != nil {
		return nil, err
	}
	for _, ss := range mat {
		if len(ss.Values) == 0 {
			continue
		}
		pts := make([]Point, 0, len(ss.Values))
		for _, sp := range ss.Values {
			pts = append(pts, Point{T: sp.Timestamp.Time(), V: float64(sp.Value)})
		}
		return pts, nil
	}
	return nil, nil
}
