package chart

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/png"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/whyslow/whyslow/verdict"
)

var t0 = time.Unix(1700000000, 0).UTC()

// fakeMetrics answers range queries whose expression contains one of the
// keys with a synthetic curve; everything else is empty.
type fakeMetrics struct {
	curves  map[string]func(t time.Time) float64
	fail    error
	queries []string
}

func (f *fakeMetrics) Query(context.Context, string, time.Time) (model.Vector, []string, error) {
	return nil, nil, errors.New("not used")
}

func (f *fakeMetrics) QueryRange(_ context.Context, expr string, start, end time.Time, step time.Duration) (model.Matrix, []string, error) {
	f.queries = append(f.queries, expr)
	if f.fail != nil {
		return nil, nil, f.fail
	}
	for k, fn := range f.curves {
		if !strings.Contains(expr, k) {
			continue
		}
		ss := &model.SampleStream{Metric: model.Metric{}}
		for t := start; !t.After(end); t = t.Add(step) {
			ss.Values = append(ss.Values, model.SamplePair{Timestamp: model.TimeFromUnixNano(t.UnixNano()), Value: model.SampleValue(fn(t))})
		}
		return model.Matrix{ss}, nil, nil
	}
	return model.Matrix{}, nil, nil
}

func windows() (verdict.Window, verdict.Window) {
	return verdict.Window{Start: t0.Add(-10 * time.Minute), End: t0},
		verdict.Window{Start: t0.Add(-70 * time.Minute), End: t0.Add(-60 * time.Minute)}
}

// incidentOnly returns base before the incident window and high inside it.
func incidentOnly(base, high float64) func(time.Time) float64 {
	inc, _ := windows()
	return func(t time.Time) float64 {
		if t.Before(inc.Start) {
			return base
		}
		x := t.Sub(inc.Start).Minutes() / 10
		return base + (high-base)*x
	}
}

func kvFake() *fakeMetrics {
	return &fakeMetrics{curves: map[string]func(time.Time) float64{
		"vllm:time_to_first_token_seconds":   incidentOnly(0.2, 3.5),
		"vllm:time_per_output_token_seconds": incidentOnly(0.03, 0.09), // old name only
		"vllm:gpu_cache_usage_perc":          incidentOnly(0.55, 0.99), // old name only
		"vllm:num_requests_waiting":          incidentOnly(0, 40),
		"vllm:num_preemptions_total":         incidentOnly(0, 5),
	}}
}

func TestBuildPicksAlternatives(t *testing.T) {
	inc, base := windows()
	m := kvFake()
	d, err := Build(context.Background(), m, `model_name="llama"`, inc, base, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Panels) != 6 {
		t.Fatalf("panels = %d, want 6", len(d.Panels))
	}
	want := []string{
		`histogram_quantile(0.95, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket{model_name="llama"}[1m])))`,
		`histogram_quantile(0.95, sum by (le) (rate(vllm:time_per_output_token_seconds_bucket{model_name="llama"}[1m])))`,
		`max(vllm:gpu_cache_usage_perc{model_name="llama"})`,
		`sum(vllm:num_requests_waiting{model_name="llama"})`,
		`sum(rate(vllm:time_to_first_token_seconds_count{model_name="llama"}[1m]))`,
		`sum(rate(vllm:num_preemptions_total{ model_name="llama" }[1m]))`,
	}
	for i, p := range d.Panels {
		if p.Query != want[i] {
			t.Errorf("panel %d query = %s, want %s", i, p.Query, want[i])
		}
		if len(p.Incident) == 0 || len(p.Baseline) == 0 {
			t.Errorf("panel %d: %d incident, %d baseline points", i, len(p.Incident), len(p.Baseline))
		}
	}
	// The 10m window at the default step is 121 points.
	if n := len(d.Panels[0].Incident); n != 121 {
		t.Errorf("incident points = %d, want 121", n)
	}
}

func TestBuildEngineOrder(t *testing.T) {
	q := Queries(`job="x"`, Options{Engine: "sglang"})
	if got := q["TTFT p95"][0]; !strings.Contains(got, "sglang:time_to_first_token_seconds") {
		t.Errorf("first TTFT query for sglang = %s", got)
	}
	if got := q["KV-cache usage (max over targets)"][0]; got != `max(sglang:token_usage{job="x"})` {
		t.Errorf("first KV query for sglang = %s", got)
	}
}

func TestBuildErrors(t *testing.T) {
	inc, base := windows()
	ctx := context.Background()
	if _, err := Build(ctx, &fakeMetrics{fail: errors.New("prometheus down")}, "", inc, base, Options{}); err == nil ||
		!strings.Contains(err.Error(), "prometheus down") {
		t.Errorf("all queries failing: err = %v", err)
	}
	if _, err := Build(ctx, nil, "", inc, base, Options{}); err == nil {
		t.Error("nil metrics: no error")
	}
	if _, err := Build(ctx, kvFake(), "", verdict.Window{Start: t0, End: t0}, base, Options{}); err == nil {
		t.Error("empty window: no error")
	}
	// No data at all is not an error: the panels say "no data".
	d, err := Build(ctx, &fakeMetrics{}, "", inc, base, Options{})
	if err != nil || len(d.Panels) != 6 || d.Panels[0].Query != "" {
		t.Errorf("no data: %v %+v", err, d)
	}
	if err := Render(&bytes.Buffer{}, Data{}); err == nil {
		t.Error("render without panels: no error")
	}
}

// renderImage renders d through PNG and decodes it again.
func renderImage(t *testing.T, d Data) image.Image {
	t.Helper()
	b, err := PNG(d)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("decode png: %v", err)
	}
	if got := img.Bounds().Size(); got.X != Width || got.Y != ImageHeight(len(d.Panels)) {
		t.Fatalf("size = %v, want %dx%d", got, Width, ImageHeight(len(d.Panels)))
	}
	return img
}

func rgb(img image.Image, x, y int) (r, g, b uint32) {
	r, g, b, _ = img.At(x, y).RGBA()
	return r >> 8, g >> 8, b >> 8
}

// isIncident is the incident curve's red; isBaseline the baseline's grey
// (not the light gridlines, the darker axes and labels or the lighter "no
// data").
func isIncident(img image.Image, x, y int) bool {
	r, g, b := rgb(img, x, y)
	return r > 180 && g < 90 && b < 90
}

func isBaseline(img image.Image, x, y int) bool {
	r, g, b := rgb(img, x, y)
	return r >= 0x78 && r <= 0x90 && r+8 > g && g+8 > r && g+8 > b && b+8 > g
}

// count counts the pixels of rect that are what is says.
func count(img image.Image, rect image.Rectangle, is func(image.Image, int, int) bool) int {
	n := 0
	for y := rect.Min.Y; y < rect.Max.Y; y++ {
		for x := rect.Min.X; x < rect.Max.X; x++ {
			if is(img, x, y) {
				n++
			}
		}
	}
	return n
}

func notWhite(img image.Image, x, y int) bool {
	r, g, b := rgb(img, x, y)
	return r < 250 || g < 250 || b < 250
}

// TestRenderPNG: a baseline a day back (over MaxContinuous) is drawn
// under the incident, side by side in time.
func TestRenderPNG(t *testing.T) {
	inc, base := windows()
	base = verdict.Window{Start: base.Start.Add(-24 * time.Hour), End: base.End.Add(-24 * time.Hour)}
	v := &verdict.Verdict{Status: verdict.StatusAnomaly, Severity: verdict.SeverityCritical, Engine: "vllm",
		Scope: verdict.Scope{Selector: `model_name="llama"`}, Incident: inc, Baseline: base}
	d, err := ForVerdict(context.Background(), kvFake(), v, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !d.Span.Start.IsZero() {
		t.Fatalf("a baseline a day back drawn on one axis over %v", d.Span)
	}
	img := renderImage(t, d)
	boxes := layout(len(d.Panels))
	if len(boxes) != 6 {
		t.Fatalf("%d panel boxes, want 6", len(boxes))
	}
	// Each panel has ink (axes, labels) and both curves in its plot area.
	for i, box := range boxes {
		if n := count(img, box.cell, notWhite); n < 3000 {
			t.Errorf("panel %d: only %d non-white pixels", i, n)
		}
		if n := count(img, box.plot, isIncident); n < 400 {
			t.Errorf("panel %d: only %d incident-red pixels in the plot area", i, n)
		}
		if n := count(img, box.plot, isBaseline); n < 200 {
			t.Errorf("panel %d: only %d baseline-grey pixels in the plot area", i, n)
		}
	}
	// Red is only in the plot areas (and the legend, above the first).
	legend := image.Rect(boxes[0].cell.Min.X, boxes[0].cell.Min.Y, boxes[0].cell.Max.X, boxes[0].plot.Min.Y)
	if n := count(img, legend, isIncident); n == 0 {
		t.Error("no incident-red legend above the first panel")
	}
	if n := count(img, boxes[1].cell.Intersect(legend.Add(image.Pt(Width/2, 0))), isIncident); n != 0 {
		t.Errorf("%d incident-red pixels above the second panel: a legend on it too?", n)
	}
	stray := 0
	for y := range img.Bounds().Dy() {
	pixel:
		for x := range Width {
			if !isIncident(img, x, y) {
				continue
			}
			p := image.Pt(x, y)
			if p.In(legend) {
				continue
			}
			for _, box := range boxes {
				if p.In(box.plot.Inset(-rasterPad)) {
					continue pixel
				}
			}
			stray++
		}
	}
	if stray != 0 {
		t.Errorf("%d incident-red pixels outside the plot areas", stray)
	}
}

// single is one panel over the 10-minute incident window: it fills the
// image.
func single(p Panel) Data {
	inc, base := windows()
	return Data{Title: "one panel", Incident: inc, Baseline: base, Panels: []Panel{p}}
}

// frameOf is the mapping Render uses for a single panel.
func frameOf(t *testing.T, d Data) frame {
	t.Helper()
	return frame{plot: layout(1)[0].plot, x: TimeAxis(10), y: ValueAxis(d.Panels[0])}
}

func TestRenderGap(t *testing.T) {
	inc, base := windows()
	var pts, bpts []Point
	for s := 0; s <= 600; s += 10 {
		v := 0.2 + float64(s)/6000 // 200..300 ms
		if s > 180 && s < 360 {
			v = math.NaN() // no samples from 3m to 6m
		}
		pts = append(pts, Point{inc.Start.Add(time.Duration(s) * time.Second), v})
		bpts = append(bpts, Point{base.Start.Add(time.Duration(s) * time.Second), 0.1})
	}
	d := single(Panel{Title: "gappy", Unit: UnitSeconds, Incident: pts, Baseline: bpts})
	img := renderImage(t, d)
	f := frameOf(t, d)
	// x is minutes into the 10-minute window across the plot area.
	col := func(min float64) int { return f.plot.Min.X + int(min/10*float64(f.plot.Dx())) }
	colRed := func(x int) bool {
		return count(img, image.Rect(x, f.plot.Min.Y, x+1, f.plot.Max.Y), isIncident) > 0
	}
	for x := col(3) + 3; x < col(6)-3; x++ {
		if colRed(x) {
			t.Fatalf("incident-red pixels at x=%d, in the gap (columns %d..%d)", x, col(3), col(6))
		}
	}
	for _, r := range [][2]float64{{0.1, 2.9}, {6.1, 9.9}} {
		for x := col(r[0]); x < col(r[1]); x++ {
			if !colRed(x) {
				t.Fatalf("no incident-red pixel at x=%d (%.1fm..%.1fm has samples)", x, r[0], r[1])
			}
		}
	}
	// The baseline has no gap: it is drawn (dashed) across the gap.
	if n := count(img, image.Rect(col(3)+3, f.plot.Min.Y, col(6)-3, f.plot.Max.Y), isBaseline); n < 50 {
		t.Errorf("only %d baseline pixels across the incident's gap", n)
	}
}

// TestRenderValues checks where curves land: a flat incident at 500 ms
// and a flat baseline at 250 ms on the ms axis.
func TestRenderValues(t *testing.T) {
	inc, base := windows()
	var pts, bpts []Point
	for s := 0; s <= 600; s += 15 {
		pts = append(pts, Point{inc.Start.Add(time.Duration(s) * time.Second), 0.5})
		bpts = append(bpts, Point{base.Start.Add(time.Duration(s) * time.Second), 0.25})
	}
	d := single(Panel{Title: "flat", Unit: UnitSeconds, Incident: pts, Baseline: bpts})
	f := frameOf(t, d)
	if f.y.Ticks[len(f.y.Ticks)-1].V != 500 || f.y.Hi < 550 {
		t.Fatalf("value axis %+v: want ticks up to 500 (ms), the top at 550", f.y)
	}
	img := renderImage(t, d)
	row := func(ms float64) float64 { return float64(f.plot.Max.Y) - ms/f.y.Hi*float64(f.plot.Dy()) }
	for _, c := range []struct {
		name string
		is   func(image.Image, int, int) bool
		v    float64
		min  int
	}{{"incident", isIncident, 500, 1000}, {"baseline", isBaseline, 250, 300}} {
		y := row(c.v)
		band := image.Rect(f.plot.Min.X, int(y)-2, f.plot.Max.X, int(y)+3)
		if n := count(img, band, c.is); n < c.min {
			t.Errorf("%s at %.0f ms: %d pixels in rows %d..%d, want at least %d", c.name, c.v, n, band.Min.Y, band.Max.Y-1, c.min)
		}
		if all := count(img, f.plot, c.is); all != count(img, band, c.is) {
			t.Errorf("%s at %.0f ms: %d of its pixels outside rows %d..%d", c.name, c.v, all-count(img, band, c.is), band.Min.Y, band.Max.Y-1)
		}
	}
}

// TestRenderClips draws a fraction above 100%: the axis stops at 100%,
// the curve is cut off at the plot area's edge.
func TestRenderClips(t *testing.T) {
	inc, _ := windows()
	var pts []Point
	for s := 0; s <= 600; s += 15 {
		pts = append(pts, Point{inc.Start.Add(time.Duration(s) * time.Second), 0.5 + float64(s)/600})
	}
	d := single(Panel{Title: "over", Unit: UnitFraction, Incident: pts})
	if f := frameOf(t, d); f.y.Hi != 100 {
		t.Errorf("fraction axis up to %g%%, want 100%%", f.y.Hi)
	}
	img := renderImage(t, d)
	plot := layout(1)[0].plot
	outside := 0
	for y := range img.Bounds().Dy() {
		for x := range Width {
			if isIncident(img, x, y) && !image.Pt(x, y).In(plot.Inset(-rasterPad)) && y > plot.Min.Y {
				outside++
			}
		}
	}
	if outside != 0 {
		t.Errorf("%d incident-red pixels outside the plot area", outside)
	}
	// 50% at 0m to 100% at 5m is drawn; 102% from 5.2m on is above the
	// plot area (by 13 px, more than its margin and the line's half-width).
	at := func(min float64) int { return plot.Min.X + int(min/10*float64(plot.Dx())) }
	if n := count(img, image.Rect(at(0), plot.Min.Y, at(4.5), plot.Max.Y), isIncident); n < 400 {
		t.Errorf("only %d incident-red pixels from 0m to 4.5m", n)
	}
	if n := count(img, image.Rect(at(5.2), 0, at(8), Height), isIncident); n != 0 {
		t.Errorf("%d incident-red pixels from 5.2m to 8m (above 100%%; the legend is right of 8m)", n)
	}
}

func TestRenderGapsAndEmpty(t *testing.T) {
	inc, base := windows()
	nan := math.NaN()
	d := Data{Incident: inc, Baseline: base, Panels: []Panel{
		{Title: "gappy", Unit: UnitSeconds, Incident: []Point{{inc.Start, 1}, {inc.Start.Add(time.Minute), nan}, {inc.Start.Add(2 * time.Minute), 2}, {inc.Start.Add(3 * time.Minute), 3}}},
		{Title: "empty", Unit: UnitCount},
		{Title: "inf", Unit: UnitFraction, Baseline: []Point{{base.Start, math.Inf(1)}}},
	}}
	img := renderImage(t, d)
	boxes := layout(3)
	// The lone first sample is a dot; the run after the gap a line.
	if n := count(img, boxes[0].plot, isIncident); n < 100 {
		t.Errorf("gappy: only %d incident-red pixels", n)
	}
	for i := 1; i < 3; i++ {
		if n := count(img, boxes[i].plot, isIncident) + count(img, boxes[i].plot, isBaseline); n != 0 {
			t.Errorf("panel %d has no finite samples but %d curve pixels", i, n)
		}
		if n := count(img, boxes[i].cell, notWhite); n < 1000 {
			t.Errorf("panel %d: only %d non-white pixels (no axes, no \"no data\"?)", i, n)
		}
	}
	if err := Render(&bytes.Buffer{}, Data{}); err == nil {
		t.Error("render without panels: no error")
	}
	if _, err := PNG(Data{Title: "x"}); err == nil {
		t.Error("PNG without panels: no error")
	}
}

func TestText(t *testing.T) {
	if got := ascii("a — b – c × d"); got != "a - b - c x d" {
		t.Errorf("ascii = %q", got)
	}
	long := strings.Repeat("x", 300)
	if got := fit(long, 700); textWidth(got) > 700 || !strings.HasSuffix(got, "...") {
		t.Errorf("fit(300 x, 700px) = %d px: %q", textWidth(got), got)
	}
	if got := fit("short", 700); got != "short" {
		t.Errorf("fit(short) = %q", got)
	}
}

func TestDashes(t *testing.T) {
	// 30 px along a line with a corner at 10: on 7, off 2 → 0..7,
	// 9..16 (round the corner), 18..25, 27..30.
	pts := []vec{{0, 0}, {10, 0}, {10, 20}}
	got := dashes(pts, 7, 2)
	if len(got) != 4 {
		t.Fatalf("dashes = %v, want 4", got)
	}
	length := func(ps []vec) float64 {
		l := 0.0
		for i := 1; i < len(ps); i++ {
			l += math.Hypot(float64(ps[i].x-ps[i-1].x), float64(ps[i].y-ps[i-1].y))
		}
		return l
	}
	for i, want := range []float64{7, 7, 7, 3} {
		if l := length(got[i]); math.Abs(l-want) > 1e-4 {
			t.Errorf("dash %d is %.3f px, want %g: %v", i, l, want, got[i])
		}
	}
	if len(got[1]) != 3 || got[1][1] != (vec{10, 0}) {
		t.Errorf("the second dash turns the corner: %v", got[1])
	}
}

func BenchmarkRender(b *testing.B) {
	inc, base := windows()
	d, err := Build(context.Background(), kvFake(), "", inc, base, Options{})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := PNG(d); err != nil {
			b.Fatal(err)
		}
	}
}
