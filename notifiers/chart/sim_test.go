package chart_test

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"testing"

	"github.com/whyslow/whyslow/collectors/bundle"
	"github.com/whyslow/whyslow/collectors/store"
	"github.com/whyslow/whyslow/notifiers/chart"
	"github.com/whyslow/whyslow/testbed/sim"
	"github.com/whyslow/whyslow/verdict"
)

// TestKVPressureChart renders the chart of the engine model's kv_pressure
// scenario end to end: sim bundle → embedded store → range queries → PNG.
func TestKVPressureChart(t *testing.T) {
	ctx := context.Background()
	b, err := sim.Record(ctx, sim.Options{Scenario: "kv_pressure", Seed: 1, Trim: true})
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := bundle.ReadMetrics(ctx, "metrics.om", b.Metrics, st.DB()); err != nil {
		t.Fatal(err)
	}
	inc := b.Incident
	v := &verdict.Verdict{
		Status: verdict.StatusAnomaly, Severity: verdict.SeverityCritical, Engine: inc.Engine,
		Scope:    verdict.Scope{Selector: inc.Selector},
		Incident: verdict.Window{Start: inc.At.Add(-inc.Window), End: inc.At},
		Baseline: verdict.Window{Start: inc.At.Add(-inc.Baseline - inc.Window), End: inc.At.Add(-inc.Baseline)},
	}
	d, err := chart.ForVerdict(ctx, st, v, chart.Options{})
	if err != nil {
		t.Fatal(err)
	}
	peak := func(ps []chart.Point) float64 {
		m := 0.0
		for _, p := range ps {
			m = max(m, p.V)
		}
		return m
	}
	for _, p := range d.Panels {
		if len(p.Incident) == 0 || len(p.Baseline) == 0 {
			t.Errorf("panel %q: %d incident and %d baseline points (query %s)", p.Title, len(p.Incident), len(p.Baseline), p.Query)
		}
	}
	kv := d.Panels[2]
	if peak(kv.Incident) <= peak(kv.Baseline) {
		t.Errorf("KV usage peak %.2f in the incident is not above the baseline's %.2f", peak(kv.Incident), peak(kv.Baseline))
	}
	var buf bytes.Buffer
	if err := chart.Render(&buf, d); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if got := img.Bounds().Size(); got != image.Pt(chart.Width, chart.ImageHeight(len(d.Panels))) {
		t.Fatalf("size = %v, want %dx%d", got, chart.Width, chart.ImageHeight(len(d.Panels)))
	}
	// The KV panel (bottom left) has the incident curve near 100%, in
	// its upper part, and the baseline's below it.
	red := func(r image.Rectangle) int {
		n := 0
		for y := r.Min.Y; y < r.Max.Y; y++ {
			for x := r.Min.X; x < r.Max.X; x++ {
				r, g, b, _ := img.At(x, y).RGBA()
				if r>>8 > 180 && g>>8 < 90 && b>>8 < 90 {
					n++
				}
			}
		}
		return n
	}
	kvTop := image.Rect(60, chart.Height/2, chart.Width/2, chart.Height/2+120)
	kvBottom := image.Rect(60, chart.Height/2+120, chart.Width/2, chart.Height)
	if n := red(kvTop); n < 500 {
		t.Errorf("KV panel: only %d incident-red pixels in its upper part %v", n, kvTop)
	}
	if n := red(kvBottom); n > 0 {
		t.Errorf("KV panel: %d incident-red pixels below its upper part %v", n, kvBottom)
	}
}
