package sim

import (
	"fmt"
	"strconv"
)

// target is how Prometheus would label a replica's scrape targets.
type target struct {
	pod, podIP, node string
}

func (w *world) target(i int) target {
	return target{
		pod:   fmt.Sprintf("%s-%s-%d", w.tele, w.plan.cfg.model.short, i),
		podIP: fmt.Sprintf("10.42.%d.%d", i/200, 10+i%200),
		node:  fmt.Sprintf("gpu-node-%d", i),
	}
}

// buildRegistry declares every family the options ask for, with one series
// set per replica.
func (w *world) buildRegistry() *registry {
	switch w.tele {
	case PolicySGLang:
		return w.buildSGLangRegistry()
	case PolicyTRTLLM:
		return w.buildTRTLLMRegistry()
	}
	reg := &registry{}
	v0 := w.opt.Names == "v0"
	model := w.plan.cfg.model.name
	pref := "vllm:"
	f := func(name, help string, typ famType) *family { return reg.family(pref+name, help, typ) }

	type def struct {
		fam  *family
		fill func(fam *family, i int, e *engine, t *telemetry, own, tgt labelSet)
	}
	var defs []def
	g := func(name, help string, get func(e *engine, t *telemetry) float64) {
		defs = append(defs, def{f(name, help, gaugeType), func(fam *family, i int, e *engine, t *telemetry, own, tgt labelSet) {
			fam.add(i, own, tgt, func() float64 { return get(e, t) })
		}})
	}
	c := func(name, help string, get func(t *telemetry) float64) {
		defs = append(defs, def{f(name, help, counterType), func(fam *family, i int, e *engine, t *telemetry, own, tgt labelSet) {
			fam.add(i, own, tgt, func() float64 { return get(t) })
		}})
	}
	h := func(name, help string, get func(t *telemetry) *histogram) {
		defs = append(defs, def{f(name, help, histogramType), func(fam *family, i int, e *engine, t *telemetry, own, tgt labelSet) {
			fam.addHist(i, own, tgt, get(t))
		}})
	}

	g("num_requests_running", "Number of requests in model execution batches.",
		func(e *engine, _ *telemetry) float64 { return float64(e.numRunning()) })
	g("num_requests_waiting", "Number of requests waiting to be processed.",
		func(e *engine, _ *telemetry) float64 { return float64(e.nWait) })
	if v0 {
		g("num_requests_swapped", "Number of requests swapped to CPU.",
			func(*engine, *telemetry) float64 { return 0 })
		g("gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.",
			func(e *engine, _ *telemetry) float64 { return e.kvUsage() })
		g("cpu_cache_usage_perc", "CPU KV-cache usage. 1 means 100 percent usage.",
			func(*engine, *telemetry) float64 { return 0 })
		c("gpu_prefix_cache_queries", "GPU prefix cache queries, in terms of number of queried tokens.",
			func(t *telemetry) float64 { return t.prefixQueries })
		c("gpu_prefix_cache_hits", "GPU prefix cache hits, in terms of number of cached tokens.",
			func(t *telemetry) float64 { return t.prefixHits })
	} else {
		byReason := f("num_requests_waiting_by_reason", "Number of requests waiting, by reason.", gaugeType)
		defs = append(defs, def{byReason, func(fam *family, i int, e *engine, _ *telemetry, own, tgt labelSet) {
			fam.add(i, own.with(labelSet{"reason": "capacity"}), tgt, func() float64 { return float64(e.nWait) })
			fam.add(i, own.with(labelSet{"reason": "deferred"}), tgt, func() float64 { return 0 })
		}})
		g("kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
			func(e *engine, _ *telemetry) float64 { return e.kvUsage() })
		c("prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.",
			func(t *telemetry) float64 { return t.prefixQueries })
		c("prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
			func(t *telemetry) float64 { return t.prefixHits })
	}
	c("num_preemptions", "Cumulative number of preemption from the engine.",
		func(t *telemetry) float64 { return t.preemptions })
	c("prompt_tokens", "Number of prefill tokens processed.", func(t *telemetry) float64 { return t.promptTokens })
	if !v0 {
		bySource := f("prompt_tokens_by_source", "Number of prompt tokens by source.", counterType)
		defs = append(defs, def{bySource, func(fam *family, i int, _ *engine, t *telemetry, own, tgt labelSet) {
			fam.add(i, own.with(labelSet{"source": "local_compute"}), tgt, func() float64 { return t.promptCompute })
			fam.add(i, own.with(labelSet{"source": "local_cache_hit"}), tgt, func() float64 { return t.promptCacheHit })
			fam.add(i, own.with(labelSet{"source": "external_kv_transfer"}), tgt, func() float64 { return 0 })
		}})
		c("prompt_tokens_cached", "Number of cached prompt tokens (local + external).",
			func(t *telemetry) float64 { return t.promptCacheHit })
	}
	c("generation_tokens", "Number of generation tokens processed.",
		func(t *telemetry) float64 { return t.generationTokens })
	// vLLM V1 exports one series per FinishReason; "error" came with
	// later releases (vllm/v1/engine/__init__.py FINISH_REASON_STRINGS), so
	// only the plans that model such a release have it. Without it a
	// server-side failure is aborted by the API server (V0 does the same).
	reasons := []string{"abort", "length", "stop"}
	errSeries := !v0 && w.plan.errorReason
	if errSeries {
		reasons = []string{"abort", "error", "length", "stop"}
	}
	succ := f("request_success", "Count of successfully processed requests.", counterType)
	defs = append(defs, def{succ, func(fam *family, i int, _ *engine, t *telemetry, own, tgt labelSet) {
		for _, reason := range reasons {
			get := func() float64 { return t.success[reason] }
			if reason == "abort" && !errSeries {
				get = func() float64 { return t.success["abort"] + t.success["error"] }
			}
			fam.add(i, own.with(labelSet{"finished_reason": reason}), tgt, get)
		}
	}})
	h("iteration_tokens_total", "Histogram of number of tokens per engine_step.",
		func(t *telemetry) *histogram { return t.iterationTokens })
	h("request_prompt_tokens", "Number of prefill tokens processed.", func(t *telemetry) *histogram { return t.promptLen })
	h("request_generation_tokens", "Number of generation tokens processed.",
		func(t *telemetry) *histogram { return t.genLen })
	h("request_max_num_generation_tokens", "Histogram of maximum number of requested generation tokens.",
		func(t *telemetry) *histogram { return t.maxGen })
	h("request_params_n", "Histogram of the n request parameter.", func(t *telemetry) *histogram { return t.paramsN })
	h("request_params_max_tokens", "Histogram of the max_tokens request parameter.",
		func(t *telemetry) *histogram { return t.paramsMaxTokens })
	if !v0 {
		h("request_prefill_kv_computed_tokens", "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
			func(t *telemetry) *histogram { return t.prefillKVComputed })
	}
	h("time_to_first_token_seconds", "Histogram of time to first token in seconds.",
		func(t *telemetry) *histogram { return t.ttft })
	if v0 {
		h("time_per_output_token_seconds", "Histogram of time per output token in seconds.",
			func(t *telemetry) *histogram { return t.itl })
	} else {
		h("inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
			func(t *telemetry) *histogram { return t.itl })
		h("request_time_per_output_token_seconds", "Histogram of time_per_output_token_seconds per request.",
			func(t *telemetry) *histogram { return t.reqTPOT })
	}
	h("e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
		func(t *telemetry) *histogram { return t.e2e })
	h("request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
		func(t *telemetry) *histogram { return t.queue })
	h("request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.",
		func(t *telemetry) *histogram { return t.inference })
	h("request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.",
		func(t *telemetry) *histogram { return t.prefill })
	h("request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.",
		func(t *telemetry) *histogram { return t.decode })
	if !v0 {
		h("request_num_preemptions", "Number of preemptions per finished request.",
			func(t *telemetry) *histogram { return t.numPreemptions })
	}
	info := f("cache_config_info", "Information of the LLMEngine CacheConfig", gaugeType)
	defs = append(defs, def{info, func(fam *family, i int, e *engine, _ *telemetry, _ labelSet, tgt labelSet) {
		l := labelSet{"block_size": strconv.Itoa(blockSize), "cache_dtype": "auto", "enable_prefix_caching": "True",
			"gpu_memory_utilization": strconv.FormatFloat(e.cfg.gpuMemUtil, 'f', -1, 64),
			"num_gpu_blocks":         strconv.Itoa(e.cfg.numBlocks), "num_cpu_blocks": "0", "cpu_offload_gb": "0",
			"calculate_kv_scales": "False"}
		if !v0 {
			l["engine"] = "0"
		}
		fam.add(i, l, tgt, func() float64 { return 1 })
	}})

	// The OpenAI server's prometheus_fastapi_instrumentator counter, on
	// the same /metrics (docs/engines.md §2.7): labels handler, method and
	// status grouped by class, no model_name. A server-side failure is a
	// 5xx; a request the client aborted mid-stream already had its 200.
	httpReqs := reg.family("http_requests", "Total number of requests by method, status and handler.", counterType)
	defs = append(defs, def{httpReqs, func(fam *family, i int, _ *engine, t *telemetry, _ labelSet, tgt labelSet) {
		route := labelSet{"handler": "/v1/completions", "method": "POST"}
		fam.add(i, route.with(labelSet{"status": "2xx"}), tgt, func() float64 {
			return t.success["stop"] + t.success["length"] + t.success["abort"]
		})
		fam.add(i, route.with(labelSet{"status": "5xx"}), tgt, func() float64 { return t.success["error"] })
	}})

	for i, e := range w.engines {
		tg := w.target(i)
		own := labelSet{"model_name": model}
		if !v0 {
			own["engine"] = "0"
		}
		tgt := labelSet{"job": "vllm", "instance": tg.podIP + ":8000", "pod": tg.pod}
		for _, d := range defs {
			d.fill(d.fam, i, e, e.tel, own, tgt)
		}
	}
	w.addGPUFamilies(reg)
	return reg
}

// addGPUFamilies declares the GPU counter series the options ask for.
func (w *world) addGPUFamilies(reg *registry) {
	switch w.opt.GPUSeries {
	case "whyslow":
		w.gpuFamilies(reg)
	case "dcgm":
		w.dcgmFamilies(reg)
	case "both":
		w.gpuFamilies(reg)
		w.dcgmFamilies(reg)
	}
}

func gpuUUID(seed int64, replica, gpu int) string {
	x := uint64(seed)*0x9E3779B97F4A7C15 + uint64(replica)*0xBF58476D1CE4E5B9 + uint64(gpu)*0x94D049BB133111EB
	return fmt.Sprintf("GPU-%08x-%04x-%04x-%04x-%012x", uint32(x>>32), uint16(x>>16), uint16(x), uint16(x>>48)^0x4a1f,
		(x*0x2545F4914F6CDD1D)&0xffffffffffff)
}

// gpuFamilies declares the whyslow_gpu_* series (one per GPU of each
// replica), named as the NVML collector names them.
func (w *world) gpuFamilies(reg *registry) {
	type gdef struct {
		name, help string
		get        func(g *gpuState) float64
	}
	defs := []gdef{
		{"whyslow_gpu_dram_bandwidth_utilization", "Fraction of peak DRAM bandwidth used (GPM).", func(g *gpuState) float64 { return g.dram }},
		{"whyslow_gpu_memory_busy_ratio", "Fraction of time device memory was read or written (NVML utilization.memory).", func(g *gpuState) float64 { return g.memBusy }},
		{"whyslow_gpu_sm_active", "Fraction of SM cycles with at least one warp resident.", func(g *gpuState) float64 { return g.smActive }},
		{"whyslow_gpu_utilization", "Fraction of time a kernel was running (NVML utilization.gpu).", func(g *gpuState) float64 { return g.util }},
		{"whyslow_gpu_sm_clock_mhz", "Current SM clock in MHz.", func(g *gpuState) float64 { return g.smClock }},
		{"whyslow_gpu_sm_clock_max_mhz", "Maximum SM clock in MHz.", nil},
		{"whyslow_gpu_mem_clock_mhz", "Current memory clock in MHz.", func(g *gpuState) float64 { return g.memClock }},
		{"whyslow_gpu_mem_clock_max_mhz", "Maximum memory clock in MHz.", nil},
		{"whyslow_gpu_clock_throttle_active", "Whether a clock event reason is active (1) or not (0).", nil},
		{"whyslow_gpu_power_watts", "Power draw in watts.", func(g *gpuState) float64 { return g.power }},
		{"whyslow_gpu_power_limit_watts", "Enforced power limit in watts.", nil},
		{"whyslow_gpu_temperature_celsius", "GPU temperature in degrees Celsius.", func(g *gpuState) float64 { return g.temp }},
		{"whyslow_gpu_fb_used_bytes", "Framebuffer memory used in bytes.", func(g *gpuState) float64 { return g.fbUsed }},
		{"whyslow_gpu_fb_total_bytes", "Framebuffer memory total in bytes.", func(g *gpuState) float64 { return g.fbTotal }},
		{"whyslow_gpu_pcie_tx_bytes_per_second", "PCIe transmit throughput in bytes per second.", func(g *gpuState) float64 { return g.pcieTx }},
		{"whyslow_gpu_pcie_rx_bytes_per_second", "PCIe receive throughput in bytes per second.", func(g *gpuState) float64 { return g.pcieRx }},
		{"whyslow_gpu_nvlink_tx_bytes_per_second", "NVLink transmit throughput in bytes per second.", func(g *gpuState) float64 { return g.nvlink }},
		{"whyslow_gpu_nvlink_rx_bytes_per_second", "NVLink receive throughput in bytes per second.", func(g *gpuState) float64 { return g.nvlink }},
	}
	spec := w.plan.cfg.gpu
	for _, d := range defs {
		fam := reg.family(d.name, d.help, gaugeType)
		for i, e := range w.engines {
			tg := w.target(i)
			tgt := labelSet{"job": "whyslow", "instance": tg.podIP + ":9464", "pod": tg.pod}
			for gi := 0; gi < e.cfg.tp; gi++ {
				own := labelSet{"gpu": strconv.Itoa(gi), "uuid": gpuUUID(w.plan.seed, i, gi), "model": spec.product}
				gs := &e.tel.gpu
				switch d.name {
				case "whyslow_gpu_sm_clock_max_mhz":
					fam.add(i, own, tgt, func() float64 { return spec.smClockMax })
				case "whyslow_gpu_mem_clock_max_mhz":
					fam.add(i, own, tgt, func() float64 { return spec.memClockMax })
				case "whyslow_gpu_power_limit_watts":
					fam.add(i, own, tgt, func() float64 { return spec.powerLimit })
				case "whyslow_gpu_clock_throttle_active":
					for _, r := range throttleReasons {
						fam.add(i, own.with(labelSet{"reason": r}), tgt, func() float64 { return gs.throttle[r] })
					}
				case "whyslow_gpu_temperature_celsius":
					off := float64(gi % 3)
					fam.add(i, own, tgt, func() float64 { return gs.temp + off })
				default:
					get := d.get
					fam.add(i, own, tgt, func() float64 { return get(gs) })
				}
			}
		}
	}
}

// dcgmFamilies declares dcgm-exporter series (docs/engines.md §5.2 names, units
// and labels, with the Kubernetes pod mapping) for the counters CSV and the
// Prometheus label layout of Options.DCGMCounters and DCGMLayout.
//
// Counters: "" is a profiling set (the DEV fields below plus
// DCGM_FI_PROF_*); "default" is NVIDIA/dcgm-exporter
// etc/default-counters.csv (@00d6d344): the fields of it the model can
// drive (clocks, temperatures, power and energy, utilisation, XID,
// framebuffer), no DCGM_FI_PROF_* and the violation counters commented out
// (PCIe, NVLink, vGPU and row-remap fields are left out); "violations"
// adds DCGM_FI_DEV_POWER_VIOLATION and DCGM_FI_DEV_THERMAL_VIOLATION,
// cumulative nanoseconds of clocks held down by power capping
// (sw_power_cap) and by thermal slowdown (hw_/sw_thermal_slowdown); a
// plain hw_slowdown moves neither. dcgm-exporter writes counters without
// a _total suffix, and so do these.
//
// Layout "k8s" is the Helm chart's ServiceMonitor default honorLabels:
// false (deployment/values.yaml @9190a38a): Prometheus keeps the target's
// pod, namespace and container (the exporter's own DaemonSet pod, container
// "exporter") and renames the workload's to exported_pod,
// exported_namespace and exported_container. What the exporter itself
// serves (Live) still has the workload's pod, namespace and container.
func (w *world) dcgmFamilies(reg *registry) {
	type ddef struct {
		name, help string
		typ        famType
		get        func(g *gpuState) float64
	}
	const mib = 1 << 20
	gauge := func(name, help string, get func(g *gpuState) float64) ddef { return ddef{name, help, gaugeType, get} }
	counter := func(name, help string, get func(g *gpuState) float64) ddef { return ddef{name, help, counterType, get} }
	clocks := []ddef{
		gauge("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", func(g *gpuState) float64 { return g.smClock }),
		gauge("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", func(g *gpuState) float64 { return g.memClock }),
	}
	var defs []ddef
	switch w.opt.DCGMCounters {
	case "":
		defs = append(clocks,
			gauge("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", func(g *gpuState) float64 { return g.temp }),
			gauge("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", func(g *gpuState) float64 { return g.power }),
			gauge("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", func(g *gpuState) float64 { return float64(int(g.util * 100)) }),
			gauge("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", func(g *gpuState) float64 { return float64(int(g.memBusy * 100)) }),
			gauge("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", func(g *gpuState) float64 { return float64(int((g.fbTotal - g.fbUsed) / mib)) }),
			gauge("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", func(g *gpuState) float64 { return float64(int(g.fbUsed / mib)) }),
			gauge("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active.", func(g *gpuState) float64 { return g.util }),
			gauge("DCGM_FI_PROF_SM_ACTIVE", "The ratio of cycles an SM has at least 1 warp assigned.", func(g *gpuState) float64 { return g.smActive }),
			gauge("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "Ratio of cycles the tensor (HMMA) pipe is active.", func(g *gpuState) float64 { return g.tensor }),
			gauge("DCGM_FI_PROF_DRAM_ACTIVE", "Ratio of cycles the device memory interface is active sending or receiving data.", func(g *gpuState) float64 { return g.dram }),
		)
	default:
		defs = append(clocks,
			gauge("DCGM_FI_DEV_MEMORY_TEMP", "Memory temperature (in C).", func(g *gpuState) float64 { return g.temp + 2 }),
			gauge("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", func(g *gpuState) float64 { return g.temp }),
			gauge("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", func(g *gpuState) float64 { return g.power }),
			counter("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "Total energy consumption since boot (in mJ).", func(g *gpuState) float64 { return float64(int64(g.energyMJ)) }),
			gauge("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", func(g *gpuState) float64 { return float64(int(g.util * 100)) }),
			gauge("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", func(g *gpuState) float64 { return float64(int(g.memBusy * 100)) }),
			gauge("DCGM_FI_DEV_ENC_UTIL", "Encoder utilization (in %).", func(*gpuState) float64 { return 0 }),
			gauge("DCGM_FI_DEV_DEC_UTIL", "Decoder utilization (in %).", func(*gpuState) float64 { return 0 }),
			gauge("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", func(*gpuState) float64 { return 0 }),
		)
		if w.opt.DCGMCounters == "violations" {
			// The CSV's help text says microseconds; DCGM reports nanoseconds (docs/engines.md §5.2).
			defs = append(defs,
				counter("DCGM_FI_DEV_POWER_VIOLATION", "Throttling duration due to power constraints (in us).", func(g *gpuState) float64 { return g.powerViolationNs }),
				counter("DCGM_FI_DEV_THERMAL_VIOLATION", "Throttling duration due to thermal constraints (in us).", func(g *gpuState) float64 { return g.thermalViolationNs }),
			)
		}
		defs = append(defs,
			gauge("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", func(g *gpuState) float64 { return float64(int((g.fbTotal - g.fbUsed) / mib)) }),
			gauge("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", func(g *gpuState) float64 { return float64(int(g.fbUsed / mib)) }),
		)
	}
	spec := w.plan.cfg.gpu
	k8s := w.opt.DCGMLayout == "k8s"
	for _, d := range defs {
		fam := reg.family(d.name, d.help, d.typ)
		fam.bare = d.typ == counterType
		for i, e := range w.engines {
			tg := w.target(i)
			instance := fmt.Sprintf("10.40.0.%d:9400", 10+i)
			tgt := labelSet{"job": "dcgm-exporter", "instance": instance, "pod": tg.pod}
			if k8s {
				tgt = labelSet{"job": "dcgm-exporter", "instance": instance, "pod": dcgmExporterPod(w.plan.seed, i),
					"namespace": "gpu-operator", "container": "exporter", "service": "dcgm-exporter", "endpoint": "metrics"}
			}
			for gi := 0; gi < e.cfg.tp; gi++ {
				own := labelSet{"gpu": strconv.Itoa(gi), "UUID": gpuUUID(w.plan.seed, i, gi), "device": fmt.Sprintf("nvidia%d", gi),
					"modelName": spec.product, "Hostname": tg.node, "pci_bus_id": fmt.Sprintf("00000000:%02X:00.0", 0x18+gi*0x10),
					"DCGM_FI_DRIVER_VERSION": "570.124.06", "pod": tg.pod, "namespace": "llm", "container": w.tele.String()}
				gs := &e.tel.gpu
				get := d.get
				if !k8s {
					fam.add(i, own, tgt, func() float64 { return get(gs) })
					continue
				}
				stored := labelSet{}
				for k, v := range own {
					switch k {
					case "pod", "namespace", "container":
						k = "exported_" + k
					}
					stored[k] = v
				}
				fam.addStored(i, own, stored.with(tgt), func() float64 { return get(gs) })
			}
		}
	}
}

// dcgmExporterPod is the name of the dcgm-exporter DaemonSet pod on
// replica i's node: the DaemonSet name and a five-character suffix from
// Kubernetes' name alphabet.
func dcgmExporterPod(seed int64, i int) string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	x := uint64(seed)*0x9E3779B97F4A7C15 + uint64(i+1)*0xD1B54A32D192ED03
	b := make([]byte, 5)
	for j := range b {
		x ^= x >> 29
		x *= 0xBF58476D1CE4E5B9
		b[j] = alphabet[(x>>32)%uint64(len(alphabet))]
	}
	return "dcgm-exporter-" + string(b)
}
