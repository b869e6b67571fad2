package fluid

import (
	"context"
	"testing"
)

// benchRecord records opts b.N times and reports the CPU time per record
// (user+system, GC included) and the exposition's size.
func benchRecord(b *testing.B, opts Options) {
	b.ReportAllocs()
	var size int
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		bd, err := Record(context.Background(), opts)
		if err != nil {
			b.Fatal(err)
		}
		size = len(bd.Metrics)
	}
	b.ReportMetric((cpuTime()-cpu0).Seconds()/float64(b.N), "cpu-s/op")
	b.ReportMetric(float64(size)/(1<<20), "MiB/op")
}

// BenchmarkRecord4Replicas records a full 83-simulated-minute instance on 4
// replicas (router_skew seed 6 draws 4× Llama-8B on H100), every scrape
// written, with both GPU series.
func BenchmarkRecord4Replicas(b *testing.B) {
	benchRecord(b, Options{Scenario: "router_skew", Seed: benchSeed, GPUSeries: "both"})
}

// BenchmarkRecord4ReplicasTrim is the same instance, trimmed to the windows.
func BenchmarkRecord4ReplicasTrim(b *testing.B) {
	benchRecord(b, Options{Scenario: "router_skew", Seed: benchSeed, GPUSeries: "both", Trim: true})
}

// benchSeed draws 4 replicas for router_skew (checked by TestBenchInstance).
const benchSeed = 6

func TestBenchInstance(t *testing.T) {
	b := recorded(t, Options{Scenario: "router_skew", Seed: benchSeed, GPUSeries: "both", Trim: true})
	if b.in.p.replicas != 4 {
		t.Errorf("benchmark instance has %d replicas, want 4", b.in.p.replicas)
	}
}
