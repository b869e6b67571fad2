package diagnose

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/whyslow/whyslow/query/querytest"
	"github.com/whyslow/whyslow/rulesets"
	"github.com/whyslow/whyslow/verdict"
)

// steadyVLLMLoad is one vLLM model serving steadily for 100 minutes (15 s
// steps): the engine the pool series sit beside, and a steady scope.
const steadyVLLMLoad = `load 15s
  vllm:num_requests_running{model_name="a"} 1+0x400
  vllm:e2e_request_latency_seconds_count{model_name="a"} 0+1x400
  vllm:time_to_first_token_seconds_bucket{model_name="a", le="0.05"} 0+0x400
  vllm:time_to_first_token_seconds_bucket{model_name="a", le="0.1"} 0+0x400
  vllm:time_to_first_token_seconds_bucket{model_name="a", le="0.25"} 0+1x400
  vllm:time_to_first_token_seconds_bucket{model_name="a", le="+Inf"} 0+1x400
  vllm:time_to_first_token_seconds_sum{model_name="a"} 0+0.1x400
  vllm:time_to_first_token_seconds_count{model_name="a"} 0+1x400
`

// poolSeries is one pool's gauges: queue 1.5 and KV 40% for the first hour
// (the baseline window ends at 30m), then queue 12 and KV 94%; 4 ready pods.
func poolSeries(name string) string {
	return `  inference_pool_average_queue_size{name="` + name + `"} 1.5+0x239 12+0x160
  inference_pool_average_kv_cache_utilization{name="` + name + `"} 0.4+0x239 0.94+0x160
  inference_pool_ready_pods{name="` + name + `"} 4+0x400
`
}

func runPool(t *testing.T, load string) *verdict.Verdict {
	t.Helper()
	all, err := rulesets.All()
	if err != nil {
		t.Fatal(err)
	}
	m := querytest.Range{Metrics: querytest.New(t, load)}
	v, err := Run(context.Background(), Options{Metrics: m, Rulesets: all, At: time.Unix(0, 0).Add(90 * time.Minute), GPU: "H100"})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func poolGap(v *verdict.Verdict) *verdict.DataGap {
	for i, g := range v.DataGaps {
		if g.Signal == "pool_context" {
			return &v.DataGaps[i]
		}
	}
	return nil
}

// TestPoolContext: over real PromQL, one pool beside a vLLM model is read
// into the verdict's pool context (incident and baseline values, source
// endpoint_picker) and its gap goes; two pools the scope cannot tell apart
// keep the gap with the reason; and the pool changes nothing else: the
// verdict with it is the verdict without pool series, pool context aside.
func TestPoolContext(t *testing.T) {
	without := runPool(t, steadyVLLMLoad)
	if without.PoolContext != nil || poolGap(without) != nil {
		t.Fatalf("no pool series, yet pool context %+v / gap %+v", without.PoolContext, poolGap(without))
	}

	one := runPool(t, steadyVLLMLoad+poolSeries("pool-x"))
	if g := poolGap(one); g != nil {
		t.Errorf("pool read, gap kept: %+v", g)
	}
	pc := one.PoolContext
	if pc == nil || pc.Pool != "pool-x" {
		t.Fatalf("pool context %+v, want pool-x", pc)
	}
	want := map[string][2]float64{"pool_queue_mean": {12, 1.5}, "pool_kv_usage_mean": {0.94, 0.4}, "pool_ready_pods": {4, 4}}
	if len(pc.Rows) != len(want) {
		t.Errorf("rows %+v, want %d", pc.Rows, len(want))
	}
	for _, r := range pc.Rows {
		w, ok := want[r.Signal]
		if !ok || r.Now == nil || r.Baseline == nil || math.Abs(*r.Now-w[0]) > 1e-9 || math.Abs(*r.Baseline-w[1]) > 1e-9 {
			t.Errorf("row %s: %v / %v, want %v", r.Signal, r.Now, r.Baseline, w)
		}
		if r.Source != SourceEndpointPicker || r.Unit == "" || r.Title == "" {
			t.Errorf("row %+v: want source %s, a unit and a title", r, SourceEndpointPicker)
		}
	}
	// Context only: the rest of the verdict is the one without the pool.
	one.PoolContext = nil
	a, _ := json.Marshal(one)
	b, _ := json.Marshal(without)
	if string(a) != string(b) {
		t.Errorf("the pool series changed the verdict:\nwith    %s\nwithout %s", a, b)
	}

	two := runPool(t, steadyVLLMLoad+poolSeries("pool-x")+poolSeries("pool-y"))
	if two.PoolContext != nil {
		t.Errorf("two pools, one read: %+v", two.PoolContext)
	}
	if g := poolGap(two); g == nil || !strings.Contains(g.Reason, "2 pools, none named by the scope") {
		t.Errorf("two pools: gap %+v, want the reason", g)
	}
}

// TestPickPool: the scope's pool label names the pool, else the only one,
// else the only one in the scope's namespace.
func TestPickPool(t *testing.T) {
	x, y := poolRef{"x", "ns1"}, poolRef{"y", "ns2"}
	for _, c := range []struct {
		pools []poolRef
		scope map[string]string
		want  string // the pool, or a fragment of the reason
	}{
		{[]poolRef{x}, nil, "x"},
		{[]poolRef{x, y}, map[string]string{"inference_pool": "y"}, "y"},
		{[]poolRef{x, y}, map[string]string{"pool": "x", "namespace": "ns2"}, "x"},
		{[]poolRef{x, y}, map[string]string{"namespace": "ns2"}, "y"},
		{[]poolRef{x, y}, map[string]string{"model_name": "m"}, "2 pools, none named by the scope"},
		{[]poolRef{x, y}, map[string]string{"namespace": "ns3"}, "2 pools, none named by the scope"},
		{[]poolRef{x}, map[string]string{"pool": "z"}, `names pool "z"`},
		{nil, nil, "no pool"},
	} {
		p, why := pickPool(c.pools, c.scope)
		if got := p.name; why != "" {
			if !strings.Contains(why, c.want) {
				t.Errorf("%v %v: reason %q, want %q", c.pools, c.scope, why, c.want)
			}
		} else if got != c.want {
			t.Errorf("%v %v: pool %q, want %q", c.pools, c.scope, got, c.want)
		}
	}
}
