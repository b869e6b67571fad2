package reqsim

import (
	"math"
	"slices"
)

// blockTokens is the paged KV pool's block size.
const blockTokens = 16

// policy is an engine's scheduler.
type policy int

const (
	vllmV1   policy = iota // mixed batches, chunked prefill, recompute preemption
	sglangPF               // prefill-first batches, retraction
	trtIFB                 // in-flight batching, no chunking, GUARANTEED_NO_EVICT
)

func (p policy) engine() string {
	switch p {
	case sglangPF:
		return "sglang"
	case trtIFB:
		return "trtllm"
	}
	return "vllm"
}

// hardware is one replica's cost model (a TP group running one model).
type hardware struct {
	name, gpu, product string
	model              string
	tp                 int
	weightRead         float64 // s per step to read the weights at full clock
	kvRead             float64 // s per KV token read by a decoding request
	perToken           float64 // s of compute per computed token
	overhead           float64 // s per step (launch, sampling, scheduler)
	kvTokens           int     // KV pool capacity in tokens
	smClockMax         float64
	tdp                float64
	memGiB             float64
	maxLen             int
}

// req is one request.
type req struct {
	arrive   float64 // client sent it (TTFT and e2e start here)
	enq      float64 // reached the engine's queue (after the API server)
	prompt   int
	cached   int // prompt tokens served from the prefix cache at first admission
	out      int // tokens it will generate unless it aborts or fails
	maxTok   int // the request's max_tokens (out ≤ maxTok)
	abortAt  int // client aborts after this many tokens (0: never)
	fail     bool
	rep      int
	sched    float64 // first scheduled (-1 before)
	need     int     // tokens to compute before the next token (prefill)
	done     int     // of need, computed so far
	gen      int
	first    float64
	last     float64
	blocks   int
	reserved int // TensorRT-LLM: blocks reserved for prompt + max_tokens
	preempts int
	chunk    int  // tokens of need scheduled into the current step
	decoding bool // in the current step as a decode
}

// kvLen is the tokens the request holds in the KV pool.
func (r *req) kvLen() int {
	if r.need > 0 {
		return r.ctxBase() + r.done
	}
	return r.prompt + r.gen
}

// ctxBase is what a (re)prefill starts from: the prefix-cache hit.
func (r *req) ctxBase() int { return r.prompt + r.gen - r.need }

func blocksFor(tokens int) int { return (tokens + blockTokens - 1) / blockTokens }

// replica is one engine.
type replica struct {
	id        int
	alive     bool
	accepting bool
	waiting   []*req
	running   []*req
	free      int // free KV blocks
	total     int
	clock     float64
	stepping  bool
	stepEnd   float64
	stepStart float64
	step      stepCost
	tel       *tel
	// TensorRT-LLM reservation of blocks for admitted requests.
	reservedBlocks int
}

// stepCost is one step's cost split by driver, in seconds at full clock.
type stepCost struct {
	fixed, batch, context, prefill float64
	clock                          float64
	decodes, prefillTok            int
}

func (c stepCost) seconds() float64 {
	return (c.fixed + c.batch + c.context + c.prefill) / c.clock
}

// engine holds the scheduler configuration and the callbacks the
// simulation gives it.
type engine struct {
	pol      policy
	hw       hardware
	budget   int // max_num_batched_tokens / chunked_prefill_size / max_num_tokens
	maxSeqs  int
	chunked  bool
	onToken  func(rp *replica, r *req, t float64, gap float64, first bool)
	onFinish func(rp *replica, r *req, t float64, reason int)
	onSched  func(rp *replica, r *req, t float64)
}

// Finish reasons.
const (
	finStop = iota
	finLength
	finAbort
	finError
	nFinish
)

// cost computes a step's cost from its batch.
func (e *engine) cost(rp *replica) stepCost {
	c := stepCost{clock: rp.clock, fixed: e.hw.overhead + e.hw.weightRead}
	ctx := 0
	for _, r := range rp.running {
		if r.decoding {
			c.decodes++
			ctx += r.prompt + r.gen
		}
		c.prefillTok += r.chunk
	}
	c.batch = float64(c.decodes) * e.hw.perToken
	c.context = float64(ctx) * e.hw.kvRead
	// attention over the already computed context of prefill chunks is
	// folded into the per-token compute.
	c.prefill = float64(c.prefillTok) * e.hw.perToken
	return c
}

// schedule builds the next step on rp at time t; it returns false when
// there is nothing to run.
func (e *engine) schedule(rp *replica, t float64) bool {
	for _, r := range rp.running {
		r.chunk, r.decoding = 0, false
	}
	switch e.pol {
	case vllmV1:
		e.scheduleVLLM(rp, t)
	case sglangPF:
		e.scheduleSGLang(rp, t)
	default:
		e.scheduleTRT(rp, t)
	}
	work := false
	for _, r := range rp.running {
		if r.decoding || r.chunk > 0 {
			work = true
			break
		}
	}
	return work
}

// grow allocates blocks so r can hold tokens; false when the pool is short.
func (rp *replica) grow(r *req, tokens int) bool {
	need := blocksFor(tokens) - r.blocks
	if need <= 0 {
		return true
	}
	if need > rp.free {
		return false
	}
	rp.free -= need
	r.blocks += need
	return true
}

func (rp *replica) release(r *req) {
	rp.free += r.blocks
	r.blocks = 0
	if r.reserved > 0 {
		rp.reservedBlocks -= r.reserved
		r.reserved = 0
	}
}

// preempt evicts r (recompute): it loses its KV and re-prefills its prompt
// and the tokens it generated, from the front of the queue.
func (e *engine) preempt(rp *replica, r *req) {
	rp.release(r)
	r.preempts++
	r.need = r.prompt + r.gen
	r.done = 0
	r.chunk, r.decoding = 0, false
	rp.running = slices.DeleteFunc(rp.running, func(x *req) bool { return x == r })
	rp.waiting = slices.Insert(rp.waiting, 0, r)
	rp.tel.preempts++
}

// growOrPreempt grows r's KV to upTo tokens, preempting the newest running
// request while the pool has no room; false when r itself was preempted.
func (e *engine) growOrPreempt(rp *replica, r *req, upTo int) bool {
	for !rp.grow(r, upTo) {
		v := rp.running[len(rp.running)-1]
		e.preempt(rp, v)
		if v == r {
			return false
		}
	}
	return true
}

// admit moves the head of the queue into the running set with its prefix
// hit (first admission only).
func (e *engine) admit(rp *replica, r *req, t float64) {
	rp.waiting = rp.waiting[1:]
	if r.sched < 0 {
		r.sched = t
		e.onSched(rp, r, t)
		r.need = r.prompt - r.cached
		r.done = 0
	}
	rp.running = append(rp.running, r)
}

// scheduleVLLM is vLLM V1's scheduler: running requests first (decodes and
// unfinished prefill chunks) under the token budget, preempting the newest
// running request when a decode finds no free block, then waiting ones.
func (e *engine) scheduleVLLM(rp *replica, t float64) {
	budget := e.budget
	for i := 0; i < len(rp.running) && budget > 0; i++ {
		r := rp.running[i]
		if r.need > 0 {
			n := min(r.need-r.done, budget)
			if !e.growOrPreempt(rp, r, r.ctxBase()+r.done+n) {
				i--
				continue
			}
			r.chunk = n
			budget -= n
			continue
		}
		if !e.growOrPreempt(rp, r, r.prompt+r.gen+1) {
			i--
			continue
		}
		r.decoding = true
		budget--
	}
	for len(rp.waiting) > 0 && budget > 0 && len(rp.running) < e.maxSeqs {
		r := rp.waiting[0]
		base := r.prompt + r.gen
		need := r.prompt - r.cached
		if r.sched >= 0 {
			need = r.prompt + r.gen
		}
		start := base - need
		n := min(need, budget)
		if blocksFor(start+n)-r.blocks > rp.free {
			break
		}
		e.admit(rp, r, t)
		rp.grow(r, start+n)
		r.chunk = n
		budget -= n
	}
}

// scheduleSGLang is SGLang's prefill-first loop: when requests wait and
// fit, the step is a prefill batch of up to the chunk size (a request that
// does not fit is chunked and continues first); otherwise a decode batch,
// retracting the newest request when the pool runs out.
func (e *engine) scheduleSGLang(rp *replica, t float64) {
	budget := e.budget
	// an unfinished chunked prefill continues first
	for _, r := range rp.running {
		if r.need > 0 && budget > 0 {
			n := min(r.need-r.done, budget)
			if rp.grow(r, r.ctxBase()+r.done+n) {
				r.chunk = n
				budget -= n
			}
		}
	}
	headroom := rp.total / 10 // room kept for the running requests' growth
	for len(rp.waiting) > 0 && budget > 0 && len(rp.running) < e.maxSeqs {
		r := rp.waiting[0]
		need := r.prompt - r.cached
		if r.sched >= 0 {
			need = r.prompt + r.gen
		}
		start := r.prompt + r.gen - need
		n := min(need, budget)
		if blocksFor(start+n)-r.blocks > rp.free-headroom {
			break
		}
		e.admit(rp, r, t)
		rp.grow(r, start+n)
		r.chunk = n
		budget -= n
	}
	if budget < e.budget {
		return // a prefill batch
	}
	for i := 0; i < len(rp.running); i++ {
		r := rp.running[i]
		if r.need > 0 {
			continue
		}
		if !e.growOrPreempt(rp, r, r.prompt+r.gen+1) {
			break
		}
		r.decoding = true
	}
}

// scheduleTRT is TensorRT-LLM's in-flight batching under
// GUARANTEED_NO_EVICT: every running request decodes; a waiting request is
// admitted only when its prompt and max_tokens fit the blocks not yet
// reserved, and its whole prompt runs in the step (no chunking).
func (e *engine) scheduleTRT(rp *replica, t float64) {
	ctxTok := 0
	for _, r := range rp.running {
		rp.grow(r, r.prompt+r.gen+1) // within its reservation
		r.decoding = true
	}
	for len(rp.waiting) > 0 && len(rp.running) < e.maxSeqs {
		r := rp.waiting[0]
		res := blocksFor(r.prompt + r.maxTok)
		if rp.reservedBlocks+res > rp.total {
			break
		}
		n := r.prompt - r.cached
		if ctxTok > 0 && ctxTok+n > e.budget {
			break
		}
		e.admit(rp, r, t)
		r.reserved = res
		rp.reservedBlocks += res
		rp.grow(r, r.prompt)
		r.chunk = n
		ctxTok += n
	}
}

// finishStep applies a step's results at its end t.
func (e *engine) finishStep(rp *replica, t float64) {
	keep := rp.running[:0]
	for _, r := range rp.running {
		emit := false
		if r.chunk > 0 {
			r.done += r.chunk
			if r.done >= r.need {
				r.need, r.done = 0, 0
				emit = true
			}
		} else if r.decoding {
			emit = true
		}
		r.chunk, r.decoding = 0, false
		if !emit {
			keep = append(keep, r)
			continue
		}
		if r.fail {
			rp.release(r)
			e.onFinish(rp, r, t, finError)
			continue
		}
		r.gen++
		first := r.gen == 1
		gap := 0.0
		if !first {
			gap = t - r.last
		} else {
			r.first = t
		}
		r.last = t
		e.onToken(rp, r, t, gap, first)
		switch {
		case r.abortAt > 0 && r.gen >= r.abortAt:
			rp.release(r)
			e.onFinish(rp, r, t, finAbort)
		case r.gen >= r.out:
			rp.release(r)
			reason := finStop
			if r.out >= r.maxTok {
				reason = finLength
			}
			e.onFinish(rp, r, t, reason)
		default:
			keep = append(keep, r)
		}
	}
	clear(rp.running[len(keep):])
	rp.running = keep
}

// kvUsage is the share of the pool's blocks in use.
func (rp *replica) kvUsage() float64 {
	if rp.total == 0 {
		return 0
	}
	return math.Min(1, float64(rp.total-rp.free)/float64(rp.total))
}
