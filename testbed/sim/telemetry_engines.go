package sim

// This file holds what the SGLang and TensorRT-LLM telemetry add to the
// shared counters of telemetry.go, and a small builder for their families.
// The mechanism (scheduler, block pool, cost model) is the same for every
// engine; only what is exposed, and how, differs.

// engineExtra is the per-replica state that only the SGLang or TRT-LLM
// telemetry reads.
type engineExtra struct {
	// retractedIn and retractedOut are the prompt and output tokens of
	// preempted (SGLang: retracted) requests at the moment of preemption.
	retractedIn, retractedOut float64
	// prefillBatchTokens is trtllm_prefill_batch_tokens (context tokens per
	// iteration); nil for the other engines.
	prefillBatchTokens *histogram
	// cachedPerRequest is trtllm_prompt_cached_tokens_per_request; nil for
	// the other engines.
	cachedPerRequest *histogram
	// lastBatchPrefill says the replica's last step carried prefill work,
	// lastContextRequests how many requests it prefilled and
	// lastGenRequests how many it decoded.
	lastBatchPrefill    bool
	lastContextRequests int
	lastGenRequests     int

	// skipZero leaves out a per-request TPOT, prefill, decode or
	// inference time of exactly 0, and skipZeroQueue a queue time of 0:
	// TensorRT-LLM's collector observes them only when truthy
	// (tensorrt_llm/metrics/collector.py `if x := d.get(..., 0)`; @050f80de
	// observes any queue time that is not None, @89fd9b74 skips 0 too).
	skipZero, skipZeroQueue bool

	// arrivals is the requests the replica's HTTP server received
	// (SGLang's sglang:http_requests_total, Dynamo's requests counter).
	arrivals float64

	// dp is the per-rank state of an SGLang replica with DP attention
	// (Names "dp"); nil otherwise.
	dp []*dpRank

	// Snapshots at the previous tick and what the last interval showed.
	snapPreempt, snapGen, snapHits, snapQueries float64
	retractedInterval                           float64 // requests retracted in the last interval
	genThroughput                               float64 // generated tokens/s in the last interval
	intervalHitRate                             float64 // prefix-cache hit rate of the last interval's admissions
}

// Bucket layouts of SGLang (docs/engines.md §3.2; python/sglang/srt/metrics/collector.py defaults).
var (
	bucketsSGLangTTFT = []float64{0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400}
	bucketsSGLangITL  = []float64{0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040,
		0.060, 0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1, 2, 4, 6, 8}
	bucketsSGLangE2E = []float64{0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600,
		1200, 1800, 2400}
	bucketsSGLangQueue = []float64{0, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60, 70, 80, 90, 100,
		200, 300, 400, 500, 600, 700, 800, 900, 1000, 1200, 1400, 1600, 1800, 2000, 2500, 3000}
	bucketsSGLangRetractions = []float64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 75, 100}
	bucketsSGLangTokens      = []float64{100, 300, 500, 700, 1000, 1500, 2000, 3000, 4000, 5000, 6000, 7000, 8000,
		9000, 10000, 12000, 15000, 20000, 22000, 25000, 30000, 35000, 40000, 66000, 99000, 132000, 300000, 600000,
		900000, 1100000}

	// trtllm-serve (docs/engines.md §4.1; tensorrt_llm/metrics/collector.py): TTFT, TPOT and latency reuse the vLLM V1 lists.
	bucketsTRTLLMPrefillBatch = []float64{64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768}
	// trtllm_request_prefill_time_seconds (collector.py @050f80de); decode and inference use the latency list.
	bucketsTRTLLMPrefill = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160,
		640, 2560}
	bucketsTRTLLMCached = []float64{0, 64, 128, 256, 512, 1024, 2048, 4096, 8192}
)

// newEngineTelemetry returns the counters of one replica with the bucket
// layouts of the engine whose names it exposes.
func newEngineTelemetry(tele Policy, names string, maxModelLen int) *telemetry {
	t := newTelemetry(names, maxModelLen)
	switch tele {
	case PolicySGLang:
		t.ttft = newHistogram(bucketsSGLangTTFT)
		t.itl = newHistogram(bucketsSGLangITL)
		t.e2e = newHistogram(bucketsSGLangE2E)
		t.queue = newHistogram(bucketsSGLangQueue)
		t.numPreemptions = newHistogram(bucketsSGLangRetractions)
		t.promptLen = newHistogram(bucketsSGLangTokens)
		t.genLen = newHistogram(bucketsSGLangTokens)
	case PolicyTRTLLM:
		t.ttft = newHistogram(bucketsTTFTv1)
		t.reqTPOT = newHistogram(bucketsITLv1)
		t.e2e = newHistogram(bucketsLatencyv1)
		t.queue = newHistogram(bucketsLatencyv1)
		t.prefill = newHistogram(bucketsTRTLLMPrefill)
		t.decode = newHistogram(bucketsLatencyv1)
		t.inference = newHistogram(bucketsLatencyv1)
		t.prefillBatchTokens = newHistogram(bucketsTRTLLMPrefillBatch)
		t.cachedPerRequest = newHistogram(bucketsTRTLLMCached)
		t.skipZero = true
		t.skipZeroQueue = names == "unprefixed" || names == "dynamo"
	}
	return t
}

// dpRanks is how many DP-attention ranks an SGLang replica has with
// Names "dp".
const dpRanks = 2

// dpRank is what one DP-attention rank's scheduler counts. A request
// belongs to one rank for its life (rankOf).
type dpRank struct {
	preemptions, retractedIn, retractedOut float64
	generationTokens                       float64
	prefixQueries, prefixHits              float64
	queue                                  *histogram

	snapPreempt, snapGen, snapHits, snapQueries       float64
	retractedInterval, genThroughput, intervalHitRate float64
}

// initDP gives the replica n DP-attention ranks.
func (t *telemetry) initDP(n int) {
	t.dp = make([]*dpRank, n)
	for k := range t.dp {
		t.dp[k] = &dpRank{queue: newHistogram(t.queue.bounds)}
	}
}

// rankOf is the DP rank of r among n: SGLang's data-parallel controller
// hands requests to the ranks in turn.
func rankOf(r *request, n int) int { return int(r.seq % int64(n)) }

// rank returns the state of r's DP rank, or nil without DP attention.
func (t *telemetry) rank(r *request) *dpRank {
	if t.dp == nil {
		return nil
	}
	return t.dp[rankOf(r, len(t.dp))]
}

// phase records a per-request duration, leaving out zeros where the
// engine's collector does (skipZero).
func (t *telemetry) phase(h *histogram, v float64) {
	if v == 0 && t.skipZero {
		return
	}
	h.observe(v, 1)
}

// observeQueue records r's queue time on the replica and on its DP rank.
func (t *telemetry) observeQueue(r *request, v float64) {
	if v == 0 && t.skipZeroQueue {
		return
	}
	t.queue.observe(v, 1)
	if d := t.rank(r); d != nil {
		d.queue.observe(v, 1)
	}
}

// observeChunk records one streamed chunk of k tokens that took interval
// seconds the way SGLang's tokenizer does: k observations of interval/k in
// the buckets and the count, the raw interval once in the sum. The engine
// model streams every token (k = 1), for which this is a plain observation.
func (h *histogram) observeChunk(interval, k float64) {
	if k <= 0 {
		return
	}
	before := h.sum
	h.observe(interval/k, k)
	h.sum = before + interval
}

// observeBatch records what one finished step tells the engine-specific
// series: whether it carried prefill work, and how many context tokens.
func (t *telemetry) observeBatch(batch []batchItem) {
	prefill, ctxReqs, genReqs := 0, 0, 0
	for _, it := range batch {
		if it.n > 1 || it.ctx < it.r.prompt {
			prefill += it.n
			ctxReqs++
		} else {
			genReqs++
		}
	}
	t.lastBatchPrefill = prefill > 0
	t.lastContextRequests = ctxReqs
	t.lastGenRequests = genReqs
	if t.prefillBatchTokens != nil && prefill > 0 {
		t.prefillBatchTokens.observe(float64(prefill), 1)
	}
}

// finishExtra records a finished or aborted request in the engine-specific series.
func (t *telemetry) finishExtra(r *request) {
	if t.cachedPerRequest != nil && r.reason != "abort" {
		t.cachedPerRequest.observe(float64(r.cached), 1)
	}
}

// tickExtra turns the last interval's deltas into the interval gauges.
func (t *telemetry) tickExtra(interval float64) {
	t.retractedInterval = t.preemptions - t.snapPreempt
	t.genThroughput = (t.generationTokens - t.snapGen) / interval
	if q := t.prefixQueries - t.snapQueries; q > 0 {
		t.intervalHitRate = (t.prefixHits - t.snapHits) / q
	} else {
		t.intervalHitRate = 0
	}
	t.snapPreempt, t.snapGen, t.snapHits, t.snapQueries = t.preemptions, t.generationTokens, t.prefixHits, t.prefixQueries
	for _, d := range t.dp {
		d.retractedInterval = d.preemptions - d.snapPreempt
		d.genThroughput = (d.generationTokens - d.snapGen) / interval
		d.intervalHitRate = 0
		if q := d.prefixQueries - d.snapQueries; q > 0 {
			d.intervalHitRate = (d.prefixHits - d.snapHits) / q
		}
		d.snapPreempt, d.snapGen, d.snapHits, d.snapQueries = d.preemptions, d.generationTokens, d.prefixHits, d.prefixQueries
	}
}

// allocatedBlocks is the blocks that hold KV now. Under GUARANTEED_NO_EVICT
// the model reserves prompt + max_tokens blocks at admission; TRT-LLM
// allocates them as tokens arrive and reports only those as used, so the
// reserved but empty blocks are left out.
func (e *engine) allocatedBlocks() int {
	used := e.pool.used
	for _, r := range e.running {
		if r.done || !r.running {
			continue
		}
		need := max(ceilDiv(r.computed, blockSize)-e.prefixBlocks(r), 0)
		if r.ownBlocks > need {
			used -= r.ownBlocks - need
		}
	}
	return used
}

// famBuilder declares families with one series set per replica.
type famBuilder struct {
	w    *world
	reg  *registry
	defs []famDef
}

type famDef struct {
	fam  *family
	fill func(fam *family, i int, e *engine, t *telemetry, tgt labelSet)
}

func (b *famBuilder) gauge(name, help string, own labelSet, get func(e *engine, t *telemetry) float64) {
	b.defs = append(b.defs, famDef{b.reg.family(name, help, gaugeType), func(fam *family, i int, e *engine, t *telemetry, tgt labelSet) {
		fam.add(i, own, tgt, func() float64 { return get(e, t) })
	}})
}

// counter declares a counter; name is without the _total suffix.
func (b *famBuilder) counter(name, help string, own labelSet, get func(t *telemetry) float64) {
	b.defs = append(b.defs, famDef{b.reg.family(name, help, counterType), func(fam *family, i int, _ *engine, t *telemetry, tgt labelSet) {
		fam.add(i, own, tgt, func() float64 { return get(t) })
	}})
}

func (b *famBuilder) hist(name, help string, own labelSet, get func(t *telemetry) *histogram) {
	b.defs = append(b.defs, famDef{b.reg.family(name, help, histogramType), func(fam *family, i int, _ *engine, t *telemetry, tgt labelSet) {
		fam.addHist(i, own, tgt, get(t))
	}})
}

// custom declares a family whose series the caller adds.
func (b *famBuilder) custom(name, help string, typ famType, fill func(fam *family, i int, e *engine, t *telemetry, tgt labelSet)) {
	b.defs = append(b.defs, famDef{b.reg.family(name, help, typ), fill})
}

// build adds every replica's series, as scraped from job on port, then the GPU counters.
func (b *famBuilder) build(job, port string) *registry {
	for i, e := range b.w.engines {
		tg := b.w.target(i)
		tgt := labelSet{"job": job, "instance": tg.podIP + ":" + port, "pod": tg.pod}
		for _, d := range b.defs {
			d.fill(d.fam, i, e, e.tel, tgt)
		}
	}
	b.w.addGPUFamilies(b.reg)
	return b.reg
}
