package sim

import "strconv"

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
//   - SGLang always exports through prometheus_client's multiprocess mode
//     (python/sglang/srt/utils/common.py set_prometheus_multiproc_dir,
//     add_prometheus_middleware), so no shape has process_* or *_created
//     samples. Names "multiprocess" adds the mode's remaining artifact: a
//     gauge declared without a multiprocess_mode (sglang:num_retracted_reqs)
//     is exported per process with a pid label; the serving command also
//     leaves out its process_start_time_seconds (Live.ProcessStart).
//   - Names "dp" is DP attention with dpRanks ranks per replica: every
//     scheduler-side series is exported once per rank with dp_rank (and
//     that rank's tp_rank); a request stays on one rank (rankOf); running
//     and queued requests, used tokens and counters split over the ranks
//     and add up to the replica's; each rank owns an equal part of the KV
//     pool (token_usage per rank, capped at 1). Tokenizer-side series are
//     unchanged.
func (w *world) buildSGLangRegistry() *registry {
	b := &famBuilder{w: w, reg: &registry{}}
	model := w.plan.cfg.model.name
	tok := labelSet{"model_name": model}
	const p = "sglang:"
	multi := w.opt.Names == "multiprocess"

	// sched declares a scheduler-side family: one series per replica, or
	// one per DP rank with Names "dp" (get sees the rank, -1 for the
	// whole replica).
	sched := func(name, help string, typ famType, get func(e *engine, t *telemetry, k int) float64) {
		b.custom(p+name, help, typ, func(fam *family, i int, e *engine, t *telemetry, tgt labelSet) {
			for _, r := range schedRanks(e, model) {
				l := r.labels
				if multi && name == "num_retracted_reqs" {
					l = l.with(labelSet{"pid": schedPID(i, r.k)})
				}
				k := r.k
				fam.add(i, l, tgt, func() float64 { return get(e, t, k) })
			}
		})
	}
	// perRank picks the replica's value or, for a rank, the rank's.
	perRank := func(whole func(t *telemetry) float64, rank func(d *dpRank) float64) func(*engine, *telemetry, int) float64 {
		return func(_ *engine, t *telemetry, k int) float64 {
			if k < 0 {
				return whole(t)
			}
			return rank(t.dp[k])
		}
	}

	sched("num_running_reqs", "The number of running requests.", gaugeType,
		func(e *engine, _ *telemetry, k int) float64 { return float64(e.runningOfRank(k)) })
	sched("num_queue_reqs", "The number of requests in the waiting queue.", gaugeType,
		func(e *engine, _ *telemetry, k int) float64 { return float64(e.waitingOfRank(k)) })
	sched("num_grammar_queue_reqs", "The number of requests in the grammar waiting queue.", gaugeType,
		func(*engine, *telemetry, int) float64 { return 0 })
	sched("num_used_tokens", "The number of used tokens.", gaugeType,
		func(e *engine, _ *telemetry, k int) float64 { return float64(e.usedTokensOfRank(k)) })
	sched("token_usage", "The token usage.", gaugeType,
		func(e *engine, _ *telemetry, k int) float64 {
			if k < 0 {
				return e.kvUsage()
			}
			return min(1, float64(e.usedTokensOfRank(k))/float64(e.poolTokensOfRank(k)))
		})
	sched("max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.", gaugeType,
		func(e *engine, _ *telemetry, k int) float64 { return float64(e.poolTokensOfRank(k)) })
	sched("cache_hit_rate", "The prefix cache hit rate.", gaugeType,
		func(_ *engine, t *telemetry, k int) float64 {
			if !t.lastBatchPrefill {
				return 0
			}
			if k < 0 {
				return t.intervalHitRate
			}
			return t.dp[k].intervalHitRate
		})
	sched("gen_throughput", "The generation throughput (token/s).", gaugeType,
		perRank(func(t *telemetry) float64 { return t.genThroughput }, func(d *dpRank) float64 { return d.genThroughput }))
	sched("num_retracted_reqs", "The number of retracted requests.", gaugeType,
		perRank(func(t *telemetry) float64 { return t.retractedInterval }, func(d *dpRank) float64 { return d.retractedInterval }))
	sched("num_retracted_requests", "Total number of retracted requests.", counterType,
		perRank(func(t *telemetry) float64 { return t.preemptions }, func(d *dpRank) float64 { return d.preemptions }))
	sched("num_retracted_input_tokens", "Total number of retracted input tokens.", counterType,
		perRank(func(t *telemetry) float64 { return t.retractedIn }, func(d *dpRank) float64 { return d.retractedIn }))
	sched("num_retracted_output_tokens", "Total number of retracted output tokens.", counterType,
		perRank(func(t *telemetry) float64 { return t.retractedOut }, func(d *dpRank) float64 { return d.retractedOut }))
	b.custom(p+"queue_time_seconds", "Histogram of queueing time in seconds.", histogramType,
		func(fam *family, i int, e *engine, t *telemetry, tgt labelSet) {
			for _, r := range schedRanks(e, model) {
				h := t.queue
				if r.k >= 0 {
					h = t.dp[r.k].queue
				}
				fam.addHist(i, r.labels, tgt, h)
			}
		})

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

	// The HTTP middleware's counters (python/sglang/srt/utils/common.py
	// add_prometheus_track_response_middleware): no model_name; a
	// response is counted when the request ends, 200 for finished and
	// aborted streams, 500 for a server-side failure.
	http := labelSet{"endpoint": "/v1/chat/completions", "method": "POST"}
	b.counter(p+"http_requests", "Total number of HTTP requests by endpoint and method", http,
		func(t *telemetry) float64 { return t.arrivals })
	b.custom(p+"http_responses", "Total number of HTTP responses by endpoint and status code", counterType,
		func(fam *family, i int, _ *engine, t *telemetry, tgt labelSet) {
			fam.add(i, http.with(labelSet{"status_code": "200"}), tgt,
				func() float64 { return t.success["stop"] + t.success["length"] + t.success["abort"] })
			fam.add(i, http.with(labelSet{"status_code": "500"}), tgt, func() float64 { return t.success["error"] })
		})
	return b.build("sglang", "30000")
}

// schedRank is one scheduler that exports: k is its DP rank, -1 without
// DP attention.
type schedRank struct {
	k      int
	labels labelSet
}

// schedRanks lists the schedulers of a replica that export metrics: TP
// rank 0 only, or with DP attention the attention-TP rank 0 of each DP
// rank, labelled dp_rank (python/sglang/srt/managers/
// scheduler_metrics_mixin.py adds dp_rank when it is set; only
// attn_tp_rank 0 records unless --enable-metrics-for-all-schedulers).
func schedRanks(e *engine, model string) []schedRank {
	base := labelSet{"model_name": model, "engine_type": "unified", "tp_rank": "0", "pp_rank": "0"}
	n := len(e.tel.dp)
	if n == 0 {
		return []schedRank{{k: -1, labels: base}}
	}
	attnTP := max(e.cfg.tp/n, 1)
	out := make([]schedRank, n)
	for k := range out {
		out[k] = schedRank{k: k, labels: base.with(labelSet{"tp_rank": strconv.Itoa(k * attnTP), "dp_rank": strconv.Itoa(k)})}
	}
	return out
}

// schedPID is the process id of replica i's scheduler for rank k, the pid
// label prometheus_client's multiprocess mode adds to a gauge without a
// multiprocess_mode (sglang:num_retracted_reqs in collector.py @00ae9c15).
func schedPID(i, k int) string { return strconv.Itoa(4100 + 64*i + max(k, 0)) }

// runningOfRank is the running requests of DP rank k (all for k < 0).
func (e *engine) runningOfRank(k int) int {
	if k < 0 {
		return e.numRunning()
	}
	n := 0
	for _, r := range e.running {
		if !r.done && r.running && rankOf(r, len(e.tel.dp)) == k {
			n++
		}
	}
	return n
}

// waitingOfRank is the waiting requests of DP rank k (all for k < 0).
func (e *engine) waitingOfRank(k int) int {
	if k < 0 {
		return e.nWait
	}
	n := 0
	for i := 0; i < e.waiting.size; i++ {
		r := e.waiting.buf[(e.waiting.head+i)%len(e.waiting.buf)]
		if !r.done && !r.running && rankOf(r, len(e.tel.dp)) == k {
			n++
		}
	}
	return n
}

// poolTokensOfRank is the KV pool of DP rank k: the replica's pool split
// evenly, the remainder to rank 0 (all for k < 0).
func (e *engine) poolTokensOfRank(k int) int {
	total := e.cfg.numBlocks * blockSize
	if k < 0 {
		return total
	}
	n := len(e.tel.dp)
	share := total / n
	if k == 0 {
		share += total - share*n
	}
	return share
}

// usedTokensOfRank is the KV tokens DP rank k's requests hold: their own
// blocks and their share of the prefix blocks they reference. The ranks
// add up to the replica's pool.used; the last rank takes the rounding.
func (e *engine) usedTokensOfRank(k int) int {
	total := e.pool.used * blockSize
	if k < 0 {
		return total
	}
	n := len(e.tel.dp)
	held := make([]float64, n)
	for _, r := range e.running {
		if r.done || !r.running {
			continue
		}
		b := float64(r.ownBlocks)
		if pe := r.prefixRef; pe != nil && pe.refs > 0 {
			b += float64(pe.blocks) / float64(pe.refs)
		}
		held[rankOf(r, n)] += b * blockSize
	}
	sum := 0
	for j := 0; j < n-1; j++ {
		v := int(held[j] + 0.5)
		if j == k {
			return v
		}
		sum += v
	}
	return max(total-sum, 0)
}
