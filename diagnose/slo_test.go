package diagnose

import (
	"context"
	"strings"
	"testing"

	"github.com/whyslow/whyslow/rules"
	"github.com/whyslow/whyslow/rulesets"
	"github.com/whyslow/whyslow/verdict"
)

func TestParseSLO(t *testing.T) {
	for _, c := range []struct {
		in     string
		signal string
		op     string
		bound  float64
	}{
		{"ttft_p95 > 2s", "ttft_p95", ">", 2},
		{"tpot_p95>150ms", "tpot_p95", ">", 0.15},
		{" success_rate < 99% ", "success_rate", "<", 0.99},
		{"kv_usage > 0.95", "kv_usage", ">", 0.95},
	} {
		got, err := ParseSLO(c.in)
		if err != nil {
			t.Errorf("ParseSLO(%q): %v", c.in, err)
			continue
		}
		if got.Signal != c.signal || got.Op != c.op || got.Bound != c.bound {
			t.Errorf("ParseSLO(%q) = %+v", c.in, got)
		}
	}
	for _, bad := range []string{"", "ttft_p95", "ttft_p95 >= 2s", "ttft_p95 > two", "TTFT > 1s", "ttft_p95 > 2x"} {
		if _, err := ParseSLO(bad); err == nil {
			t.Errorf("ParseSLO(%q) accepted", bad)
		}
	}
}

// TestSLOBreachIsAnAnomaly: a window no worse than its baseline (a slowdown
// that crept in long ago) is healthy against the baseline, and an anomaly
// once the user's bound says TTFT p95 must stay under 300 ms; the verdict
// names the breach, ranks causes and takes the phase from the bound.
func TestSLOBreachIsAnAnomaly(t *testing.T) {
	rs, err := rulesets.Default("vllm")
	if err != nil {
		t.Fatal(err)
	}
	base := baseline()
	run := func(slos ...string) (*verdict.Verdict, error) {
		var ss []verdict.SLO
		for _, s := range slos {
			slo, err := ParseSLO(s)
			if err != nil {
				t.Fatal(err)
			}
			ss = append(ss, slo)
		}
		return Run(context.Background(), Options{Metrics: newFake(t, rs, base, base, nil), Rulesets: []*rules.Ruleset{rs},
			At: at, GPU: "H100", SLOs: ss})
	}
	v, err := run()
	if err != nil || v.Status != verdict.StatusHealthy {
		t.Fatalf("without an SLO: %v, %v", v.Status, err)
	}
	v, err = run("ttft_p95 > 300ms", "tpot_p95 > 1s")
	if err != nil {
		t.Fatal(err)
	}
	if v.Status != verdict.StatusAnomaly || v.Phase != verdict.PhasePrefill {
		t.Errorf("status %s phase %s, want anomaly in prefill", v.Status, v.Phase)
	}
	if len(v.SLOBreaches) != 1 || v.SLOBreaches[0].Signal != "ttft_p95" || v.SLOBreaches[0].Value != 0.4 {
		t.Errorf("breaches %+v, want ttft_p95 at 0.4", v.SLOBreaches)
	}
	if _, err := run("no_such_signal > 1s"); err == nil || !strings.Contains(err.Error(), "unknown signal") {
		t.Errorf("unknown signal: err = %v", err)
	}
}
