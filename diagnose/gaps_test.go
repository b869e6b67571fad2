package diagnose

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/whyslow/whyslow/query/querytest"
	"github.com/whyslow/whyslow/rules"
	"github.com/whyslow/whyslow/rulesets"
	"github.com/whyslow/whyslow/verdict"
)

// Issue 22: a missing or never-implemented series is a data gap; no default
// value stands in for it. One test per failure class, each from its
// smallest reproduction.

func causeIDs(v *verdict.Verdict) []string {
	ids := make([]string, 0, len(v.Causes))
	for _, c := range v.Causes {
		ids = append(ids, c.ID)
	}
	return ids
}

// runEngine is run for a ruleset with shapes: the engine named, so a fake
// that answers no shape's detect query reads the first (newest) shape.
func runEngine(t *testing.T, rs *rules.Ruleset, now, base map[string]float64) *verdict.Verdict {
	t.Helper()
	m := newFake(t, rs, now, base, nil)
	v, err := Run(context.Background(), Options{Metrics: m, Ruleset: rs, Engine: rs.Engine, At: at, GPU: "H100"})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func without(m map[string]float64, keys ...string) map[string]float64 {
	out := with(m)
	for _, k := range keys {
		delete(out, k)
	}
	return out
}

// TestTRTLLMWithoutPrefixFamiliesIsAGap: a TensorRT-LLM server without its
// prefix-cache families (no cached-token counter, no hit-rate gauge) and
// without its error counter. The map must not manufacture a 0% hit rate, a
// prefill rate equal to every prompt token, or a 0% HTTP error ratio (each
// was `… or vector(0)`); the verdict lists the gaps and rules neither
// prefix_cache_regression nor prefill_contention out.
func TestTRTLLMWithoutPrefixFamiliesIsAGap(t *testing.T) {
	rs, err := rulesets.Default("trtllm")
	if err != nil {
		t.Fatal(err)
	}
	// The map, over real series: prompt tokens and requests, nothing else.
	m := querytest.New(t, `load 15s
  trtllm_prompt_tokens_total{model_name="m"} 0+3000x80
  trtllm_e2e_request_latency_seconds_count{model_name="m"} 0+3x80
  trtllm_e2e_request_latency_seconds_sum{model_name="m"} 0+6x80
`)
	for _, name := range []string{"prefix_hit_rate", "prefill_tps", "http_error_ratio"} {
		s := rs.Signal(name)
		if s == nil {
			t.Fatalf("trtllm maps no %s", name)
		}
		expr, err := s.Render(`model_name="m"`, "5m", nil)
		if err != nil {
			t.Fatal(err)
		}
		v, _, err := m.Query(context.Background(), expr, time.Unix(15*70, 0))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(v) != 0 {
			t.Errorf("%s reads %v without its family: a missing family must be a gap, not a value", name, v)
		}
	}
	// A sanity check that the same expression reads the family when it exists.
	m = querytest.New(t, `load 15s
  trtllm_prompt_tokens_total{model_name="m"} 0+3000x80
  trtllm_prompt_cached_tokens_total{model_name="m"} 0+1000x80
`)
	expr, _ := rs.Signal("prefix_hit_rate").Render(`model_name="m"`, "5m", nil)
	if v, _, err := m.Query(context.Background(), expr, time.Unix(15*70, 0)); err != nil || len(v) != 1 || v[0].Value < 0.3 || v[0].Value > 0.36 {
		t.Errorf("prefix_hit_rate with the cached-token counter = %v, %v; want 1/3", v, err)
	}

	// The verdict: TTFT up, the prefix and prefill signals absent.
	base := without(baseline(), "prefix_hit_rate", "prefill_tps", "prompt_len_p90", "prompt_len_p99", "prompt_len_p999", "preemption_rate")
	now := with(base, "ttft_mean", 1.2, "queue_mean", 0.4)
	v := runEngine(t, rs, now, base)
	if v.Status != verdict.StatusAnomaly {
		t.Fatalf("status %s", v.Status)
	}
	for _, id := range []string{"prefix_cache_regression", "prefill_contention"} {
		if ruledOut(v, id) {
			t.Errorf("%s ruled out without the series that would show it: %+v", id, v.RuledOut)
		}
	}
	if !hasGap(v, "prefix_hit_rate", "no series matched") {
		t.Errorf("no data gap for the prefix hit rate: %+v", v.DataGaps)
	}
}

// TestHTTPErrorsWithoutCounterAreAGap: 20% of requests fail with HTTP 5xx
// at the API server, the engine's finish reasons never say error (its
// success rate reads 100%) and the source has no HTTP status counter. The
// 100% is no evidence: request_errors is a gap line, not ruled out.
func TestHTTPErrorsWithoutCounterAreAGap(t *testing.T) {
	rs, err := rulesets.Default("vllm")
	if err != nil {
		t.Fatal(err)
	}
	base := baseline()
	now := with(base, "ttft_mean", 1.0, "queue_mean", 0.6)
	v := run(t, rs, now, base)
	if ruledOut(v, "request_errors") {
		t.Errorf("request_errors ruled out by a success rate that cannot count failures: %+v", v.RuledOut)
	}
	if !hasGap(v, "request_failures", "no series counts failed requests") {
		t.Errorf("no data gap for the missing failure counter: %+v", v.DataGaps)
	}
	// With the HTTP status counter the 20% shows, and it is the cause.
	v = run(t, rs, with(now, "http_error_ratio", 0.2), with(base, "http_error_ratio", 0.0))
	if len(v.Causes) == 0 || v.Causes[0].ID != "request_errors" {
		t.Errorf("20%% HTTP 5xx with the counter: causes %v, want request_errors first", causeIDs(v))
	}
	if hasGap(v, "request_failures", "") {
		t.Errorf("a failure-counter gap while the HTTP counter exists: %+v", v.DataGaps)
	}
}

// TestNoPhaseHistogramsIsAGap: neither queue nor prefill time exported; TTFT
// rose with the decode batch. The TTFT split is not measured (a gap line),
// which is not an unexplained slowdown: `unexplained` does not come first.
func TestNoPhaseHistogramsIsAGap(t *testing.T) {
	rs, err := rulesets.Default("vllm")
	if err != nil {
		t.Fatal(err)
	}
	base := without(baseline(), "queue_mean", "prefill_mean", "decode_mean")
	now := with(base, "ttft_mean", 1.5, "tpot_mean", 0.035, "running", 34.0, "running_peak", 26.0,
		"arrival_rate", 5.1, "started_rate", 5.1, "request_rate", 5.1, "waiting", 6.0)
	v := run(t, rs, now, base)
	if v.Status != verdict.StatusAnomaly {
		t.Fatalf("status %s", v.Status)
	}
	if len(v.Causes) == 0 || v.Causes[0].ID == "unexplained" {
		t.Errorf("causes %v: unexplained ranked first while the split is only unmeasured", causeIDs(v))
	}
	if !hasGap(v, "ttft_split", "the TTFT split is not measured") {
		t.Errorf("no gap line for the unmeasured TTFT split: %+v", v.DataGaps)
	}
	if a := v.Attribution; a == nil || a.TTFT == nil || !a.TTFT.Unmeasured || a.TTFT.UnexplainedShare != 0 {
		t.Errorf("TTFT split %+v: want unmeasured, nothing unexplained", v.Attribution)
	}
}

// TestTRTLLMMeanPromptPastBudget: TensorRT-LLM exports the mean prompt only
// (no p90) and its own budget gauge. A mean past the budget names
// chunked_prefill_mismatch, and nothing renders "NaN" for the missing p90.
func TestTRTLLMMeanPromptPastBudget(t *testing.T) {
	rs, err := rulesets.Default("trtllm")
	if err != nil {
		t.Fatal(err)
	}
	base := without(baseline(), "prompt_len_p90", "prompt_len_p99", "prompt_len_p999", "preemption_rate", "prefix_hit_rate")
	base = with(base, "engine_token_budget", 8192.0, "engine_max_seqs", 2048.0, "prompt_len_mean", 3000.0)
	now := with(base, "prompt_len_mean", 12000.0, "ttft_mean", 1.4, "queue_mean", 0.9, "prefill_mean", 0.45, "tpot_mean", 0.026,
		"prefill_tps", 8000.0, "prompt_tps", 12000.0)
	v := runEngine(t, rs, now, base)
	if v.Status != verdict.StatusAnomaly {
		t.Fatalf("status %s", v.Status)
	}
	if len(v.Causes) == 0 || v.Causes[0].ID != "chunked_prefill_mismatch" {
		t.Errorf("causes %v, want chunked_prefill_mismatch first (mean 12000 tokens past the 8192 budget)", causeIDs(v))
	}
	if ruledOut(v, "chunked_prefill_mismatch") {
		t.Errorf("chunked_prefill_mismatch ruled out: %+v", v.RuledOut)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "NaN") {
		t.Errorf("the verdict prints NaN: %s", b)
	}
	if !strings.Contains(string(b), "prompt p90 n/a tokens") {
		t.Errorf("the scheduler step does not say n/a for the missing p90: %s", b)
	}
}
