package diagnose

import (
	"context"
	"testing"

	"github.com/whyslow/whyslow/rules"
	"github.com/whyslow/whyslow/rulesets"
)

// BenchmarkOverhead measures triage without query cost (a map-backed source).
func BenchmarkOverhead(b *testing.B) {
	rs, err := rulesets.Default("vllm")
	if err != nil {
		b.Fatal(err)
	}
	t := &testing.T{}
	base := baseline()
	m := newFake(t, rs, with(base, "ttft_mean", 2.0, "kv_usage_peak", 1.0, "preemption_rate", 0.5), base, nil)
	opts := Options{Metrics: m, Rulesets: []*rules.Ruleset{rs}, At: at, GPU: "H100", Concurrency: 1}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := Run(context.Background(), opts); err != nil {
			b.Fatal(err)
		}
	}
}
