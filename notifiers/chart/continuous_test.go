package chart

import (
	"context"
	"image"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/whyslow/whyslow/verdict"
)

// holeMetrics is m with no samples in hole: a source (a bundle) that kept
// only the chart windows.
type holeMetrics struct {
	*fakeMetrics
	hole verdict.Window
}

func (h holeMetrics) QueryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) (model.Matrix, []string, error) {
	mat, w, err := h.fakeMetrics.QueryRange(ctx, expr, start, end, step)
	for _, ss := range mat {
		kept := ss.Values[:0]
		for _, sp := range ss.Values {
			if t := sp.Timestamp.Time(); t.Before(h.hole.Start) || t.After(h.hole.End) {
				kept = append(kept, sp)
			}
		}
		ss.Values = kept
	}
	return mat, w, err
}

func isCurve(img image.Image, x, y int) bool {
	r, g, b := rgb(img, x, y)
	return b > 120 && r < 90 && g < 130
}

func isColor(c [3]uint32) func(image.Image, int, int) bool {
	return func(img image.Image, x, y int) bool {
		r, g, b := rgb(img, x, y)
		return r == c[0] && g == c[1] && b == c[2]
	}
}

// TestRenderContinuous: a baseline an hour back is drawn with the incident
// on one clock-time axis from the baseline's lead-in to the incident's
// end: both windows shaded where they lie, the onset a dark line, ticks
// at round clock times, the curve broken over the hour without samples.
func TestRenderContinuous(t *testing.T) {
	inc, base := windows() // incident 10 min to t0, baseline an hour before
	v := &verdict.Verdict{Status: verdict.StatusAnomaly, Engine: "vllm", Scope: verdict.Scope{Selector: `model_name="llama"`},
		Incident: inc, Baseline: base}
	onset := inc.Start.Add(2 * time.Minute)
	// Samples only in the chart windows (LeadIn: 10 min before each).
	m := holeMetrics{kvFake(), verdict.Window{Start: base.End.Add(time.Minute), End: inc.Start.Add(-11 * time.Minute)}}
	d, err := ForVerdict(context.Background(), m, v, Options{Onset: onset})
	if err != nil {
		t.Fatal(err)
	}
	wantSpan := verdict.Window{Start: base.Start.Add(-10 * time.Minute), End: inc.End}
	if d.Span != wantSpan || d.Incident != inc || d.Baseline != base || !d.Onset.Equal(onset) {
		t.Fatalf("span %v, windows %v %v, onset %v; want span %v", d.Span, d.Incident, d.Baseline, d.Onset, wantSpan)
	}
	if len(d.Panels) != 6 {
		t.Fatalf("%d panels, want 6", len(d.Panels))
	}
	for _, p := range d.Panels {
		if len(p.Baseline) != 0 || len(Segments(p.Incident)) != 2 {
			t.Errorf("panel %q: %d baseline points, %d runs; want 0 and 2 (one per window)", p.Title, len(p.Baseline), len(Segments(p.Incident)))
		}
	}
	x := continuousAxis(d.Span)
	var labels []string
	for _, tk := range x.Ticks {
		labels = append(labels, tk.Label)
	}
	// t0 is 22:13:20 UTC; the span 20:53:20..22:13:20.
	if got := strings.Join(labels, " "); got != "21:00 21:15 21:30 21:45 22:00" || x.Title != "time (UTC)" {
		t.Errorf("time ticks %q, title %q", got, x.Title)
	}

	img := renderImage(t, d)
	boxes := layout(len(d.Panels))
	for i, box := range boxes {
		f := frame{plot: box.plot, x: x, y: ValueAxis(Panel{Unit: d.Panels[i].Unit, Incident: d.Panels[i].Incident})}
		px := func(t time.Time) int { return int(math.Round(float64(f.px(t.Sub(d.Span.Start).Minutes())))) }
		// A column through each window, a row below the plot's top
		// (under the legend on the first panel: rows further down).
		col := func(x int) image.Rectangle { return image.Rect(x, box.plot.Min.Y+40, x+1, box.plot.Max.Y-2) }
		if n := count(img, col(px(inc.Start.Add(5*time.Minute))), isColor([3]uint32{0xfb, 0xdc, 0xdc})); n < 20 {
			t.Errorf("panel %d: %d incident-shaded pixels in the incident window's middle", i, n)
		}
		if n := count(img, col(px(base.Start.Add(3*time.Minute))), isColor([3]uint32{0xea, 0xea, 0xea})); n < 20 {
			t.Errorf("panel %d: %d baseline-shaded pixels in the baseline window's middle", i, n)
		}
		gap := px(base.End.Add(20 * time.Minute))
		for _, c := range []int{gap, px(inc.Start.Add(-20 * time.Minute))} {
			if n := count(img, col(c), isColor([3]uint32{0xfb, 0xdc, 0xdc})) + count(img, col(c), isColor([3]uint32{0xea, 0xea, 0xea})); n != 0 {
				t.Errorf("panel %d: %d shaded pixels between the windows", i, n)
			}
		}
		// The gap between the windows has no curve: no line across it.
		hole := image.Rect(px(base.End.Add(5*time.Minute)), box.plot.Min.Y, px(inc.Start.Add(-15*time.Minute)), box.plot.Max.Y)
		if n := count(img, hole, isCurve); n != 0 {
			t.Errorf("panel %d: %d curve pixels over the hour without samples", i, n)
		}
		if n := count(img, box.plot, isCurve); n < 150 {
			t.Errorf("panel %d: only %d curve pixels", i, n)
		}
		// The onset: a dark column over the shading.
		if n := count(img, col(px(onset)), isColor([3]uint32{0x11, 0x11, 0x11})); n < 100 {
			t.Errorf("panel %d: onset line has %d dark pixels", i, n)
		}
	}
	// The curve stays in the plot areas.
	stray := 0
	for y := range img.Bounds().Dy() {
	pixel:
		for x := range Width {
			if !isCurve(img, x, y) {
				continue
			}
			for _, box := range boxes {
				if image.Pt(x, y).In(box.plot.Inset(-rasterPad)) {
					continue pixel
				}
			}
			stray++
		}
	}
	if stray != 0 {
		t.Errorf("%d curve pixels outside the plot areas", stray)
	}
}

// TestFailedRequestsPanel: the failed-requests panel is 1 − the engine
// map's success_rate; an engine whose map has no success_rate (SGLang)
// gets no panel, not a 0% one.
func TestFailedRequestsPanel(t *testing.T) {
	inc, base := windows()
	const title = "Failed requests (1 - success rate)"
	m := kvFake()
	m.curves["vllm:request_success_total"] = func(time.Time) float64 { return 0.97 }
	d, err := Build(context.Background(), m, `model_name="llama"`, inc, base, Options{Engine: "vllm"})
	if err != nil {
		t.Fatal(err)
	}
	last := d.Panels[len(d.Panels)-1]
	if len(d.Panels) != 7 || last.Title != title || last.Unit != UnitFraction ||
		!strings.HasPrefix(last.Query, `1 - (sum(rate(vllm:request_success_total{finished_reason!="error", model_name="llama" }[1m]))`) {
		t.Fatalf("%d panels, last %q %s", len(d.Panels), last.Title, last.Query)
	}
	if math.Abs(last.Incident[0].V-0.97) > 1e-9 || len(last.Baseline) == 0 {
		t.Errorf("failed requests %v (the fake answers every query 0.97), %d baseline points", last.Incident[0].V, len(last.Baseline))
	}
	// SGLang's map has no success_rate: no alternative of its own, and
	// with no data from the other engines' names, no panel.
	sg := &fakeMetrics{curves: map[string]func(time.Time) float64{"sglang:token_usage": incidentOnly(0.5, 0.9)}}
	d, err = Build(context.Background(), sg, `job="x"`, inc, base, Options{Engine: "sglang"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range d.Panels {
		if p.Title == title {
			t.Errorf("sglang: a failed-requests panel from %s", p.Query)
		}
	}
	if len(d.Panels) != 6 {
		t.Errorf("sglang: %d panels, want 6 (the preemption panel stays, saying no data)", len(d.Panels))
	}
	for _, q := range Queries(`job="x"`, Options{Engine: "sglang"})[title] {
		if strings.Contains(q, "sglang:") {
			t.Errorf("a failed-requests query over SGLang's names: %s", q)
		}
	}
}

// podMetrics answers the per-target KV query with one series per pod
// (pod a full in the incident, pod b not) and the rest as m does.
type podMetrics struct {
	*fakeMetrics
}

func (p podMetrics) QueryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) (model.Matrix, []string, error) {
	if !strings.HasPrefix(expr, "max by (namespace, pod) (") {
		return p.fakeMetrics.QueryRange(ctx, expr, start, end, step)
	}
	p.queries = append(p.queries, expr)
	var mat model.Matrix
	for pod, fn := range map[string]func(time.Time) float64{"a": incidentOnly(0.5, 0.99), "b": incidentOnly(0.3, 0.3), "c": incidentOnly(0.1, 0.1)} {
		ss := &model.SampleStream{Metric: model.Metric{"namespace": "chat", "pod": model.LabelValue(pod)}}
		for t := start; !t.After(end); t = t.Add(step) {
			ss.Values = append(ss.Values, model.SamplePair{Timestamp: model.TimeFromUnixNano(t.UnixNano()), Value: model.SampleValue(fn(t))})
		}
		mat = append(mat, ss)
	}
	return mat, nil, nil
}

// TestReplicaLines: with two or more targets in the verdict, the KV-cache
// panel of a continuous chart gets a line per named target (not the pods
// the verdict does not name), drawn in its own colour; with one target,
// none.
func TestReplicaLines(t *testing.T) {
	inc, base := windows()
	pod := func(name string) verdict.Target {
		return verdict.Target{Labels: map[string]string{"namespace": "chat", "pod": name}, Signal: "kv_usage", Value: 0.9}
	}
	v := &verdict.Verdict{Status: verdict.StatusAnomaly, Engine: "vllm", Scope: verdict.Scope{Selector: `namespace="chat"`},
		Incident: inc, Baseline: base, Targets: []verdict.Target{pod("a"), pod("b"), pod("a")}}
	m := podMetrics{kvFake()}
	// A GPU panel's query is a max over GPUs too: it gets no lines.
	m.curves["whyslow_gpu_dram_bandwidth_utilization"] = func(time.Time) float64 { return 0.5 }
	d, err := ForVerdict(context.Background(), m, v, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Panels) != 7 {
		t.Fatalf("%d panels, want 7 (with the DRAM bandwidth)", len(d.Panels))
	}
	var names []string
	for i, p := range d.Panels {
		if i != 2 && len(p.Replicas) != 0 {
			t.Errorf("panel %q has replica lines", p.Title)
		}
	}
	kv := d.Panels[2]
	for _, r := range kv.Replicas {
		names = append(names, r.Name)
	}
	if got := strings.Join(names, " "); got != "chat/a chat/b" {
		t.Fatalf("replicas %q, want chat/a chat/b (query %v)", got, m.queries[len(m.queries)-1])
	}
	img := renderImage(t, d)
	pl := layout(len(d.Panels))[2].plot
	for i, c := range replicaColors[:2] {
		if n := count(img, pl, isColor([3]uint32{uint32(c.R), uint32(c.G), uint32(c.B)})); n < 100 {
			t.Errorf("replica %d: %d pixels of its colour in the KV panel", i, n)
		}
	}
	if n := count(img, layout(len(d.Panels))[0].plot, isColor([3]uint32{0xe0, 0x8a, 0x00})); n != 0 {
		t.Errorf("%d replica-coloured pixels in the TTFT panel", n)
	}

	v.Targets = v.Targets[:1]
	if d, err = ForVerdict(context.Background(), m, v, Options{}); err != nil || len(d.Panels[2].Replicas) != 0 {
		t.Errorf("one target: %d replica lines (%v)", len(d.Panels[2].Replicas), err)
	}
}

// TestGPUPanels: the GPU panels come from the maps' sm_clock and dram_bw
// where the GPUs export them (joined to the engine's targets), and are
// left out where they do not (kvFake: six panels, none GPU).
func TestGPUPanels(t *testing.T) {
	inc, base := windows()
	m := kvFake()
	m.curves["whyslow_gpu_sm_clock_mhz"] = func(time.Time) float64 { return 1410 }
	d, err := Build(context.Background(), m, `model_name="llama"`, inc, base, Options{Engine: "vllm"})
	if err != nil {
		t.Fatal(err)
	}
	last := d.Panels[len(d.Panels)-1]
	if len(d.Panels) != 7 || last.Title != "GPU SM clock (MHz, slowest busy GPU)" || last.Unit != UnitMHz ||
		!strings.Contains(last.Query, `and on(pod) vllm:num_requests_running{model_name="llama"}`) {
		t.Fatalf("%d panels, last %q %s %s", len(d.Panels), last.Title, last.Unit, last.Query)
	}
	if a := ValueAxis(last); a.Unit != "MHz" || a.Ticks[len(a.Ticks)-1].Label != "1500" {
		t.Errorf("SM clock axis %s: %q", a.Unit, labels(a))
	}
	d, err = Build(context.Background(), kvFake(), `model_name="llama"`, inc, base, Options{Engine: "vllm"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range d.Panels {
		if strings.HasPrefix(p.Title, "GPU") {
			t.Errorf("a GPU panel without GPU series: %s", p.Query)
		}
	}
}

// TestContinuousEdges: without a baseline window the span is the
// incident's lead-in and window, nothing else shaded and no baseline
// mean; an onset off the span is not marked.
func TestContinuousEdges(t *testing.T) {
	inc, _ := windows()
	v := &verdict.Verdict{Status: verdict.StatusAnomaly, Engine: "vllm", Incident: inc}
	d, err := ForVerdict(context.Background(), kvFake(), v, Options{Onset: inc.End.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if want := (verdict.Window{Start: inc.Start.Add(-10 * time.Minute), End: inc.End}); d.Span != want || !d.Onset.IsZero() {
		t.Fatalf("span %v (want %v), onset %v", d.Span, want, d.Onset)
	}
	if _, ok := windowMean(d.Panels[0].Incident, d.Baseline); ok {
		t.Error("a baseline mean without a baseline window")
	}
	img := renderImage(t, d)
	if n := count(img, img.Bounds(), isColor([3]uint32{0xea, 0xea, 0xea})); n != 0 {
		t.Errorf("%d baseline-shaded pixels without a baseline window", n)
	}
}

func BenchmarkRenderContinuous(b *testing.B) {
	inc, base := windows()
	v := &verdict.Verdict{Engine: "vllm", Incident: inc, Baseline: base, Targets: []verdict.Target{
		{Labels: map[string]string{"namespace": "chat", "pod": "a"}}, {Labels: map[string]string{"namespace": "chat", "pod": "b"}}}}
	d, err := ForVerdict(context.Background(), podMetrics{kvFake()}, v, Options{Onset: inc.Start})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := PNG(d); err != nil {
			b.Fatal(err)
		}
	}
}
