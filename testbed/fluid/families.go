package fluid

import (
	"fmt"
	"math"
	"strconv"
)

// target is how Kubernetes service discovery labels a replica's targets.
func (p *plan) target(i int, port int, job string) labelSet {
	return labelSet{"instance": fmt.Sprintf("10.0.0.%d:%d", i+1, port), "job": job, "pod": p.podName(i)}
}

func (p *plan) podName(i int) string { return fmt.Sprintf("%s-%d", p.model.short, i+1) }

// buildRegistry declares the families this instance exposes, one series set
// per replica.
//
// vLLM names, help texts and labels: vllm/v1/metrics/loggers.py (V1, by
// era: ~0.10 still emits the deprecated gpu_cache_usage_perc,
// gpu_prefix_cache_* and time_per_output_token_seconds; ~0.11 adds
// inter_token_latency_seconds and request_time_per_output_token_seconds;
// newer adds prompt_tokens_by_source, prompt_tokens_cached,
// request_prefill_kv_computed_tokens, request_num_preemptions,
// num_requests_waiting_by_reason) and vllm/engine/metrics.py (V0). Labels
// model_name and, in V1, engine (prometheus_client adds _total to
// counters). http_requests_total{handler,method,status} is
// prometheus_fastapi_instrumentator's default on the API server, status
// grouped as 2xx/4xx/5xx.
func (s *sim) buildRegistry() *registry {
	p := s.p
	every := int(math.Round(p.scrape / tickDT))
	reg := newRegistry(every)
	g := newRNG(p.drawSeed, 12)
	phase := func() { reg.target(g.intn(every), int64(g.intn(int(tickDT*1000)))) }
	v0 := p.names == "v0"
	era := p.era
	newer := !v0 && era == "0.13"
	legacy := !v0 && era == "0.10"
	tok := buckets125(p.maxLen)
	ttftB, itlB, latB, iterB := bucketsTTFTv1, bucketsITLv1, bucketsLatencyV1, bucketsIterV1
	if v0 {
		ttftB, itlB, latB, iterB = bucketsTTFTv0, bucketsTPOTv0, bucketsLatencyV0, bucketsIterV0
	}
	reasons := outcomeNames[:]
	if v0 || legacy {
		reasons = outcomeNames[:outError] // FinishReason had no ERROR yet
	}
	for i, r := range s.reps {
		i, r := i, r
		t := r.tel
		tgt := p.target(i, 8000, "vllm")
		phase()
		own := tgt.with("model_name", p.model.name)
		if !v0 {
			own = own.with("engine", "0")
		}
		g := func(name, help string, get func() float64) {
			reg.scalar(reg.family(name, help, kindGauge, nil), i, own, get)
		}
		c := func(name, help string, get func() float64) {
			reg.scalar(reg.family(name, help, kindCounter, nil), i, own, get)
		}
		h := func(name, help string, bounds []float64, hh *hist) {
			reg.histogram(reg.family(name, help, kindHistogram, bounds), i, own, hh)
		}
		g("vllm:num_requests_running", "Number of requests in model execution batches.",
			func() float64 { return float64(r.nRun) })
		if v0 {
			g("vllm:num_requests_swapped", "Number of requests swapped to CPU.", func() float64 { return 0 })
		}
		g("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
			func() float64 { return float64(r.nWait) })
		if newer {
			f := reg.family("vllm:num_requests_waiting_by_reason", "Number of requests waiting, by reason.", kindGauge, nil)
			reg.scalar(f, i, own.with("reason", "capacity"), func() float64 { return float64(r.nWait) })
			reg.scalar(f, i, own.with("reason", "deferred"), func() float64 { return 0 })
		}
		if v0 || legacy {
			help := "GPU KV-cache usage. 1 means 100 percent usage."
			if legacy {
				help += "DEPRECATED: Use vllm:kv_cache_usage_perc instead."
			}
			g("vllm:gpu_cache_usage_perc", help, r.kvUsage)
		}
		if v0 {
			g("vllm:cpu_cache_usage_perc", "CPU KV-cache usage. 1 means 100 percent usage.", func() float64 { return 0 })
			g("vllm:gpu_prefix_cache_hit_rate", "GPU prefix cache block hit rate.",
				func() float64 { return div(t.prefixH, t.prefixQ) })
		} else {
			g("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", r.kvUsage)
			if legacy {
				c("vllm:gpu_prefix_cache_queries_total", "GPU prefix cache queries, in terms of number of queried tokens. DEPRECATED: Use vllm:prefix_cache_queries instead.",
					func() float64 { return floor(t.prefixQ) })
				c("vllm:gpu_prefix_cache_hits_total", "GPU prefix cache hits, in terms of number of cached tokens. DEPRECATED: Use vllm:prefix_cache_hits instead.",
					func() float64 { return floor(t.prefixH) })
			}
			c("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.",
				func() float64 { return floor(t.prefixQ) })
			c("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.",
				func() float64 { return floor(t.prefixH) })
		}
		if p.fam.preempt {
			c("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.",
				func() float64 { return t.preempts })
		}
		c("vllm:prompt_tokens_total", "Number of prefill tokens processed.", func() float64 { return floor(t.promptTok) })
		if newer {
			f := reg.family("vllm:prompt_tokens_by_source_total", "Number of prompt tokens by source.", kindCounter, nil)
			reg.scalar(f, i, own.with("source", "local_compute"), func() float64 { return floor(t.promptTok) - floor(t.cachedTok) })
			reg.scalar(f, i, own.with("source", "local_cache_hit"), func() float64 { return floor(t.cachedTok) })
			reg.scalar(f, i, own.with("source", "external_kv_transfer"), func() float64 { return 0 })
			c("vllm:prompt_tokens_cached_total", "Number of cached prompt tokens (local + external).",
				func() float64 { return floor(t.cachedTok) })
		}
		c("vllm:generation_tokens_total", "Number of generation tokens processed.", func() float64 { return floor(t.genTok) })
		succ := reg.family("vllm:request_success_total", "Count of successfully processed requests.", kindCounter, nil)
		for k, reason := range reasons {
			k := k
			reg.scalar(succ, i, own.with("finished_reason", reason), func() float64 { return t.success[k] })
		}
		if p.fam.iteration {
			h("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", iterB, t.iter)
		}
		h("vllm:request_prompt_tokens", "Number of prefill tokens processed.", tok, t.promptLen)
		h("vllm:request_generation_tokens", "Number of generation tokens processed.", tok, t.genLen)
		h("vllm:request_max_num_generation_tokens", "Histogram of maximum number of requested generation tokens.", tok, t.maxGen)
		h("vllm:request_params_n", "Histogram of the n request parameter.", bucketsParamsN, t.paramsN)
		h("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", tok, t.maxTokens)
		if newer {
			h("vllm:request_prefill_kv_computed_tokens", "Histogram of new KV tokens computed during prefill (excluding cached tokens).", tok, t.kvComp)
		}
		h("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttftB, t.ttft)
		if v0 || legacy || era == "0.11" {
			h("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.", itlB, t.itl)
		}
		if !v0 && !legacy {
			h("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itlB, t.itl)
			h("vllm:request_time_per_output_token_seconds", "Histogram of time_per_output_token_seconds per request.", itlB, t.reqTPOT)
		}
		h("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", latB, t.e2e)
		h("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", latB, t.queue)
		h("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", latB, t.inference)
		if p.fam.phase {
			h("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", latB, t.prefill)
			h("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", latB, t.decode)
		}
		if newer && p.fam.preempt {
			h("vllm:request_num_preemptions", "Number of preemptions per finished request.", bucketsPreemptN, t.nPre)
		}
		if p.fam.cacheInfo {
			// an Info emulated by a gauge: CacheConfig fields as labels, no model_name
			info := tgt.with("block_size", strconv.Itoa(blockSize), "cache_dtype", "auto",
				"enable_prefix_caching", "True", "gpu_memory_utilization", strconv.FormatFloat(p.memUtil, 'f', -1, 64),
				"num_gpu_blocks", strconv.Itoa(p.numBlocks()), "swap_space", "4", "cpu_offload_gb", "0",
				"calculate_kv_scales", "False")
			if v0 {
				info = info.with("num_cpu_blocks", "2048")
			} else {
				info = info.with("num_cpu_blocks", "None", "engine", "0")
			}
			reg.scalar(reg.family("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", kindGauge, nil), i, info,
				func() float64 { return 1 })
		}
		if p.fam.http {
			f := reg.family("http_requests_total", "Total number of requests by method, status and handler.", kindCounter, nil)
			for hi, handler := range []string{"/v1/chat/completions", "/v1/completions"} {
				for si, status := range []string{"2xx", "4xx", "5xx"} {
					hi, si := hi, si
					reg.scalar(f, i, tgt.with("handler", handler, "method", "POST", "status", status),
						func() float64 { return t.http[hi][si] })
				}
			}
		}
	}
	if p.gpuSeries == "whyslow" || p.gpuSeries == "both" {
		s.whyslowGPU(reg, phase)
	}
	if p.gpuSeries == "dcgm" || p.gpuSeries == "both" {
		s.dcgmGPU(reg, phase)
	}
	return reg
}

func floor(x float64) float64 {
	if x < 0 {
		return 0
	}
	return float64(int64(x))
}

// throttleReasons are the reason label values of
// whyslow_gpu_clock_throttle_active (collectors/gpu ThrottleReasons).
var throttleReasons = []string{"sw_power_cap", "hw_slowdown", "hw_thermal_slowdown", "sw_thermal_slowdown",
	"hw_power_brake", "gpu_idle", "applications_clocks_setting", "sync_boost", "display_clock"}

func gpuUUID(seed int64, rep, gpu int) string {
	x := uint64(seed)*0xA24BAED4963EE407 ^ uint64(rep+1)*0x9FB21C651E98DF25 ^ uint64(gpu+1)*0xC2B2AE3D27D4EB4F
	x ^= x >> 29
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 32
	y := x*0x94D049BB133111EB + 0x632BE59BD9B4E019
	return fmt.Sprintf("GPU-%08x-%04x-%04x-%04x-%012x", uint32(x), uint16(x>>32), uint16(x>>48)&0x0fff|0x4000,
		uint16(y)&0x3fff|0x8000, y>>16&0xffffffffffff)
}

// gpuVal is one GPU's reading: the replica's state plus a small fixed
// per-GPU offset, and the scrape's noise.
func (s *sim) gpuVal(gi int, v, noise float64) float64 {
	j := 1 + 0.01*float64(gi%3) + noise*s.noise.normal()
	return math.Round(v*j*1e4) / 1e4
}

// whyslowGPU declares whyslow's NVML series (collectors/gpu: names from
// Counter.Metric, labels gpu, uuid, model; GPM-only series are absent on
// pre-Hopper GPUs).
func (s *sim) whyslowGPU(reg *registry, phase func()) {
	p := s.p
	gc := p.gpu
	gpm := gc.name != "A100"
	for i, r := range s.reps {
		r := r
		t := r.tel
		tgt := p.target(i, 9109, "whyslow")
		phase()
		for gi := 0; gi < p.tp; gi++ {
			gi := gi
			own := tgt.with("gpu", strconv.Itoa(gi), "uuid", gpuUUID(p.opts.Seed, i, gi), "model", gc.product)
			add := func(name, help string, get func() float64) {
				reg.scalar(reg.family(name, help, kindGauge, nil), i, own, get)
			}
			if gpm {
				add("whyslow_gpu_dram_bandwidth_utilization", "Share of the GPU's theoretical DRAM bandwidth in use (GPM DRAM_BW_UTIL, Hopper and newer), 0-1.",
					func() float64 { return clamp(s.gpuVal(gi, t.dram, 0.01), 0, 1) })
			}
			add("whyslow_gpu_memory_busy_ratio", "Share of time device memory was read or written (NVML memory utilisation), 0-1. Not bandwidth.",
				func() float64 { return clamp(s.gpuVal(gi, math.Min(1, t.util*0.9+t.dram*0.2), 0.01), 0, 1) })
			add("whyslow_gpu_sm_active", "Share of SMs busy (GPM SM_UTIL), or NVML GPU utilisation where GPM is missing, 0-1.",
				func() float64 {
					if gpm {
						return clamp(s.gpuVal(gi, t.sm, 0.01), 0, 1)
					}
					return clamp(s.gpuVal(gi, t.util, 0.01), 0, 1)
				})
			if gpm {
				add("whyslow_gpu_sm_occupancy", "Share of warps active against the maximum (GPM SM_OCCUPANCY), 0-1.",
					func() float64 { return clamp(s.gpuVal(gi, t.sm*0.45, 0.02), 0, 1) })
			}
			add("whyslow_gpu_utilization", "Share of time a kernel was running (NVML GPU utilisation), 0-1.",
				func() float64 { return clamp(s.gpuVal(gi, t.util, 0.005), 0, 1) })
			add("whyslow_gpu_sm_clock_mhz", "Current SM clock in MHz.", func() float64 { return smClock(gc, t) })
			add("whyslow_gpu_sm_clock_max_mhz", "Maximum SM clock in MHz.", func() float64 { return gc.smClockMax })
			add("whyslow_gpu_mem_clock_mhz", "Current memory clock in MHz.", func() float64 { return gc.memClockMax })
			add("whyslow_gpu_mem_clock_max_mhz", "Maximum memory clock in MHz.", func() float64 { return gc.memClockMax })
			thr := reg.family("whyslow_gpu_clock_throttle_active", "Whether a clock event (throttle) reason is active, 0 or 1.", kindGauge, nil)
			for _, reason := range throttleReasons {
				reason := reason
				reg.scalar(thr, i, own.with("reason", reason), func() float64 {
					switch {
					case reason == "gpu_idle":
						return b2f(t.util < 0.02)
					case t.throttled && reason == p.throttleReason():
						return 1
					}
					return 0
				})
			}
			add("whyslow_gpu_power_watts", "Board power draw in watts.", func() float64 { return s.gpuVal(gi, t.power, 0.01) })
			add("whyslow_gpu_power_limit_watts", "Enforced power limit in watts.", func() float64 { return gc.tdp })
			add("whyslow_gpu_temperature_celsius", "GPU core temperature in degrees Celsius.",
				func() float64 { return math.Round(t.temp + float64(gi%3)) })
			add("whyslow_gpu_fb_used_bytes", "Framebuffer memory used in bytes.", func() float64 { return fbUsed(p) })
			add("whyslow_gpu_fb_total_bytes", "Framebuffer memory size in bytes.", func() float64 { return gc.memBytes })
			add("whyslow_gpu_pcie_tx_bytes_per_second", "PCIe traffic from the GPU in bytes per second.",
				func() float64 { return s.gpuVal(gi, 2e7+3e8*t.util, 0.1) })
			add("whyslow_gpu_pcie_rx_bytes_per_second", "PCIe traffic to the GPU in bytes per second.",
				func() float64 { return s.gpuVal(gi, 3e7+2e8*t.util, 0.1) })
			if gpm {
				add("whyslow_gpu_nvlink_tx_bytes_per_second", "NVLink traffic sent over all links in bytes per second (GPM).",
					func() float64 { return nvlink(p, t) })
				add("whyslow_gpu_nvlink_rx_bytes_per_second", "NVLink traffic received over all links in bytes per second (GPM).",
					func() float64 { return nvlink(p, t) })
			}
		}
	}
}

// dcgmGPU declares dcgm-exporter's series: the default counters
// (NVIDIA/dcgm-exporter etc/default-counters.csv) plus the DCP fields a
// typical deployment enables (DCGM_FI_PROF_*), and, where drawn, the
// commented-out violation counters. Labels as dcgm-exporter with the
// Kubernetes pod mapping: gpu, UUID, device, modelName, Hostname,
// pci_bus_id, DCGM_FI_DRIVER_VERSION, pod, namespace, container.
func (s *sim) dcgmGPU(reg *registry, phase func()) {
	p := s.p
	gc := p.gpu
	for i, r := range s.reps {
		r := r
		t := r.tel
		tgt := labelSet{"instance": fmt.Sprintf("10.0.1.%d:9400", i+1), "job": "dcgm-exporter"}
		phase()
		for gi := 0; gi < p.tp; gi++ {
			gi := gi
			own := tgt.with("gpu", strconv.Itoa(gi), "UUID", gpuUUID(p.opts.Seed, i, gi), "device", fmt.Sprintf("nvidia%d", gi),
				"modelName", gc.product, "Hostname", fmt.Sprintf("gpu-node-%d", i+1),
				"pci_bus_id", fmt.Sprintf("00000000:%02X:00.0", 0x18+gi*0x10), "DCGM_FI_DRIVER_VERSION", "570.124.06",
				"pod", p.podName(i), "namespace", "llm", "container", "vllm")
			add := func(name, help string, kind famKind, get func() float64) {
				reg.scalar(reg.family(name, help, kind, nil), i, own, get)
			}
			add("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", kindGauge, func() float64 { return smClock(gc, t) })
			add("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", kindGauge, func() float64 { return gc.memClockMax })
			add("DCGM_FI_DEV_MEMORY_TEMP", "Memory temperature (in C).", kindGauge, func() float64 { return math.Round(t.temp + 4) })
			add("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", kindGauge, func() float64 { return math.Round(t.temp + float64(gi%3)) })
			add("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", kindGauge, func() float64 { return math.Round(s.gpuVal(gi, t.power, 0.01)*1000) / 1000 })
			add("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "Total energy consumption since boot (in mJ).", kindUnknown,
				func() float64 { return math.Floor(t.energy) })
			add("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", kindGauge, func() float64 { return math.Round(100 * clamp(t.util, 0, 1)) })
			add("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", kindGauge,
				func() float64 { return math.Round(100 * clamp(t.util*0.9+t.dram*0.2, 0, 1)) })
			add("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", kindGauge, func() float64 { return 0 })
			add("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", kindGauge,
				func() float64 { return math.Floor((gc.memBytes - fbUsed(p)) / (1 << 20)) })
			add("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", kindGauge, func() float64 { return math.Floor(fbUsed(p) / (1 << 20)) })
			add("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "Total number of NVLink bandwidth counters for all lanes", kindUnknown,
				func() float64 { return math.Floor(t.nvBytes) })
			add("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active.", kindGauge,
				func() float64 { return clamp(s.gpuVal(gi, t.util, 0.005), 0, 1) })
			if p.fam.dcgmSM {
				add("DCGM_FI_PROF_SM_ACTIVE", "The ratio of cycles an SM has at least 1 warp assigned.", kindGauge,
					func() float64 { return clamp(s.gpuVal(gi, t.sm, 0.01), 0, 1) })
			}
			add("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "Ratio of cycles the tensor (HMMA) pipe is active.", kindGauge,
				func() float64 { return clamp(s.gpuVal(gi, t.tensor, 0.02), 0, 1) })
			if p.fam.dcgmDRAM {
				add("DCGM_FI_PROF_DRAM_ACTIVE", "Ratio of cycles the device memory interface is active sending or receiving data.", kindGauge,
					func() float64 { return clamp(s.gpuVal(gi, t.dram, 0.01), 0, 1) })
			}
			add("DCGM_FI_PROF_PCIE_TX_BYTES", "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second.", kindGauge,
				func() float64 { return math.Round(s.gpuVal(gi, 2e7+3e8*t.util, 0.1)) })
			add("DCGM_FI_PROF_PCIE_RX_BYTES", "The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second.", kindGauge,
				func() float64 { return math.Round(s.gpuVal(gi, 3e7+2e8*t.util, 0.1)) })
			if p.fam.dcgmViolation {
				add("DCGM_FI_DEV_POWER_VIOLATION", "Throttling duration due to power constraints (in us).", kindUnknown,
					func() float64 { return t.powerViol })
				add("DCGM_FI_DEV_THERMAL_VIOLATION", "Throttling duration due to thermal constraints (in us).", kindUnknown,
					func() float64 { return t.thermViol })
			}
		}
	}
}

func smClock(gc gpuClass, t *repTel) float64 {
	if t.util < 0.02 {
		return math.Round(gc.smClockMax * 0.1) // idle clocks
	}
	return math.Round(gc.smClockMax*t.clock/15) * 15
}

// fbUsed is vLLM's preallocation: gpu_memory_utilization of the device
// plus the CUDA context.
func fbUsed(p *plan) float64 { return p.memUtil*p.gpu.memBytes + 512*(1<<20) }

func nvlink(p *plan, t *repTel) float64 {
	if p.tp < 2 {
		return 0
	}
	return math.Round(nvlinkRate(p, t))
}

// nvlinkRate is the TP all-reduce traffic: two all-reduces of the hidden
// state per layer per token, ring-reduced over the TP group.
func nvlinkRate(p *plan, t *repTel) float64 {
	if p.tp < 2 {
		return 0
	}
	perTok := float64(2*p.model.layers*p.model.hidden*2) * 2 * float64(p.tp-1) / float64(p.tp)
	return t.tokRate * perTok
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
