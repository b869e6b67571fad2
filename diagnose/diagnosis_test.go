package diagnose

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/whyslow/whyslow/rules"
	"github.com/whyslow/whyslow/rulesets"
	"github.com/whyslow/whyslow/verdict"
)

func run(t *testing.T, rs *rules.Ruleset, now, base map[string]float64) *verdict.Verdict {
	t.Helper()
	m := newFake(t, rs, now, base, nil)
	v, err := Run(context.Background(), Options{Metrics: m, Ruleset: rs, At: at, GPU: "H100"})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func ruledOut(v *verdict.Verdict, id string) bool {
	for _, r := range v.RuledOut {
		if r.ID == id {
			return true
		}
	}
	return false
}

func hasGap(v *verdict.Verdict, signal, reason string) bool {
	for _, g := range v.DataGaps {
		if g.Signal == signal && strings.Contains(g.Reason, reason) {
			return true
		}
	}
	return false
}

// TestZeroGaugeIsAGap checks that a KV gauge the engine exposes but never
// sets (0 in both windows) is a data gap and rules nothing out, while a
// real low usage does rule the memory wall out.
func TestZeroGaugeIsAGap(t *testing.T) {
	rs, err := rulesets.Default("vllm")
	if err != nil {
		t.Fatal(err)
	}
	base := with(baseline(), "kv_usage", 0.0, "kv_usage_peak", 0.0, "kv_usage_avg", 0.0)
	now := with(base, "ttft_mean", 2.0, "queue_mean", 1.6, "waiting", 30.0)
	v := run(t, rs, now, base)
	if ruledOut(v, "kv_cache_pressure") {
		t.Errorf("a stuck-at-zero KV gauge ruled kv_cache_pressure out: %+v", v.RuledOut)
	}
	if !hasGap(v, "kv_usage_peak", "reads 0 in both windows") {
		t.Errorf("no data gap for the zero gauge: %+v", v.DataGaps)
	}
	v = run(t, rs, with(now, "kv_usage", 0.3, "kv_usage_peak", 0.4), with(base, "kv_usage", 0.3, "kv_usage_peak", 0.35))
	if !ruledOut(v, "kv_cache_pressure") {
		t.Errorf("real KV room did not rule the memory wall out: %+v", v.RuledOut)
	}
}

// TestMissingSeriesRulesNothingOut checks that a verdict on an engine
// without error series does not rule request errors out.
func TestMissingSeriesRulesNothingOut(t *testing.T) {
	rs, err := rulesets.Default("vllm")
	if err != nil {
		t.Fatal(err)
	}
	base := baseline()
	delete(base, "success_rate")
	now := with(base, "ttft_mean", 2.0, "queue_mean", 1.6)
	if v := run(t, rs, now, base); ruledOut(v, "request_errors") {
		t.Errorf("request_errors ruled out without a success series: %+v", v.RuledOut)
	}
	// A success rate counts failures only where a failure series exists
	// (an engine error finish reason, or the HTTP status counter).
	if v := run(t, rs, with(now, "success_rate", 1.0, "error_finish_rate", 0.0), with(base, "success_rate", 1.0, "error_finish_rate", 0.0)); !ruledOut(v, "request_errors") {
		t.Errorf("a present success series of 100%% did not rule request_errors out: %+v", v.RuledOut)
	}
}

// TestPartialBaseline checks that a baseline window the data only partly
// covers is a data gap and lowers the confidences without changing the
// ranking.
func TestPartialBaseline(t *testing.T) {
	rs, err := rulesets.Default("vllm")
	if err != nil {
		t.Fatal(err)
	}
	base := baseline()
	now := with(base, "ttft_mean", 2.0, "ttft_mean_recent", 2.1, "queue_mean", 1.7, "waiting", 40.0, "arrival_rate", 5.0, "started_rate", 5.0,
		"request_rate", 3.2, "running", 40.0, "kv_usage_peak", 0.7)
	base = with(base, "arrival_rate", 3.0, "started_rate", 3.0)
	full := run(t, rs, now, base)
	part := run(t, rs, now, with(base, "samples", 6.0))
	if len(full.Causes) == 0 || len(part.Causes) == 0 || full.Causes[0].ID != part.Causes[0].ID {
		t.Fatalf("ranking changed: %v vs %v", full.Causes, part.Causes)
	}
	if part.Causes[0].Confidence >= full.Causes[0].Confidence {
		t.Errorf("confidence %v with a 30%%-covered baseline, %v with a full one", part.Causes[0].Confidence, full.Causes[0].Confidence)
	}
	if !hasGap(part, "samples", "only 30% covered") {
		t.Errorf("no coverage gap: %+v", part.DataGaps)
	}
}

// TestFixesDoNotContradict checks that a verdict never advises turning a
// setting both ways: the lower-ranked cause's fix is left out, with why.
func TestFixesDoNotContradict(t *testing.T) {
	rs, err := rulesets.Default("vllm")
	if err != nil {
		t.Fatal(err)
	}
	// Prompts past the budget (raise it) and more prefill per request
	// crowding decodes (lower it) at once.
	base := with(baseline(), "prompt_len_p90", 4000.0, "started_rate", 3.0, "prefill_tps", 2000.0)
	now := with(base, "ttft_mean", 3.0, "ttft_mean_recent", 3.0, "queue_mean", 1.2, "prefill_mean", 1.6, "tpot_mean", 0.05,
		"prompt_len_p90", 9000.0, "prompt_len_mean", 2400.0, "prefill_tps", 5200.0, "prompt_len_started", 2400.0)
	v := run(t, rs, now, base)
	seen := map[string]bool{}
	for _, c := range v.Causes {
		for _, r := range c.Remediation {
			low := strings.ToLower(r)
			if strings.Contains(low, "max-num-batched-tokens") {
				dir := "up"
				if strings.HasPrefix(low, "lower") {
					dir = "down"
				}
				seen[dir] = true
			}
		}
	}
	if seen["up"] && seen["down"] {
		t.Errorf("the verdict says both raise and lower --max-num-batched-tokens: %+v", v.Causes)
	}
	omitted := false
	for _, c := range v.Causes {
		omitted = omitted || len(c.Omitted) > 0
	}
	if len(v.Causes) >= 2 && !omitted {
		t.Errorf("no remediation_omitted with both causes ranked: %+v", v.Causes)
	}
}

// TestAttributionAddsUp checks the TTFT split: the parts and the
// unexplained remainder add up to the change, and the inter-token split
// names the clock when only the clock moved.
func TestAttributionAddsUp(t *testing.T) {
	base := map[string]float64{"ttft_mean": 0.2, "queue_mean": 0.02, "prefill_mean": 0.15, "tpot_mean": 0.02, "running": 30,
		"kv_usage_avg": 0.2, "prefill_tps": 3000, "sm_clock": 1980, "targets": 1}
	now := map[string]float64{"ttft_mean": 3.0, "queue_mean": 2.62, "prefill_mean": 0.35, "tpot_mean": 0.027, "running": 30,
		"kv_usage_avg": 0.2, "prefill_tps": 3000, "sm_clock": 1200, "targets": 1}
	a := Attribute(now, base, "H100", "Llama-3.1-8B-Instruct")
	if a == nil || a.TTFT == nil || a.ITL == nil {
		t.Fatalf("attribution %+v", a)
	}
	sum := a.TTFT.Unexplained
	for _, p := range a.TTFT.Parts {
		sum += p.Seconds
	}
	if math.Abs(sum-a.TTFT.Delta) > 1e-9 || math.Abs(a.TTFT.Delta-2.8) > 1e-9 {
		t.Errorf("TTFT parts add to %v, delta %v", sum, a.TTFT.Delta)
	}
	for _, p := range a.TTFT.Parts {
		if p.Component == verdict.CompQueue && math.Abs(p.Share-2.6/2.8) > 1e-9 {
			t.Errorf("queue share %v", p.Share)
		}
	}
	var clock float64
	for _, p := range a.ITL.Parts {
		if p.Component == verdict.CompClock {
			clock = p.Share
		} else if math.Abs(p.Share) > 0.01 {
			t.Errorf("part %s moved without its driver: %+v", p.Component, p)
		}
	}
	if clock < 0.75 || math.Abs(a.ITL.UnexplainedShare) > 0.25 {
		t.Errorf("clock share %v, unexplained %v: %+v", clock, a.ITL.UnexplainedShare, a.ITL)
	}
	m := AttrMap(a)
	if m[rules.AttrTTFTQueue] < 0.9 || m[rules.AttrITLClock] != clock {
		t.Errorf("attr map %v", m)
	}
	if Attribute(base, base, "H100", "") != nil {
		t.Error("an attribution without a slowdown")
	}
}

// TestUnmappedSignalsAreOneGap checks that the signals an engine does not
// export are one data gap line, not one per signal.
func TestUnmappedSignalsAreOneGap(t *testing.T) {
	rs, err := rulesets.Default("sglang")
	if err != nil {
		t.Fatal(err)
	}
	v := run(t, rs, with(baseline(), "ttft_mean", 2.0), baseline())
	n := 0
	for _, g := range v.DataGaps {
		if strings.Contains(g.Reason, "does not export") {
			n++
			if len(g.Signals) < 3 || !strings.Contains(g.Reason, "prefill_mean") {
				t.Errorf("not-exported gap %+v", g)
			}
		}
	}
	if n != 1 {
		t.Errorf("%d not-exported gaps, want 1: %+v", n, v.DataGaps)
	}
}

// TestGroupGapsCollapse checks that the missing GPU counters are one gap
// per window and reason, and one gap when both windows miss them alike.
func TestGroupGapsCollapse(t *testing.T) {
	rs, err := rulesets.Default("vllm")
	if err != nil {
		t.Fatal(err)
	}
	const missing = "no series"
	in := []verdict.DataGap{
		{Signal: "dram_bw", Window: "incident", Reason: missing},
		{Signal: "queue_wait_mean", Window: "incident", Reason: missing},
		{Signal: "sm_active", Window: "incident", Reason: missing},
		{Signal: "dram_bw", Window: "baseline", Reason: missing},
		{Signal: "sm_active", Window: "baseline", Reason: missing},
		{Signal: "gpu_temp", Window: "baseline", Reason: "stale"},
		{Signal: "queue_wait_mean", Window: "baseline", Reason: missing},
	}
	got := collapseGaps(rs, in)
	want := []verdict.DataGap{
		{Signal: "gpu_counters", Reason: missing + " (2 series: dram_bw, sm_active)", Signals: []string{"dram_bw", "sm_active"}},
		{Signal: "queue_wait_mean", Reason: missing},
		{Signal: "gpu_counters", Window: "baseline", Reason: "stale", Signals: []string{"gpu_temp"}},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].Signal != want[i].Signal || got[i].Window != want[i].Window || got[i].Reason != want[i].Reason || strings.Join(got[i].Signals, ",") != strings.Join(want[i].Signals, ",") {
			t.Errorf("gap %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

// TestUnknownTokenBudget checks that a scheduler without settings or a
// GPU class says "token budget unknown", not "0 (unknown)".
func TestUnknownTokenBudget(t *testing.T) {
	rs, err := rulesets.Default("vllm")
	if err != nil {
		t.Fatal(err)
	}
	base := baseline()
	m := newFake(t, rs, with(base, "ttft_mean", 2.0, "queue_mean", 1.6), base, nil)
	v, err := Run(context.Background(), Options{Metrics: m, Ruleset: rs, At: at})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, st := range v.Steps {
		if strings.Contains(st.Outcome, "token budget") {
			found = true
			if !strings.Contains(st.Outcome, "token budget unknown") || strings.Contains(st.Outcome, "(unknown)") {
				t.Errorf("step %s: %s", st.Name, st.Outcome)
			}
		}
	}
	if !found {
		t.Errorf("no step mentions the token budget: %+v", v.Steps)
	}
}
