package sim

// trtllmFinishReason maps the model's finish reasons to the LLM API's
// (stop, length, cancelled); a client abort is a cancelled request. A
// request that fails in the server has no finish reason and is not
// counted.
var trtllmFinishReason = map[string]string{"stop": "stop", "length": "length", "abort": "cancelled"}

// buildTRTLLMRegistry declares the series of a TensorRT-LLM replica in the
// shape Options.Names asks for:
//
//   - "v1": current trtllm-serve on /prometheus/metrics with
//     return_perf_metrics and enable_iter_perf_stats on, labelled with
//     model_name and engine_type="trtllm" (the collector's documented
//     example). Names, help texts and buckets are those of
//     NVIDIA/TensorRT-LLM tensorrt_llm/metrics/collector.py @050f80de; the
//     subset the model can drive is exported (no speculative decoding,
//     perplexity, host-tier or memory series).
//   - "unprefixed": TensorRT-LLM 1.1 and older (collector.py @89fd9b74,
//     PR #5785): the five per-request families without a prefix, labelled
//     model_name="undefined", engine_type="undefined" as trtllm-serve
//     created its collector then.
//   - "dynamo": NVIDIA Dynamo's worker /metrics (port 8081): the same five
//     families with the trtllm_ prefix Dynamo adds and the labels the
//     engine was given (ai-dynamo/dynamo docs/backends/trtllm/prometheus.md),
//     plus Dynamo's work-handler series dynamo_component_requests_total and
//     dynamo_component_inflight_requests (docs/observability/metrics.md,
//     lib/runtime/src/metrics/prometheus_names.rs) on the default endpoint
//     dyn://dynamo.tensorrt_llm.generate. No iteration series.
//
// Notes on the mapping from the model:
//   - per-request series (success, e2e, TTFT, TPOT, queue, phases, prompt,
//     generation and cached token counters) are recorded when a request
//     finishes; TPOT is per request (mean inter-token gap), there is no
//     per-token inter-token histogram and no prompt-length histogram.
//   - the collectors observe a duration only when it is not 0 (skipZero):
//     a one-token request has no TPOT or decode time; the older collector
//     (unprefixed, dynamo) also drops queue times of exactly 0, which the
//     model produces for requests admitted on arrival at an idle replica.
//   - trtllm_kv_cache_utilization is used blocks over max blocks, and used
//     blocks are allocated ones: under GUARANTEED_NO_EVICT blocks are
//     reserved for prompt + max_tokens at admission but only the ones
//     holding KV count as used.
//   - trtllm_kv_cache_hit_rate is the last interval's block-reuse rate.
//   - there is no preemption counter and trtllm_num_paused_requests is 0:
//     GUARANTEED_NO_EVICT never evicts.
//   - trtllm_request_error_total{http_code="500"} counts the requests that
//     fail in the server; like the success counter's reasons, the series
//     is present from the start (the real client creates it on its first
//     increment).
func (w *world) buildTRTLLMRegistry() *registry {
	switch w.opt.Names {
	case "unprefixed":
		b := &famBuilder{w: w, reg: &registry{}}
		w.trtllmRequestFamilies(b, "", labelSet{"model_name": "undefined", "engine_type": "undefined"})
		return b.build("trtllm", "8000")
	case "dynamo":
		b := &famBuilder{w: w, reg: &registry{}}
		w.trtllmRequestFamilies(b, "trtllm_", labelSet{"model_name": w.plan.cfg.model.name, "engine_type": "trtllm"})
		dyn := labelSet{"dynamo_namespace": "dynamo", "dynamo_component": "tensorrt_llm", "dynamo_endpoint": "generate"}
		b.counter("dynamo_component_requests", "Total requests processed", dyn,
			func(t *telemetry) float64 { return t.arrivals })
		b.gauge("dynamo_component_inflight_requests", "Requests currently being processed", dyn,
			func(e *engine, _ *telemetry) float64 { return float64(e.nWait + e.numRunning()) })
		return b.build("dynamo", "8081")
	}
	b := &famBuilder{w: w, reg: &registry{}}
	own := labelSet{"model_name": w.plan.cfg.model.name, "engine_type": "trtllm"}
	const p = "trtllm_"
	w.trtllmRequestFamilies(b, p, own)
	b.hist(p+"request_prefill_time_seconds",
		"Histogram of prefill (context) phase duration in seconds (first_token_time - first_scheduled_time).", own,
		func(t *telemetry) *histogram { return t.prefill })
	b.hist(p+"request_decode_time_seconds",
		"Histogram of decode (generation) phase duration in seconds (last_token_time - first_token_time).", own,
		func(t *telemetry) *histogram { return t.decode })
	b.hist(p+"request_inference_time_seconds",
		"Histogram of total inference duration in seconds (last_token_time - first_scheduled_time).", own,
		func(t *telemetry) *histogram { return t.inference })
	b.counter(p+"prompt_tokens", "Cumulative number of prompt (input) tokens processed.", own,
		func(t *telemetry) float64 { return t.promptLen.sum })
	b.counter(p+"generation_tokens", "Cumulative number of generation (output) tokens produced.", own,
		func(t *telemetry) float64 { return t.genLen.sum })
	b.counter(p+"prompt_cached_tokens", "Process-lifetime total prompt tokens served from KV cache.", own,
		func(t *telemetry) float64 { return t.promptCacheHit })
	b.hist(p+"prompt_cached_tokens_per_request", "Histogram of cached prompt tokens per request.", own,
		func(t *telemetry) *histogram { return t.cachedPerRequest })
	b.custom(p+"request_error", "Total request errors, labeled by HTTP status code.", counterType,
		func(fam *family, i int, _ *engine, t *telemetry, tgt labelSet) {
			fam.add(i, own.with(labelSet{"http_code": "500"}), tgt, func() float64 { return t.success["error"] })
		})
	b.gauge(p+"kv_cache_hit_rate", "KV cache hit rate", own,
		func(_ *engine, t *telemetry) float64 { return t.intervalHitRate })
	b.gauge(p+"kv_cache_utilization", "KV cache utilization", own,
		func(e *engine, _ *telemetry) float64 { return float64(e.allocatedBlocks()) / float64(e.pool.total) })
	b.gauge(p+"num_requests_running", "Number of active requests", own,
		func(e *engine, _ *telemetry) float64 { return float64(e.numRunning()) })
	b.gauge(p+"num_requests_waiting", "Number of queued requests", own,
		func(e *engine, _ *telemetry) float64 { return float64(e.nWait) })
	b.gauge(p+"max_batch_size_runtime", "Runtime maximum batch size", own,
		func(e *engine, _ *telemetry) float64 { return float64(e.cfg.sched.MaxNumSeqs) })
	b.gauge(p+"max_num_tokens_runtime", "Runtime maximum number of tokens", own,
		func(e *engine, _ *telemetry) float64 { return float64(e.cfg.sched.MaxNumBatchedTokens) })
	b.gauge(p+"kv_cache_max_blocks", "Maximum number of KV cache blocks", own,
		func(e *engine, _ *telemetry) float64 { return float64(e.pool.total) })
	b.gauge(p+"kv_cache_used_blocks", "Number of used KV cache blocks", own,
		func(e *engine, _ *telemetry) float64 { return float64(e.allocatedBlocks()) })
	b.gauge(p+"kv_cache_tokens_per_block", "Number of tokens per KV cache block", own,
		func(*engine, *telemetry) float64 { return blockSize })
	b.gauge(p+"num_context_requests", "Number of context (prefill) requests", own,
		func(_ *engine, t *telemetry) float64 { return float64(t.lastContextRequests) })
	b.gauge(p+"num_generation_requests", "Number of generation (decode) requests", own,
		func(_ *engine, t *telemetry) float64 { return float64(t.lastGenRequests) })
	b.gauge(p+"num_paused_requests", "Number of paused requests", own,
		func(*engine, *telemetry) float64 { return 0 })
	b.hist(p+"prefill_batch_tokens", "Histogram of total context tokens per iteration.", own,
		func(t *telemetry) *histogram { return t.prefillBatchTokens })
	return b.build("trtllm", "8000")
}

// trtllmRequestFamilies declares the five per-request families every
// TensorRT-LLM shape has, named with prefix p.
func (w *world) trtllmRequestFamilies(b *famBuilder, p string, own labelSet) {
	b.custom(p+"request_success", "Count of successfully processed requests.", counterType,
		func(fam *family, i int, _ *engine, t *telemetry, tgt labelSet) {
			for _, reason := range []string{"abort", "length", "stop"} {
				fam.add(i, own.with(labelSet{"finished_reason": trtllmFinishReason[reason]}), tgt,
					func() float64 { return t.success[reason] })
			}
		})
	b.hist(p+"e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.", own,
		func(t *telemetry) *histogram { return t.e2e })
	b.hist(p+"time_to_first_token_seconds", "Histogram of time to first token in seconds.", own,
		func(t *telemetry) *histogram { return t.ttft })
	b.hist(p+"time_per_output_token_seconds", "Histogram of time per output token in seconds.", own,
		func(t *telemetry) *histogram { return t.reqTPOT })
	b.hist(p+"request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", own,
		func(t *telemetry) *histogram { return t.queue })
}
