package triage

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/whyslow/whyslow/rules"
	"github.com/whyslow/whyslow/rulesets"
)

// withNoise answers the baseline's sub-window queries: every noise signal
// and the request count at the five 1-minute sub-windows ending at the
// baseline's end, each value spread by ±spread around base (alternating).
func withNoise(t *testing.T, f *fakeMetrics, rs *rules.Ruleset, base map[string]float64, spread float64) {
	t.Helper()
	for _, s := range rs.Signals {
		v, ok := base[s.Name]
		if !ok || (!s.Noise && s.Name != "requests") {
			continue
		}
		expr, err := s.Render("", "1m", nil)
		if err != nil {
			t.Fatal(err)
		}
		if f.vals[expr] == nil {
			f.vals[expr] = map[time.Time]model.Vector{}
		}
		for j := range 5 {
			x := v
			switch {
			case s.Name == "requests":
				x = v / 5
			case j%2 == 0:
				x = v * (1 + spread)
			default:
				x = v * (1 - spread)
			}
			f.vals[expr][at.Add(-time.Hour-time.Duration(j)*time.Minute)] = model.Vector{{Value: model.SampleValue(x)}}
		}
	}
}

// TestGateTailOnly is the smallest reproduction of a fleet losing 2 of 4
// replicas: the means barely move (TTFT ×1.1, inter-token ×1.2) while the
// inter-token p95 rises ×2.77 (29 → 80 ms). The gate reads the p95 against
// the baseline's own variability and calls it an anomaly; the same p95
// inside a noisy baseline is not one.
func TestGateTailOnly(t *testing.T) {
	rs, err := rulesets.Default("vllm")
	if err != nil {
		t.Fatal(err)
	}
	base := with(baseline(), "targets", 4.0, "serving_targets", 4.0, "tpot_p95", 0.029, "tpot_p50", 0.018, "tpot_p99", 0.04,
		"ttft_p50", 0.15, "ttft_p99", 0.8)
	now := with(base, "targets", 2.0, "serving_targets", 2.0, "tpot_mean", 0.024, "tpot_p95", 0.080, "tpot_p95_recent", 0.082,
		"tpot_mean_recent", 0.024, "ttft_mean", 0.22, "ttft_mean_recent", 0.22, "running", 24.0)

	quiet := newFake(t, rs, now, base, nil)
	withNoise(t, quiet, rs, base, 0.05)
	v, err := Run(context.Background(), Options{Metrics: quiet, Rulesets: []*rules.Ruleset{rs}, At: at, GPU: "H100"})
	if err != nil {
		t.Fatal(err)
	}
	if v.Status != StatusAnomaly {
		t.Fatalf("tail-only slowdown (inter-token p95 ×2.77, mean ×1.2): status %s, want anomaly", v.Status)
	}
	if v.Phase != PhaseDecode && v.Phase != PhaseBoth {
		t.Errorf("phase %s, want decode", v.Phase)
	}
	if len(v.Causes) == 0 || v.Causes[0].ID != "capacity_loss" {
		t.Errorf("causes %+v, want capacity_loss first", v.Causes)
	}
	var z *float64
	for _, c := range v.Headline {
		if c.Signal == "tpot_p95" {
			z = c.Noise
		}
	}
	if z == nil || *z < 3 {
		t.Errorf("headline tpot_p95 noise %v, want a z-score above 3", z)
	}

	// The same numbers where the baseline's p95 swings ×2 from minute to
	// minute: inside the noise, and the means did not move enough alone.
	noisy := newFake(t, rs, now, base, nil)
	withNoise(t, noisy, rs, base, 0.6)
	v, err = Run(context.Background(), Options{Metrics: noisy, Rulesets: []*rules.Ruleset{rs}, At: at, GPU: "H100"})
	if err != nil {
		t.Fatal(err)
	}
	if v.Status != StatusHealthy {
		t.Errorf("p95 ×2.77 inside a baseline that swings ×2: status %s, want healthy", v.Status)
	}
}

// TestGateRecentUsesNoise: a sustained ×1.5 rise of the TTFT p95 whose last
// minutes read ×1.3 (the old recency bar was ×1.5) is still outside a quiet
// baseline's noise, so it is not vetoed; a rise that returned to the
// baseline in the last minutes is.
func TestGateRecentUsesNoise(t *testing.T) {
	rs, err := rulesets.Default("vllm")
	if err != nil {
		t.Fatal(err)
	}
	base := with(baseline(), "ttft_p50", 0.15, "ttft_p99", 0.8, "tpot_p50", 0.018, "tpot_p99", 0.04)
	for _, tt := range []struct {
		name   string
		recent float64
		want   Status
	}{{"still raised ×1.3", 1.3, StatusAnomaly}, {"back to baseline", 1.0, StatusHealthy}} {
		now := with(base, "ttft_p95", 0.6, "ttft_p95_recent", 0.4*tt.recent, "ttft_mean", 0.22, "ttft_mean_recent", 0.2)
		f := newFake(t, rs, now, base, nil)
		withNoise(t, f, rs, base, 0.05)
		v, err := Run(context.Background(), Options{Metrics: f, Rulesets: []*rules.Ruleset{rs}, At: at, GPU: "H100"})
		if err != nil {
			t.Fatal(err)
		}
		if v.Status != tt.want {
			t.Errorf("%s: status %s, want %s", tt.name, v.Status, tt.want)
		}
	}
}

func TestNoiseZ(t *testing.T) {
	sigma := map[string]float64{"x": 0.1}
	z := noiseZ(sigma, time.Minute, 5*time.Minute, map[string]float64{"x": 2, "x_recent": 2}, map[string]float64{"x": 1})
	// ln 2 / (0.1 · √(2/5)) and ln 2 / (0.1 · √(1/2 + 1/5)).
	if want := math.Log(2) / (0.1 * math.Sqrt(0.4)); math.Abs(z["x"]-want) > 1e-9 {
		t.Errorf("z = %g, want %g", z["x"], want)
	}
	if want := math.Log(2) / (0.1 * math.Sqrt(0.7)); math.Abs(z["x_recent"]-want) > 1e-9 {
		t.Errorf("z recent = %g, want %g", z["x_recent"], want)
	}
	if len(noiseZ(sigma, 0, 5*time.Minute, map[string]float64{"x": 2}, map[string]float64{"x": 1})) != 0 {
		t.Error("z without sub-windows")
	}
	if sub, k := noiseSub(2 * time.Minute); k != 0 || sub != 0 {
		t.Errorf("a 2m window split into %d × %s", k, sub)
	}
	if sub, k := noiseSub(10 * time.Minute); k != 5 || sub != 2*time.Minute {
		t.Errorf("a 10m window split into %d × %s", k, sub)
	}
}
