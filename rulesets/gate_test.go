package rulesets

import (
	"testing"

	"github.com/whyslow/whyslow/rules"
)

// TestGateMedianAcrossBucketEdge: an inter-token median near vLLM's 10 ms
// bucket edge is interpolated inside buckets 10 and 15 ms wide, so a ×1.14
// shift of the whole distribution (the exact mean) reads ×1.8 at the
// median, well outside a quiet baseline's noise. That is not a slowdown; the
// same median with a mean that moved with it is.
func TestGateMedianAcrossBucketEdge(t *testing.T) {
	rs, err := Default("vllm")
	if err != nil {
		t.Fatal(err)
	}
	base := map[string]float64{"samples": 40, "requests": 8000, "ttft_mean": 0.054, "tpot_mean": 0.011, "tpot_p50": 0.0082,
		"tpot_p95": 0.0243, "ttft_p50": 0.045, "ttft_p95": 0.165}
	now := map[string]float64{"samples": 40, "requests": 10700, "ttft_mean": 0.056, "tpot_mean": 0.0125, "tpot_p50": 0.015,
		"tpot_p95": 0.0254, "ttft_p50": 0.046, "ttft_p95": 0.17, "tpot_mean_recent": 0.0126, "ttft_mean_recent": 0.056}
	z := map[string]float64{"tpot_p50": 4.2, "tpot_mean": 2.5, "tpot_p95": 1.8, "tpot_mean_recent": 2.2, "ttft_mean": 1.0, "ttft_p50": 0.9, "ttft_p95": 1.0}
	out := rs.Walk(rules.Facts{Now: now, Base: base, Z: z})
	if out.Anomaly || out.Decode || len(out.Errors) > 0 {
		t.Errorf("median ×1.8 across a bucket edge with the mean ×1.14: anomaly %v decode %v errors %v, want neither", out.Anomaly, out.Decode, out.Errors)
	}
	bulk := map[string]float64{}
	for k, v := range now {
		bulk[k] = v
	}
	bulk["tpot_mean"], bulk["tpot_mean_recent"] = 0.0165, 0.0166
	out = rs.Walk(rules.Facts{Now: bulk, Base: base, Z: z})
	if !out.Anomaly || !out.Decode {
		t.Errorf("median ×1.8 with the mean ×1.5: anomaly %v decode %v, want both (errors %v)", out.Anomaly, out.Decode, out.Errors)
	}
}

// causeRank returns the rank (1-based) of a cause among the outcome's causes,
// 0 when it is not ranked.
func causeRank(out *rules.Outcome, id string) int {
	for i, c := range out.Causes {
		if c.Cause.ID == id {
			return i + 1
		}
	}
	return 0
}

// TestUniformSlowdownNeedsUniform: without GPU series, throttling is read
// from prefill and decode slowing alike at steady traffic; a TTFT that rose
// ×40 while inter-token latency rose ×1.5 is queueing or time outside the
// engine, not a clock.
func TestUniformSlowdownNeedsUniform(t *testing.T) {
	rs, err := Default("vllm")
	if err != nil {
		t.Fatal(err)
	}
	base := map[string]float64{"samples": 40, "requests": 9000, "ttft_mean": 0.166, "tpot_mean": 0.0315, "prompt_len_mean": 1200,
		"gen_len_mean": 300, "request_rate": 50, "prefix_hit_rate": 0.4}
	for _, c := range []struct {
		ttft, tpot float64
		throttle   bool
	}{{6.87, 0.0484, false}, {0.27, 0.0484, true}} {
		now := map[string]float64{"samples": 40, "requests": 9100, "ttft_mean": c.ttft, "tpot_mean": c.tpot, "prompt_len_mean": 1200,
			"gen_len_mean": 300, "request_rate": 50.5, "prefix_hit_rate": 0.4}
		out := rs.Walk(rules.Facts{Now: now, Base: base})
		if !out.Anomaly {
			t.Fatalf("TTFT ×%.1f, inter-token ×%.2f: not an anomaly", c.ttft/base["ttft_mean"], c.tpot/base["tpot_mean"])
		}
		if got := causeRank(out, "gpu_throttling") == 1; got != c.throttle {
			t.Errorf("TTFT ×%.1f, inter-token ×%.2f, no GPU series: gpu_throttling first %v, want %v (causes %v)",
				c.ttft/base["ttft_mean"], c.tpot/base["tpot_mean"], got, c.throttle, out.Causes)
		}
	}
}

// TestContextFromNewPrompt: the context each running request holds grew
// because the prompts grew and the prefix cache served none of the growth (a
// prompt shift over the engine's token budget). Memory bandwidth is the
// mechanism, not the cause: it must not outrank the scheduler's evidence.
// Cached growth (multi-turn history) keeps it as the cause.
func TestContextFromNewPrompt(t *testing.T) {
	rs, err := Default("vllm")
	if err != nil {
		t.Fatal(err)
	}
	base := map[string]float64{"samples": 40, "requests": 9000, "ttft_mean": 0.169, "tpot_mean": 0.0304, "prompt_len_mean": 2300,
		"prompt_len_p90": 4750, "kv_per_running": 0.0099, "prefix_hit_rate": 0.30, "request_rate": 30, "arrival_rate": 30}
	attr := map[string]float64{"itl_context": 0.6, "itl_symptom": 0.45}
	now := map[string]float64{"samples": 40, "requests": 9000, "ttft_mean": 0.388, "tpot_mean": 0.0426, "prompt_len_mean": 5860,
		"prompt_len_p90": 10000, "kv_per_running": 0.0282, "prefix_hit_rate": 0.29, "request_rate": 30, "arrival_rate": 30}
	sched := rules.Scheduler{Known: true, ChunkedPrefill: true, MaxNumBatchedTokens: 8192}
	out := rs.Walk(rules.Facts{Now: now, Base: base, Attr: attr, Scheduler: sched})
	if causeRank(out, "chunked_prefill_mismatch") != 1 {
		t.Errorf("uncached prompts ×2.5 past the budget: causes %v, want chunked_prefill_mismatch first", out.Causes)
	}
	cached := map[string]float64{}
	for k, v := range now {
		cached[k] = v
	}
	cached["prompt_len_p90"], cached["prefix_hit_rate"] = 4750, 0.75 // the growth is served from the cache
	out = rs.Walk(rules.Facts{Now: cached, Base: base, Attr: attr, Scheduler: sched})
	if causeRank(out, "memory_bandwidth_saturation") != 1 {
		t.Errorf("cached context ×2.8: causes %v, want memory_bandwidth_saturation first", out.Causes)
	}
}

// TestFrontendDelayBesideSlowerSteps: SGLang (no prefill-phase histogram),
// no GPU series; the API server adds 240 ms before the engine while a lower
// clock slows every decode step ×1.31 at the same traffic, prompts, outputs
// and context per request. Both causes are ranked: the front-end time is
// worth 50 inter-token rises, so the slower steps do not stand it down, and
// the step model explains 30% of the inter-token rise, so the rest is the
// steps themselves. With the same context per request grown ×5 (longer
// cached contexts), the slower steps are the bandwidth's, not a clock's.
func TestFrontendDelayBesideSlowerSteps(t *testing.T) {
	rs, err := Default("sglang")
	if err != nil {
		t.Fatal(err)
	}
	base := map[string]float64{"samples": 30, "requests": 8400, "ttft_mean": 0.0739, "tpot_mean": 0.016, "queue_mean": 0.0134,
		"prompt_len_mean": 2400, "gen_len_mean": 300, "arrival_rate": 18.1, "started_rate": 18.1, "running": 120, "waiting": 0.2,
		"kv_per_running": 0.0019, "targets": 7}
	now := map[string]float64{"samples": 30, "requests": 8500, "ttft_mean": 0.329, "tpot_mean": 0.0209, "queue_mean": 0.0140,
		"prompt_len_mean": 2420, "gen_len_mean": 298, "arrival_rate": 18.7, "started_rate": 18.7, "running": 160, "waiting": 0.33,
		"kv_per_running": 0.0019, "targets": 7, "ttft_mean_recent": 0.331, "tpot_mean_recent": 0.0209}
	z := map[string]float64{"ttft_mean": 4.9, "tpot_mean": 3.8, "ttft_mean_recent": 4.7, "tpot_mean_recent": 3.5}
	attr := map[string]float64{"itl_batch": 0.30, "itl_context": 0, "itl_prefill": 0.01, "itl_unexplained": 0.69, "itl_symptom": 0.1}
	out := rs.Walk(rules.Facts{Now: now, Base: base, Z: z, Attr: attr})
	if !out.Anomaly || len(out.Errors) > 0 {
		t.Fatalf("anomaly %v errors %v, want an anomaly", out.Anomaly, out.Errors)
	}
	for _, id := range []string{"outside_engine", "gpu_throttling"} {
		if r := causeRank(out, id); r < 1 || r > 2 {
			t.Errorf("%s ranked %d, want in the top two (causes %v)", id, r, out.Causes)
		}
	}
	wider := map[string]float64{}
	for k, v := range now {
		wider[k] = v
	}
	wider["kv_per_running"] = 0.0095
	out = rs.Walk(rules.Facts{Now: wider, Base: base, Z: z, Attr: attr})
	if r := causeRank(out, "gpu_throttling"); r != 0 {
		t.Errorf("context per request ×5: gpu_throttling ranked %d, want unranked (causes %v)", r, out.Causes)
	}
}
