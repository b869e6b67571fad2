package rulesets

import (
	"slices"
	"strings"
	"testing"

	"github.com/whyslow/whyslow/diagnose"
	"github.com/whyslow/whyslow/rules"
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
			if len(rs.UnknownChainLinks) > 0 {
				t.Errorf("chains quote undeclared signals: %q", rs.UnknownChainLinks)
			}
			// The shipped rulebook passes its own default check: no default
			// stands in for a missing series (issue 22).
			if errs := rs.CheckDefaults(); len(errs) > 0 {
				t.Errorf("rules check refuses the shipped rulebook:\n%v", errs)
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

// TestAllEngines checks All returns one validated ruleset per engine, in
// Engines order, each with the same core signal names the steps share.
func TestAllEngines(t *testing.T) {
	rss, err := All()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"vllm", "sglang", "trtllm", "tgi"}
	// TGI exports no KV-cache or prefix-cache series: stated gaps.
	lacks := map[string][]string{"tgi": {"kv_usage", "kv_usage_peak", "prefix_hit_rate", "prefill_tps"}}
	if len(rss) != len(want) {
		t.Fatalf("All returned %d rulesets, want %d", len(rss), len(want))
	}
	for i, rs := range rss {
		if rs.Engine != want[i] {
			t.Errorf("ruleset %d engine %q, want %q", i, rs.Engine, want[i])
		}
		for _, s := range []string{"samples", "requests", "ttft_mean", "tpot_mean", "e2e_mean", "queue_mean",
			"request_rate", "abort_ratio", "kv_usage", "kv_usage_peak", "waiting", "running", "prefix_hit_rate",
			"prefill_tps", "gen_len_mean", "dram_bw", "sm_clock", "throttled"} {
			if rs.Signal(s) == nil && !slices.Contains(lacks[rs.Engine], s) {
				t.Errorf("%s: signal %q missing", rs.Engine, s)
			}
		}
		// A failure signal of its own: an engine reason, or the HTTP status.
		if rs.Signal("success_rate") == nil && rs.Signal("http_error_ratio") == nil {
			t.Errorf("%s: no signal for server-side failures", rs.Engine)
		}
		if len(rs.SchedulerDefaults) == 0 {
			t.Errorf("%s: no scheduler defaults", rs.Engine)
		}
		for _, id := range []string{"kv_cache_pressure", "prefill_contention", "queue_saturation"} {
			if c := rs.Cause(id); c == nil || len(c.FixesFor(rs.Engine)) == 0 {
				t.Errorf("%s: cause %q missing or without remediation", rs.Engine, id)
			}
		}
	}
}

// TestOneRulebook checks that every engine reads the same rules: the steps,
// rules and verdict come from rulebook.yaml only, and an engine's file holds
// nothing but its signal map and scheduler defaults.
func TestOneRulebook(t *testing.T) {
	rss, err := All()
	if err != nil {
		t.Fatal(err)
	}
	ref := rss[0]
	for _, rs := range rss {
		if len(rs.Steps) != len(ref.Steps) {
			t.Fatalf("%s: %d steps, %s has %d", rs.Engine, len(rs.Steps), ref.Engine, len(ref.Steps))
		}
		for i, st := range rs.Steps {
			if st.Pos.File != RulebookFile {
				t.Errorf("%s: step %q comes from %s, not the rulebook", rs.Engine, st.Name, st.Pos.File)
			}
			if len(st.Rules) != len(ref.Steps[i].Rules) {
				t.Errorf("%s: step %q has %d rules, %s has %d", rs.Engine, st.Name, len(st.Rules), ref.Engine, len(ref.Steps[i].Rules))
				continue
			}
			for j, r := range st.Rules {
				if o := ref.Steps[i].Rules[j]; r.Name != o.Name || r.When != o.When || r.Grade != o.Grade {
					t.Errorf("%s: rule %s differs from %s's", rs.Engine, r.Name, ref.Engine)
				}
			}
		}
		if rs.Verdict.Anomaly.Source != ref.Verdict.Anomaly.Source || rs.Verdict.Anomaly.Pos.File != RulebookFile {
			t.Errorf("%s: the verdict is not the rulebook's", rs.Engine)
		}
		for _, s := range rs.Signals {
			// The router in front of every engine (Dynamo's frontend) is
			// read in its own names, written once in the rulebook.
			if s.FrontendOf != "" && s.Pos.File == RulebookFile && s.DeclPos.File == RulebookFile {
				continue
			}
			if (s.Pos.File != rs.Engine+".yaml" && s.Pos.File != SharedFile) || s.DeclPos.File != RulebookFile {
				t.Errorf("%s: signal %s mapped at %s, declared at %s", rs.Engine, s.Name, s.Pos, s.DeclPos)
			}
		}
	}
	for _, e := range Engines {
		b, _ := FS.ReadFile(e + ".yaml")
		for _, key := range []string{"\nsteps:", "\nverdict:", "\ncauses:"} {
			if strings.Contains(string(b), key) {
				t.Errorf("%s.yaml has a %q block: engine files map signals only", e, strings.TrimSpace(key))
			}
		}
	}
}

// TestSchedulerDefaults checks the engine defaults of docs/engines.md §2.10, §3.5 and §4.4 per GPU.
func TestSchedulerDefaults(t *testing.T) {
	for _, tc := range []struct {
		engine, gpu string
		chunked     bool
		budget      int
	}{
		{"sglang", "H100", true, 8192},
		{"sglang", "H200", true, 8192},
		{"sglang", "B200", true, 16384},
		{"sglang", "L40S", true, 4096},
		{"sglang", "L4", true, 2048},
		{"sglang", "", true, 4096},
		{"trtllm", "H100", false, 8192},
		{"trtllm", "", false, 8192},
	} {
		t.Run(tc.engine+"/"+tc.gpu, func(t *testing.T) {
			rs, err := Default(tc.engine)
			if err != nil {
				t.Fatal(err)
			}
			mem := diagnose.GPUMemoryGiB(tc.gpu)
			s := rs.ResolveScheduler(rules.Facts{Engine: tc.engine, GPU: rules.GPU{Class: tc.gpu, MemoryGiB: mem}})
			if !s.Known || s.Source != "default" {
				t.Fatalf("no default applies: %+v", s)
			}
			if s.ChunkedPrefill != tc.chunked || s.MaxNumBatchedTokens != tc.budget {
				t.Errorf("got chunked=%v budget=%d, want chunked=%v budget=%d", s.ChunkedPrefill, s.MaxNumBatchedTokens,
					tc.chunked, tc.budget)
			}
		})
	}
}
