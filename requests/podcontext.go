package requests

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/model"

	"github.com/whyslow/whyslow/query"
)

// podContextStep is the resolution of the pods' metric context.
const podContextStep = 5 * time.Second

// PodContextQuery asks for the metric context of some pods over a time range.
type PodContextQuery struct {
	// Selector is the scope's PromQL label matchers without braces.
	Selector string
	// TargetLabel is the label that names a pod in the metrics (default "pod").
	TargetLabel string
	// Pods restricts the result to these pods; empty means every pod.
	Pods       []string
	Start, End time.Time
	// Step is the sample spacing (default 5s).
	Step time.Duration
	// KVUsage, Waiting and Running are the engines' gauges (their maps'
	// series, every engine's in the engine list's order, first present
	// wins); Running also restricts the GPU counters to the scope's pods.
	KVUsage, Waiting, Running []string
}

// podContextExprs are the per-pod context signals: the engine's KV usage and
// queues (the gauges of q) and the GPU counters of the whyslow NVML
// collector, restricted to pods of the scope; a signal whose gauges q lacks
// is left out. %[1]s is the selector, %[2]s the target label.
func podContextExprs(q PodContextQuery) []struct{ key, expr string } {
	var out []struct{ key, expr string }
	add := func(key, expr string) { out = append(out, struct{ key, expr string }{key, expr}) }
	if len(q.KVUsage) > 0 {
		add("kv_cache_usage", `max by (%[2]s) (`+anyOf(q.KVUsage)+`)`)
	}
	if len(q.Waiting) > 0 {
		add("num_requests_waiting", `sum by (%[2]s) (`+anyOf(q.Waiting)+`)`)
	}
	if len(q.Running) == 0 {
		return out
	}
	add("num_requests_running", `sum by (%[2]s) (`+anyOf(q.Running)+`)`)
	podScope := `max by (%[2]s) (` + anyOf(q.Running) + `)`
	add("whyslow_gpu_sm_clock_mhz", `min by (%[2]s) (whyslow_gpu_sm_clock_mhz) and on (%[2]s) `+podScope)
	add("whyslow_gpu_dram_bandwidth_utilization", `max by (%[2]s) (whyslow_gpu_dram_bandwidth_utilization) and on (%[2]s) `+podScope)
	add("whyslow_gpu_sm_active", `max by (%[2]s) (whyslow_gpu_sm_active) and on (%[2]s) `+podScope)
	add("whyslow_gpu_clock_throttle_active", `max by (%[2]s) (whyslow_gpu_clock_throttle_active{reason=~"hw_slowdown|hw_thermal_slowdown|sw_thermal_slowdown|hw_power_brake|sw_power_cap"}) and on (%[2]s) `+podScope)
	return out
}

// anyOf is the first present of the gauges, each over the selector.
func anyOf(gauges []string) string {
	parts := make([]string, len(gauges))
	for i, g := range gauges {
		parts[i] = g + `{%[1]s}`
	}
	return strings.Join(parts, " or ")
}

// PodContext reads the pods' metric context (KV cache usage, queue depth,
// running requests, GPU counters) over [Start, End] through PromQL range
// queries, one sample per pod and step. Signals without data are left out
// of the samples; an error is returned only when every query failed.
func PodContext(ctx context.Context, m query.Metrics, q PodContextQuery) ([]PodSample, []string, error) {
	if q.TargetLabel == "" {
		q.TargetLabel = "pod"
	}
	if q.Step <= 0 {
		q.Step = podContextStep
	}
	want := map[string]bool{}
	for _, p := range q.Pods {
		want[p] = true
	}
	type key struct {
		pod string
		at  int64
	}
	byKey := map[key]map[string]float64{}
	var warns []string
	var firstErr error
	failed := 0
	exprs := podContextExprs(q)
	if len(exprs) == 0 {
		return nil, nil, errors.New("pod context: no engine gauges to read")
	}
	for _, pc := range exprs {
		expr := fmt.Sprintf(pc.expr, q.Selector, q.TargetLabel)
		mat, w, err := m.QueryRange(ctx, expr, q.Start, q.End, q.Step)
		for _, w := range w {
			if !slices.Contains(warns, w) {
				warns = append(warns, w)
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, warns, ctx.Err()
			}
			failed++
			if firstErr == nil {
				firstErr = fmt.Errorf("%s: %w", pc.key, err)
			}
			continue
		}
		for _, ss := range mat {
			pod := string(ss.Metric[model.LabelName(q.TargetLabel)])
			if pod == "" || len(want) > 0 && !want[pod] {
				continue
			}
			for _, p := range ss.Values {
				f := float64(p.Value)
				if math.IsNaN(f) || math.IsInf(f, 0) {
					continue
				}
				k := key{pod, int64(p.Timestamp)}
				if byKey[k] == nil {
					byKey[k] = map[string]float64{}
				}
				byKey[k][pc.key] = f
			}
		}
	}
	if failed == len(exprs) {
		return nil, warns, fmt.Errorf("pod context: %w", firstErr)
	}
	out := make([]PodSample, 0, len(byKey))
	for k, vs := range byKey {
		out = append(out, PodSample{Pod: k.pod, At: time.UnixMilli(k.at).UTC(), Values: vs})
	}
	slices.SortFunc(out, func(a, b PodSample) int {
		if c := a.At.Compare(b.At); c != 0 {
			return c
		}
		return strings.Compare(a.Pod, b.Pod)
	})
	return out, warns, nil
}
