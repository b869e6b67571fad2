package rules_test

import (
	"strings"
	"testing"

	. "github.com/whyslow/whyslow/rules"
	"github.com/whyslow/whyslow/rulesets"
)

// TestFixRender is finding 6 of issue 25: a fix said "raise
// --max-num-batched-tokens to at least the p90 prompt length (e.g. 8192 or
// 16384)" beside "p90 prompt 32769 tokens, budget 8192". The shipped fix
// is computed from the evidence; a missing number or a budget that already
// holds the prompts leaves the plain text.
func TestFixRender(t *testing.T) {
	rs, err := rulesets.Default("vllm")
	if err != nil {
		t.Fatal(err)
	}
	var fix *Fix
	for _, c := range rs.Causes {
		if c.ID != "chunked_prefill_mismatch" {
			continue
		}
		for i := range c.FixesFor("vllm") {
			if c.FixesFor("vllm")[i].Computed != "" {
				fix = &c.FixesFor("vllm")[i]
			}
		}
	}
	if fix == nil {
		t.Fatal("chunked_prefill_mismatch has no computed fix")
	}
	data := func(budget, p90 any) *EvidenceData {
		now, sched := map[string]any{}, map[string]any{}
		if p90 != nil {
			now["prompt_len_p90"] = p90
		}
		if budget != nil {
			sched["max_num_batched_tokens"] = budget
		}
		return &EvidenceData{Now: now, Base: map[string]any{}, Scheduler: sched}
	}
	for _, tc := range []struct {
		name       string
		budget, p9 any
		want       string
	}{
		{"past a power of two", 8192.0, 32769.0, "Raise --max-num-batched-tokens from 8192 to 65536 (p90 prompt 32769 tokens"},
		{"below one", 8192.0, 20000.0, "Raise --max-num-batched-tokens from 8192 to 32768 (p90 prompt 20000 tokens"},
		{"exactly one", 2048.0, 8192.0, "Raise --max-num-batched-tokens from 2048 to 8192 (p90 prompt 8192 tokens"},
		{"budget holds it", 16384.0, 9000.0, fix.Text},
		{"no p90", 8192.0, nil, fix.Text},
		{"no budget", nil, 20000.0, fix.Text},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := fix.Render(data(tc.budget, tc.p9))
			if !strings.HasPrefix(got, tc.want) {
				t.Errorf("Render = %q, want it to start with %q", got, tc.want)
			}
		})
	}
}

func TestPow2Up(t *testing.T) {
	for in, want := range map[float64]float64{1: 1, 3: 4, 8192: 8192, 8193: 16384, 32769: 65536, 0.5: 0.5} {
		if got := Pow2Up(in); got != want {
			t.Errorf("Pow2Up(%v) = %v, want %v", in, got, want)
		}
	}
	if got := FormatTokens(Pow2Up(nil)); got != "n/a" {
		t.Errorf("Pow2Up(missing) renders %q", got)
	}
}

// TestFixRenderLower: prefill_contention's "lower the budget" fix says
// the budget it lowers, and does not advise lowering one already at or
// under 4096 by number (the issue-25 complaint, the other way round).
func TestFixRenderLower(t *testing.T) {
	for _, engine := range []string{"vllm", "sglang"} {
		rs, err := rulesets.Default(engine)
		if err != nil {
			t.Fatal(err)
		}
		var fix *Fix
		for _, c := range rs.Causes {
			if c.ID != "prefill_contention" {
				continue
			}
			for i, f := range c.FixesFor(engine) {
				if f.Computed != "" {
					fix = &c.FixesFor(engine)[i]
				}
			}
		}
		if fix == nil {
			t.Fatalf("%s: prefill_contention has no computed fix", engine)
		}
		data := func(budget any) *EvidenceData {
			sched := map[string]any{}
			if budget != nil {
				sched["max_num_batched_tokens"] = budget
			}
			return &EvidenceData{Now: map[string]any{}, Base: map[string]any{}, Scheduler: sched}
		}
		for _, tc := range []struct {
			budget   any
			want     string
			dontWant string
		}{
			{16384.0, "from 16384 to 4096", ""},
			{2048.0, "is already 2048", "to 4096"},
			{4096.0, "is already 4096", "to 4096"},
			{nil, fix.Text, ""},
		} {
			got := fix.Render(data(tc.budget))
			if !strings.Contains(got, tc.want) || (tc.dontWant != "" && strings.Contains(got, tc.dontWant)) {
				t.Errorf("%s budget %v: Render = %q, want %q without %q", engine, tc.budget, got, tc.want, tc.dontWant)
			}
		}
	}
}
