package whatiftest

import (
	"context"
	"testing"

	"github.com/whyslow/whyslow/testbed/reqsim"
)

func TestDebugKV(t *testing.T) {
	for _, o := range []reqsim.Options{{Scenario: "clock_throttle", Seed: 0x28000 + 16, Engine: "vllm", Wide: true}} {
		b, err := reqsim.Record(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		m, err := predictor(context.Background(), b)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("params %v", b.Truth.Params)
		t.Logf("cfg %+v", m.Config())
		t.Logf("inc %v", m.In.Inc)
	}
}
