package chart

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/whyslow/whyslow/verdict"
)

// labels are an axis' tick labels, space-separated.
func labels(a Axis) string {
	var s []string
	for _, t := range a.Ticks {
		s = append(s, t.Label)
	}
	return strings.Join(s, " ")
}

func TestValueAxis(t *testing.T) {
	for _, c := range []struct {
		hi     float64
		unit   string
		ticks  []float64
		top    float64
		labels []string
	}{
		{156, "s", []float64{0, 50, 100, 150}, 171.6, []string{"0 s", "50 s", "100 s", "150 s"}},
		{85, "ms", []float64{0, 20, 40, 60, 80}, 93.5, []string{"0 ms", "20 ms", "40 ms", "60 ms", "80 ms"}},
		{99.9, "%", []float64{0, 20, 40, 60, 80, 100}, 100, []string{"0%", "20%", "40%", "60%", "80%", "100%"}},
		{11.4, "requests", []float64{0, 5, 10, 15}, 15, []string{"0", "5", "10", "15"}},
		{2.3, "s", []float64{0, 0.5, 1, 1.5, 2, 2.5}, 2.53, []string{"0 s", "0.5 s", "1 s", "1.5 s", "2 s", "2.5 s"}},
		{0, "ms", []float64{0, 0.2, 0.4, 0.6, 0.8, 1}, 1, nil},
	} {
		a := valueAxis(0, c.hi, c.unit)
		if len(a.Ticks) != len(c.ticks) || math.Abs(a.Hi-c.top) > 1e-9 {
			t.Errorf("valueAxis(0, %g, %s) = %v up to %g, want %v up to %g", c.hi, c.unit, a.Ticks, a.Hi, c.ticks, c.top)
			continue
		}
		for i, v := range c.ticks {
			if math.Abs(a.Ticks[i].V-v) > 1e-9 {
				t.Errorf("valueAxis(0, %g, %s) tick %d = %g, want %g", c.hi, c.unit, i, a.Ticks[i].V, v)
			}
			if c.labels != nil && a.Ticks[i].Label != c.labels[i] {
				t.Errorf("valueAxis(0, %g, %s) label %d = %q, want %q", c.hi, c.unit, i, a.Ticks[i].Label, c.labels[i])
			}
		}
	}
	// Any range: 4 to 6 ticks of 1, 2 or 5 × 10^k from 0, the last within
	// the axis, the axis above the data.
	for _, hi := range []float64{0.003, 0.07, 0.9, 1, 3.3, 7, 12.5, 42, 99, 480, 1e4, 3.7e6} {
		a := valueAxis(0, hi, "")
		if len(a.Ticks) < minYTicks || len(a.Ticks) > maxYTicks || a.Ticks[0].V != 0 || a.Ticks[len(a.Ticks)-1].V > a.Hi || a.Hi < hi {
			t.Errorf("valueAxis(0, %g) = %v up to %g", hi, a.Ticks, a.Hi)
			continue
		}
		step := a.Ticks[1].V
		m := step / math.Pow(10, math.Floor(math.Log10(step)+1e-9))
		if math.Abs(m-1) > 1e-6 && math.Abs(m-2) > 1e-6 && math.Abs(m-5) > 1e-6 {
			t.Errorf("valueAxis(0, %g): step %g is not 1, 2 or 5 × 10^k", hi, step)
		}
	}
}

// TestPanelValueAxis: a panel's unit picks the display unit; gaps are not
// values; an empty panel still has an axis.
func TestPanelValueAxis(t *testing.T) {
	nan := math.NaN()
	for _, c := range []struct {
		p            Panel
		mult         float64
		unit, labels string
	}{
		{Panel{Unit: UnitSeconds, Incident: []Point{{t0, 0.25}, {t0, nan}}, Baseline: []Point{{t0, math.Inf(1)}}}, 1000, "ms", "0 ms 50 ms 100 ms 150 ms 200 ms 250 ms"},
		{Panel{Unit: UnitSeconds, Incident: []Point{{t0, 2.5}}}, 1, "s", "0 s 0.5 s 1 s 1.5 s 2 s 2.5 s"},
		{Panel{Unit: UnitFraction, Baseline: []Point{{t0, 0.93}}}, 100, "%", "0% 20% 40% 60% 80% 100%"},
		{Panel{Unit: UnitCount, Incident: []Point{{t0, -3}, {t0, 8}}}, 1, UnitCount, "-2 0 2 4 6 8"},
		{Panel{Unit: UnitCount}, 1, UnitCount, "0 0.2 0.4 0.6 0.8 1"},
	} {
		a := ValueAxis(c.p)
		if a.Mult != c.mult || a.Unit != c.unit || labels(a) != c.labels {
			t.Errorf("ValueAxis(%+v) = ×%g %s %q, want ×%g %s %q", c.p, a.Mult, a.Unit, labels(a), c.mult, c.unit, c.labels)
		}
		if f := a.Frac(a.Lo); f != 0 || a.Frac(a.Hi) != 1 {
			t.Errorf("ValueAxis(%+v): Frac(Lo) = %g, Frac(Hi) = %g", c.p, f, a.Frac(a.Hi))
		}
	}
}

// TestTimeAxis: ticks at round seconds, minutes or hours, at most 7.
func TestTimeAxis(t *testing.T) {
	for _, c := range []struct {
		span          float64
		labels, title string
	}{
		{5, "0 1 2 3 4 5", "minutes"},
		{10, "0 2 4 6 8 10", "minutes"},
		{1.5, "0 0.5 1 1.5", "minutes"},
		{60, "0 10 20 30 40 50 60", "minutes"},
		{90, "0 15 30 45 60 75 90", "minutes"},
		{500.0 / 60, "0 2 4 6 8", "minutes"},
		{180, "0 30 60 90 120 150 180", "minutes"},
		{360, "0 1 2 3 4 5 6", "hours"},
		{24 * 60, "0 6 12 18 24", "hours"},
		{0.5, "0 5 10 15 20 25 30", "seconds"},
	} {
		a := TimeAxis(c.span)
		if got := labels(a); got != c.labels || a.Title != c.title+" into window" {
			t.Errorf("TimeAxis(%g) = %q, %q; want %q in %s", c.span, got, a.Title, c.labels, c.title)
		}
		if a.Lo != 0 || a.Hi != c.span || len(a.Ticks) > maxXTicks {
			t.Errorf("TimeAxis(%g) spans %g..%g with %d ticks", c.span, a.Lo, a.Hi, len(a.Ticks))
		}
	}
}

func TestSegments(t *testing.T) {
	nan := math.NaN()
	pts := []Point{{t0, 1}, {t0, nan}, {t0, 2}, {t0, 3}, {t0, math.Inf(-1)}}
	if got := Segments(pts); len(got) != 2 || len(got[0]) != 1 || len(got[1]) != 2 {
		t.Errorf("segments = %v", got)
	}
	if got := Finite(pts); len(got) != 3 || got[2].V != 3 {
		t.Errorf("finite = %v", got)
	}
}

// TestLogAxis: a panel whose values spread more than LogAbove times gets a
// log axis from a 1/2/5 × 10^k below the lowest to one above the highest,
// its ticks at 1, 2, 5 × 10^k (powers of ten over many decades), every
// value inside; a spread under LogAbove, or a zero, stays linear.
func TestLogAxis(t *testing.T) {
	pts := func(vs ...float64) []Point {
		out := make([]Point, len(vs))
		for i, v := range vs {
			out[i] = Point{T: time.Unix(1700000000+int64(i), 0), V: v}
		}
		return out
	}
	// issue 25: TTFT p95 136 ms at baseline, 154 s in the incident.
	a := ValueAxis(Panel{Unit: UnitSeconds, Baseline: pts(0.136, 0.14), Incident: pts(0.2, 154)})
	if !a.Log || a.Lo != 0.1 || a.Hi != 200 {
		t.Fatalf("axis %+v, want log 0.1..200 s", a)
	}
	var labels []string
	for _, tk := range a.Ticks {
		labels = append(labels, tk.Label)
		m := tk.V / math.Pow(10, math.Floor(math.Log10(tk.V)+1e-9))
		if math.Abs(m-1) > 1e-9 && math.Abs(m-2) > 1e-9 && math.Abs(m-5) > 1e-9 {
			t.Errorf("tick %g is not 1, 2 or 5 × 10^k", tk.V)
		}
	}
	if got := strings.Join(labels, " "); got != "0.1 s 1 s 10 s 100 s" {
		t.Errorf("ticks %q", got)
	}
	if f := a.Frac(0.136 * a.Mult); f <= 0.03 || f >= 0.2 { // linear: 0.0008
		t.Errorf("the baseline lies at %.2f of the axis, want off the floor", f)
	}
	if a.Frac(0) != 0 || a.Frac(200) != 1 {
		t.Errorf("Frac(0) %g, Frac(Hi) %g", a.Frac(0), a.Frac(200))
	}
	a = ValueAxis(Panel{Unit: UnitCount, Baseline: pts(2, 3), Incident: pts(9, 60)})
	if !a.Log || len(a.Ticks) > maxYTicks || a.Ticks[0].Label != "2" {
		t.Errorf("2..60 requests: %+v", a)
	}
	for _, p := range []Panel{
		{Unit: UnitCount, Baseline: pts(10, 12), Incident: pts(150)},        // ×15
		{Unit: UnitCount, Baseline: pts(0, 0), Incident: pts(148)},          // a zero
		{Unit: UnitFraction, Baseline: pts(0.01), Incident: pts(0.99, 1.0)}, // up to 100%
	} {
		if a := ValueAxis(p); a.Log {
			t.Errorf("%v: log axis, want linear", p)
		}
	}
}

// TestClockTicks: a clock axis ticks at round minutes or hours (1m, 2m,
// 5m, 10m, 15m, 30m, 1h…), at most 7, never at 8m20s.
func TestClockTicks(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 13, 0, 0, time.UTC)
	for _, c := range []struct {
		span time.Duration
		want string
	}{
		{10 * time.Minute, "00:14 00:16 00:18 00:20 00:22"},
		{20 * time.Minute, "00:15 00:20 00:25 00:30"},
		{70 * time.Minute, "00:15 00:30 00:45 01:00 01:15"},
		{5 * time.Hour, "01:00 02:00 03:00 04:00 05:00"},
		{50 * time.Hour, "12:00 Jan 2 00:00 12:00 Jan 3 00:00"},
	} {
		var got []string
		for _, tk := range ClockTicks(t0, t0.Add(c.span)) {
			got = append(got, tk.Label)
		}
		if s := strings.Join(got, " "); s != c.want {
			t.Errorf("%s: ticks %q, want %q", c.span, s, c.want)
		}
	}
}

// TestLeadIn: the lead-in is as long as the window, 5 minutes to an
// hour; a window without times stays as it is.
func TestLeadIn(t *testing.T) {
	for _, tc := range []struct{ window, lead time.Duration }{
		{time.Minute, 5 * time.Minute}, {10 * time.Minute, 10 * time.Minute}, {3 * time.Hour, time.Hour},
	} {
		v := &verdict.Verdict{Incident: verdict.Window{Start: t0.Add(-tc.window), End: t0}}
		inc, base := LeadIn(v)
		if got := inc.End.Sub(inc.Start) - tc.window; got != tc.lead || !inc.End.Equal(t0) {
			t.Errorf("window %s: lead %s, want %s", tc.window, got, tc.lead)
		}
		if !base.Start.IsZero() || !base.End.IsZero() {
			t.Errorf("an unknown baseline window became %+v", base)
		}
	}
}
