package diagnose

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/whyslow/whyslow/verdict"
)

// The endpoint picker (Gateway API Inference Extension, llm-d) exports its
// InferencePool's averages over the model servers as gauges labelled `name`
// (the pool): kubernetes-sigs/gateway-api-inference-extension
// pkg/epp/metrics/metrics.go (inferencePoolAvgKVCache,
// inferencePoolAvgQueueSize, inferencePoolReadyPods; subsystem
// inference_pool). The KV average is of the servers' usage, 0–1. They are
// fleet context beside the engine's own series: rows of the verdict, never
// inputs of the walk.
const (
	poolQueue = "inference_pool_average_queue_size"
	poolKV    = "inference_pool_average_kv_cache_utilization"
	poolReady = "inference_pool_ready_pods"
	// SourceEndpointPicker marks the rows read from the endpoint picker.
	SourceEndpointPicker = "endpoint_picker"
)

// poolSignals are the pool's rows ($s: the pool's selector, $w: the
// window). Several series of one pool (EPP replicas) are averaged; ready
// pods is the fewest in the window, so a pod lost mid-window shows.
var poolSignals = []struct{ signal, title, unit, expr string }{
	{"pool_queue_mean", "Pool average queue size", "requests", `avg(avg_over_time(` + poolQueue + `{$s}[$w]))`},
	{"pool_kv_usage_mean", "Pool average KV cache usage", "fraction", `avg(avg_over_time(` + poolKV + `{$s}[$w]))`},
	{"pool_ready_pods", "Pool ready pods (fewest)", "count", `max(min_over_time(` + poolReady + `{$s}[$w]))`},
}

// poolScopeLabels are the scope labels that name an InferencePool: the
// engine's series carry one only when relabelled so; the pool's own
// series call it `name`.
var poolScopeLabels = []string{"inference_pool", "pool"}

// poolRef is one pool seen on the picker's series.
type poolRef struct{ name, namespace string }

// pickPool chooses the pool the scope's servers belong to among those seen:
// the one the scope names, else the only one, else the only one in the
// scope's namespace (the pool's series carry the picker's namespace when
// Kubernetes discovery labels them). The reason when none or several fit.
func pickPool(pools []poolRef, scope map[string]string) (poolRef, string) {
	for _, k := range poolScopeLabels {
		if want, ok := scope[k]; ok {
			for _, p := range pools {
				if p.name == want {
					return p, ""
				}
			}
			return poolRef{}, fmt.Sprintf("the scope names pool %q (%s); the endpoint picker has no series of it", want, k)
		}
	}
	if len(pools) == 1 {
		return pools[0], ""
	}
	if ns, ok := scope["namespace"]; ok {
		var in []poolRef
		for _, p := range pools {
			if p.namespace == ns {
				in = append(in, p)
			}
		}
		if len(in) == 1 {
			return in[0], ""
		}
	}
	if len(pools) == 0 {
		return poolRef{}, "no pool has a sample in the incident window"
	}
	return poolRef{}, fmt.Sprintf("%d pools, none named by the scope (%s)", len(pools), strings.Join(poolScopeLabels, " or "))
}

// readPoolContext reads the pool's averages at both windows (one query
// each). nil, with the reason, when no single pool answers for the scope
// or the pool has no value in the incident window.
func readPoolContext(ctx context.Context, opts *Options, scope map[string]string, win string, baseAt time.Time) (*verdict.PoolContext, string) {
	v, _, err := opts.Metrics.Query(ctx, `group by (name, namespace) (last_over_time({__name__=~"`+
		poolQueue+`|`+poolKV+`|`+poolReady+`"}[`+win+`]))`, opts.At)
	if err != nil {
		return nil, "the query failed: " + err.Error()
	}
	var pools []poolRef
	for _, s := range v {
		pools = append(pools, poolRef{string(s.Metric["name"]), string(s.Metric["namespace"])})
	}
	sort.Slice(pools, func(i, j int) bool {
		return pools[i].name+"\x00"+pools[i].namespace < pools[j].name+"\x00"+pools[j].namespace
	})
	p, why := pickPool(pools, scope)
	if why != "" {
		return nil, why
	}
	sel := "name=" + strconv.Quote(p.name)
	if p.namespace != "" {
		sel += ",namespace=" + strconv.Quote(p.namespace)
	}
	parts := make([]string, len(poolSignals))
	for i, c := range poolSignals {
		e := strings.NewReplacer("$s", sel, "$w", win).Replace(c.expr)
		parts[i] = `label_replace(` + e + `, "signal", "` + c.signal + `", "", "")`
	}
	read := func(at time.Time) (map[string]float64, error) {
		return signalValues(ctx, opts.Metrics, strings.Join(parts, " or "), at)
	}
	now, err := read(opts.At)
	if err != nil {
		return nil, "the query failed: " + err.Error()
	}
	if len(now) == 0 {
		return nil, fmt.Sprintf("pool %q has no value in the incident window", p.name)
	}
	base, err := read(baseAt)
	if err != nil {
		return nil, "the query failed: " + err.Error()
	}
	pc := &verdict.PoolContext{Pool: p.name, Namespace: p.namespace}
	for _, c := range poolSignals {
		row := verdict.Comparison{Signal: c.signal, Title: c.title, Unit: c.unit, Source: SourceEndpointPicker,
			Now: valuePtr(now, c.signal), Baseline: valuePtr(base, c.signal)}
		if row.Now == nil && row.Baseline == nil {
			continue
		}
		if row.Now != nil && row.Baseline != nil && *row.Baseline != 0 {
			r := *row.Now / *row.Baseline
			row.Ratio = &r
		}
		pc.Rows = append(pc.Rows, row)
	}
	return pc, ""
}

// dropGap removes the data gaps of one signal.
func dropGap(gaps []verdict.DataGap, signal string) []verdict.DataGap {
	out := gaps[:0]
	for _, g := range gaps {
		if g.Signal != signal {
			out = append(out, g)
		}
	}
	return out
}
