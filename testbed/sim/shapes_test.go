package sim

import (
	"context"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// familyNames is the sorted family names of a parsed scrape.
func familyNames(fams map[string]*dto.MetricFamily) []string {
	var out []string
	for n := range fams {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// sameSet reports the names missing from got and the ones got has beyond want.
func sameSet(got, want []string) (missing, extra []string) {
	g, w := map[string]bool{}, map[string]bool{}
	for _, n := range got {
		g[n] = true
	}
	for _, n := range want {
		w[n] = true
		if !g[n] {
			missing = append(missing, n)
		}
	}
	for _, n := range got {
		if !w[n] {
			extra = append(extra, n)
		}
	}
	return missing, extra
}

func labelMap(m *dto.Metric) map[string]string {
	l := map[string]string{}
	for _, lp := range m.GetLabel() {
		l[lp.GetName()] = lp.GetValue()
	}
	return l
}

// removedTRTLLM are names of an unmerged trtllm-serve version that no
// release ships.
var removedTRTLLM = []string{"trtllm_num_active_requests", "trtllm_server_queue_length", "trtllm_prefill_num_context_requests"}

// The five per-request families of TensorRT-LLM 1.1 and older (collector.py @89fd9b74).
var trtllmFive = []string{"request_success_total", "e2e_request_latency_seconds", "time_to_first_token_seconds",
	"time_per_output_token_seconds", "request_queue_time_seconds"}

func prefixed(p string, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = p + n
	}
	return out
}

// TestTRTLLMShapes scrapes each TensorRT-LLM shape and checks that it has
// exactly its families, with its labels and path, and none of the removed
// names.
func TestTRTLLMShapes(t *testing.T) {
	v1 := make([]string, 0, len(wantTRTLLM))
	for n := range wantTRTLLM {
		if !strings.HasPrefix(n, "whyslow_gpu_") {
			v1 = append(v1, n)
		}
	}
	for _, tc := range []struct {
		names       string
		want        []string
		model, eng  string // model_name and engine_type of the trtllm series
		path        string
		processStat bool
	}{
		{"v1", v1, "", "trtllm", "/prometheus/metrics", true},
		{"unprefixed", trtllmFive, "undefined", "undefined", "/prometheus/metrics", false},
		{"dynamo", append(prefixed("trtllm_", trtllmFive), "dynamo_component_requests_total", "dynamo_component_inflight_requests"),
			"", "trtllm", "/metrics", false},
	} {
		t.Run(tc.names, func(t *testing.T) {
			live, reps := scrapeLive(t, Options{Scenario: "healthy", Seed: 2, Replicas: 2, Policy: "trtllm", Names: tc.names,
				GPUSeries: "none"}, 20*time.Minute)
			model := tc.model
			if model == "" {
				model = modelOf(t, live)
			}
			if live.MetricsPath() != tc.path || live.ProcessStart() != tc.processStat {
				t.Errorf("path %s, process start %v; want %s, %v", live.MetricsPath(), live.ProcessStart(), tc.path, tc.processStat)
			}
			for i, fams := range reps {
				missing, extra := sameSet(familyNames(fams), tc.want)
				if len(missing)+len(extra) > 0 {
					t.Errorf("replica %d: missing %v, unexpected %v", i, missing, extra)
				}
				for _, n := range removedTRTLLM {
					if fams[n] != nil {
						t.Errorf("removed name %s exposed", n)
					}
				}
				for name, f := range fams {
					for _, m := range f.GetMetric() {
						l := labelMap(m)
						if strings.HasPrefix(name, "dynamo_") {
							if l["dynamo_component"] != "tensorrt_llm" || l["dynamo_endpoint"] != "generate" || l["model_name"] != "" {
								t.Errorf("%s labels %v", name, l)
							}
							continue
						}
						if l["model_name"] != model || l["engine_type"] != tc.eng {
							t.Errorf("%s: model_name %q engine_type %q, want %q %q", name, l["model_name"], l["engine_type"], model, tc.eng)
						}
					}
				}
				for _, n := range []string{"time_to_first_token_seconds", "request_queue_time_seconds"} {
					if tc.names != "unprefixed" {
						n = "trtllm_" + n
					}
					h := fams[n].GetMetric()[0].GetHistogram()
					if h.GetSampleCount() == 0 {
						t.Errorf("replica %d: %s has no observations after 20 minutes", i, n)
					}
				}
			}
			if tc.names == "v1" {
				fams := reps[0]
				e := live.w.engines[0]
				if v := fams["trtllm_kv_cache_max_blocks"].GetMetric()[0].GetGauge().GetValue(); v != float64(e.pool.total) {
					t.Errorf("max blocks %v, want %d", v, e.pool.total)
				}
				if v := fams["trtllm_max_num_tokens_runtime"].GetMetric()[0].GetGauge().GetValue(); v != 8192 {
					t.Errorf("max_num_tokens_runtime %v", v)
				}
				used := fams["trtllm_kv_cache_used_blocks"].GetMetric()[0].GetGauge().GetValue()
				util := fams["trtllm_kv_cache_utilization"].GetMetric()[0].GetGauge().GetValue()
				if d := used/float64(e.pool.total) - util; d > 1e-9 || d < -1e-9 {
					t.Errorf("utilization %v is not used %v / max %d", util, used, e.pool.total)
				}
			}
		})
	}
}

// TestTRTLLMZeroQueue checks the collectors' zero-skipping: the older
// collector (unprefixed, dynamo) drops queue times of exactly 0, the
// current one keeps them; both drop TPOT 0.
func TestTRTLLMZeroQueue(t *testing.T) {
	for _, names := range []string{"v1", "unprefixed", "dynamo"} {
		t.Run(names, func(t *testing.T) {
			var finished, zeroQueue, oneToken int
			opt := Options{Scenario: "healthy", Seed: 2, Replicas: 1, Policy: "trtllm", Names: names, GPUSeries: "none",
				OnRequest: func(r RequestRecord) {
					if r.FinishedReason != "stop" && r.FinishedReason != "length" {
						return
					}
					finished++
					if r.Scheduled.Equal(r.Queued) {
						zeroQueue++
					}
					if r.OutputTokens <= 1 {
						oneToken++
					}
				}}
			live, err := NewLive(opt)
			if err != nil {
				t.Fatal(err)
			}
			live.Advance(20 * time.Minute)
			tel := live.w.engines[0].tel
			if zeroQueue == 0 || finished == 0 {
				t.Fatalf("%d of %d finished requests queued for 0 s; the check needs some", zeroQueue, finished)
			}
			want := finished
			if names != "v1" {
				want -= zeroQueue
			}
			if got := int(tel.queue.count); got != want {
				t.Errorf("queue observations %d, want %d (%d finished, %d with queue 0)", got, want, finished, zeroQueue)
			}
			if got := int(tel.reqTPOT.count); got != finished-oneToken {
				t.Errorf("TPOT observations %d, want %d", got, finished-oneToken)
			}
		})
	}
}

// TestTRTLLMShapeBundles records each TensorRT-LLM shape and parses the
// bundle: the same families, a selector that matches its series, and an
// incident.yaml with nothing a user would not have.
func TestTRTLLMShapeBundles(t *testing.T) {
	for _, tc := range []struct {
		names, selector, job, series string
		absent                       []string
	}{
		{"v1", `model_name="meta-llama/`, "trtllm", "trtllm_num_requests_running", removedTRTLLM},
		{"unprefixed", `job="trtllm"`, "trtllm", "e2e_request_latency_seconds_count",
			[]string{"trtllm_e2e_request_latency_seconds_count", "trtllm_num_requests_running"}},
		{"dynamo", `model_name="meta-llama/`, "dynamo", "dynamo_component_requests_total",
			[]string{"trtllm_num_requests_running", "trtllm_kv_cache_utilization", "trtllm_prefill_batch_tokens_count"}},
	} {
		t.Run(tc.names, func(t *testing.T) {
			b, d := recordParsed(t, Options{Scenario: "healthy", Seed: 5, Policy: "trtllm", Names: tc.names,
				Trim: true, GPUSeries: "none", Replicas: 1})
			if len(d.byName[tc.series]) == 0 {
				t.Errorf("no %s", tc.series)
			}
			for _, n := range tc.absent {
				if len(d.byName[n]) > 0 {
					t.Errorf("%s present", n)
				}
			}
			if b.Incident.Engine != "trtllm" || !strings.HasPrefix(b.Incident.Selector, tc.selector) {
				t.Errorf("incident engine %q selector %q", b.Incident.Engine, b.Incident.Selector)
			}
			if strings.Contains(b.Incident.Notes, tc.names) && tc.names != "v1" {
				t.Errorf("incident notes name the shape: %q", b.Incident.Notes)
			}
			for _, s := range d.series {
				if s.labels.Get("job") != tc.job {
					t.Errorf("%s: job %q, want %q", s.labels, s.labels.Get("job"), tc.job)
				}
			}
			if b.Truth.Params["names"] != tc.names {
				t.Errorf("truth names %v", b.Truth.Params["names"])
			}
		})
	}
}

// TestSGLangMultiprocess checks the multiprocess shape: what v1 has, no
// process_start_time_seconds or *_created samples, a pid label on the
// gauge without a multiprocess mode, and no process start line to serve.
func TestSGLangMultiprocess(t *testing.T) {
	opt := Options{Scenario: "healthy", Seed: 2, Replicas: 2, Policy: "sglang", GPUSeries: "none"}
	_, v1 := scrapeLive(t, opt, 10*time.Minute)
	opt.Names = "multiprocess"
	live, mp := scrapeLive(t, opt, 10*time.Minute)
	if live.ProcessStart() || live.MetricsPath() != "/metrics" {
		t.Errorf("process start %v, path %s", live.ProcessStart(), live.MetricsPath())
	}
	for i := range mp {
		missing, extra := sameSet(familyNames(mp[i]), familyNames(v1[i]))
		if len(missing)+len(extra) > 0 {
			t.Errorf("replica %d: families differ from v1: missing %v, extra %v", i, missing, extra)
		}
		for name, f := range mp[i] {
			if strings.HasPrefix(name, "process_") || strings.HasSuffix(name, "_created") {
				t.Errorf("multiprocess exposes %s", name)
			}
			for _, m := range f.GetMetric() {
				pid := labelMap(m)["pid"]
				if (pid != "") != (name == "sglang:num_retracted_reqs") {
					t.Errorf("%s: pid %q", name, pid)
				}
			}
		}
	}
	for _, n := range []string{"sglang:http_requests_total", "sglang:http_responses_total"} {
		if mp[0][n] == nil {
			t.Errorf("%s missing", n)
		}
	}
	var ok, failed float64
	for _, m := range mp[0]["sglang:http_responses_total"].GetMetric() {
		switch labelMap(m)["status_code"] {
		case "200":
			ok = m.GetCounter().GetValue()
		case "500":
			failed = m.GetCounter().GetValue()
		}
	}
	req := mp[0]["sglang:http_requests_total"].GetMetric()[0].GetCounter().GetValue()
	if ok <= 0 || ok+failed > req {
		t.Errorf("http responses 200=%v 500=%v, requests %v", ok, failed, req)
	}
	_, d := recordParsed(t, Options{Scenario: "error_burst", Seed: 1, Policy: "sglang", Names: "multiprocess",
		Trim: true, GPUSeries: "none", Replicas: 1})
	for name := range d.byName {
		if strings.HasPrefix(name, "process_") || strings.HasSuffix(name, "_created") {
			t.Errorf("bundle has %s", name)
		}
	}
	var errs float64
	for _, s := range d.byName["sglang:http_responses_total"] {
		if s.labels.Get("status_code") == "500" {
			errs = s.vals[len(s.vals)-1]
		}
	}
	if errs <= 0 {
		t.Error("error_burst shows no 500 responses")
	}
}

// TestSGLangDP checks DP attention: every scheduler-side series per
// dp_rank, summing to the replica's totals; tokenizer-side series as
// without DP.
func TestSGLangDP(t *testing.T) {
	live, reps := scrapeLive(t, Options{Scenario: "kv_pressure", Seed: 2, Replicas: 2, Policy: "sglang", Names: "dp",
		GPUSeries: "none"}, 84*time.Minute)
	for i, fams := range reps {
		e := live.w.engines[i]
		for name, want := range wantSGLang {
			f := fams[name]
			if f == nil {
				t.Errorf("replica %d: %s missing", i, name)
				continue
			}
			ranks := map[string]bool{}
			for _, m := range f.GetMetric() {
				l := labelMap(m)
				ranks[l["dp_rank"]] = true
				if want.labels == sglangTok && l["dp_rank"] != "" {
					t.Errorf("tokenizer series %s has dp_rank", name)
				}
			}
			if want.labels == sglangSched && (len(ranks) != dpRanks || ranks[""]) {
				t.Errorf("%s: dp_rank values %v, want %d ranks", name, ranks, dpRanks)
			}
		}
		sum := func(name string) float64 {
			v := 0.0
			for _, m := range fams[name].GetMetric() {
				v += m.GetGauge().GetValue() + m.GetCounter().GetValue()
			}
			return v
		}
		for _, c := range []struct {
			name string
			want float64
		}{
			{"sglang:num_running_reqs", float64(e.numRunning())},
			{"sglang:num_queue_reqs", float64(e.nWait)},
			{"sglang:num_used_tokens", float64(e.pool.used * blockSize)},
			{"sglang:max_total_num_tokens", float64(e.cfg.numBlocks * blockSize)},
			{"sglang:num_retracted_requests_total", e.tel.preemptions},
		} {
			if got := sum(c.name); got != c.want {
				t.Errorf("replica %d: %s sums to %v over ranks, want %v", i, c.name, got, c.want)
			}
		}
		if e.numRunning() == 0 || e.tel.preemptions == 0 {
			t.Errorf("replica %d: %d running, %v retractions: the sums prove little", i, e.numRunning(), e.tel.preemptions)
		}
		// Token usage per rank is the rank's used tokens over its pool.
		used := map[string]float64{}
		for _, m := range fams["sglang:num_used_tokens"].GetMetric() {
			used[labelMap(m)["dp_rank"]] = m.GetGauge().GetValue()
		}
		pool := map[string]float64{}
		for _, m := range fams["sglang:max_total_num_tokens"].GetMetric() {
			pool[labelMap(m)["dp_rank"]] = m.GetGauge().GetValue()
		}
		for _, m := range fams["sglang:token_usage"].GetMetric() {
			k := labelMap(m)["dp_rank"]
			if want := min(1, used[k]/pool[k]); m.GetGauge().GetValue() != want {
				t.Errorf("rank %s token usage %v, want %v", k, m.GetGauge().GetValue(), want)
			}
		}
		var count uint64
		for _, m := range fams["sglang:queue_time_seconds"].GetMetric() {
			count += m.GetHistogram().GetSampleCount()
		}
		if count != uint64(e.tel.queue.count) {
			t.Errorf("queue time observations %d over ranks, want %v", count, e.tel.queue.count)
		}
	}
}

// dcgmBase is the DEV fields every counters set has.
var dcgmBase = []string{"DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE",
	"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED"}

// dcgmDefault is what etc/default-counters.csv adds that the model drives.
var dcgmDefault = []string{"DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_ENC_UTIL",
	"DCGM_FI_DEV_DEC_UTIL", "DCGM_FI_DEV_XID_ERRORS"}

// TestDCGMShapes records each counters set and layout and checks the
// families, the counter samples without _total, the violation time and
// the honorLabels: false relabelling.
func TestDCGMShapes(t *testing.T) {
	join := func(parts ...[]string) []string {
		var out []string
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	prof := []string{"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE"}
	viol := []string{"DCGM_FI_DEV_POWER_VIOLATION", "DCGM_FI_DEV_THERMAL_VIOLATION"}
	for _, tc := range []struct {
		counters, layout string
		want             []string
	}{
		{"", "", join(dcgmBase, prof)},
		{"default", "", join(dcgmBase, dcgmDefault)},
		{"violations", "", join(dcgmBase, dcgmDefault, viol)},
		{"violations", "k8s", join(dcgmBase, dcgmDefault, viol)},
	} {
		t.Run(tc.counters+"/"+tc.layout, func(t *testing.T) {
			// gpu_throttle seed 1 throttles by sw_power_cap (narrow_golden_test.go).
			b, d := recordParsed(t, Options{Scenario: "gpu_throttle", Seed: 1, GPUSeries: "dcgm", Replicas: 2,
				DCGMCounters: tc.counters, DCGMLayout: tc.layout, Trim: true})
			var got []string
			for n := range d.byName {
				if strings.HasPrefix(n, "DCGM_") {
					got = append(got, n)
				}
			}
			missing, extra := sameSet(got, tc.want)
			if len(missing)+len(extra) > 0 {
				t.Errorf("missing %v, unexpected %v", missing, extra)
			}
			if d.types["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] != "" && d.types["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] != "counter" {
				t.Errorf("energy type %q", d.types["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"])
			}
			at := b.Incident.At.UnixMilli()
			from := b.Incident.At.Add(-b.Incident.Window).UnixMilli()
			if tc.counters == "violations" {
				for _, s := range d.byName["DCGM_FI_DEV_POWER_VIOLATION"] {
					v1, _ := s.valueAt(at)
					v0, _ := s.valueAt(from)
					// The clocks are capped through the whole window: ~1e9 ns per second.
					if share := (v1 - v0) / 1e9 / b.Incident.Window.Seconds(); share < 0.9 || share > 1.01 {
						t.Errorf("power violation share of the window %v, want ~1", share)
					}
				}
				for _, s := range d.byName["DCGM_FI_DEV_THERMAL_VIOLATION"] {
					if v, _ := s.valueAt(at); v != 0 {
						t.Errorf("thermal violation %v under a power cap", v)
					}
				}
			}
			enginePods := map[string]bool{}
			for _, s := range d.byName["vllm:num_requests_running"] {
				enginePods[s.labels.Get("pod")] = true
			}
			for _, s := range d.series {
				if !strings.HasPrefix(s.name, "DCGM_") {
					continue
				}
				l := s.labels
				if tc.layout == "" {
					if !enginePods[l.Get("pod")] || l.Get("exported_pod") != "" || l.Get("namespace") != "llm" {
						t.Fatalf("honor_labels layout: %s", l)
					}
					continue
				}
				if !enginePods[l.Get("exported_pod")] || l.Get("exported_namespace") != "llm" || l.Get("exported_container") != "vllm" {
					t.Fatalf("k8s layout: workload labels %s", l)
				}
				if !strings.HasPrefix(l.Get("pod"), "dcgm-exporter-") || len(l.Get("pod")) != len("dcgm-exporter-")+5 ||
					l.Get("namespace") != "gpu-operator" || l.Get("container") != "exporter" || enginePods[l.Get("pod")] {
					t.Fatalf("k8s layout: exporter labels %s", l)
				}
			}
		})
	}
}

// TestDCGMK8sLive checks that the exporter itself still serves the
// workload's pod label: the renaming is Prometheus's.
func TestDCGMK8sLive(t *testing.T) {
	live, reps := scrapeLive(t, Options{Scenario: "healthy", Seed: 1, GPUSeries: "dcgm", DCGMLayout: "k8s", DCGMCounters: "violations",
		Replicas: 2}, 2*time.Minute)
	for i, fams := range reps {
		f := fams["DCGM_FI_DEV_POWER_VIOLATION"]
		if f == nil || strings.ToLower(f.GetType().String()) != "counter" {
			t.Fatalf("replica %d: power violation family %v", i, f)
		}
		for _, m := range f.GetMetric() {
			l := labelMap(m)
			if l["pod"] != live.w.target(i).pod || l["exported_pod"] != "" {
				t.Errorf("replica %d serves %v", i, l)
			}
		}
	}
	rec := httptest.NewRecorder()
	live.Handler(0).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(rec.Body.String(), "\nDCGM_FI_DEV_POWER_VIOLATION{") || strings.Contains(rec.Body.String(), "DCGM_FI_DEV_POWER_VIOLATION_total") {
		t.Error("violation counter not served under its bare name")
	}
}

// TestShapeOptionErrors checks that shapes are refused where they do not
// belong.
func TestShapeOptionErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  Options
		want string
	}{
		{"unprefixed on vllm", Options{Names: "unprefixed"}, "only trtllm"},
		{"dynamo on sglang", Options{Names: "dynamo", Policy: "sglang"}, "only trtllm"},
		{"multiprocess on trtllm", Options{Names: "multiprocess", Policy: "trtllm"}, "only sglang"},
		{"dp on vllm", Options{Names: "dp"}, "only sglang"},
		{"dp on sglang policy, vllm telemetry", Options{Names: "dp", Policy: "sglang", Telemetry: "vllm"}, "only sglang"},
		{"v0 on trtllm", Options{Names: "v0", Policy: "trtllm"}, "no v0"},
		{"unknown names", Options{Names: "v2"}, "want v1 or v0"},
		{"dcgm layout", Options{GPUSeries: "dcgm", DCGMLayout: "openshift"}, "dcgm layout"},
		{"dcgm counters", Options{GPUSeries: "dcgm", DCGMCounters: "all"}, "dcgm counters"},
		{"dcgm layout without dcgm", Options{DCGMLayout: "k8s"}, "need gpu series dcgm or both"},
		{"dcgm counters without dcgm", Options{GPUSeries: "none", DCGMCounters: "default"}, "need gpu series dcgm or both"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opt.Scenario = "healthy"
			_, err := NewLive(tc.opt)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want %q", err, tc.want)
			}
		})
	}
	for _, ok := range []Options{
		{Names: "unprefixed", Policy: "trtllm"}, {Names: "dynamo", Telemetry: "trtllm"}, {Names: "multiprocess", Policy: "sglang"},
		{Names: "dp", Policy: "sglang"}, {GPUSeries: "both", DCGMLayout: "k8s", DCGMCounters: "default"},
	} {
		ok.Scenario = "healthy"
		if _, err := NewLive(ok); err != nil {
			t.Errorf("%+v: %v", ok, err)
		}
	}
}

// recordParsed records a bundle and parses its metrics.
func recordParsed(t *testing.T, opt Options) (*Bundle, *omData) {
	t.Helper()
	b, err := Record(context.Background(), opt)
	if err != nil {
		t.Fatal(err)
	}
	d, err := parseOM(b.Metrics)
	if err != nil {
		t.Fatalf("OpenMetrics parse: %v", err)
	}
	return b, d
}
