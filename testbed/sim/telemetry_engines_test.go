package sim

import (
	"bytes"
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

type famWant struct {
	typ     string
	buckets string
	labels  string // label names besides le and the family's own extra label, sorted, comma-joined
}

const (
	sglangSched = "engine_type,model_name,pp_rank,tp_rank"
	sglangTok   = "model_name"
	trtllmOwn   = "engine_type,model_name"
)

// docs/engines.md §3.1–§3.2 (SGLang collector defaults, python/sglang/srt/metrics/collector.py), written out independently of
// the model's tables.
var wantSGLang = map[string]famWant{
	"sglang:num_running_reqs":                  {"gauge", "", sglangSched},
	"sglang:num_queue_reqs":                    {"gauge", "", sglangSched},
	"sglang:token_usage":                       {"gauge", "", sglangSched},
	"sglang:num_used_tokens":                   {"gauge", "", sglangSched},
	"sglang:max_total_num_tokens":              {"gauge", "", sglangSched},
	"sglang:gen_throughput":                    {"gauge", "", sglangSched},
	"sglang:cache_hit_rate":                    {"gauge", "", sglangSched},
	"sglang:num_retracted_reqs":                {"gauge", "", sglangSched},
	"sglang:num_retracted_requests_total":      {"counter", "", sglangSched},
	"sglang:num_retracted_input_tokens_total":  {"counter", "", sglangSched},
	"sglang:num_retracted_output_tokens_total": {"counter", "", sglangSched},
	"sglang:queue_time_seconds": {"histogram",
		"0,0.1,0.2,0.5,1,2,3,4,5,10,15,20,30,40,50,60,70,80,90,100,200,300,400,500,600,700,800,900,1000,1200,1400,1600,1800,2000,2500,3000",
		sglangSched},
	"sglang:prompt_tokens_total":         {"counter", "", sglangTok},
	"sglang:generation_tokens_total":     {"counter", "", sglangTok},
	"sglang:cached_tokens_total":         {"counter", "", sglangTok},
	"sglang:num_requests_total":          {"counter", "", sglangTok},
	"sglang:num_aborted_requests_total":  {"counter", "", sglangTok},
	"sglang:time_to_first_token_seconds": {"histogram", "0.1,0.2,0.4,0.6,0.8,1,2,4,6,8,10,20,40,60,80,100,200,400", sglangTok},
	"sglang:inter_token_latency_seconds": {"histogram",
		"0.002,0.004,0.006,0.008,0.01,0.015,0.02,0.025,0.03,0.035,0.04,0.06,0.08,0.1,0.2,0.4,0.6,0.8,1,2,4,6,8", sglangTok},
	"sglang:e2e_request_latency_seconds": {"histogram",
		"0.1,0.2,0.4,0.6,0.8,1,2,4,6,8,10,20,40,60,80,100,200,400,600,1200,1800,2400", sglangTok},
	"sglang:num_retractions": {"histogram", "0,1,2,3,4,5,6,7,8,9,10,15,20,25,30,40,50,75,100", sglangTok},
}

// docs/engines.md §4.1; NVIDIA/TensorRT-LLM tensorrt_llm/metrics/collector.py @050f80de (names, buckets), written
// out independently of the model's tables.
var wantTRTLLM = map[string]famWant{
	"trtllm_request_success_total":            {"counter", "", trtllmOwn},
	"trtllm_e2e_request_latency_seconds":      {"histogram", latencyV1, trtllmOwn},
	"trtllm_request_queue_time_seconds":       {"histogram", latencyV1, trtllmOwn},
	"trtllm_time_to_first_token_seconds":      {"histogram", "0.001,0.005,0.01,0.02,0.04,0.06,0.08,0.1,0.25,0.5,0.75,1,2.5,5,7.5,10,20,40,80,160,640,2560", trtllmOwn},
	"trtllm_time_per_output_token_seconds":    {"histogram", "0.01,0.025,0.05,0.075,0.1,0.15,0.2,0.3,0.4,0.5,0.75,1,2.5,5,7.5,10,20,40,80", trtllmOwn},
	"trtllm_request_prefill_time_seconds":     {"histogram", "0.001,0.005,0.01,0.025,0.05,0.1,0.25,0.5,1,2.5,5,10,20,40,80,160,640,2560", trtllmOwn},
	"trtllm_request_decode_time_seconds":      {"histogram", latencyV1, trtllmOwn},
	"trtllm_request_inference_time_seconds":   {"histogram", latencyV1, trtllmOwn},
	"trtllm_kv_cache_hit_rate":                {"gauge", "", trtllmOwn},
	"trtllm_kv_cache_utilization":             {"gauge", "", trtllmOwn},
	"trtllm_kv_cache_max_blocks":              {"gauge", "", trtllmOwn},
	"trtllm_kv_cache_used_blocks":             {"gauge", "", trtllmOwn},
	"trtllm_kv_cache_tokens_per_block":        {"gauge", "", trtllmOwn},
	"trtllm_prompt_tokens_total":              {"counter", "", trtllmOwn},
	"trtllm_generation_tokens_total":          {"counter", "", trtllmOwn},
	"trtllm_prompt_cached_tokens_total":       {"counter", "", trtllmOwn},
	"trtllm_prompt_cached_tokens_per_request": {"histogram", "0,64,128,256,512,1024,2048,4096,8192", trtllmOwn},
	"trtllm_request_error_total":              {"counter", "", "engine_type,http_code,model_name"},
	"trtllm_num_requests_running":             {"gauge", "", trtllmOwn},
	"trtllm_num_requests_waiting":             {"gauge", "", trtllmOwn},
	"trtllm_num_context_requests":             {"gauge", "", trtllmOwn},
	"trtllm_num_generation_requests":          {"gauge", "", trtllmOwn},
	"trtllm_num_paused_requests":              {"gauge", "", trtllmOwn},
	"trtllm_max_num_tokens_runtime":           {"gauge", "", trtllmOwn},
	"trtllm_max_batch_size_runtime":           {"gauge", "", trtllmOwn},
	"trtllm_prefill_batch_tokens":             {"histogram", "64,128,256,512,1024,2048,4096,8192,16384,32768", trtllmOwn},
	"whyslow_gpu_dram_bandwidth_utilization":  {"gauge", "", ""},
	"whyslow_gpu_clock_throttle_active":       {"gauge", "", ""},
	"whyslow_gpu_sm_clock_mhz":                {"gauge", "", ""},
	"whyslow_gpu_nvlink_tx_bytes_per_second":  {"gauge", "", ""},
	"whyslow_gpu_temperature_celsius":         {"gauge", "", ""},
	"whyslow_gpu_memory_busy_ratio":           {"gauge", "", ""},
	"whyslow_gpu_power_limit_watts":           {"gauge", "", ""},
	"whyslow_gpu_fb_total_bytes":              {"gauge", "", ""},
	"whyslow_gpu_pcie_rx_bytes_per_second":    {"gauge", "", ""},
	"whyslow_gpu_sm_active":                   {"gauge", "", ""},
	"whyslow_gpu_mem_clock_max_mhz":           {"gauge", "", ""},
	"whyslow_gpu_utilization":                 {"gauge", "", ""},
	"whyslow_gpu_power_watts":                 {"gauge", "", ""},
	"whyslow_gpu_fb_used_bytes":               {"gauge", "", ""},
	"whyslow_gpu_pcie_tx_bytes_per_second":    {"gauge", "", ""},
	"whyslow_gpu_nvlink_rx_bytes_per_second":  {"gauge", "", ""},
	"whyslow_gpu_sm_clock_max_mhz":            {"gauge", "", ""},
	"whyslow_gpu_mem_clock_mhz":               {"gauge", "", ""},
}

func labelNames(m *dto.Metric, skip ...string) string {
	var out []string
	for _, lp := range m.GetLabel() {
		keep := true
		for _, s := range skip {
			keep = keep && lp.GetName() != s
		}
		if keep {
			out = append(out, lp.GetName())
		}
	}
	return strings.Join(out, ",")
}

// scrapeLive serves every replica of a live model and parses it with
// Prometheus's text parser.
func scrapeLive(t *testing.T, opt Options, d time.Duration) (*Live, []map[string]*dto.MetricFamily) {
	t.Helper()
	live, err := NewLive(opt)
	if err != nil {
		t.Fatal(err)
	}
	live.Advance(d)
	var out []map[string]*dto.MetricFamily
	for replica := 0; replica < live.Replicas(); replica++ {
		rec := httptest.NewRecorder()
		live.Handler(replica).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(bytes.NewReader(rec.Body.Bytes()))
		if err != nil {
			t.Fatalf("replica %d: parse: %v", replica, err)
		}
		out = append(out, fams)
	}
	return live, out
}

// TestEngineTelemetryParses scrapes live SGLang and trtllm-serve replicas
// and checks every name, type, label set and bucket list against docs/engines.md §3 and §4
// with Prometheus's text parser.
func TestEngineTelemetryParses(t *testing.T) {
	for _, tc := range []struct {
		policy string
		want   map[string]famWant
		prefix string
	}{
		{"sglang", wantSGLang, "sglang:"},
		{"trtllm", wantTRTLLM, "trtllm_"},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			live, reps := scrapeLive(t, Options{Scenario: "kv_pressure", Seed: 2, Replicas: 2, Policy: tc.policy}, 84*time.Minute)
			for i, fams := range reps {
				for name, want := range tc.want {
					f, ok := fams[name]
					if !ok {
						t.Errorf("replica %d: %s missing", i, name)
						continue
					}
					if got := strings.ToLower(f.GetType().String()); got != want.typ {
						t.Errorf("%s: type %s, want %s", name, got, want.typ)
					}
					for _, m := range f.GetMetric() {
						if want.labels != "" {
							if got := labelNames(m, "finished_reason"); got != want.labels {
								t.Errorf("%s: labels %s, want %s", name, got, want.labels)
							}
						}
						if want.buckets != "" {
							if got := bucketList(m.GetHistogram()); got != want.buckets {
								t.Errorf("%s buckets\n got %s\nwant %s", name, got, want.buckets)
							}
						}
					}
				}
				for name := range fams {
					if strings.HasPrefix(name, "vllm:") {
						t.Errorf("%s telemetry exposes %s", tc.policy, name)
					}
					if !strings.HasPrefix(name, tc.prefix) && !strings.HasPrefix(name, "whyslow_gpu_") {
						t.Errorf("unexpected family %s", name)
					}
				}
			}
			fams := reps[0]
			switch tc.policy {
			case "sglang":
				if v := fams["sglang:num_retracted_requests_total"].GetMetric()[0].GetCounter().GetValue(); v <= 0 {
					t.Errorf("no retractions 9 minutes after the kv_pressure onset (policy sglang)")
				}
				if v := fams["sglang:num_requests_total"].GetMetric()[0].GetCounter().GetValue(); v <= 0 {
					t.Error("no finished requests")
				}
			case "trtllm":
				reasons := map[string]bool{}
				for _, m := range fams["trtllm_request_success_total"].GetMetric() {
					for _, lp := range m.GetLabel() {
						if lp.GetName() == "finished_reason" {
							reasons[lp.GetValue()] = true
						}
					}
				}
				if !reasons["stop"] || !reasons["length"] || !reasons["cancelled"] {
					t.Errorf("finished_reason values %v", reasons)
				}
				if u := fams["trtllm_kv_cache_utilization"].GetMetric()[0].GetGauge().GetValue(); u < 0 || u > 1 {
					t.Errorf("kv utilisation %v", u)
				}
			}
			for _, e := range live.w.engines {
				if a := e.allocatedBlocks(); a < 0 || a > e.pool.used {
					t.Errorf("allocated blocks %d outside [0, %d]", a, e.pool.used)
				}
			}
		})
	}
}

// TestEngineTelemetryBundle checks that a recorded bundle says which engine
// produced it, and that Telemetry can keep vLLM names under another policy.
func TestEngineTelemetryBundle(t *testing.T) {
	for _, tc := range []struct {
		policy, telemetry, engine, series string
	}{
		{"sglang", "", "sglang", "sglang:token_usage"},
		{"trtllm", "", "trtllm", "trtllm_kv_cache_utilization"},
		{"sglang", "vllm", "vllm", "vllm:kv_cache_usage_perc"},
		{"vllm", "", "vllm", "vllm:kv_cache_usage_perc"},
	} {
		t.Run(tc.policy+"/"+tc.engine, func(t *testing.T) {
			b, err := Record(context.Background(), Options{Scenario: "healthy", Seed: 5, Policy: tc.policy,
				Telemetry: tc.telemetry, Trim: true, GPUSeries: "none"})
			if err != nil {
				t.Fatal(err)
			}
			if b.Incident.Engine != tc.engine {
				t.Errorf("incident engine %q, want %q", b.Incident.Engine, tc.engine)
			}
			if !bytes.Contains(b.Metrics, []byte("\n"+tc.series+"{")) {
				t.Errorf("no %s series", tc.series)
			}
			if !bytes.Contains(b.Metrics, []byte(`job="`+tc.engine+`"`)) {
				t.Errorf("no job=%q target label", tc.engine)
			}
			if _, err := parseOM(b.Metrics); err != nil {
				t.Fatalf("OpenMetrics parse: %v", err)
			}
		})
	}
	if _, err := Record(context.Background(), Options{Scenario: "healthy", Seed: 1, Policy: "trtllm", Names: "v0"}); err == nil {
		t.Error("names v0 with trtllm telemetry accepted")
	}
	if _, err := Record(context.Background(), Options{Scenario: "healthy", Seed: 1, Telemetry: "tgi"}); err == nil {
		t.Error("unknown telemetry accepted")
	}
}

// TestObserveChunk checks SGLang's inter-token rule: a chunk of k tokens is
// k observations of interval/k in the buckets and count, the raw interval in the sum.
func TestObserveChunk(t *testing.T) {
	h := newHistogram(bucketsSGLangITL)
	h.observeChunk(0.09, 3) // 3 × 0.03
	h.observeChunk(0.5, 1)
	h.observeChunk(1, 0) // ignored
	if h.count != 4 {
		t.Errorf("count %v, want 4", h.count)
	}
	if h.sum < 0.5899 || h.sum > 0.5901 {
		t.Errorf("sum %v, want 0.59", h.sum)
	}
	i := 0
	for bucketsSGLangITL[i] < 0.03 {
		i++
	}
	if h.counts[i] != 3 {
		t.Errorf("bucket le=%v holds %v, want 3", bucketsSGLangITL[i], h.counts[i])
	}
}
