package sim

import (
	"context"
	"testing"
	"time"
)

// benchWorld is one replica of Llama-3.1-8B on an H100 at a steady rate.
func benchWorld(b *testing.B, rate float64, replicas int, record bool) *world {
	b.Helper()
	p, err := newPlan("healthy", 1)
	if err != nil {
		b.Fatal(err)
	}
	p.cfg = newEngineConfig(PolicyVLLM, modelSpecs["8B"], gpuSpecs["H100"], 0.9)
	p.replicas = replicas
	p.base.rate = rate
	p.bursts = nil
	p.inc = p.base
	w := newWorldFromPlan(p, Options{Names: "v1", GPUSeries: "whyslow", ScrapeInterval: 15 * time.Second, Start: DefaultStart})
	w.recording = record
	return w
}

// BenchmarkSimulate reports simulated seconds per wall second for one
// replica at 20 req/s.
func BenchmarkSimulate(b *testing.B) {
	const span = 600.0 // simulated seconds per iteration
	var steps float64
	start := time.Now()
	for i := 0; i < b.N; i++ {
		w := benchWorld(b, 20, 1, false)
		if err := w.run(context.Background(), span); err != nil {
			b.Fatal(err)
		}
		steps += w.engines[0].tel.iterationTokens.count
	}
	wall := time.Since(start).Seconds()
	b.ReportMetric(span*float64(b.N)/wall, "sim-s/s")
	b.ReportMetric(steps/float64(b.N)/span, "steps/sim-s")
}

// BenchmarkRecordTwoHoursFourReplicas records two simulated hours of four
// replicas (about 80 req/s in all) into a bundle.
func BenchmarkRecordTwoHoursFourReplicas(b *testing.B) {
	for i := 0; i < b.N; i++ {
		w := benchWorld(b, 80, 4, true)
		w.plan.onset = 112 * 60
		w.plan.at = 120 * 60
		bundle, err := w.recordBundle(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(len(bundle.Metrics))/1e6, "MB-metrics")
	}
}
