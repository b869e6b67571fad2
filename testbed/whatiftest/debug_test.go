package whatiftest

import (
	"context"
	"testing"

	"github.com/whyslow/whyslow/testbed/reqsim"
)

func TestDebugScale(t *testing.T) {
	for _, o := range []reqsim.Options{{Scenario: "clock_throttle", Seed: 0x28000 + 16, Engine: "vllm", Wide: true},
		{Scenario: "prefix_loss", Seed: 0x28000 + 19, Engine: "vllm", Wide: true}} {
		b, err := reqsim.Record(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		m, err := predictor(context.Background(), b)
		if err != nil {
			t.Fatal(err)
		}
		c := m.Config()
		t.Logf("%s truth inc TTFT p95 %.3f ITL p95 %.4f | observed %.3f %.4f | replayed %.3f %.4f scale %.2f %.2f | truth TTFT mean %.3f queue %.3f prefill %.3f outside %.3f",
			o.Scenario, b.Truth.Inc.TTFTP95, b.Truth.Inc.ITLP95, m.Observed.TTFTP95, m.Observed.ITLP95, m.Replayed.TTFTP95, m.Replayed.ITLP95, m.ScaleTTFT, m.ScaleITL,
			b.Truth.Inc.TTFT, b.Truth.Inc.Queue, b.Truth.Inc.Prefill, b.Truth.Inc.Outside)
		t.Logf("params %v", b.Truth.Params)
		t.Logf("fit %s; cfg budget %d kv %d hit %.2f clock %.2f prompt %.0f tail %v body %.2f out %.0f outside %.3f", m.Fit, c.Budget, c.KVTokens, c.Hit, c.Clock, c.PromptMean, c.PromptTail, c.PromptBody, c.OutputMean, c.Outside)
		t.Logf("buckets %v", m.In.Buckets)
	}
}
