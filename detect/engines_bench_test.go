package detect

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/whyslow/whyslow/query/querytest"
)

// vllmLoad is 70 minutes of a vLLM V1 server's detector series (TTFT and
// ITL histograms, the waiting queue, finished requests by reason, the API
// server's status counter) for scopes models, scraped every 5 s.
func vllmLoad(scopes int) string {
	var b strings.Builder
	b.WriteString("load 5s\n")
	const samples = 840
	for s := 0; s < scopes; s++ {
		model := fmt.Sprintf("m%d", s)
		target := fmt.Sprintf(`model_name=%q,pod="p%d",instance="10.0.0.%d:8000"`, model, s, s)
		for _, fam := range []string{"vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds"} {
			for i, le := range []string{"0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "+Inf"} {
				fmt.Fprintf(&b, "  %s_bucket{%s,le=%q} 0+%dx%d\n", fam, target, le, 2*i+1, samples)
			}
			fmt.Fprintf(&b, "  %s_sum{%s} 0+3x%d\n", fam, target, samples)
			fmt.Fprintf(&b, "  %s_count{%s} 0+19x%d\n", fam, target, samples)
		}
		fmt.Fprintf(&b, "  vllm:num_requests_waiting{%s} 0+0x%d\n", target, samples)
		fmt.Fprintf(&b, "  vllm:num_requests_running{%s} 4+0x%d\n", target, samples)
		for _, reason := range []string{"stop", "length", "abort", "error"} {
			fmt.Fprintf(&b, "  vllm:request_success_total{%s,finished_reason=%q} 0+2x%d\n", target, reason, samples)
		}
		fmt.Fprintf(&b, "  http_requests_total{pod=\"p%d\",instance=\"10.0.0.%d:8000\",status=\"2xx\"} 0+8x%d\n", s, s, samples)
	}
	return b.String()
}

// BenchmarkDetectorTick is one evaluation of the default triggers against
// a vLLM store, reading every shipped engine's names (all: the whole `or`,
// as a fleet daemon) and vLLM's alone (vllm: ReadOnly, as a sidecar whose
// engine check found vLLM): the CPU the engines without series cost.
func BenchmarkDetectorTick(b *testing.B) {
	m := querytest.New(b, vllmLoad(4))
	at := time.Unix(0, 0).Add(70 * time.Minute)
	engines := append(shipped(b), shippedEngine(b, "tgi"))
	for _, reads := range [][]string{nil, {"vllm"}} {
		name := "all"
		if reads != nil {
			name = strings.Join(reads, "+")
		}
		b.Run(name, func(b *testing.B) {
			d, err := NewDetector(DetectConfig{}, engines)
			if err != nil {
				b.Fatal(err)
			}
			d.ReadOnly(reads)
			for b.Loop() {
				if _, err := d.Evaluate(context.Background(), m, at); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
