package sim

import (
	"bytes"
	"context"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// docs/engines.md §2.1–§2.3 (vllm/v1/metrics/loggers.py, buckets.py): V1 names, types and buckets, written out here
// independently of the model's own tables.
var wantV1 = map[string]struct {
	typ     string
	buckets string
}{
	"vllm:num_requests_running":               {"gauge", ""},
	"vllm:num_requests_waiting":               {"gauge", ""},
	"vllm:num_requests_waiting_by_reason":     {"gauge", ""},
	"vllm:kv_cache_usage_perc":                {"gauge", ""},
	"vllm:prefix_cache_queries_total":         {"counter", ""},
	"vllm:prefix_cache_hits_total":            {"counter", ""},
	"vllm:num_preemptions_total":              {"counter", ""},
	"vllm:prompt_tokens_total":                {"counter", ""},
	"vllm:prompt_tokens_by_source_total":      {"counter", ""},
	"vllm:prompt_tokens_cached_total":         {"counter", ""},
	"vllm:generation_tokens_total":            {"counter", ""},
	"vllm:request_success_total":              {"counter", ""},
	"vllm:iteration_tokens_total":             {"histogram", "1,8,16,32,64,128,256,512,1024,2048,4096,8192,16384"},
	"vllm:request_prompt_tokens":              {"histogram", "1,2,5,10,20,50,100,200,500,1000,2000,5000,10000,20000,50000,100000"},
	"vllm:request_generation_tokens":          {"histogram", "1,2,5,10,20,50,100,200,500,1000,2000,5000,10000,20000,50000,100000"},
	"vllm:request_max_num_generation_tokens":  {"histogram", "1,2,5,10,20,50,100,200,500,1000,2000,5000,10000,20000,50000,100000"},
	"vllm:request_params_max_tokens":          {"histogram", "1,2,5,10,20,50,100,200,500,1000,2000,5000,10000,20000,50000,100000"},
	"vllm:request_params_n":                   {"histogram", "1,2,5,10,20"},
	"vllm:request_prefill_kv_computed_tokens": {"histogram", "1,2,5,10,20,50,100,200,500,1000,2000,5000,10000,20000,50000,100000"},
	"vllm:time_to_first_token_seconds": {"histogram",
		"0.001,0.005,0.01,0.02,0.04,0.06,0.08,0.1,0.25,0.5,0.75,1,2.5,5,7.5,10,20,40,80,160,640,2560"},
	"vllm:inter_token_latency_seconds": {"histogram",
		"0.01,0.025,0.05,0.075,0.1,0.15,0.2,0.3,0.4,0.5,0.75,1,2.5,5,7.5,10,20,40,80"},
	"vllm:request_time_per_output_token_seconds": {"histogram",
		"0.01,0.025,0.05,0.075,0.1,0.15,0.2,0.3,0.4,0.5,0.75,1,2.5,5,7.5,10,20,40,80"},
	"vllm:e2e_request_latency_seconds":    {"histogram", latencyV1},
	"vllm:request_queue_time_seconds":     {"histogram", latencyV1},
	"vllm:request_prefill_time_seconds":   {"histogram", latencyV1},
	"vllm:request_decode_time_seconds":    {"histogram", latencyV1},
	"vllm:request_inference_time_seconds": {"histogram", latencyV1},
	"vllm:request_num_preemptions":        {"histogram", "1,2,3,4,5,10,20"},
	"vllm:cache_config_info":              {"gauge", ""},
}

const latencyV1 = "0.3,0.5,0.8,1,1.5,2,2.5,5,10,15,20,30,40,50,60,120,240,480,960,1920,7680"

func bucketList(h *dto.Histogram) string {
	var out []string
	for _, b := range h.GetBucket() {
		out = append(out, strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64))
	}
	return strings.TrimSuffix(strings.Join(out, ","), ",+Inf")
}

// TestServeOutputParses scrapes a live replica and checks every name, type,
// label and bucket against docs/engines.md §2 with Prometheus's text parser.
func TestServeOutputParses(t *testing.T) {
	live, err := NewLive(Options{Scenario: "healthy", Seed: 3, Replicas: 2})
	if err != nil {
		t.Fatal(err)
	}
	live.Advance(10 * time.Minute)
	for replica := 0; replica < live.Replicas(); replica++ {
		rec := httptest.NewRecorder()
		live.Handler(replica).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
			t.Fatalf("content type %q", ct)
		}
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(bytes.NewReader(rec.Body.Bytes()))
		if err != nil {
			t.Fatalf("replica %d: parse: %v", replica, err)
		}
		for name, want := range wantV1 {
			f, ok := fams[name]
			if !ok {
				t.Errorf("replica %d: %s missing", replica, name)
				continue
			}
			if got := strings.ToLower(f.GetType().String()); got != want.typ {
				t.Errorf("%s: type %s, want %s", name, got, want.typ)
			}
			for _, m := range f.GetMetric() {
				l := map[string]string{}
				for _, lp := range m.GetLabel() {
					l[lp.GetName()] = lp.GetValue()
				}
				if l["engine"] != "0" {
					t.Errorf("%s: engine label %q", name, l["engine"])
				}
				if name != "vllm:cache_config_info" && l["model_name"] != modelOf(t, live) {
					t.Errorf("%s: model_name %q", name, l["model_name"])
				}
				if want.buckets != "" {
					if got := bucketList(m.GetHistogram()); got != want.buckets {
						t.Errorf("%s buckets\n got %s\nwant %s", name, got, want.buckets)
					}
				}
			}
		}
		reasons := map[string]bool{}
		for _, m := range fams["vllm:request_success_total"].GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "finished_reason" {
					reasons[lp.GetValue()] = true
				}
			}
		}
		if !reasons["stop"] || !reasons["length"] || !reasons["abort"] {
			t.Errorf("finished_reason values %v", reasons)
		}
		if fams["vllm:generation_tokens_total"].GetMetric()[0].GetCounter().GetValue() <= 0 {
			t.Error("no tokens generated after 10 simulated minutes")
		}
		if _, ok := fams["whyslow_gpu_dram_bandwidth_utilization"]; !ok {
			t.Error("GPU series missing")
		}
	}
}

func modelOf(t *testing.T, l *Live) string {
	t.Helper()
	return l.w.plan.cfg.model.name
}

// TestBundleOpenMetrics parses recorded bundles in every naming and GPU
// series variant with the OpenMetrics parser.
func TestBundleOpenMetrics(t *testing.T) {
	cases := []struct {
		names, gpu string
		want       []string
		absent     []string
	}{
		{"v1", "whyslow",
			[]string{"vllm:kv_cache_usage_perc", "vllm:inter_token_latency_seconds_bucket", "vllm:prefix_cache_hits_total",
				"whyslow_gpu_dram_bandwidth_utilization", "whyslow_gpu_clock_throttle_active", "whyslow_gpu_sm_clock_mhz"},
			[]string{"vllm:gpu_cache_usage_perc", "DCGM_FI_PROF_DRAM_ACTIVE"}},
		{"v0", "dcgm",
			[]string{"vllm:gpu_cache_usage_perc", "vllm:time_per_output_token_seconds_bucket", "vllm:gpu_prefix_cache_queries_total",
				"vllm:gpu_prefix_cache_hits_total", "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_SM_CLOCK",
				"DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP"},
			[]string{"vllm:kv_cache_usage_perc", "vllm:inter_token_latency_seconds_bucket", "whyslow_gpu_sm_active"}},
		{"v1", "none", []string{"vllm:num_requests_waiting"}, []string{"whyslow_gpu_sm_active", "DCGM_FI_DEV_SM_CLOCK"}},
	}
	for _, tc := range cases {
		t.Run(tc.names+"/"+tc.gpu, func(t *testing.T) {
			b, err := Record(context.Background(), Options{Scenario: "gpu_throttle", Seed: 4, Names: tc.names, GPUSeries: tc.gpu,
				Replicas: 2, Trim: true})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasSuffix(b.Metrics, []byte("# EOF\n")) {
				t.Fatal("metrics do not end in # EOF")
			}
			d, err := parseOM(b.Metrics)
			if err != nil {
				t.Fatalf("OpenMetrics parse: %v", err)
			}
			for _, n := range tc.want {
				if len(d.byName[n]) == 0 {
					t.Errorf("%s missing", n)
				}
			}
			for _, n := range tc.absent {
				if len(d.byName[n]) != 0 {
					t.Errorf("%s present", n)
				}
			}
			pods := map[string]bool{}
			for _, s := range d.series {
				for _, l := range []string{"job", "instance", "pod"} {
					if s.labels.Get(l) == "" {
						t.Fatalf("%s lacks target label %s", s.labels, l)
					}
				}
				pods[s.labels.Get("pod")] = true
				if strings.HasPrefix(s.name, "vllm:") && s.name != "vllm:cache_config_info" {
					if s.labels.Get("model_name") == "" {
						t.Fatalf("%s lacks model_name", s.labels)
					}
					if (s.labels.Get("engine") == "") != (tc.names == "v0") {
						t.Fatalf("%s: engine label wrong for %s names", s.labels, tc.names)
					}
				}
			}
			if len(pods) != 2 {
				t.Errorf("pods %v, want 2", pods)
			}
			// Trimmed: both windows plus margin, nothing in between.
			at := b.Incident.At
			for _, s := range d.byName["vllm:num_requests_running"] {
				var inGap int
				for _, ts := range s.ts {
					tm := time.UnixMilli(ts)
					if tm.After(at.Add(-b.Incident.Baseline)) && tm.Before(at.Add(-b.Incident.Window-trimMargin)) {
						inGap++
					}
				}
				if inGap > 0 || len(s.ts) < 2*int((b.Incident.Window+trimMargin)/(15*time.Second)) {
					t.Errorf("trim kept %d samples, %d between the windows", len(s.ts), inGap)
				}
				if s.ts[len(s.ts)-1] != at.UnixMilli() {
					t.Errorf("last sample at %v, want at %v", time.UnixMilli(s.ts[len(s.ts)-1]).UTC(), at)
				}
			}
			if tc.gpu == "whyslow" {
				var reasons []string
				for _, s := range d.byName["whyslow_gpu_clock_throttle_active"] {
					if v, _ := s.valueAt(at.UnixMilli()); v == 1 {
						reasons = append(reasons, s.labels.Get("reason"))
					}
				}
				sort.Strings(reasons)
				if len(reasons) == 0 || reasons[0] != b.Truth.Params["throttle_reason"] {
					t.Errorf("throttle reasons at incident %v, want %v", reasons, b.Truth.Params["throttle_reason"])
				}
			}
		})
	}
}

func TestOptionsErrors(t *testing.T) {
	cases := []struct {
		name string
		opt  Options
		want string
	}{
		{"unknown scenario", Options{Scenario: "nope"}, `unknown scenario "nope"`},
		{"names", Options{Scenario: "healthy", Names: "v2"}, "names"},
		{"gpu series", Options{Scenario: "healthy", GPUSeries: "nvml"}, "gpu series"},
		{"replicas", Options{Scenario: "healthy", Replicas: -1}, "replicas"},
		{"policy", Options{Scenario: "healthy", Policy: "tgi"}, "policy"},
		{"scrape", Options{Scenario: "healthy", ScrapeInterval: time.Millisecond}, "scrape interval"},
		{"magnitude range", Options{Scenario: "gpu_throttle", Wide: true, Magnitude: 1.5}, "magnitude"},
		{"magnitude narrow", Options{Scenario: "gpu_throttle", Magnitude: 0.5}, "only wide draws"},
		{"compound", Options{Scenario: "kv_pressure+context_growth"}, "not a pair"},
		{"capacity loss on one replica", Options{Scenario: "capacity_loss", Replicas: 1}, "at least 2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Record(context.Background(), tc.opt)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want %q", err, tc.want)
			}
		})
	}
}

func TestRecordDeterministic(t *testing.T) {
	opt := Options{Scenario: "abort_storm", Seed: 9, Trim: true}
	a, err := Record(context.Background(), opt)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Record(context.Background(), opt)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Metrics, b.Metrics) {
		t.Error("two recordings with the same seed differ")
	}
	// Clients aborting is no fault of the engine: a healthy truth.
	if len(a.Truth.Causes) != 0 {
		t.Errorf("causes %v, want none", a.Truth.Causes)
	}
	if got := a.Incident.At.Sub(a.Truth.Onset); got <= a.Incident.Window {
		t.Errorf("at is %s after onset, want more than the window", got)
	}
}

func TestScenariosCatalogue(t *testing.T) {
	causes := map[string]bool{}
	healthy := 0
	for _, s := range Scenarios() {
		if s.Summary == "" {
			t.Errorf("%s has no summary", s.Name)
		}
		if s.Cause == "" {
			healthy++
		}
		causes[s.Cause] = true
	}
	for _, c := range []string{"queue_saturation", "prefill_contention", "chunked_prefill_mismatch", "kv_cache_pressure",
		"memory_bandwidth_saturation", "gpu_throttling", "prefix_cache_regression", "request_errors", "load_imbalance",
		"outside_engine"} {
		if !causes[c] {
			t.Errorf("no scenario injects %s", c)
		}
	}
	if healthy < 3 {
		t.Errorf("%d healthy variants, want healthy plus two hard negatives", healthy)
	}
}
