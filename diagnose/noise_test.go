package diagnose

import (
	"context"
	"fmt"
	"maps"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/whyslow/whyslow/rules"
	"github.com/whyslow/whyslow/rulesets"
	"github.com/whyslow/whyslow/verdict"
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
	if v.Status != verdict.StatusAnomaly {
		t.Fatalf("tail-only slowdown (inter-token p95 ×2.77, mean ×1.2): status %s, want anomaly", v.Status)
	}
	if v.Phase != verdict.PhaseDecode && v.Phase != verdict.PhaseBoth {
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

	// A smaller tail rise (p95 ×1.35, below the fixed ×1.4 bar) is an
	// anomaly against a quiet baseline and none inside one that swings ×1.5
	// from minute to minute.
	small := with(base, "tpot_p95", 0.039, "tpot_p95_recent", 0.039)
	for _, c := range []struct {
		spread float64
		want   verdict.Status
	}{{0.03, verdict.StatusAnomaly}, {0.5, verdict.StatusHealthy}} {
		f := newFake(t, rs, small, base, nil)
		withNoise(t, f, rs, base, c.spread)
		v, err := Run(context.Background(), Options{Metrics: f, Rulesets: []*rules.Ruleset{rs}, At: at, GPU: "H100"})
		if err != nil {
			t.Fatal(err)
		}
		if v.Status != c.want {
			t.Errorf("inter-token p95 ×1.35, baseline spread ±%.0f%%: status %s, want %s", 100*c.spread, v.Status, c.want)
		}
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
		want   verdict.Status
	}{{"still raised ×1.3", 1.3, verdict.StatusAnomaly}, {"back to baseline", 1.0, verdict.StatusHealthy}} {
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
	sigma := map[string]spread{"x": {sd: 0.1, n: 6}} // 5 degrees of freedom: t as is
	z := noiseZ(sigma, time.Minute, 5*time.Minute, map[string]float64{"x": 2, "x_recent": 2}, map[string]float64{"x": 1})
	// ln 2 / (0.1 · √(2/5)) and ln 2 / (0.1 · √(1/2 + 1/5)).
	if want := math.Log(2) / (0.1 * math.Sqrt(0.4)); math.Abs(z["x"]-want) > 1e-9 {
		t.Errorf("z = %g, want %g", z["x"], want)
	}
	if want := math.Log(2) / (0.1 * math.Sqrt(0.7)); math.Abs(z["x_recent"]-want) > 1e-9 {
		t.Errorf("z recent = %g, want %g", z["x_recent"], want)
	}
	// The t tails against tables: P(T > 2.920 | 2 dof) = P(T > 2.353 | 3)
	// = P(T > 2.132 | 4) = 0.05, whose normal equivalent is 1.645; and
	// P(T > 6.965 | 2) = P(T > 4.541 | 3) = P(T > 3.747 | 4) = 0.01 (2.326).
	for _, c := range []struct {
		t    float64
		dof  int
		want float64
	}{{2.920, 2, 1.645}, {2.353, 3, 1.645}, {2.132, 4, 1.645}, {6.965, 2, 2.326}, {4.541, 3, 2.326}, {3.747, 4, 2.326}, {0, 4, 0}} {
		if got := normalOfT(c.t, c.dof); math.Abs(got-c.want) > 0.005 {
			t.Errorf("normalOfT(%g, %d) = %.4f, want %.3f", c.t, c.dof, got, c.want)
		}
		if got := normalOfT(-c.t, c.dof); math.Abs(got+c.want) > 0.005 {
			t.Errorf("normalOfT(%g, %d) = %.4f, want %.3f", -c.t, c.dof, got, -c.want)
		}
	}
	if z := normalOfT(1e9, 4); math.IsInf(z, 0) || math.IsNaN(z) || z < 8 {
		t.Errorf("normalOfT(1e9, 4) = %g", z)
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

// TestWeakMechanismDoesNotLead: inter-token latency ×1.07, all of it from
// more KV context read per step (prompts ×3), while TTFT rose ×10, nearly all
// of it prefill. The bandwidth mechanism explains a sliver of what users
// felt; it must not be the top cause.
func TestWeakMechanismDoesNotLead(t *testing.T) {
	rs, err := rulesets.Default("vllm")
	if err != nil {
		t.Fatal(err)
	}
	base := with(baseline(), "decode_batch", 20.0, "decode_ctx_tokens", 1100.0, "kv_per_running", 0.01, "prompt_len_started", 1000.0)
	now := with(base, "ttft_mean", 2.0, "ttft_mean_recent", 2.0, "ttft_p95", 4.0, "ttft_p95_recent", 4.0, "prefill_mean", 1.9,
		"tpot_mean", 0.0214, "tpot_mean_recent", 0.0214, "tpot_p95", 0.032, "decode_ctx_tokens", 3300.0,
		"prompt_len_started", 3000.0, "prompt_len_mean", 3000.0, "prefill_tps", 6000.0)
	attr := map[string]float64{rules.AttrTTFTDelta: 1.8, rules.AttrTTFTPrefill: 0.95, rules.AttrTTFTQueue: 0.05,
		rules.AttrITLDelta: 0.0014, rules.AttrITLContext: 1.0, rules.AttrUnexplained: 0,
		rules.AttrITLSymptom: math.Log(1.07) / (math.Log(1.07) + math.Log(10))}
	out := rs.Walk(rules.Facts{Now: now, Base: base, Engine: "vllm", Attr: attr, GPU: rules.GPU{Class: "H100", MemoryGiB: 80}})
	if !out.Anomaly || len(out.Causes) == 0 {
		t.Fatalf("anomaly %v, causes %d", out.Anomaly, len(out.Causes))
	}
	var ids []string
	for _, c := range out.Causes {
		ids = append(ids, c.Cause.ID)
	}
	if ids[0] == "memory_bandwidth_saturation" {
		t.Errorf("memory_bandwidth_saturation first with inter-token ×1.07 and TTFT ×10: %v", ids)
	}
	t.Logf("causes: %v", ids)
}

// TestScrapeSurgeWithoutGPUSeries is the smallest reproduction of an SGLang
// server (which exports no start time) under an arrival surge, triaged by
// `why --scrape`: the baseline is its lifetime, so its rates are left out,
// and no GPU series exist. Prefill and decode slowed together while requests
// queue: the verdict names queue_saturation and never gpu_throttling, which
// no series here could show.
func TestScrapeSurgeWithoutGPUSeries(t *testing.T) {
	rs, err := rulesets.Default("sglang")
	if err != nil {
		t.Fatal(err)
	}
	base := baseline()
	now := with(base, "ttft_mean", 1.6, "ttft_mean_recent", 1.7, "ttft_p95", 4.0, "ttft_p95_recent", 4.2, "queue_mean", 1.3,
		"tpot_mean", 0.032, "tpot_mean_recent", 0.033, "tpot_p95", 0.05, "waiting", 40.0, "waiting_last", 45.0, "running", 60.0,
		"running_peak", 64.0, "running_last", 62.0, "request_rate", 5.5, "arrival_rate", 6.5, "started_rate", 5.5, "kv_usage", 0.6,
		"kv_usage_peak", 0.7, "decode_batch", 60.0)
	m := newFake(t, rs, now, base, nil)
	v, err := Run(context.Background(), Options{Metrics: m, Ruleset: rs, Engine: "sglang", At: at, BaselineWithoutRates: true})
	if err != nil {
		t.Fatal(err)
	}
	if v.Status != verdict.StatusAnomaly || len(v.Causes) == 0 {
		t.Fatalf("status %s, causes %v", v.Status, causeIDs(v))
	}
	if v.Causes[0].ID != "queue_saturation" {
		t.Errorf("causes %v, want queue_saturation first", causeIDs(v))
	}
	for _, c := range v.Causes {
		if c.ID == "gpu_throttling" {
			t.Errorf("gpu_throttling ranked without a GPU series: %v", causeIDs(v))
		}
	}
}

// TestUnresolvedRises: a quantile that rose inside one bucket (vLLM TTFT
// 0.1–0.25 s: 0.121 → 0.176, read ×1.45 where the requests' p95 moved ×1.2)
// has no noise z for the walk; one that crossed a bound, one that fell, one
// past the last bound and a signal without buckets keep theirs, and z
// itself is left as it was.
func TestUnresolvedRises(t *testing.T) {
	vllmTTFT := []float64{0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5}
	z := map[string]float64{"ttft_p95": 2.73, "tpot_p95": 3.4, "ttft_p99": 3.1, "e2e_p95": 4, "ttft_mean": 3.03}
	les := map[string][]float64{"ttft_p95": vllmTTFT, "tpot_p95": {0.01, 0.025, 0.05}, "ttft_p99": vllmTTFT, "e2e_p95": {1, 2}}
	now := map[string]float64{"ttft_p95": 0.176, "tpot_p95": 0.03, "ttft_p99": 0.2, "e2e_p95": 3, "ttft_mean": 0.0473}
	base := map[string]float64{"ttft_p95": 0.121, "tpot_p95": 0.02, "ttft_p99": 0.3, "e2e_p95": 1.5, "ttft_mean": 0.0416}
	got := unresolvedRises(z, les, now, base)
	want := map[string]float64{"ttft_p95": 0, "tpot_p95": 3.4, "ttft_p99": 3.1, "e2e_p95": 4, "ttft_mean": 3.03}
	if !maps.Equal(got, want) {
		t.Errorf("unresolvedRises = %v, want %v", got, want)
	}
	if z["ttft_p95"] != 2.73 {
		t.Errorf("z changed: ttft_p95 %v", z["ttft_p95"])
	}
	// A rise from exactly a bound to the next one crosses it.
	got = unresolvedRises(map[string]float64{"ttft_p95": 3}, map[string][]float64{"ttft_p95": vllmTTFT},
		map[string]float64{"ttft_p95": 0.25}, map[string]float64{"ttft_p95": 0.1})
	if got["ttft_p95"] != 3 {
		t.Errorf("0.1 → 0.25 (a bound crossed): z %v, want 3", got["ttft_p95"])
	}
}

// TestTailQuantile: inside a wide bucket the tail read sits nearer the
// lower bound than histogram_quantile's even spread; the first bucket, a
// bucket holding the whole rest of the tail and an empty histogram are
// undefined; past the last bound it is that bound.
func TestTailQuantile(t *testing.T) {
	les := []float64{0.08, 0.1, 0.25}
	// 3200 requests: 6.5% above 0.1 s, 0.58% above 0.25 s.
	q, ok := tailQuantile(0.95, les, []float64{2800, 192, 189.5, 18.5})
	if !ok || q < 0.108 || q > 0.112 {
		t.Errorf("tail p95 = %v, %v; want ≈0.110 (histogram_quantile: 0.138)", q, ok)
	}
	for _, c := range []struct {
		name   string
		counts []float64
	}{
		{"first bucket", []float64{100, 1, 1, 1}},
		{"bucket holding the rest", []float64{90, 10, 0, 0}},
		{"empty", []float64{0, 0, 0, 0}},
		{"counts without the +Inf bucket", []float64{1, 2, 3}},
	} {
		if q, ok := tailQuantile(0.95, les, c.counts); ok {
			t.Errorf("%s: tail p95 = %v, want undefined", c.name, q)
		}
	}
	if q, ok := tailQuantile(0.95, les, []float64{1, 1, 1, 97}); !ok || q != 0.25 {
		t.Errorf("past the last bound: %v, %v; want 0.25", q, ok)
	}
}

// TestTailReadCrossedBound is a diurnal growth's smallest reproduction:
// the TTFT p95 crossed vLLM's 0.1 s bound and histogram_quantile reads it
// ×1.40 (0.0988 → 0.138 s) where the requests' own p95 moved ×1.10, with
// the mean up ×1.13 outside a quiet baseline. Read from the bucket counts
// the rise is ×1.10: healthy. A p95 that crossed the same bound with a
// quarter of the requests above 0.1 s (tail read ×2.04) is an anomaly.
func TestTailReadCrossedBound(t *testing.T) {
	rs, err := rulesets.Default("vllm")
	if err != nil {
		t.Fatal(err)
	}
	les := []float64{0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5}
	base := with(baseline(), "requests", 2400.0, "ttft_p95", 0.0988, "ttft_mean", 0.0404, "ttft_mean_recent", 0.0404,
		"ttft_p50", 0.033, "ttft_p99", 0.228)
	baseCounts := []float64{1200, 600, 300, 100, 85.1, 90, 24.9, 0}
	for _, c := range []struct {
		name   string
		p95    float64
		counts []float64
		want   verdict.Status
	}{
		{"×1.10 in the counts", 0.138, []float64{1600, 800, 400, 192, 192, 189.5, 18.5, 0}, verdict.StatusHealthy},
		{"×2.04 in the counts", 0.236, []float64{1200, 600, 400, 200, 0, 704, 96, 0}, verdict.StatusAnomaly},
	} {
		now := with(base, "requests", 3200.0, "ttft_p95", c.p95, "ttft_mean", 0.0457, "ttft_mean_recent", 0.0457,
			"ttft_p95_recent", c.p95)
		v := runWithBuckets(t, rs, "ttft_p95", now, base, les, c.counts, baseCounts)
		if v.Status != c.want {
			t.Errorf("%s: status %s, want %s (causes %v)", c.name, v.Status, c.want, causeIDs(v))
		}
		for _, h := range v.Headline {
			if h.Signal == "ttft_p95" && (h.Now == nil || *h.Now != c.p95) {
				t.Errorf("%s: headline ttft_p95 %v, want the PromQL value %v", c.name, h.Now, c.p95)
			}
		}
	}
}

// runWithBuckets triages now against base (a 2% noise spread) with the
// bucket queries of signal's histogram answered from the requests per
// bucket of each window.
func runWithBuckets(t *testing.T, rs *rules.Ruleset, signal string, now, base map[string]float64, les, nowCounts, baseCounts []float64) *verdict.Verdict {
	t.Helper()
	f := newFake(t, rs, now, base, nil)
	withNoise(t, f, rs, base, 0.02)
	sels := bucketSelectors(rs.Declared(signal), "", "5m")
	if len(sels) == 0 {
		t.Fatalf("%s reads no histogram", signal)
	}
	putBuckets(f, sels, les, nowCounts, baseCounts)
	v, err := Run(context.Background(), Options{Metrics: f, Rulesets: []*rules.Ruleset{rs}, At: at, GPU: "H100"})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// putBuckets answers the bucket queries of a signal's histogram selectors
// over 5m (one query joining them with "or", as triage asks): its le layout
// and the requests per bucket now (at) and in the baseline (an hour
// before), cumulative as Prometheus stores them.
func putBuckets(f *fakeMetrics, sels []string, les, nowCounts, baseCounts []float64) {
	put := func(expr string, ts time.Time, counts []float64) {
		var vec model.Vector
		cum := 0.0
		for i, n := range counts {
			cum += n
			le := "+Inf"
			if i < len(les) {
				le = strconv.FormatFloat(les[i], 'g', -1, 64)
			}
			vec = append(vec, &model.Sample{Metric: model.Metric{"le": model.LabelValue(le)}, Value: model.SampleValue(cum)})
		}
		if f.vals[expr] == nil {
			f.vals[expr] = map[time.Time]model.Vector{}
		}
		f.vals[expr][ts] = vec
	}
	join := func(format string) string {
		parts := make([]string, len(sels))
		for i, sel := range sels {
			parts[i] = fmt.Sprintf(format, sel)
		}
		return strings.Join(parts, " or ")
	}
	put(join("count by (le) (last_over_time(%s[5m]))"), at, nowCounts)
	put(join("sum by (le) (increase(%s[5m]))"), at, nowCounts)
	put(join("sum by (le) (increase(%s[5m]))"), at.Add(-time.Hour), baseCounts)
}

// TestTailReadFromTheFirstBucket is another diurnal growth's smallest
// reproduction: the inter-token p95 sat in vLLM's first bucket (0–10 ms,
// read 9.88 ms) and crossed its bound, and histogram_quantile reads it
// ×1.59 (→ 15.7 ms, z 3.4) where the requests' own p95 moved ×1.08, the
// mean ×1.04. The first bucket has no tail to read, so the baseline is read
// as its 10 ms bound: ×1.19 from the counts, healthy. A quarter of the
// requests past 10 ms (tail read ×2.66) is an anomaly.
func TestTailReadFromTheFirstBucket(t *testing.T) {
	rs, err := rulesets.Default("vllm")
	if err != nil {
		t.Fatal(err)
	}
	les := []float64{0.01, 0.025, 0.05, 0.075, 0.1}
	base := with(baseline(), "requests", 1450.0, "tpot_p95", 0.00988, "tpot_mean", 0.00992, "tpot_mean_recent", 0.00992,
		"tpot_p50", 0.0052, "tpot_p99", 0.0457)
	baseCounts := []float64{1394.2, 40, 10, 5.8, 0, 0}
	for _, c := range []struct {
		name   string
		p95    float64
		counts []float64
		want   verdict.Status
	}{
		{"×1.19 in the counts", 0.0157, []float64{1600, 114.5, 10, 5.5, 0, 0}, verdict.StatusHealthy},
		{"×2.66 in the counts", 0.0292, []float64{1300, 330, 80, 20, 0, 0}, verdict.StatusAnomaly},
	} {
		now := with(base, "requests", 1730.0, "tpot_p95", c.p95, "tpot_mean", 0.0103, "tpot_mean_recent", 0.0103,
			"tpot_p95_recent", c.p95)
		v := runWithBuckets(t, rs, "tpot_p95", now, base, les, c.counts, baseCounts)
		if v.Status != c.want {
			t.Errorf("%s: status %s, want %s (causes %v)", c.name, v.Status, c.want, causeIDs(v))
		}
	}
}
