package diagnose

import (
	"strings"
	"testing"

	"github.com/whyslow/whyslow/rulesets"
)

// TestDegradedBaseline is finding 4 of issue 25: a daemon installed during
// a slow-burning incident learnt the incident as its baseline (×1
// everywhere, KV 100%, 146 preemptions/s) and said nothing. The verdict
// flags it, first; a healthy baseline is not flagged, nor a missing signal.
func TestDegradedBaseline(t *testing.T) {
	rs, err := rulesets.Default("vllm")
	if err != nil {
		t.Fatal(err)
	}
	sick := with(baseline(), "kv_usage", 0.98, "kv_usage_peak", 1.0, "preemption_rate", 146.0, "waiting", 40.0,
		"queue_mean", 3.0, "ttft_mean", 4.0, "ttft_p95", 9.0)
	v := run(t, rs, sick, sick)
	db := v.DegradedBaseline
	if db == nil {
		t.Fatalf("a baseline with KV 100%% and 146 preemptions/s is not flagged (status %s)", v.Status)
	}
	for _, want := range []string{"KV cache peak 100.0%", "146 preemptions/s", "understate"} {
		if !strings.Contains(db.Message, want) {
			t.Errorf("message %q lacks %q", db.Message, want)
		}
	}
	if strings.Contains(db.Message, "queue growing") {
		t.Errorf("queue growth flagged without inflight_growth: %q", db.Message)
	}
	if healthy := run(t, rs, baseline(), baseline()); healthy.DegradedBaseline != nil {
		t.Errorf("a healthy baseline is flagged: %+v", healthy.DegradedBaseline)
	}
}
