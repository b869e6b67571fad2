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

	"github.com/whyslow/whyslow/triage"
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

func windows() (triage.Window, triage.Window) {
	return triage.Window{Start: t0.Add(-10 * time.Minute), End: t0},
		triage.Window{Start: t0.Add(-70 * time.Minute), End: t0.Add(-60 * time.Minute)}
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
	}}
}

func TestBuildPicksAlternatives(t *testing.T) {
	inc, base := windows()
	m := kvFake()
	d, err := Build(context.Background(), m, `model_name="llama"`, inc, base, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Panels) != 4 {
		t.Fatalf("panels = %d, want 4", len(d.Panels))
	}
	want := []string{
		`histogram_quantile(0.95, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket{model_name="llama"}[1m])))`,
		`histogram_quantile(0.95, sum by (le) (rate(vllm:time_per_output_token_seconds_bucket{model_name="llama"}[1m])))`,
		`max(vllm:gpu_cache_usage_perc{model_name="llama"})`,
		`sum(vllm:num_requests_waiting{model_name="llama"})`,
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
	if _, err := Build(ctx, kvFake(), "", triage.Window{Start: t0, End: t0}, base, Options{}); err == nil {
		t.Error("empty window: no error")
	}
	// No data at all is not an error: the panels say "no data".
	d, err := Build(ctx, &fakeMetrics{}, "", inc, base, Options{})
	if err != nil || len(d.Panels) != 4 || d.Panels[0].Query != "" {
		t.Errorf("no data: %v %+v", err, d)
	}
	if err := Render(&bytes.Buffer{}, Data{}); err == nil {
		t.Error("render without panels: no error")
	}
}

// plotPixels counts the pixels that are not white, and the incident-red ones.
func plotPixels(img image.Image) (nonWhite, red int) {
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r>>8 < 250 || g>>8 < 250 || bl>>8 < 250 {
				nonWhite++
			}
			if r>>8 > 180 && g>>8 < 90 && bl>>8 < 90 {
				red++
			}
		}
	}
	return nonWhite, red
}

func TestRenderPNG(t *testing.T) {
	inc, base := windows()
	v := &triage.Verdict{Status: triage.StatusAnomaly, Severity: triage.SeverityCritical, Engine: "vllm",
		Scope: triage.Scope{Selector: `model_name="llama"`}, Incident: inc, Baseline: base}
	b, err := PNGFunc(kvFake(), Options{})(context.Background(), v)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("decode png: %v", err)
	}
	if got := img.Bounds().Size(); got.X != Width || got.Y != Height {
		t.Errorf("size = %v, want %dx%d", got, Width, Height)
	}
	// Each quadrant is one panel: each must have ink and a red curve.
	for i := range 4 {
		x0, y0 := (i%2)*Width/2, (i/2)*Height/2
		sub := img.(interface {
			SubImage(image.Rectangle) image.Image
		}).SubImage(image.Rect(x0, y0+40, x0+Width/2, y0+Height/2))
		nonWhite, red := plotPixels(sub)
		if nonWhite < 2000 {
			t.Errorf("panel %d: only %d non-white pixels", i, nonWhite)
		}
		if red < 200 {
			t.Errorf("panel %d: only %d incident-red pixels", i, red)
		}
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
	var b bytes.Buffer
	if err := Render(&b, d); err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(&b); err != nil {
		t.Fatal(err)
	}
}

func TestSegments(t *testing.T) {
	nan := math.NaN()
	pts := []Point{{t0, 1}, {t0, nan}, {t0, 2}, {t0, 3}, {t0, math.Inf(-1)}}
	if got := Segments(pts); len(got) != 2 || len(got[0]) != 1 || len(got[1]) != 2 {
		t.Errorf("segments = %v", got)
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
