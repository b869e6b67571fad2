package rulesets

import (
	"slices"
	"strings"
	"testing"

	"github.com/whyslow/whyslow/rules"
)

// TestTRTLLMShapes: each shipped form of TensorRT-LLM's metrics reads only
// the families it has, under its own names, and the signals it lacks are
// gaps of that shape.
func TestTRTLLMShapes(t *testing.T) {
	rs, err := Default("trtllm")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, sh := range rs.Shapes {
		names = append(names, sh.Shape().Name)
	}
	if !slices.Equal(names, []string{"current", "dynamo", "unprefixed"}) {
		t.Fatalf("shapes %v, want current, dynamo, unprefixed", names)
	}
	current, dynamo, unprefixed := rs.Shapes[0], rs.Shapes[1], rs.Shapes[2]
	if len(current.Signals) != len(rs.Signals) || len(current.Unmapped) != len(rs.Unmapped) {
		t.Errorf("current shape maps %d signals (%d unmapped), want the map's %d (%d)",
			len(current.Signals), len(current.Unmapped), len(rs.Signals), len(rs.Unmapped))
	}
	// The five per-request families give the latency split, the request
	// rate, success and abort ratios and the coverage signals; nothing
	// that needs the iteration gauges or the token counters.
	want := []string{"samples", "requests", "targets", "ttft_p95", "ttft_mean", "tpot_p95", "tpot_mean", "e2e_p95",
		"e2e_mean", "queue_mean", "request_rate", "success_rate", "abort_ratio", "started_rate", "dram_bw", "sm_clock"}
	lacks := []string{"running", "waiting", "kv_usage", "arrival_rate", "prompt_len_mean", "http_error_ratio", "prefill_mean"}
	for _, v := range []struct {
		shape        string
		mapped       func(string) bool
		prefix, miss string
	}{
		{"dynamo", func(n string) bool { return dynamo.Signal(n) != nil }, "trtllm_", ""},
		{"unprefixed", func(n string) bool { return unprefixed.Signal(n) != nil }, "", "trtllm_"},
	} {
		for _, n := range want {
			if !v.mapped(n) {
				t.Errorf("%s: signal %s not mapped", v.shape, n)
			}
		}
		for _, n := range lacks {
			if v.mapped(n) {
				t.Errorf("%s: signal %s mapped, but the shape has no series for it", v.shape, n)
			}
		}
	}
	for _, s := range unprefixed.Signals {
		if s.FrontendOf != "" {
			continue // the frontend's own series, not the engine's
		}
		q, err := s.Render(`model_name="m"`, "5m", nil)
		if err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		if strings.Contains(q, "trtllm_") || strings.Contains(q, "num_requests_running") {
			t.Errorf("unprefixed %s reads a family the shape lacks: %s", s.Name, q)
		}
		if !strings.Contains(q, `engine_type!=""`) {
			t.Errorf("unprefixed %s: selectors lack engine_type!=\"\": %s", s.Name, q)
		}
	}
	q, _ := unprefixed.Signal("samples").Render(`model_name="m"`, "5m", nil)
	if !strings.Contains(q, `e2e_request_latency_seconds_count{engine_type!="",model_name="m"}`) &&
		!strings.Contains(q, `e2e_request_latency_seconds_count{model_name="m",engine_type!=""}`) {
		t.Errorf("unprefixed samples: %s", q)
	}
}

// TestSchedulerFromEngineGauges: the limits trtllm-serve reports it runs
// with replace the defaults for the GPU, and say so; an incident's own
// settings still win.
func TestSchedulerFromEngineGauges(t *testing.T) {
	rs, err := Default("trtllm")
	if err != nil {
		t.Fatal(err)
	}
	f := rules.Facts{Engine: "trtllm", GPU: rules.GPU{Class: "H100", MemoryGiB: 80},
		Now: map[string]float64{"engine_token_budget": 16384, "engine_max_seqs": 512}}
	s := rs.ResolveScheduler(f)
	if s.MaxNumBatchedTokens != 16384 || s.MaxNumSeqs != 512 || s.Source != "engine" || s.KVAdmission != "reserve" || s.ChunkedPrefill {
		t.Errorf("scheduler %+v, want 16384 tokens, 512 requests from the engine, reserve admission, no chunking", s)
	}
	f.Now = nil
	if s := rs.ResolveScheduler(f); s.Source != "default" || s.MaxNumBatchedTokens != 8192 {
		t.Errorf("without gauges: %+v, want the default 8192", s)
	}
	f.Now = map[string]float64{"engine_token_budget": 16384}
	f.Scheduler = rules.Scheduler{Known: true, MaxNumBatchedTokens: 4096}
	if s := rs.ResolveScheduler(f); s.MaxNumBatchedTokens != 4096 || s.Source != "incident" {
		t.Errorf("incident settings: %+v, want 4096 from the incident", s)
	}
}
