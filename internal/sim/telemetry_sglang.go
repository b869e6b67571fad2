package sim

// buildSGLangRegistry declares the series an SGLang server started with
// --enable-metrics (and --collect-tokens-histogram) exposes (docs/engines.md §3).
//
// Scheduler-side series carry model_name, engine_type ("unified"), tp_rank
// and pp_rank (only TP rank 0 exports, SGLang's default); tokenizer-side
// series carry model_name only. Notes on the mapping from the model:
//   - prompt/generation/cached token counters, num_requests_total and e2e
//     are counted per finished request (tokenizer side), aborted ones
//     included; num_aborted_requests_total counts the aborts.
//   - a retraction is the model's preemption (KV pool full during decode).
//   - sglang:cache_hit_rate is the last interval's hit rate when the
//     replica's last step was a prefill batch and 0 otherwise, mimicking
//     SGLang setting it from the last prefill batch and resetting it on each
//     decode log: do not trust it; use cached_tokens_total / prompt_tokens_total.
//   - inter-token latency: one streamed chunk of k tokens is k observations
//     of interval/k (observeChunk); the model streams one token per step.
//   - with Names "v0" the inter-token histogram has its old name
//     sglang:time_per_output_token_seconds (removed spring 2025).
func (w *world) buildSGLangRegistry() *registry {
	b := &famBuilder{w: w, reg: &registry{}}
	model := w.plan.cfg.model.name
	sched := labelSet{"model_name": model, "engine_type": "unified", "tp_rank": "0", "pp_rank": "0"}
	tok := labelSet{"model_name": model}
	const p = "sglang:"

	b.gauge(p+"num_running_reqs", "The number of running requests.", sched,
		func(e *engine, _ *telemetry) float64 { return float64(e.numRunning()) })
	b.gauge(p+"num_queue_reqs", "The number of requests in the waiting queue.", sched,
		func(e *engine, _ *telemetry) float64 { return float64(e.nWait) })
	b.gauge(p+"num_grammar_queue_reqs", "The number of requests in the grammar waiting queue.", sched,
		func(*engine, *telemetry) float64 { return 0 })
	b.gauge(p+"num_used_tokens", "The number of used tokens.", sched,
		func(e *engine, _ *telemetry) float64 { return float64(e.pool.used * blockSize) })
	b.gauge(p+"token_usage", "The token usage.", sched,
		func(e *engine, _ *telemetry) float64 { return e.kvUsage() })
	b.gauge(p+"max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.", sched,
		func(e *engine, _ *telemetry) float64 { return float64(e.cfg.numBlocks * blockSize) })
	b.gauge(p+"cache_hit_rate", "The prefix cache hit rate.", sched,
		func(_ *engine, t *telemetry) float64 {
			if t.lastBatchPrefill {
				return t.intervalHitRate
			}
			return 0
		})
	b.gauge(p+"gen_throughput", "The generation throughput (token/s).", sched,
		func(_ *engine, t *telemetry) float64 { return t.genThroughput })
	b.gauge(p+"num_retracted_reqs", "The number of retracted requests.", sched,
		func(_ *engine, t *telemetry) float64 { return t.retractedInterval })
	b.counter(p+"num_retracted_requests", "Total number of retracted requests.", sched,
		func(t *telemetry) float64 { return t.preemptions })
	b.counter(p+"num_retracted_input_tokens", "Total number of retracted input tokens.", sched,
		func(t *telemetry) float64 { return t.retractedIn })
	b.counter(p+"num_retracted_output_tokens", "Total number of retracted output tokens.", sched,
		func(t *telemetry) float64 { return t.retractedOut })
	b.hist(p+"queue_time_seconds", "Histogram of queueing time in seconds.", sched,
		func(t *telemetry) *histogram { return t.queue })

	b.counter(p+"prompt_tokens", "Number of prefill tokens processed.", tok,
		func(t *telemetry) float64 { return t.promptLen.sum })
	b.counter(p+"generation_tokens", "Number of generation tokens processed.", tok,
		func(t *telemetry) float64 { return t.genLen.sum })
	b.counter(p+"cached_tokens", "Number of cached prompt tokens.", tok,
		func(t *telemetry) float64 { return t.promptCacheHit })
	b.counter(p+"num_requests", "Number of requests processed.", tok,
		func(t *telemetry) float64 { return t.e2e.count })
	// A request that fails in the server is aborted with an error status.
	b.counter(p+"num_aborted_requests", "Number of requests aborted.", tok,
		func(t *telemetry) float64 { return t.success["abort"] + t.success["error"] })
	b.hist(p+"time_to_first_token_seconds", "Histogram of time to first token in seconds.", tok,
		func(t *telemetry) *histogram { return t.ttft })
	itl := "inter_token_latency_seconds"
	if w.opt.Names == "v0" {
		itl = "time_per_output_token_seconds"
	}
	b.hist(p+itl, "Histogram of inter-token latency in seconds.", tok,
		func(t *telemetry) *histogram { return t.itl })
	b.hist(p+"e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", tok,
		func(t *telemetry) *histogram { return t.e2e })
	b.hist(p+"num_retractions", "Histogram of retraction counts per request.", tok,
		func(t *telemetry) *histogram { return t.numPreemptions })
	b.hist(p+"prompt_tokens_histogram", "Histogram of prompt token length.", tok,
		func(t *telemetry) *histogram { return t.promptLen })
	b.hist(p+"generation_tokens_histogram", "Histogram of generation token length.", tok,
		func(t *telemetry) *histogram { return t.genLen })
	return b.build("sglang", "30000")
}
