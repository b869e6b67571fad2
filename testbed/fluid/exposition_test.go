package fluid

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"
)

// parsed is an exposition read back through Prometheus' OpenMetrics parser.
type parsed struct {
	types  map[string]model.MetricType // family → type
	series map[string]*parsedSeries    // full label set (with __name__) → samples
}

type parsedSeries struct {
	lset labels.Labels
	ts   []int64
	vals []float64
}

func parseOM(t *testing.T, data []byte) *parsed {
	t.Helper()
	if !bytes.HasSuffix(data, []byte("# EOF\n")) {
		t.Fatal("exposition does not end in # EOF")
	}
	p := textparse.NewOpenMetricsParser(data, labels.NewSymbolTable())
	out := &parsed{types: map[string]model.MetricType{}, series: map[string]*parsedSeries{}}
	for {
		et, err := p.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("OpenMetrics parse: %v", err)
		}
		switch et {
		case textparse.EntryType:
			name, typ := p.Type()
			if _, dup := out.types[string(name)]; dup {
				t.Fatalf("family %s declared twice (interleaved families)", name)
			}
			out.types[string(name)] = typ
		case textparse.EntrySeries:
			key, ts, v := p.Series()
			if ts == nil {
				t.Fatalf("sample %s has no timestamp", key)
			}
			var ls labels.Labels
			p.Labels(&ls)
			k := ls.String()
			s := out.series[k]
			if s == nil {
				s = &parsedSeries{lset: ls}
				out.series[k] = s
			}
			if n := len(s.ts); n > 0 && *ts <= s.ts[n-1] {
				t.Fatalf("series %s: timestamp %d after %d", k, *ts, s.ts[n-1])
			}
			s.ts = append(s.ts, *ts)
			s.vals = append(s.vals, v)
		}
	}
	return out
}

// family maps a sample name to its declared family and suffix.
func (p *parsed) family(name string) (string, string, bool) {
	if _, ok := p.types[name]; ok {
		return name, "", true
	}
	for _, suf := range []string{"_total", "_bucket", "_count", "_sum"} {
		if base, ok := strings.CutSuffix(name, suf); ok {
			if _, ok := p.types[base]; ok {
				return base, suf, true
			}
		}
	}
	return "", "", false
}

// knownFamilies are the families real deployments export, with their types
// (docs/engines.md §2 and §5.2, collectors/gpu); anything else is a typo.
var knownFamilies = map[string]model.MetricType{}

func init() {
	add := func(typ model.MetricType, names string) {
		for _, n := range strings.Fields(names) {
			knownFamilies[n] = typ
		}
	}
	add(model.MetricTypeGauge, `vllm:num_requests_running vllm:num_requests_waiting vllm:num_requests_waiting_by_reason
		vllm:num_requests_swapped vllm:kv_cache_usage_perc vllm:gpu_cache_usage_perc vllm:cpu_cache_usage_perc
		vllm:gpu_prefix_cache_hit_rate vllm:cache_config_info`)
	add(model.MetricTypeCounter, `vllm:prefix_cache_queries vllm:prefix_cache_hits vllm:gpu_prefix_cache_queries
		vllm:gpu_prefix_cache_hits vllm:num_preemptions vllm:prompt_tokens vllm:prompt_tokens_by_source
		vllm:prompt_tokens_cached vllm:generation_tokens vllm:request_success http_requests`)
	add(model.MetricTypeHistogram, `vllm:iteration_tokens_total vllm:request_prompt_tokens vllm:request_generation_tokens
		vllm:request_max_num_generation_tokens vllm:request_params_n vllm:request_params_max_tokens
		vllm:request_prefill_kv_computed_tokens vllm:time_to_first_token_seconds vllm:inter_token_latency_seconds
		vllm:time_per_output_token_seconds vllm:request_time_per_output_token_seconds vllm:e2e_request_latency_seconds
		vllm:request_queue_time_seconds vllm:request_inference_time_seconds vllm:request_prefill_time_seconds
		vllm:request_decode_time_seconds vllm:request_num_preemptions`)
	add(model.MetricTypeGauge, `whyslow_gpu_dram_bandwidth_utilization whyslow_gpu_memory_busy_ratio whyslow_gpu_sm_active
		whyslow_gpu_sm_occupancy whyslow_gpu_utilization whyslow_gpu_sm_clock_mhz whyslow_gpu_sm_clock_max_mhz
		whyslow_gpu_mem_clock_mhz whyslow_gpu_mem_clock_max_mhz whyslow_gpu_clock_throttle_active whyslow_gpu_power_watts
		whyslow_gpu_power_limit_watts whyslow_gpu_temperature_celsius whyslow_gpu_fb_used_bytes whyslow_gpu_fb_total_bytes
		whyslow_gpu_pcie_tx_bytes_per_second whyslow_gpu_pcie_rx_bytes_per_second whyslow_gpu_nvlink_tx_bytes_per_second
		whyslow_gpu_nvlink_rx_bytes_per_second`)
	add(model.MetricTypeGauge, `DCGM_FI_DEV_SM_CLOCK DCGM_FI_DEV_MEM_CLOCK DCGM_FI_DEV_MEMORY_TEMP DCGM_FI_DEV_GPU_TEMP
		DCGM_FI_DEV_POWER_USAGE DCGM_FI_DEV_GPU_UTIL DCGM_FI_DEV_MEM_COPY_UTIL DCGM_FI_DEV_XID_ERRORS DCGM_FI_DEV_FB_FREE
		DCGM_FI_DEV_FB_USED DCGM_FI_PROF_GR_ENGINE_ACTIVE DCGM_FI_PROF_SM_ACTIVE DCGM_FI_PROF_PIPE_TENSOR_ACTIVE
		DCGM_FI_PROF_DRAM_ACTIVE DCGM_FI_PROF_PCIE_TX_BYTES DCGM_FI_PROF_PCIE_RX_BYTES`)
	// dcgm-exporter's counters carry no _total: declared unknown in OpenMetrics
	add(model.MetricTypeUnknown, `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL
		DCGM_FI_DEV_POWER_VIOLATION DCGM_FI_DEV_THERMAL_VIOLATION`)
}

// upstream bucket bounds per family (vllm/v1/metrics/buckets.py, V0
// vllm/engine/metrics.py) as the parser reads le back.
func wantBounds(fam, names string, maxLen int) []float64 {
	v0 := names == "v0"
	pick := func(v1, old []float64) []float64 {
		if v0 {
			return old
		}
		return v1
	}
	switch fam {
	case "vllm:time_to_first_token_seconds":
		return pick(bucketsTTFTv1, bucketsTTFTv0)
	case "vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds", "vllm:request_time_per_output_token_seconds":
		return pick(bucketsITLv1, bucketsTPOTv0)
	case "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds", "vllm:request_inference_time_seconds",
		"vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds":
		return pick(bucketsLatencyV1, bucketsLatencyV0)
	case "vllm:iteration_tokens_total":
		return pick(bucketsIterV1, bucketsIterV0)
	case "vllm:request_params_n":
		return bucketsParamsN
	case "vllm:request_num_preemptions":
		return bucketsPreemptN
	}
	return buckets125(maxLen)
}

func TestExposition(t *testing.T) {
	era := func(e string) func(*plan) { return func(p *plan) { p.era = e } }
	cases := []struct {
		name   string
		opts   Options
		mutate func(*plan)
		want   []string // families that must be there
		absent []string // and must not
	}{
		{"v1 newest, whyslow GPU", Options{Scenario: "kv_pressure", Seed: 1, Trim: true},
			func(p *plan) {
				p.fam = families{phase: true, iteration: true, cacheInfo: true, preempt: true, http: true}
			},
			[]string{"vllm:inter_token_latency_seconds", "vllm:request_time_per_output_token_seconds", "vllm:kv_cache_usage_perc",
				"vllm:prompt_tokens_by_source", "vllm:request_num_preemptions", "vllm:num_preemptions", "http_requests",
				"vllm:cache_config_info", "whyslow_gpu_sm_clock_mhz"},
			[]string{"vllm:time_per_output_token_seconds", "vllm:gpu_cache_usage_perc", "DCGM_FI_DEV_SM_CLOCK"}},
		{"v1 0.10, dcgm", Options{Scenario: "gpu_throttle", Seed: 2, GPUSeries: "dcgm", Trim: true}, era("0.10"),
			[]string{"vllm:time_per_output_token_seconds", "vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc",
				"vllm:gpu_prefix_cache_hits", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"},
			[]string{"vllm:inter_token_latency_seconds", "vllm:prompt_tokens_by_source", "whyslow_gpu_sm_clock_mhz"}},
		{"v1 0.11, both", Options{Scenario: "error_burst", Seed: 3, GPUSeries: "both", Trim: true}, era("0.11"),
			[]string{"vllm:time_per_output_token_seconds", "vllm:inter_token_latency_seconds", "DCGM_FI_DEV_GPU_UTIL",
				"whyslow_gpu_utilization"},
			[]string{"vllm:gpu_cache_usage_perc", "vllm:request_prefill_kv_computed_tokens"}},
		{"v0, no GPU", Options{Scenario: "prompt_shift", Seed: 4, Names: "v0", GPUSeries: "none", Trim: true}, nil,
			[]string{"vllm:time_per_output_token_seconds", "vllm:gpu_cache_usage_perc", "vllm:gpu_prefix_cache_hit_rate",
				"vllm:num_requests_swapped"},
			[]string{"vllm:kv_cache_usage_perc", "vllm:inter_token_latency_seconds", "whyslow_gpu_sm_clock_mhz", "DCGM_FI_DEV_SM_CLOCK"}},
		{"families omitted", Options{Scenario: "healthy", Seed: 5, Trim: true},
			func(p *plan) { p.fam = families{} }, nil,
			[]string{"vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds", "vllm:iteration_tokens_total",
				"vllm:cache_config_info", "vllm:num_preemptions", "http_requests"}},
	}
	if testing.Short() {
		cases = cases[:2]
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := record(context.Background(), tc.opts, recordConfig{m: -1, mutate: tc.mutate})
			if err != nil {
				t.Fatal(err)
			}
			p := b.in.p
			got := parseOM(t, b.Metrics)
			for _, f := range tc.want {
				if _, ok := got.types[f]; !ok {
					t.Errorf("family %s missing", f)
				}
			}
			for _, f := range tc.absent {
				if _, ok := got.types[f]; ok {
					t.Errorf("family %s present", f)
				}
			}
			for f, typ := range got.types {
				want, ok := knownFamilies[f]
				if !ok {
					t.Errorf("unknown family %s", f)
				} else if typ != want {
					t.Errorf("family %s: type %s, want %s", f, typ, want)
				}
			}
			checkSeries(t, got, p)
		})
	}
}

// checkSeries checks names, labels, counters and histograms sample by
// sample.
func checkSeries(t *testing.T, got *parsed, p *plan) {
	t.Helper()
	type hkey struct {
		fam, labels string
	}
	buckets := map[hkey]map[float64]*parsedSeries{}
	counts := map[hkey]*parsedSeries{}
	for _, s := range got.series {
		name := s.lset.Get(labels.MetricName)
		fam, suf, ok := got.family(name)
		if !ok {
			t.Fatalf("sample %s belongs to no declared family", name)
		}
		typ := got.types[fam]
		if typ == model.MetricTypeCounter && suf != "_total" {
			t.Errorf("counter sample %s without _total", name)
		}
		if strings.HasPrefix(fam, "vllm:") {
			if s.lset.Get("pod") == "" || s.lset.Get("instance") == "" {
				t.Errorf("%s without target labels", s.lset)
			}
			if fam != "vllm:cache_config_info" && s.lset.Get("model_name") != p.model.name {
				t.Errorf("%s: model_name %q", s.lset, s.lset.Get("model_name"))
			}
			if eng := s.lset.Get("engine"); (p.names == "v0") != (eng == "") {
				t.Errorf("%s: engine label %q with names %s", s.lset, eng, p.names)
			}
		}
		if fam == "vllm:request_success" {
			r := s.lset.Get("finished_reason")
			if !slices.Contains([]string{"stop", "length", "abort", "error"}, r) {
				t.Errorf("finished_reason %q", r)
			}
		}
		if typ == model.MetricTypeCounter || typ == model.MetricTypeUnknown || suf == "_count" || suf == "_sum" || suf == "_bucket" {
			for i := 1; i < len(s.vals); i++ {
				if s.vals[i] < s.vals[i-1] {
					t.Fatalf("%s decreases: %g then %g", s.lset, s.vals[i-1], s.vals[i])
				}
			}
		}
		if typ != model.MetricTypeHistogram {
			continue
		}
		rest := labels.NewBuilder(s.lset).Del(labels.MetricName, "le").Labels().String()
		k := hkey{fam, rest}
		switch suf {
		case "_bucket":
			le, err := strconv.ParseFloat(s.lset.Get("le"), 64)
			if err != nil {
				t.Fatalf("%s: le %q", s.lset, s.lset.Get("le"))
			}
			if buckets[k] == nil {
				buckets[k] = map[float64]*parsedSeries{}
			}
			buckets[k][le] = s
		case "_count":
			counts[k] = s
		}
	}
	if len(buckets) == 0 {
		t.Fatal("no histograms")
	}
	for k, bs := range buckets {
		les := make([]float64, 0, len(bs))
		for le := range bs {
			les = append(les, le)
		}
		slices.Sort(les)
		want := append(append([]float64{}, wantBounds(k.fam, p.names, p.maxLen)...), math.Inf(1))
		if !slices.Equal(les, want) {
			t.Errorf("%s: bounds %v, want %v", k.fam, les, want)
			continue
		}
		cnt := counts[k]
		if cnt == nil {
			t.Fatalf("%s %s: no _count", k.fam, k.labels)
		}
		for j := range cnt.ts {
			prev := 0.0
			for _, le := range les {
				s := bs[le]
				if len(s.ts) != len(cnt.ts) || s.ts[j] != cnt.ts[j] {
					t.Fatalf("%s %s: bucket le=%g not sampled with _count", k.fam, k.labels, le)
				}
				if s.vals[j] < prev {
					t.Fatalf("%s %s: buckets not cumulative at le=%g", k.fam, k.labels, le)
				}
				prev = s.vals[j]
			}
			if prev != cnt.vals[j] {
				t.Fatalf("%s %s: +Inf bucket %g != _count %g", k.fam, k.labels, prev, cnt.vals[j])
			}
			if prev != math.Trunc(prev) {
				t.Fatalf("%s %s: fractional count %g", k.fam, k.labels, prev)
			}
		}
	}
}

func TestFormatting(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		want string
	}{{1, "1.0"}, {0.25, "0.25"}, {8192, "8192.0"}, {math.Inf(1), "+Inf"}, {0.001, "0.001"}, {1e-05, "1e-05"}} {
		if got := formatFloat(tc.v); got != tc.want {
			t.Errorf("formatFloat(%g) = %q, want %q", tc.v, got, tc.want)
		}
	}
	for _, tc := range []struct {
		ms   int64
		want string
	}{{1767226380000, "1767226380"}, {1767226380250, "1767226380.250"}, {1767226380005, "1767226380.005"}} {
		if got := string(appendTS(nil, tc.ms)); got != tc.want {
			t.Errorf("appendTS(%d) = %q, want %q", tc.ms, got, tc.want)
		}
	}
	if got := (labelSet{"b": `x"y`, "a": `c\d`}).render(); got != `a="c\\d",b="x\"y"` {
		t.Errorf("render = %s", got)
	}
	if got := buckets125(131072); got[len(got)-1] != 100000 || len(got) != 16 {
		t.Errorf("buckets125(131072) = %v", got)
	}
}
