package sim

// trtllmFinishReason maps the model's finish reasons to the LLM API's
// (stop, length, cancelled); a client abort is a cancelled request. A
// request that fails in the server has no finish reason and is not
// counted.
var trtllmFinishReason = map[string]string{"stop": "stop", "length": "length", "abort": "cancelled"}

// buildTRTLLMRegistry declares the series trtllm-serve exposes on
// /prometheus/metrics with return_perf_metrics and enable_iter_perf_stats
// on (docs/engines.md §4), labelled with model_name and engine_type="trtllm".
//
// Notes on the mapping from the model:
//   - per-request series (success, e2e, TTFT, TPOT, queue, prompt,
//     generation and cached token counters) are recorded when a request
//     finishes; TPOT is per request (mean inter-token gap), there is no
//     per-token inter-token histogram and no prompt-length histogram.
//   - trtllm_kv_cache_utilization is allocated blocks over the pool: under
//     GUARANTEED_NO_EVICT blocks are reserved for prompt + max_tokens at
//     admission but only the ones holding KV count as used.
//   - trtllm_kv_cache_hit_rate is the last interval's block-reuse rate.
//   - there is no preemption counter: GUARANTEED_NO_EVICT never evicts.
//   - the cached-tokens histogram uses its newer name
//     trtllm_prompt_cached_tokens_per_request, since an OpenMetrics family
//     trtllm_prompt_cached_tokens would clash with the counter's.
func (w *world) buildTRTLLMRegistry() *registry {
	b := &famBuilder{w: w, reg: &registry{}}
	own := labelSet{"model_name": w.plan.cfg.model.name, "engine_type": "trtllm"}
	const p = "trtllm_"

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
	b.gauge(p+"kv_cache_hit_rate", "KV cache hit rate", own,
		func(_ *engine, t *telemetry) float64 { return t.intervalHitRate })
	b.gauge(p+"kv_cache_utilization", "KV cache utilization", own,
		func(e *engine, _ *telemetry) float64 { return float64(e.allocatedBlocks()) / float64(e.pool.total) })
	b.counter(p+"prompt_tokens", "Cumulative number of prompt (input) tokens processed.", own,
		func(t *telemetry) float64 { return t.promptLen.sum })
	b.counter(p+"generation_tokens", "Cumulative number of generation (output) tokens produced.", own,
		func(t *telemetry) float64 { return t.genLen.sum })
	b.counter(p+"prompt_cached_tokens", "Total prompt tokens served from KV cache.", own,
		func(t *telemetry) float64 { return t.promptCacheHit })
	b.hist(p+"prompt_cached_tokens_per_request", "Histogram of cached prompt tokens per request.", own,
		func(t *telemetry) *histogram { return t.cachedPerRequest })
	b.gauge(p+"server_queue_length", "Number of requests waiting in the server queue.", own,
		func(e *engine, _ *telemetry) float64 { return float64(e.nWait) })
	b.gauge(p+"num_active_requests", "Number of active requests.", own,
		func(e *engine, _ *telemetry) float64 { return float64(e.numRunning()) })
	b.gauge(p+"prefill_num_context_requests", "Number of context (prefill) requests in the last iteration.", own,
		func(_ *engine, t *telemetry) float64 { return float64(t.lastContextRequests) })
	b.hist(p+"prefill_batch_tokens", "Histogram of total context tokens per iteration.", own,
		func(t *telemetry) *histogram { return t.prefillBatchTokens })
	return b.build("trtllm", "8000")
}
