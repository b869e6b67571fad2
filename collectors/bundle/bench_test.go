package bundle

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/whyslow/whyslow/collectors/store"
)

// syntheticBundle writes OpenMetrics text for targets replicas over span at
// step, about 300 series per replica (20 histograms of 11 buckets plus sum
// and count, 40 counters and gauges), series by series as bundles are
// written.
func syntheticBundle(targets int, span, step time.Duration) []byte {
	var b bytes.Buffer
	start := time.Unix(1700000000, 0)
	n := int(span/step) + 1
	les := []string{"0.001", "0.005", "0.01", "0.05", "0.1", "0.25", "0.5", "1.0", "2.5", "10.0", "+Inf"}
	series := func(name, labels string, f func(i int) float64) {
		for i := 0; i < n; i++ {
			b.WriteString(name)
			b.WriteByte('{')
			b.WriteString(labels)
			b.WriteString("} ")
			b.WriteString(strconv.FormatFloat(f(i), 'g', -1, 64))
			b.WriteByte(' ')
			b.WriteString(strconv.FormatInt(start.Add(time.Duration(i)*step).Unix(), 10))
			b.WriteByte('\n')
		}
	}
	for h := 0; h < 20; h++ {
		fmt.Fprintf(&b, "# TYPE vllm:hist_%d_seconds histogram\n", h)
	}
	for c := 0; c < 20; c++ {
		fmt.Fprintf(&b, "# TYPE vllm:counter_%d counter\n# TYPE vllm:gauge_%d gauge\n", c, c)
	}
	for t := 0; t < targets; t++ {
		base := fmt.Sprintf(`job="vllm",instance="10.0.0.%d:8000",pod="vllm-%d",model_name="llama-3-8b"`, t+1, t)
		for h := 0; h < 20; h++ {
			name := fmt.Sprintf("vllm:hist_%d_seconds", h)
			for j, le := range les {
				series(name+"_bucket", base+`,le="`+le+`"`, func(i int) float64 { return float64(i * (j + 1) * 3) })
			}
			series(name+"_sum", base, func(i int) float64 { return float64(i) * 4.2 })
			series(name+"_count", base, func(i int) float64 { return float64(i * 33) })
		}
		for c := 0; c < 20; c++ {
			series(fmt.Sprintf("vllm:counter_%d_total", c), base, func(i int) float64 { return float64(i * 7) })
			series(fmt.Sprintf("vllm:gauge_%d", c), base, func(i int) float64 { return float64(i % 17) })
		}
	}
	b.WriteString("# EOF\n")
	return b.Bytes()
}

// BenchmarkLoadBundle loads a 4-replica, 2-hour, 15 s bundle (about 300
// series per replica) into a fresh in-memory store and reports samples/s.
func BenchmarkLoadBundle(b *testing.B) {
	data := syntheticBundle(4, 2*time.Hour, 15*time.Second)
	b.SetBytes(int64(len(data)))
	var samples int
	b.ResetTimer()
	for b.Loop() {
		st, err := store.Open(store.Options{})
		if err != nil {
			b.Fatal(err)
		}
		ls, err := ReadMetrics(context.Background(), "metrics.om", data, st)
		if err != nil {
			b.Fatal(err)
		}
		samples = ls.Samples
		b.StopTimer()
		_ = st.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(samples)*float64(b.N)/b.Elapsed().Seconds(), "samples/s")
	b.ReportMetric(float64(samples), "samples/op")
}

// BenchmarkParseMetrics measures the parser alone on the same bundle.
func BenchmarkParseMetrics(b *testing.B) {
	data := syntheticBundle(4, 2*time.Hour, 15*time.Second)
	b.SetBytes(int64(len(data)))
	var samples int
	for b.Loop() {
		p, err := NewTextParser("metrics.om", data, FormatAuto)
		if err != nil {
			b.Fatal(err)
		}
		samples = 0
		for {
			ok, err := p.Next()
			if err != nil {
				b.Fatal(err)
			}
			if !ok {
				break
			}
			samples++
		}
	}
	b.ReportMetric(float64(samples)*float64(b.N)/b.Elapsed().Seconds(), "samples/s")
}

// TestSyntheticBundleLoads checks the benchmark's input once, at a small
// size, so a broken generator fails the ordinary test run.
func TestSyntheticBundleLoads(t *testing.T) {
	data := syntheticBundle(2, 10*time.Minute, 15*time.Second)
	st, err := store.Open(store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ls, err := ReadMetrics(context.Background(), "metrics.om", data, st)
	if err != nil {
		t.Fatal(err)
	}
	if ls.Series != 2*300 || ls.Samples != 2*300*41 {
		t.Errorf("stats = %+v", ls)
	}
	v, _, err := st.Query(context.Background(), `histogram_quantile(0.95, sum by (le) (rate(vllm:hist_0_seconds_bucket[5m])))`, ls.MaxTime)
	if err != nil || len(v) != 1 {
		t.Fatalf("query: %v %v", v, err)
	}
}
