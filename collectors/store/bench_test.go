package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
)

// fillHistograms appends a vLLM-like TTFT histogram (11 buckets, sum,
// count) for 4 replicas over 2 hours at 15 s.
func fillHistograms(b *testing.B, s *Store) time.Time {
	b.Helper()
	les := []string{"0.001", "0.005", "0.01", "0.05", "0.1", "0.25", "0.5", "1.0", "2.5", "10.0", "+Inf"}
	steps := int((2 * time.Hour) / (15 * time.Second))
	app := s.Appender(context.Background())
	for r := 0; r < 4; r++ {
		base := []string{"job", "vllm", "instance", fmt.Sprintf("10.0.0.%d:8000", r), "pod", fmt.Sprintf("vllm-%d", r)}
		for j, le := range les {
			ls := labels.FromStrings(append([]string{"__name__", "vllm:time_to_first_token_seconds_bucket", "le", le}, base...)...)
			for i := 0; i <= steps; i++ {
				if _, err := app.Append(0, ls, t0.Add(time.Duration(i)*15*time.Second).UnixMilli(), float64(i*(j+1)*(r+1))); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	if err := app.Commit(); err != nil {
		b.Fatal(err)
	}
	return t0.Add(2 * time.Hour)
}

// BenchmarkQuery runs a typical signal, a p95 over 5 minutes, on a 4-replica
// 2-hour store.
func BenchmarkQuery(b *testing.B) {
	s, err := Open(Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	at := fillHistograms(b, s)
	const expr = `histogram_quantile(0.95, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[5m])))`
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		v, _, err := s.Query(ctx, expr, at)
		if err != nil || len(v) != 1 {
			b.Fatalf("%v %v", v, err)
		}
	}
}

// BenchmarkQueryRange runs the same signal as a 1-hour range at 1 minute.
func BenchmarkQueryRange(b *testing.B) {
	s, err := Open(Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	at := fillHistograms(b, s)
	const expr = `histogram_quantile(0.95, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[5m])))`
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		m, _, err := s.QueryRange(ctx, expr, at.Add(-time.Hour), at, time.Minute)
		if err != nil || len(m) != 1 {
			b.Fatalf("%v %v", m, err)
		}
	}
}

// liveScrape appends one scrape of a vLLM-sized exposition (600 series: 40
// histograms of 13 buckets plus gauges and counters) at time at, in one
// transaction, as the daemon's scraper does every interval.
func liveScrape(b *testing.B, s *Store, series []labels.Labels, at time.Time, i int) {
	app := s.Appender(context.Background())
	for j, ls := range series {
		if _, err := app.Append(0, ls, at.UnixMilli(), float64(i*(j%13+1))); err != nil {
			b.Fatal(err)
		}
	}
	if err := app.Commit(); err != nil {
		b.Fatal(err)
	}
}

func liveSeries() []labels.Labels {
	les := []string{"0.001", "0.005", "0.01", "0.02", "0.04", "0.06", "0.08", "0.1", "0.25", "0.5", "1.0", "2.5", "+Inf"}
	var out []labels.Labels
	for h := 0; h < 40; h++ {
		for _, le := range les {
			out = append(out, labels.FromStrings("__name__", fmt.Sprintf("vllm:hist_%d_bucket", h), "le", le,
				"job", "engine", "instance", "127.0.0.1:8000", "model_name", "m"))
		}
	}
	for g := 0; g < 80; g++ {
		out = append(out, labels.FromStrings("__name__", fmt.Sprintf("vllm:gauge_%d", g), "job", "engine", "instance", "127.0.0.1:8000", "model_name", "m"))
	}
	return out
}

// BenchmarkLiveHour appends an hour of 5 s scrapes of one vLLM-sized
// target and runs a detector-like query after each, in the three modes
// (bundle-oriented in-memory, live in-memory, on disk). One op is the whole
// hour.
func BenchmarkLiveHour(b *testing.B) {
	for _, mode := range []string{"memory", "live", "disk"} {
		b.Run(mode, func(b *testing.B) {
			series := liveSeries()
			const expr = `histogram_quantile(0.95, sum by (le, model_name) (rate(vllm:hist_0_bucket[1m])))`
			ctx := context.Background()
			for b.Loop() {
				o := Options{}
				switch mode {
				case "disk":
					o.Dir = b.TempDir()
				case "live":
					o.Live = true
				}
				s, err := Open(o)
				if err != nil {
					b.Fatal(err)
				}
				for i := 0; i < liveTicks; i++ {
					at := t0.Add(time.Duration(i) * 5 * time.Second)
					liveScrape(b, s, series, at, i)
					if _, _, err := s.Query(ctx, expr, at); err != nil {
						b.Fatal(err)
					}
				}
				s.Close()
			}
		})
	}
}

// liveTicks is the scrapes in one BenchmarkLiveHour op: an hour at 5 s.
var liveTicks = 720
