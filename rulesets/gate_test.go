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
