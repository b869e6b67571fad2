package reqsim

import (
	"context"
	"flag"
	"testing"
	"time"
)

var exploreFlag = flag.Bool("reqsim.explore", false, "log every scenario's truth")

func TestExplore(t *testing.T) {
	if !*exploreFlag {
		t.Skip("-reqsim.explore")
	}
	for _, sc := range scenarios {
		for _, eng := range []string{"vllm", "sglang", "trtllm"} {
			for seed := int64(1); seed <= 2; seed++ {
				t0 := time.Now()
				b, err := Record(context.Background(), Options{Scenario: sc.Name, Seed: seed, Engine: eng, GPUSeries: "whyslow"})
				if err != nil {
					t.Fatal(err)
				}
				tr := b.Truth
				t.Logf("%-15s %-6s s%d %4.0fms %5.1fMB ttft %.3f→%.3f (p95 %.3f→%.3f x%.2f) itl %.4f→%.4f (p95 %.4f→%.4f x%.2f) q %.3f→%.3f err %.3f n %d→%d %v",
					sc.Name, eng, seed, float64(time.Since(t0).Milliseconds()), float64(len(b.Metrics))/1e6,
					tr.Base.TTFT, tr.Inc.TTFT, tr.Base.TTFTP95, tr.Inc.TTFTP95, tr.Inc.TTFTP95/tr.Base.TTFTP95,
					tr.Base.ITL, tr.Inc.ITL, tr.Base.ITLP95, tr.Inc.ITLP95, tr.Inc.ITLP95/tr.Base.ITLP95,
					tr.Base.Queue, tr.Inc.Queue, tr.Inc.ErrorRate, tr.Base.Requests, tr.Inc.Requests, tr.Params["hardware"])
			}
		}
	}
}
