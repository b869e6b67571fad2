package rulesets

import (
	"testing"
)

// TestShippedRulesets loads and validates every shipped ruleset file.
func TestShippedRulesets(t *testing.T) {
	entries, err := FS.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) < 2 {
		t.Fatalf("only %d embedded files", len(entries))
	}
	for _, e := range Engines {
		t.Run(e, func(t *testing.T) {
			rs, err := Default(e)
			if err != nil {
				t.Fatalf("ruleset %s:\n%v", e, err)
			}
			if rs.Engine != e {
				t.Errorf("engine = %q, want %q", rs.Engine, e)
			}
			if rs.Detect == nil {
				t.Error("no detect expression")
			}
			if len(rs.Steps) == 0 || len(rs.Signals) == 0 {
				t.Error("no steps or signals")
			}
		})
	}
}

// TestCatalogue checks the stable cause ids are all present.
func TestCatalogue(t *testing.T) {
	rs, err := Default("vllm")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"queue_saturation", "prefill_contention", "chunked_prefill_mismatch", "kv_cache_pressure",
		"memory_bandwidth_saturation", "gpu_throttling", "prefix_cache_regression", "request_errors", "load_imbalance", "outside_engine"} {
		if rs.Cause(id) == nil {
			t.Errorf("cause %q missing", id)
		}
	}
}
