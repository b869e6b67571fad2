package reqsim

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// modelShort names pods after the model.
func modelShort(m string) string {
	s := strings.ToLower(m[strings.LastIndex(m, "/")+1:])
	s = strings.ReplaceAll(s, ".", "-")
	return strings.TrimSuffix(s, "-instruct")
}

func (p *plan) pod(i int) string {
	return fmt.Sprintf("%s-%s-%d", p.pol.engine(), modelShort(p.hw.model), i)
}

func (p *plan) target(i int, port int, job string) labels {
	return labels{"instance": fmt.Sprintf("10.0.0.%d:%d", 10+i, port), "job": job, "pod": p.pod(i)}
}

// declare builds the registry of the instance: one engine's families per
// replica, plus the GPU series the draw asks for.
func (s *state) declare() {
	p := s.p
	g := newRegistry(len(s.reps))
	s.reg = g
	for i, rp := range s.reps {
		switch p.pol {
		case vllmV1:
			s.vllmFamilies(g, i, rp)
		case sglangPF:
			s.sglangFamilies(g, i, rp)
		default:
			s.trtFamilies(g, i, rp)
		}
		if p.gpuKind == "whyslow" || p.gpuKind == "both" {
			s.whyslowGPU(g, i, rp)
		}
		if p.gpuKind == "dcgm" || p.gpuKind == "both" {
			s.dcgmGPU(g, i, rp)
		}
	}
}

var finishNames = [nFinish]string{"stop", "length", "abort", "error"}

// vllmFamilies: vLLM V1 (vllm/v1/metrics/loggers.py). Names "v1" is the
// current release; "v0" is the 0.10 era, which still exported the
// deprecated gpu_cache_usage_perc, gpu_prefix_cache_* and
// time_per_output_token_seconds beside the new names and had no "error"
// finish reason.
func (s *state) vllmFamilies(g *registry, i int, rp *replica) {
	p := s.p
	legacy := p.names == "v0"
	tgt := p.target(i, 8000, "vllm")
	own := tgt.with("model_name", p.hw.model, "engine", "0")
	t := func() *tel { return rp.tel }
	g.scalar(i, "vllm:num_requests_running", "Number of requests in model execution batches.", gauge, own,
		func() float64 { return float64(len(rp.running)) })
	g.scalar(i, "vllm:num_requests_waiting", "Number of requests waiting to be processed.", gauge, own,
		func() float64 { return float64(len(rp.waiting)) })
	if legacy {
		g.scalar(i, "vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: Use vllm:kv_cache_usage_perc instead.", gauge, own, rp.kvUsage)
	}
	g.scalar(i, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", gauge, own, rp.kvUsage)
	if !p.omits(famPrefix) {
		if legacy {
			g.scalar(i, "vllm:gpu_prefix_cache_queries_total", "GPU prefix cache queries, in terms of number of queried tokens.", counter, own,
				func() float64 { return t().promptTok })
			g.scalar(i, "vllm:gpu_prefix_cache_hits_total", "GPU prefix cache hits, in terms of number of cached tokens.", counter, own,
				func() float64 { return t().cachedTok })
		}
		g.scalar(i, "vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", counter, own,
			func() float64 { return t().promptTok })
		g.scalar(i, "vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", counter, own,
			func() float64 { return t().cachedTok })
	}
	g.scalar(i, "vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", counter, own,
		func() float64 { return t().preempts })
	g.scalar(i, "vllm:prompt_tokens_total", "Number of prefill tokens processed.", counter, own,
		func() float64 { return t().promptTok })
	g.scalar(i, "vllm:generation_tokens_total", "Number of generation tokens processed.", counter, own,
		func() float64 { return t().genTok })
	for k, reason := range finishNames {
		if legacy && k == finError {
			continue
		}
		g.scalar(i, "vllm:request_success_total", "Count of successfully processed requests.", counter,
			own.with("finished_reason", reason), func() float64 { return t().finish[k] })
	}
	if !p.omits(famIteration) {
		g.hist(i, "vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", bIter, own,
			func() *hist { return t().iter })
	}
	tok := tokenBuckets(p.hw.maxLen)
	g.hist(i, "vllm:request_prompt_tokens", "Number of prefill tokens processed.", tok, own, func() *hist { return t().promptLen })
	g.hist(i, "vllm:request_generation_tokens", "Number of generation tokens processed.", tok, own, func() *hist { return t().genLen })
	g.hist(i, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", bTTFT, own, func() *hist { return t().ttft })
	if legacy {
		g.hist(i, "vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.", bITL, own, func() *hist { return t().itl })
	} else {
		g.hist(i, "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", bITL, own, func() *hist { return t().itl })
		g.hist(i, "vllm:request_time_per_output_token_seconds", "Histogram of time_per_output_token_seconds per request.", bITL, own,
			func() *hist { return t().tpot })
	}
	g.hist(i, "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", bLatency, own, func() *hist { return t().e2e })
	if !p.omits(famPhase) {
		g.hist(i, "vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", bLatency, own,
			func() *hist { return t().queue })
		g.hist(i, "vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", bLatency, own,
			func() *hist { return t().prefill })
		g.hist(i, "vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", bLatency, own,
			func() *hist { return t().decode })
	}
	if !p.omits(famHTTP) {
		for _, st := range []string{"2xx", "5xx"} {
			g.scalar(i, "http_requests_total", "Total number of requests by method, status and handler.", counter,
				tgt.with("handler", "/v1/chat/completions", "method", "POST", "status", st), func() float64 {
					tt := t()
					if st == "5xx" {
						return tt.finish[finError]
					}
					return tt.finish[finStop] + tt.finish[finLength] + tt.finish[finAbort]
				})
		}
	}
}

// sglangFamilies: SGLang with --enable-metrics
// (python/sglang/srt/metrics/collector.py): scheduler-side series carry
// engine_type, tp_rank and pp_rank; tokenizer-side ones model_name only.
// Names "v0" gives the inter-token histogram its old name
// time_per_output_token_seconds. A server-side failure is aborted with an
// error status: counted in num_aborted_requests and as an HTTP 500.
func (s *state) sglangFamilies(g *registry, i int, rp *replica) {
	p := s.p
	tgt := p.target(i, 30000, "sglang")
	tok := tgt.with("model_name", p.hw.model)
	sch := tok.with("engine_type", "unified", "tp_rank", "0", "pp_rank", "0")
	t := func() *tel { return rp.tel }
	g.scalar(i, "sglang:num_running_reqs", "The number of running requests.", gauge, sch, func() float64 { return float64(len(rp.running)) })
	g.scalar(i, "sglang:num_queue_reqs", "The number of requests in the waiting queue.", gauge, sch, func() float64 { return float64(len(rp.waiting)) })
	g.scalar(i, "sglang:num_used_tokens", "The number of used tokens.", gauge, sch,
		func() float64 { return float64((rp.total - rp.free) * blockTokens) })
	g.scalar(i, "sglang:token_usage", "The token usage.", gauge, sch, rp.kvUsage)
	g.scalar(i, "sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.", gauge, sch,
		func() float64 { return float64(rp.total * blockTokens) })
	g.scalar(i, "sglang:gen_throughput", "The generation throughput (token/s).", gauge, sch, func() float64 { return t().genRate })
	if !p.omits(famPrefix) {
		g.scalar(i, "sglang:cache_hit_rate", "The prefix cache hit rate.", gauge, sch, func() float64 { return t().hitRate })
	}
	g.scalar(i, "sglang:num_retracted_requests_total", "Total number of retracted requests.", counter, sch,
		func() float64 { return t().preempts })
	if !p.omits(famPhase) {
		g.hist(i, "sglang:queue_time_seconds", "Histogram of queueing time in seconds.", bSGQueue, sch, func() *hist { return t().queue })
	}
	g.scalar(i, "sglang:prompt_tokens_total", "Number of prefill tokens processed.", counter, tok, func() float64 { return t().promptTok })
	g.scalar(i, "sglang:generation_tokens_total", "Number of generation tokens processed.", counter, tok, func() float64 { return t().genTok })
	if !p.omits(famPrefix) {
		g.scalar(i, "sglang:cached_tokens_total", "Number of cached prompt tokens.", counter, tok, func() float64 { return t().cachedTok })
	}
	g.scalar(i, "sglang:num_requests_total", "Number of requests processed.", counter, tok, func() float64 { return t().finishedAll() })
	g.scalar(i, "sglang:num_aborted_requests_total", "Number of requests aborted.", counter, tok,
		func() float64 { return t().finish[finAbort] + t().finish[finError] })
	g.hist(i, "sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", bSGTTFT, tok, func() *hist { return t().ttft })
	itl := "sglang:inter_token_latency_seconds"
	if p.names == "v0" {
		itl = "sglang:time_per_output_token_seconds"
	}
	g.hist(i, itl, "Histogram of inter-token latency in seconds.", bSGITL, tok, func() *hist { return t().itl })
	g.hist(i, "sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", bSGE2E, tok, func() *hist { return t().e2e })
	if !p.omits(famPromptLen) {
		g.hist(i, "sglang:prompt_tokens_histogram", "Histogram of prompt token length.", bSGTokens, tok, func() *hist { return t().promptLen })
		g.hist(i, "sglang:generation_tokens_histogram", "Histogram of generation token length.", bSGTokens, tok, func() *hist { return t().genLen })
	}
	if !p.omits(famHTTP) {
		http := tgt.with("endpoint", "/v1/chat/completions", "method", "POST")
		g.scalar(i, "sglang:http_requests_total", "Total number of HTTP requests by endpoint and method", counter, http,
			func() float64 { return t().arrivals })
		g.scalar(i, "sglang:http_responses_total", "Total number of HTTP responses by endpoint and status code", counter,
			http.with("status_code", "200"), func() float64 { tt := t(); return tt.finishedAll() - tt.finish[finError] })
		g.scalar(i, "sglang:http_responses_total", "Total number of HTTP responses by endpoint and status code", counter,
			http.with("status_code", "500"), func() float64 { return t().finish[finError] })
	}
}

// trtFamilies: trtllm-serve with return_perf_metrics
// (tensorrt_llm/metrics/collector.py): TPOT is per request (there is no
// per-token histogram); no preemption counter (GUARANTEED_NO_EVICT never
// evicts); a failed request has no finish reason and is counted in
// request_error_total{http_code="500"}; a client abort is "cancelled".
func (s *state) trtFamilies(g *registry, i int, rp *replica) {
	p := s.p
	own := p.target(i, 8000, "trtllm").with("model_name", p.hw.model, "engine_type", "trtllm")
	t := func() *tel { return rp.tel }
	for k, reason := range []string{"stop", "length", "cancelled"} {
		g.scalar(i, "trtllm_request_success_total", "Count of successfully processed requests.", counter,
			own.with("finished_reason", reason), func() float64 { return t().finish[k] })
	}
	g.hist(i, "trtllm_e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.", bLatency, own, func() *hist { return t().e2e })
	g.hist(i, "trtllm_time_to_first_token_seconds", "Histogram of time to first token in seconds.", bTTFT, own, func() *hist { return t().ttft })
	g.hist(i, "trtllm_time_per_output_token_seconds", "Histogram of time per output token in seconds.", bITL, own, func() *hist { return t().tpot })
	if !p.omits(famPhase) {
		g.hist(i, "trtllm_request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", bLatency, own,
			func() *hist { return t().queue })
		g.hist(i, "trtllm_request_prefill_time_seconds",
			"Histogram of prefill (context) phase duration in seconds (first_token_time - first_scheduled_time).", bTRTPrefill, own,
			func() *hist { return t().prefill })
		g.hist(i, "trtllm_request_decode_time_seconds",
			"Histogram of decode (generation) phase duration in seconds (last_token_time - first_token_time).", bLatency, own,
			func() *hist { return t().decode })
	}
	g.scalar(i, "trtllm_prompt_tokens_total", "Cumulative number of prompt (input) tokens processed.", counter, own,
		func() float64 { return t().promptTok })
	g.scalar(i, "trtllm_generation_tokens_total", "Cumulative number of generation (output) tokens produced.", counter, own,
		func() float64 { return t().genTok })
	if !p.omits(famPrefix) {
		g.scalar(i, "trtllm_prompt_cached_tokens_total", "Process-lifetime total prompt tokens served from KV cache.", counter, own,
			func() float64 { return t().cachedTok })
		g.scalar(i, "trtllm_kv_cache_hit_rate", "KV cache hit rate", gauge, own, func() float64 { return t().hitRate })
	}
	g.scalar(i, "trtllm_request_error_total", "Total request errors, labeled by HTTP status code.", counter,
		own.with("http_code", "500"), func() float64 { return t().finish[finError] })
	g.scalar(i, "trtllm_kv_cache_utilization", "KV cache utilization", gauge, own, rp.kvUsage)
	g.scalar(i, "trtllm_num_requests_running", "Number of active requests", gauge, own, func() float64 { return float64(len(rp.running)) })
	g.scalar(i, "trtllm_num_requests_waiting", "Number of queued requests", gauge, own, func() float64 { return float64(len(rp.waiting)) })
	g.scalar(i, "trtllm_num_paused_requests", "Number of paused requests", gauge, own, func() float64 { return 0 })
	g.scalar(i, "trtllm_max_batch_size_runtime", "Runtime maximum batch size", gauge, own, func() float64 { return float64(s.eng.maxSeqs) })
	g.scalar(i, "trtllm_max_num_tokens_runtime", "Runtime maximum number of tokens", gauge, own, func() float64 { return float64(s.eng.budget) })
	if !p.omits(famIteration) {
		g.hist(i, "trtllm_prefill_batch_tokens", "Histogram of total context tokens per iteration.", bTRTPrefillBatch, own,
			func() *hist { return t().prefillBatch })
	}
}

// gpuUUID is a stable fake GPU UUID.
func gpuUUID(seed int64, rep, gpu int) string {
	x := uint64(seed)*0x9E3779B97F4A7C15 + uint64(rep)*0xBF58476D1CE4E5B9 + uint64(gpu+1)*0x94D049BB133111EB
	x ^= x >> 31
	return fmt.Sprintf("GPU-%08x-%04x-4%03x-a%03x-%012x", uint32(x), uint16(x>>32), uint16(x>>48)&0xfff, uint16(x>>20)&0xfff, (x*0x2545F4914F6CDD1D)&0xffffffffffff)
}

// whyslowGPU: whyslow's NVML collector (collectors/gpu), one series set
// per GPU of the replica.
func (s *state) whyslowGPU(g *registry, i int, rp *replica) {
	p := s.p
	tgt := p.target(i, 9109, "whyslow")
	for gi := 0; gi < p.hw.tp; gi++ {
		own := tgt.with("gpu", strconv.Itoa(gi), "uuid", gpuUUID(p.opts.Seed, i, gi), "model", p.hw.product)
		jit := 1 + 0.01*float64(gi%3)
		add := func(name, help string, get func() float64) { g.scalar(i, name, help, gauge, own, get) }
		t := func() *tel { return rp.tel }
		add("whyslow_gpu_utilization", "Share of time a kernel was running (NVML GPU utilisation), 0-1.",
			func() float64 { return round4(clamp01(t().util)) })
		add("whyslow_gpu_sm_active", "Share of SMs busy (GPM SM_UTIL), 0-1.", func() float64 { return round4(clamp01(t().sm * jit)) })
		if p.hw.gpu != "A100" {
			add("whyslow_gpu_dram_bandwidth_utilization", "Share of the GPU's theoretical DRAM bandwidth in use (GPM DRAM_BW_UTIL), 0-1.",
				func() float64 { return round4(clamp01(t().dram * jit)) })
		}
		add("whyslow_gpu_sm_clock_mhz", "Current SM clock in MHz.", func() float64 { return s.smClock(rp) })
		add("whyslow_gpu_sm_clock_max_mhz", "Maximum SM clock in MHz.", func() float64 { return p.hw.smClockMax })
		for _, reason := range []string{"gpu_idle", "sw_power_cap", "hw_slowdown", "hw_thermal_slowdown", "sw_thermal_slowdown", "hw_power_brake"} {
			g.scalar(i, "whyslow_gpu_clock_throttle_active", "Whether a clock event (throttle) reason is active, 0 or 1.", gauge,
				own.with("reason", reason), func() float64 {
					switch {
					case reason == "gpu_idle":
						return b2f(t().util < 0.02)
					case reason == p.throttle && rp.clock < 0.99 && t().util >= 0.02:
						return 1
					}
					return 0
				})
		}
		add("whyslow_gpu_temperature_celsius", "GPU core temperature in degrees Celsius.", func() float64 { return s.temp(rp) + float64(gi%3) })
		add("whyslow_gpu_power_watts", "Board power draw in watts.", func() float64 { return s.power(rp) })
		add("whyslow_gpu_power_limit_watts", "Enforced power limit in watts.", func() float64 { return p.hw.tdp })
	}
}

// dcgmGPU: dcgm-exporter's default counters plus the DCP fields, with
// the Kubernetes pod mapping.
func (s *state) dcgmGPU(g *registry, i int, rp *replica) {
	p := s.p
	tgt := labels{"instance": fmt.Sprintf("10.0.1.%d:9400", 10+i), "job": "dcgm-exporter"}
	for gi := 0; gi < p.hw.tp; gi++ {
		own := tgt.with("gpu", strconv.Itoa(gi), "UUID", gpuUUID(p.opts.Seed, i, gi), "device", fmt.Sprintf("nvidia%d", gi),
			"modelName", p.hw.product, "Hostname", fmt.Sprintf("gpu-node-%d", i), "pod", p.pod(i), "namespace", "llm",
			"container", p.pol.engine())
		jit := 1 + 0.01*float64(gi%3)
		t := func() *tel { return rp.tel }
		add := func(name, help string, k kind, get func() float64) { g.scalar(i, name, help, k, own, get) }
		add("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", gauge, func() float64 { return s.smClock(rp) })
		add("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", gauge, func() float64 { return s.temp(rp) + float64(gi%3) })
		add("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", gauge, func() float64 { return s.power(rp) })
		add("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", gauge, func() float64 { return math.Round(100 * clamp01(t().util)) })
		add("DCGM_FI_PROF_SM_ACTIVE", "The ratio of cycles an SM has at least 1 warp assigned.", gauge,
			func() float64 { return round4(clamp01(t().sm * jit)) })
		add("DCGM_FI_PROF_DRAM_ACTIVE", "Ratio of cycles the device memory interface is active sending or receiving data.", gauge,
			func() float64 { return round4(clamp01(t().dram * jit)) })
		add("DCGM_FI_DEV_POWER_VIOLATION", "Throttling duration due to power constraints (in us).", unknown,
			func() float64 { return math.Floor(t().powerViol) })
		add("DCGM_FI_DEV_THERMAL_VIOLATION", "Throttling duration due to thermal constraints (in us).", unknown,
			func() float64 { return math.Floor(t().thermViol) })
	}
}

func (s *state) smClock(rp *replica) float64 {
	if rp.tel.util < 0.02 {
		return math.Round(s.p.hw.smClockMax * 0.15)
	}
	return math.Round(s.p.hw.smClockMax*rp.clock/15) * 15
}

func (s *state) temp(rp *replica) float64 {
	t := 38 + 30*rp.tel.util
	if rp.clock < 0.99 && strings.Contains(s.p.throttle, "thermal") {
		t += 18
	}
	return math.Round(t)
}

func (s *state) power(rp *replica) float64 {
	w := s.p.hw.tdp * (0.15 + 0.75*rp.tel.util) * math.Min(1, rp.clock+0.1)
	if rp.clock < 0.99 && s.p.throttle == "sw_power_cap" {
		w = s.p.hw.tdp * 0.99
	}
	return math.Round(w*10) / 10
}

func clamp01(x float64) float64 { return math.Max(0, math.Min(1, x)) }
func round4(x float64) float64  { return math.Round(x*1e4) / 1e4 }
func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
