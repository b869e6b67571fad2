package fleettest

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"time"
)

// SteadyStep is the sample spacing of WriteSteady (Prometheus's usual
// scrape interval).
const SteadyStep = 15 * time.Second

// steadyBuckets are the upper bounds WriteSteady's histograms use (a
// subset of vLLM's, vllm/v1/metrics/loggers.py), with the share of
// observations at or below each.
var (
	ttftBuckets = []bucketShare{{0.05, 0.2}, {0.1, 0.55}, {0.25, 0.9}, {0.5, 0.98}, {1, 0.995}, {2.5, 1}}
	itlBuckets  = []bucketShare{{0.01, 0.3}, {0.025, 0.85}, {0.05, 0.97}, {0.1, 0.995}, {0.25, 1}}
)

type bucketShare struct{ le, share float64 }

// WriteSteady writes OpenMetrics text for n steady vLLM deployments
// (namespace steady-000…, one replica each) sampled every SteadyStep over
// each of windows: the families the detector's triggers and the KV and
// queue signals read, at a constant load, so none of them is anomalous.
// Counters grow from the first window's start, so rates over any of the
// windows are the steady ones.
func WriteSteady(w io.Writer, n int, windows [][2]time.Time) error {
	return WriteFleet(w, n, 0, windows)
}

// WriteFleet is WriteSteady where the first slow deployments slow down in
// the last window: their time to first token is five times the steady one
// and their waiting queue grows, as a saturated engine's would.
func WriteFleet(w io.Writer, n, slow int, windows [][2]time.Time) error {
	bw := bufio.NewWriter(w)
	origin := windows[0][0]
	var times []time.Time
	for _, win := range windows {
		for t := win[0]; !t.After(win[1]); t = t.Add(SteadyStep) {
			times = append(times, t)
		}
	}
	labels := func(i int) string {
		return fmt.Sprintf(`namespace="steady-%03d",model_name="steady",pod="vllm-0",instance="10.1.%d.%d:8000",job="vllm"`, i, i/250, i%250)
	}
	// Each deployment's load differs a little, so they are not copies.
	rate := func(i int) float64 { return 2 + float64(i%7)*0.25 }
	ts := func(t time.Time) string { return fmt.Sprintf("%.3f", float64(t.UnixMilli())/1000) }
	last := windows[len(windows)-1][0]
	// slowed is how many of a slowed deployment's requests so far in the
	// last window were slow: all of them, each past every bucket but +Inf.
	slowed := func(i int, t time.Time) float64 {
		if i >= slow || t.Before(last) {
			return 0
		}
		return t.Sub(last).Seconds() * rate(i)
	}
	hist := func(name, help string, buckets []bucketShare, perReq, meanObs float64, slowable bool) {
		fmt.Fprintf(bw, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name)
		for i := 0; i < n; i++ {
			for _, t := range times {
				obs := rate(i) * perReq * t.Sub(origin).Seconds()
				var late float64 // slow observations, counted in +Inf only
				if slowable {
					late = slowed(i, t)
					obs -= late
				}
				for _, b := range buckets {
					fmt.Fprintf(bw, "%s_bucket{%s,le=\"%g\"} %g %s\n", name, labels(i), b.le, math.Floor(obs*b.share), ts(t))
				}
				fmt.Fprintf(bw, "%s_bucket{%s,le=\"+Inf\"} %g %s\n", name, labels(i), math.Floor(obs+late), ts(t))
				fmt.Fprintf(bw, "%s_sum{%s} %g %s\n", name, labels(i), obs*meanObs+late*5*buckets[len(buckets)-1].le, ts(t))
				fmt.Fprintf(bw, "%s_count{%s} %g %s\n", name, labels(i), math.Floor(obs+late), ts(t))
			}
		}
	}
	gauge := func(name, help string, value func(i int) float64) {
		fmt.Fprintf(bw, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name)
		for i := 0; i < n; i++ {
			for _, t := range times {
				fmt.Fprintf(bw, "%s{%s} %g %s\n", name, labels(i), value(i), ts(t))
			}
		}
	}
	hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttftBuckets, 1, 0.11, true)
	hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itlBuckets, 200, 0.018, false)
	fmt.Fprintf(bw, "# HELP vllm:request_success Count of successfully processed requests.\n# TYPE vllm:request_success counter\n")
	for i := 0; i < n; i++ {
		for _, t := range times {
			fmt.Fprintf(bw, "vllm:request_success_total{%s,finished_reason=\"stop\"} %g %s\n", labels(i), math.Floor(rate(i)*t.Sub(origin).Seconds()), ts(t))
		}
	}
	gauge("vllm:num_requests_running", "Number of requests in model execution batches.", func(i int) float64 { return math.Round(rate(i) * 4) })
	fmt.Fprintf(bw, "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n# TYPE vllm:num_requests_waiting gauge\n")
	for i := 0; i < n; i++ {
		for _, t := range times {
			fmt.Fprintf(bw, "vllm:num_requests_waiting{%s} %g %s\n", labels(i), math.Floor(slowed(i, t)/2), ts(t))
		}
	}
	gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", func(i int) float64 { return 0.3 + float64(i%5)*0.05 })
	fmt.Fprintln(bw, "# EOF")
	return bw.Flush()
}
