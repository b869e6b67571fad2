package chart

import (
	"bytes"
	"context"
	"image"
	"image/png"
	"strings"
	"testing"
	"time"

	"github.com/whyslow/whyslow/collectors/bundle"
	"github.com/whyslow/whyslow/collectors/store"
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
	if _, err := bundle.ReadMetrics(ctx, "metrics.om", b.Metrics, st); err != nil {
		t.Fatal(err)
	}
	inc := b.Incident
	v := &verdict.Verdict{
		Status: verdict.StatusAnomaly, Severity: verdict.SeverityCritical, Engine: inc.Engine,
		Scope:    verdict.Scope{Selector: inc.Selector},
		Incident: verdict.Window{Start: inc.At.Add(-inc.Window), End: inc.At},
		Baseline: verdict.Window{Start: inc.At.Add(-inc.Baseline - inc.Window), End: inc.At.Add(-inc.Baseline)},
	}
	onset := b.Truth.Onset
	d, err := ForVerdict(ctx, st, v, Options{Onset: onset})
	if err != nil {
		t.Fatal(err)
	}
	// The baseline is an hour back: one time axis over both windows,
	// each with samples of every panel (the bundle keeps nothing between).
	if d.Span.Start.IsZero() || !d.Onset.Equal(onset) {
		t.Fatalf("span %v, onset %v: not one time axis", d.Span, d.Onset)
	}
	in := func(ps []Point, w verdict.Window) []Point {
		var out []Point
		for _, p := range Finite(ps) {
			if !p.T.Before(w.Start) && !p.T.After(w.End) {
				out = append(out, p)
			}
		}
		return out
	}
	peak := func(ps []Point) float64 {
		m := 0.0
		for _, p := range ps {
			m = max(m, p.V)
		}
		return m
	}
	for _, p := range d.Panels {
		if len(in(p.Incident, d.Incident)) == 0 || len(in(p.Incident, d.Baseline)) == 0 {
			t.Errorf("panel %q: %d incident and %d baseline points (query %s)", p.Title, len(in(p.Incident, d.Incident)), len(in(p.Incident, d.Baseline)), p.Query)
		}
	}
	// The sim's vLLM counts finish reasons and its GPUs export the
	// whyslow NVML counters: the optional panels are there.
	var titles []string
	for _, p := range d.Panels[6:] {
		titles = append(titles, p.Title)
	}
	if got := strings.Join(titles, ", "); got != "Failed requests (1 - success rate), GPU SM clock (MHz, slowest busy GPU), GPU DRAM bandwidth (busiest GPU)" {
		t.Errorf("optional panels %q", got)
	}
	kv := d.Panels[2]
	if peak(in(kv.Incident, d.Incident)) <= peak(in(kv.Incident, d.Baseline)) {
		t.Errorf("KV usage peak %.2f in the incident is not above the baseline's %.2f", peak(in(kv.Incident, d.Incident)), peak(in(kv.Incident, d.Baseline)))
	}
	var buf bytes.Buffer
	if err := Render(&buf, d); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if got := img.Bounds().Size(); got != image.Pt(Width, ImageHeight(len(d.Panels))) {
		t.Fatalf("size = %v, want %dx%d", got, Width, ImageHeight(len(d.Panels)))
	}
	// The KV panel (third): the curve near 100% in the incident window,
	// in the plot's upper part, and in its lower half in the baseline's.
	pl := layout(len(d.Panels))[2].plot
	f := frame{plot: pl, x: continuousAxis(d.Span), y: ValueAxis(Panel{Unit: kv.Unit, Incident: kv.Incident})}
	px := func(t time.Time) int { return int(f.px(t.Sub(d.Span.Start).Minutes())) }
	mid := pl.Min.Y + pl.Dy()/2
	incTop := image.Rect(px(d.Incident.Start), pl.Min.Y, px(d.Incident.End), pl.Min.Y+pl.Dy()/5)
	baseTop := image.Rect(px(d.Baseline.Start), pl.Min.Y, px(d.Baseline.End), mid)
	if n := count(img, incTop, isCurve); n < 40 {
		t.Errorf("KV panel: only %d curve pixels in the incident window's top fifth %v", n, incTop)
	}
	if n := count(img, baseTop, isCurve); n > 0 {
		t.Errorf("KV panel: %d curve pixels in the baseline window's upper half %v", n, baseTop)
	}
}
