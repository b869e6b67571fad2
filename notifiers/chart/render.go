package chart

// The renderer: a white Width×ImageHeight RGBA image, one panel per cell
// of a grid two wide, each a plot area with light gridlines at "nice" values, axes
// with tick labels in the panel's unit, and either one curve (blue) on a
// clock-time axis with the baseline and incident windows shaded, the
// baseline window's mean dashed across and the onset marked (Data.Span),
// or the baseline (grey, dashed) and incident (red) curves over each
// other. Curves are polylines stroked as thin quads with
// round joins and filled by golang.org/x/image/vector's antialiasing
// rasterizer; text is the 7×13 bitmap font of golang.org/x/image's
// basicfont (no TrueType fonts in the binary), the title at 2× when it
// fits.

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"math"
	"strings"
	"time"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
	"golang.org/x/image/vector"

	"github.com/whyslow/whyslow/verdict"
)

// Size of the rendered PNG with up to four panels; each further row of
// two panels adds a row as tall as those of four (ImageHeight).
const (
	Width  = 1200
	Height = 800
)

// ImageHeight is the height of the PNG of n panels.
func ImageHeight(n int) int {
	if rows := (n + 1) / 2; rows > 2 {
		return gridTop + rows*((Height-gridTop)/2)
	}
	return Height
}

var (
	incidentColor = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	baselineColor = color.RGBA{R: 0x80, G: 0x80, B: 0x80, A: 0xff}
	gridColor     = color.RGBA{R: 0xe6, G: 0xe6, B: 0xe6, A: 0xff}
	axisColor     = color.RGBA{R: 0x70, G: 0x70, B: 0x70, A: 0xff}
	labelColor    = color.RGBA{R: 0x44, G: 0x44, B: 0x44, A: 0xff}
	titleColor    = color.RGBA{R: 0x11, G: 0x11, B: 0x11, A: 0xff}
	noDataColor   = color.RGBA{R: 0xa0, G: 0xa0, B: 0xa0, A: 0xff}
	// On a continuous chart: the one curve, the windows' shading, the
	// onset line.
	curveColor         = color.RGBA{R: 0x1f, G: 0x5f, B: 0xa8, A: 0xff}
	baselineShadeColor = color.RGBA{R: 0xea, G: 0xea, B: 0xea, A: 0xff}
	incidentShadeColor = color.RGBA{R: 0xfb, G: 0xdc, B: 0xdc, A: 0xff}
	onsetColor         = color.RGBA{R: 0x11, G: 0x11, B: 0x11, A: 0xff}
	// replicaColors are the per-target lines', in the verdict's order of
	// its targets (none blue, red or grey).
	replicaColors = []color.RGBA{{R: 0xe0, G: 0x8a, B: 0x00, A: 0xff}, {R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
		{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}, {R: 0x8c, G: 0x56, B: 0x4b, A: 0xff}}
)

// replicaHalfWidth: the per-target lines are thinner than the curve.
const replicaHalfWidth = 0.7

// Geometry, in pixels.
const (
	// gridTop is where the panels start, below the title.
	gridTop = 58
	// The plot area's inset in its cell: room for the y tick labels on
	// the left, the panel title above, the x tick labels and axis label
	// below.
	insetLeft, insetRight, insetTop, insetBottom = 76, 24, 30, 46
	// rasterPad is how far a curve may be drawn outside its plot area
	// (half a line at the axis limits is not cut off).
	rasterPad = 4
	// Stroke half-widths and the baseline's dash pattern.
	incidentHalfWidth = 1.0
	baselineHalfWidth = 1.0
	dashOn, dashOff   = 7, 5
)

// face is the only font: 7 pixels wide, 13 high, ASCII.
var face = basicfont.Face7x13

// panelBox is where a panel is drawn: its cell of the grid and, inside it,
// its plot area (the axes run along the plot area's left and bottom edges).
type panelBox struct {
	cell, plot image.Rectangle
}

// layout places n panels two to a row (one column for a single
// panel) below the title.
func layout(n int) []panelBox {
	cols := 2
	if n == 1 {
		cols = 1
	}
	rows := (n + cols - 1) / cols
	cw, ch := Width/cols, (ImageHeight(n)-gridTop)/rows
	out := make([]panelBox, n)
	for i := range out {
		x0, y0 := (i%cols)*cw, gridTop+(i/cols)*ch
		cell := image.Rect(x0, y0, x0+cw, y0+ch)
		out[i] = panelBox{cell: cell, plot: image.Rect(cell.Min.X+insetLeft, cell.Min.Y+insetTop, cell.Max.X-insetRight, cell.Max.Y-insetBottom)}
	}
	return out
}

// Render draws d as a PNG of Width×ImageHeight pixels into w.
func Render(w io.Writer, d Data) error {
	img, err := rasterize(d)
	if err != nil {
		return err
	}
	if err := png.Encode(w, img); err != nil {
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

// rasterize draws d into an image.
func rasterize(d Data) (*image.RGBA, error) {
	if len(d.Panels) == 0 {
		return nil, errors.New("render chart: no panels")
	}
	img := image.NewRGBA(image.Rect(0, 0, Width, ImageHeight(len(d.Panels))))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	title := d.Title
	if title == "" {
		title = "whyslow: incident vs baseline"
	}
	drawTitle(img, title)
	z := &vector.Rasterizer{}
	for i, box := range layout(len(d.Panels)) {
		drawPanel(img, z, d, d.Panels[i], box, i == 0)
	}
	return img, nil
}

// frame maps data coordinates onto a plot area.
type frame struct {
	plot image.Rectangle
	x, y Axis
}

func (f frame) px(x float64) float32 {
	return float32(f.plot.Min.X) + float32(f.x.Frac(x)*float64(f.plot.Dx()))
}

func (f frame) py(y float64) float32 {
	return float32(f.plot.Max.Y) - float32(f.y.Frac(y)*float64(f.plot.Dy()))
}

// curve is one window's samples of a panel.
type curve struct {
	name      string
	pts       []Point
	start     time.Time
	col       color.RGBA
	halfWidth float32
	dashed    bool
	// box: a shaded window, not a line (only in the legend).
	box bool
}

func drawPanel(img *image.RGBA, z *vector.Rasterizer, d Data, p Panel, box panelBox, legend bool) {
	if !d.Span.Start.IsZero() && d.Span.End.After(d.Span.Start) {
		drawContinuous(img, z, d, p, box, legend)
		return
	}
	curves := []curve{
		{name: "baseline", pts: p.Baseline, start: d.Baseline.Start, col: baselineColor, halfWidth: baselineHalfWidth, dashed: true},
		{name: "incident", pts: p.Incident, start: d.Incident.Start, col: incidentColor, halfWidth: incidentHalfWidth},
	}
	// x is minutes since the window's start (the first sample's without
	// a window), up to the longer window (the last sample without).
	span := max(d.Incident.End.Sub(d.Incident.Start), d.Baseline.End.Sub(d.Baseline.Start)).Minutes()
	dataSpan, have := 0.0, false
	for i, c := range curves {
		if c.start.IsZero() && len(c.pts) > 0 {
			curves[i].start = c.pts[0].T
		}
		for _, pt := range Finite(c.pts) {
			have = true
			dataSpan = math.Max(dataSpan, pt.T.Sub(curves[i].start).Minutes())
		}
	}
	if !(span > 0) {
		span = dataSpan
	}
	f := frame{plot: box.plot, x: TimeAxis(span), y: ValueAxis(p)}
	drawAxes(img, f)
	drawCurves(img, z, f, curves)
	drawTitleAndLegend(img, f, p.Title, have, legend, curves)
}

// drawAxes draws the gridlines, then the axes and their tick marks over
// them.
func drawAxes(img *image.RGBA, f frame) {
	pl := f.plot
	for _, t := range f.y.Ticks {
		y := int(math.Round(float64(f.py(t.V))))
		fill(img, image.Rect(pl.Min.X, y, pl.Max.X, y+1), gridColor)
		fill(img, image.Rect(pl.Min.X-5, y, pl.Min.X-1, y+1), axisColor)
		drawText(img, pl.Min.X-8-textWidth(t.Label), y+4, t.Label, labelColor)
	}
	for _, t := range f.x.Ticks {
		x := int(math.Round(float64(f.px(t.V))))
		fill(img, image.Rect(x, pl.Min.Y, x+1, pl.Max.Y), gridColor)
		fill(img, image.Rect(x, pl.Max.Y+1, x+1, pl.Max.Y+5), axisColor)
		drawText(img, x-textWidth(t.Label)/2, pl.Max.Y+18, t.Label, labelColor)
	}
	fill(img, image.Rect(pl.Min.X-1, pl.Min.Y, pl.Min.X, pl.Max.Y+1), axisColor)
	fill(img, image.Rect(pl.Min.X-1, pl.Max.Y, pl.Max.X, pl.Max.Y+1), axisColor)
	xl := f.x.Title
	drawText(img, pl.Min.X+(pl.Dx()-textWidth(xl))/2, pl.Max.Y+35, xl, labelColor)
}

// drawCurves strokes the curves in order (the last on top), each over its
// start.
func drawCurves(img *image.RGBA, z *vector.Rasterizer, f frame, curves []curve) {
	r := f.plot.Inset(-rasterPad).Intersect(img.Bounds())
	for _, c := range curves {
		z.Reset(r.Dx(), r.Dy())
		s := stroker{z: z, dx: -float32(r.Min.X), dy: -float32(r.Min.Y)}
		for _, seg := range Segments(c.pts) {
			line := make([]vec, len(seg))
			for i, pt := range seg {
				line[i] = vec{f.px(pt.T.Sub(c.start).Minutes()), f.py(pt.V * f.y.Mult)}
			}
			if c.dashed {
				for _, dash := range dashes(line, dashOn, dashOff) {
					s.polyline(dash, c.halfWidth)
				}
			} else {
				s.polyline(line, c.halfWidth)
			}
		}
		z.Draw(img, r, image.NewUniform(c.col), image.Point{})
	}
}

// drawTitleAndLegend draws the panel's title above the plot area ("no
// data" in it without data) and, when legend, the legend on its right.
func drawTitleAndLegend(img *image.RGBA, f frame, title string, have, legend bool, curves []curve) {
	pl := f.plot
	if f.y.Log {
		title += " (log scale)"
	}
	if !have {
		title += " (no data)"
		msg := "no data"
		drawText(img, pl.Min.X+(pl.Dx()-textWidth(msg))/2, pl.Min.Y+pl.Dy()/2+4, msg, noDataColor)
	}
	title = fit(title, pl.Dx()+insetLeft/2)
	ty := pl.Min.Y - 10
	drawBold(img, pl.Min.X-insetLeft/2, ty, title, titleColor)
	if legend {
		lw := legendWidth(curves)
		if pl.Min.X-insetLeft/2+textWidth(title)+1+24 <= pl.Max.X-lw {
			drawLegend(img, pl.Max.X-lw, ty, curves)
		} else {
			// No room beside the title: a boxed legend in the plot's
			// top right corner.
			b := image.Rect(pl.Max.X-lw-16, pl.Min.Y+6, pl.Max.X-6, pl.Min.Y+28)
			fill(img, b, axisColor)
			fill(img, b.Inset(1), color.RGBA{R: 0xff, G: 0xff, B: 0xff, A: 0xff})
			drawLegend(img, b.Min.X+6, b.Min.Y+15, curves)
		}
	}
}

// continuousAxis is the time axis of a continuous chart: minutes from the
// span's start, ticked at round clock times (ClockTicks).
func continuousAxis(span verdict.Window) Axis {
	a := Axis{Lo: 0, Hi: span.End.Sub(span.Start).Minutes(), Unit: "minutes", Mult: 1, Title: "time (UTC)"}
	for _, t := range ClockTicks(span.Start, span.End) {
		a.Ticks = append(a.Ticks, Tick{V: t.T.Sub(span.Start).Minutes(), Label: t.Label})
	}
	return a
}

// drawContinuous draws a panel of a Span chart: the two windows shaded
// and labelled, the curve over the whole span, the baseline window's mean
// dashed across the plot, the onset as a vertical line.
func drawContinuous(img *image.RGBA, z *vector.Rasterizer, d Data, p Panel, box panelBox, legend bool) {
	f := frame{plot: box.plot, x: continuousAxis(d.Span), y: ValueAxis(Panel{Unit: p.Unit, Incident: p.Incident})}
	pl := f.plot
	at := func(t time.Time) int { return int(math.Round(float64(f.px(t.Sub(d.Span.Start).Minutes())))) }
	shades := []struct {
		name string
		w    verdict.Window
		col  color.RGBA
	}{{"baseline", d.Baseline, baselineShadeColor}, {"incident", d.Incident, incidentShadeColor}}
	for _, sh := range shades {
		if !sh.w.End.After(sh.w.Start) {
			continue
		}
		x0, x1 := max(at(sh.w.Start), pl.Min.X), min(at(sh.w.End), pl.Max.X)
		if x1 <= x0 {
			continue
		}
		fill(img, image.Rect(x0, pl.Min.Y, x1, pl.Max.Y), sh.col)
	}
	drawAxes(img, f)
	for _, sh := range shades {
		x0, x1 := max(at(sh.w.Start), pl.Min.X), min(at(sh.w.End), pl.Max.X)
		if sh.w.End.After(sh.w.Start) && x1-x0 >= textWidth(sh.name)+4 {
			drawText(img, x0+3, pl.Min.Y+13, sh.name, labelColor)
		}
	}
	// The curve is whatever was fetched; the windows' samples are only
	// told apart by the shading under them.
	have := len(Finite(p.Incident)) > 0
	curves := []curve{{name: "incident window", col: incidentShadeColor, box: true}}
	if d.Baseline.End.After(d.Baseline.Start) {
		curves = append([]curve{{name: "baseline window", col: baselineShadeColor, box: true}}, curves...)
	}
	var lines []curve
	if m, ok := windowMean(p.Incident, d.Baseline); ok {
		y := f.py(m * f.y.Mult)
		mean := curve{name: "baseline mean", col: baselineColor, halfWidth: baselineHalfWidth, dashed: true,
			pts: []Point{{T: d.Span.Start, V: m}, {T: d.Span.End, V: m}}, start: d.Span.Start}
		if y >= float32(pl.Min.Y) && y <= float32(pl.Max.Y) {
			lines = append(lines, mean)
		}
		curves = append([]curve{mean}, curves...)
	}
	for i, r := range p.Replicas {
		lines = append(lines, curve{name: r.Name, pts: r.Points, start: d.Span.Start, col: replicaColors[i%len(replicaColors)], halfWidth: replicaHalfWidth})
	}
	lines = append(lines, curve{name: "", pts: p.Incident, start: d.Span.Start, col: curveColor, halfWidth: incidentHalfWidth})
	drawCurves(img, z, f, lines)
	// Each target's name in its colour, stacked in the plot's upper left
	// below the window labels (the incident window, on the right, is
	// where the curves are busy).
	for i, r := range p.Replicas {
		drawText(img, pl.Min.X+6, pl.Min.Y+27+i*(face.Height+2), fit(r.Name, pl.Dx()/2), replicaColors[i%len(replicaColors)])
	}
	if !d.Onset.IsZero() && !d.Onset.Before(d.Span.Start) && !d.Onset.After(d.Span.End) {
		x := at(d.Onset)
		fill(img, image.Rect(x, pl.Min.Y, x+1, pl.Max.Y), onsetColor)
		label := "opened " + d.Onset.UTC().Format("15:04:05")
		lx := min(x+4, pl.Max.X-textWidth(label)-2)
		drawText(img, lx, pl.Min.Y+27, label, onsetColor)
	}
	drawTitleAndLegend(img, f, p.Title, have, legend, curves)
}

// windowMean is the mean of the finite samples inside w.
func windowMean(pts []Point, w verdict.Window) (float64, bool) {
	sum, n := 0.0, 0
	for _, p := range Finite(pts) {
		if !p.T.Before(w.Start) && !p.T.After(w.End) {
			sum += p.V
			n++
		}
	}
	if n == 0 {
		return 0, false
	}
	return sum / float64(n), true
}

// Legend geometry: a line sample, a gap, the name; entries apart.
const legendSample, legendGap, legendSpacing = 24, 6, 18

func legendWidth(cs []curve) int {
	w := 0
	for i, c := range cs {
		if i > 0 {
			w += legendSpacing
		}
		w += legendSample + legendGap + textWidth(c.name)
	}
	return w
}

// drawLegend draws the entries, incident first, from x on the text
// baseline y.
func drawLegend(img *image.RGBA, x, y int, cs []curve) {
	for i := len(cs) - 1; i >= 0; i-- {
		c := cs[i]
		ly := y - 5
		switch {
		case c.box:
			fill(img, image.Rect(x, y-9, x+legendSample, y+1), c.col)
		case c.dashed:
			for dx := 0; dx < legendSample; dx += dashOn + dashOff {
				fill(img, image.Rect(x+dx, ly, x+min(dx+dashOn, legendSample), ly+2), c.col)
			}
		default:
			fill(img, image.Rect(x, ly, x+legendSample, ly+2), c.col)
		}
		x += legendSample + legendGap
		drawText(img, x, y, c.name, labelColor)
		x += textWidth(c.name) + legendSpacing
	}
}

func fill(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	draw.Draw(img, r, image.NewUniform(c), image.Point{}, draw.Src)
}

// vec is a point in pixels.
type vec struct{ x, y float32 }

// stroker adds stroked polylines to a rasterizer whose origin is at
// (-dx, -dy) of the image.
//
// The rasterizer sums the signed coverage of every polygon and clamps its
// magnitude, so overlapping polygons only join up when they wind the same
// way: every polygon is added counter-clockwise on screen.
type stroker struct {
	z      *vector.Rasterizer
	dx, dy float32
}

// polygon adds a closed polygon, reversed if it winds the other way.
func (s stroker) polygon(pts ...vec) {
	area := float32(0)
	for i, a := range pts {
		b := pts[(i+1)%len(pts)]
		area += a.x*b.y - b.x*a.y
	}
	if area < 0 {
		for i, j := 0, len(pts)-1; i < j; i, j = i+1, j-1 {
			pts[i], pts[j] = pts[j], pts[i]
		}
	}
	s.z.MoveTo(pts[0].x+s.dx, pts[0].y+s.dy)
	for _, p := range pts[1:] {
		s.z.LineTo(p.x+s.dx, p.y+s.dy)
	}
	s.z.ClosePath()
}

// dot adds a disc (a 16-gon).
func (s stroker) dot(c vec, r float32) {
	const n = 16
	pts := make([]vec, n)
	for i := range pts {
		a := 2 * math.Pi * float64(i) / n
		pts[i] = vec{c.x + r*float32(math.Cos(a)), c.y + r*float32(math.Sin(a))}
	}
	s.polygon(pts...)
}

// polyline adds a line of half-width hw through pts: a quad per segment
// and a bevel on the outside of every turn. The pieces only meet along
// shared edges, so their antialiased edges add up to exactly one line (a
// disc at each vertex would darken the edge where it touches the quads). A
// single point is a dot.
func (s stroker) polyline(pts []vec, hw float32) {
	if len(pts) == 1 {
		s.dot(pts[0], hw*2.5)
		return
	}
	var prev vec // the previous segment's direction, zero before the first
	for i := 1; i < len(pts); i++ {
		a, b := pts[i-1], pts[i]
		ex, ey := b.x-a.x, b.y-a.y
		l := float32(math.Hypot(float64(ex), float64(ey)))
		if l < 1e-4 {
			continue
		}
		d := vec{ex / l, ey / l}
		n := vec{-d.y * hw, d.x * hw}
		s.polygon(vec{a.x + n.x, a.y + n.y}, vec{b.x + n.x, b.y + n.y}, vec{b.x - n.x, b.y - n.y}, vec{a.x - n.x, a.y - n.y})
		if cross := prev.x*d.y - prev.y*d.x; cross > 1e-3 || cross < -1e-3 || prev.x*d.x+prev.y*d.y < 0 {
			// The turn is towards +n when cross > 0: the gap is on -n.
			pn := vec{-prev.y * hw, prev.x * hw}
			if cross > 0 {
				s.polygon(a, vec{a.x - pn.x, a.y - pn.y}, vec{a.x - n.x, a.y - n.y})
			} else {
				s.polygon(a, vec{a.x + pn.x, a.y + pn.y}, vec{a.x + n.x, a.y + n.y})
			}
		}
		prev = d
	}
}

// dashes cuts a polyline into the pieces of a dash pattern: on pixels
// drawn, off pixels skipped, measured along the line.
func dashes(pts []vec, on, off float32) [][]vec {
	var out [][]vec
	cur := []vec{pts[0]}
	drawing, left := true, on
	for i := 1; i < len(pts); i++ {
		a, b := pts[i-1], pts[i]
		l := float32(math.Hypot(float64(b.x-a.x), float64(b.y-a.y)))
		t := float32(0)
		for l-t > left {
			t += left
			p := vec{a.x + (b.x-a.x)*t/l, a.y + (b.y-a.y)*t/l}
			if drawing {
				out = append(out, append(cur, p))
				cur, left = nil, off
			} else {
				cur, left = []vec{p}, on
			}
			drawing = !drawing
		}
		left -= l - t
		if drawing {
			cur = append(cur, b)
		}
	}
	if drawing && len(cur) > 1 {
		out = append(out, cur)
	}
	return out
}

// ascii replaces what the bitmap font lacks: dashes by '-', the rest by
// '?'.
func ascii(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 0x20 && r < 0x7f:
			return r
		case r == '\u2010' || r == '\u2011' || r == '\u2012' || r == '\u2013' || r == '\u2014' || r == '\u2212':
			return '-'
		case r == '\u2018' || r == '\u2019':
			return '\''
		case r == '\u201c' || r == '\u201d':
			return '"'
		case r == '\u00d7':
			return 'x'
		case r == '\t' || r == '\u00a0':
			return ' '
		}
		return '?'
	}, s)
}

// textWidth is the width of s in pixels.
func textWidth(s string) int { return font.MeasureString(face, ascii(s)).Ceil() }

// fit shortens s with "..." to at most w pixels.
func fit(s string, w int) string {
	s = ascii(s)
	if textWidth(s) <= w {
		return s
	}
	n := max(0, w/face.Advance-3)
	return s[:min(n, len(s))] + "..."
}

// drawText draws s with its baseline at y.
func drawText(dst draw.Image, x, y int, s string, c color.Color) {
	dr := font.Drawer{Dst: dst, Src: image.NewUniform(c), Face: face, Dot: fixed.P(x, y)}
	dr.DrawString(ascii(s))
}

// drawBold draws s twice, a pixel apart.
func drawBold(dst draw.Image, x, y int, s string, c color.Color) {
	drawText(dst, x, y, s, c)
	drawText(dst, x+1, y, s, c)
}

// drawTitle centres the chart's title in the band above the panels, at
// twice the font's size when it fits. A title too long for that is
// split after its first part (the scope: " — " separates the parts), the
// rest below it at the font's size; else all of it at the font's size,
// shortened if need be.
func drawTitle(img *image.RGBA, s string) {
	s = ascii(s)
	const margin = 12
	fits2x := func(s string) bool { return 2*(textWidth(s)+1) <= Width-2*margin }
	switch head, rest, ok := strings.Cut(s, " - "); {
	case fits2x(s):
		drawText2x(img, 8+(gridTop-16-2*face.Height)/2, s)
	case ok && fits2x(head):
		drawText2x(img, 6, head)
		rest = fit(rest, Width-2*margin)
		drawBold(img, (Width-textWidth(rest))/2, 6+2*face.Height+4+face.Ascent, rest, labelColor)
	default:
		s = fit(s, Width-2*margin)
		drawBold(img, (Width-textWidth(s))/2, (gridTop-8)/2+face.Ascent/2, s, titleColor)
	}
}

// drawText2x draws s centred at twice the font's size (each pixel a 2×2
// block), its top at y.
func drawText2x(img *image.RGBA, y int, s string) {
	w := textWidth(s) + 1
	mask := image.NewAlpha(image.Rect(0, 0, w, face.Height))
	drawText(mask, 0, face.Ascent, s, color.Opaque)
	big := image.NewAlpha(image.Rect(0, 0, 2*w, 2*face.Height))
	for y := range big.Rect.Dy() {
		for x := range big.Rect.Dx() {
			big.Pix[y*big.Stride+x] = mask.Pix[(y/2)*mask.Stride+x/2]
		}
	}
	at := image.Pt((Width-2*w)/2, y)
	draw.DrawMask(img, big.Rect.Add(at), image.NewUniform(titleColor), image.Point{}, big, image.Point{}, draw.Over)
}
