package fluid

import (
	"math"
	"slices"
)

// Outcomes of a request, in vLLM's finished_reason spelling
// (vllm/v1/engine/__init__.py FINISH_REASON_STRINGS).
const (
	outStop = iota
	outLength
	outAbort
	outError
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"stop", "length", "abort", "error"}

type phase uint8

const (
	phWaiting phase = iota
	phPrefill
	phDecode
)

// cohort is a group of requests that arrived at one replica in the same
// tick with the same class and outcome; they move through the engine
// together.
type cohort struct {
	n       int
	outcome int
	ph      phase
	prompt  float64 // prompt tokens per request (shared prefix + history + unique)
	matched float64 // shared-prefix tokens that hit (deduplicated in the pool)
	hist    float64 // history tokens (a cache hit while the pool keeps it)
	out     float64 // output tokens it will produce
	maxTok  float64 // its max_tokens
	gen     float64 // tokens produced so far (the first token included)
	pending float64 // tokens the next prefill computes, per request
	cached  float64 // prompt tokens that hit at its first scheduling
	blocks  float64 // KV blocks held, all members
	preempt int     // preemptions so far

	arrive  float64 // at the API server
	enq     float64 // entered the engine queue (first time)
	ready   float64 // entered (or re-entered, after preemption) the engine queue
	start   float64 // first scheduled
	first   float64 // first token
	done    float64 // end of the pending prefill
	lastTok float64 // last token before a preemption
	resumed bool    // its pending prefill is a recompute after preemption
}

// seg is a stretch of prefill work on the replica's prefill frontier.
type seg struct{ from, to, step, tokens float64 }

// replica is one engine: a waiting queue and a running set of cohorts, a
// KV block pool and the prefill frontier (when the engine's prefill work
// is next free).
type replica struct {
	idx      int
	cost     costModel
	lim      limits
	p        *plan
	g        *rng
	pipe     []*cohort // in the API server, before the engine queue
	waiting  []*cohort
	running  []*cohort // admission order
	segs     []seg
	cur      []seg // segments overlapping the current tick
	frontier float64
	used     float64 // private KV blocks in use
	shared   float64 // shared-prefix blocks in use
	nRun     int     // requests admitted (prefilling + decoding)
	nWait    int

	down    bool // routed nothing (capacity_loss idle mode)
	gone    bool // stopped: its series end
	tel     *repTel
	obs     *observer
	lastEnv env

	// this tick, for gauges, GPU counters and the observed windows
	decB, decK float64
	steps      float64
	busy       float64
	pfTokens   float64
	preempted  float64
}

func (r *replica) poolBlocks() float64 { return r.lim.poolTokens / blockSize }

// kvUsage is vLLM's kv_cache_usage_perc: blocks referenced over the pool.
func (r *replica) kvUsage() float64 {
	return math.Min((r.used+r.shared)/r.poolBlocks(), 1)
}

// admitBlocks is the private blocks a cohort needs to be scheduled.
func admitBlocks(c *cohort) float64 {
	return float64(c.n) * ((c.prompt-c.matched+c.gen)/blockSize + 1)
}

// retention is the share of a cached history still in the pool's free
// (evictable) blocks: it falls once fewer than 10% of blocks are free.
func (r *replica) retention() float64 {
	free := 1 - (r.used+r.shared)/r.poolBlocks()
	return clamp(free/0.1, 0, 1)
}

// tick advances the replica by dt from t.
func (r *replica) tick(t, dt float64, e env) {
	tEnd := t + dt
	f := e.clock
	r.lastEnv = e
	r.steps, r.busy, r.pfTokens, r.preempted = 0, 0, 0, 0

	// API server → engine queue
	if len(r.pipe) > 0 {
		var keep, moved []*cohort
		for _, c := range r.pipe {
			if c.ready < tEnd {
				moved = append(moved, c)
			} else {
				keep = append(keep, c)
			}
		}
		slices.SortFunc(moved, func(a, b *cohort) int { return cmpF(a.ready, b.ready) })
		for _, c := range moved {
			c.enq = c.ready
			r.waiting = append(r.waiting, c)
			r.nWait += c.n
		}
		r.pipe = keep
	}

	// decode state at the start of the tick
	var b0, k0 float64
	for _, c := range r.running {
		if c.ph == phDecode {
			n := float64(c.n)
			b0 += n
			k0 += n * (c.prompt + c.gen)
		}
	}
	r.decB, r.decK = b0, k0
	tauLo := r.cost.step(b0, k0, 0, f)
	pmax := math.Max(r.lim.budget-b0, 16)
	full := r.cost.step(b0, k0, pmax, f)

	// admission: FCFS over the prefill frontier, head-of-line blocking on
	// sequence slots and KV blocks as vLLM's scheduler does
	front := math.Max(r.frontier, t)
	total := r.poolBlocks()
	hits := r.retention()
	for len(r.waiting) > 0 {
		c := r.waiting[0]
		wait := r.cost.overhead / 2
		if b0 > 0 {
			wait = tauLo / 2 // the step in flight finishes first
		}
		earliest := math.Max(c.ready+wait, t)
		start := math.Max(front, earliest)
		if start >= tEnd {
			break
		}
		if c.outcome == outError {
			// fails when the engine picks it up: no prefill, no tokens
			r.waiting = r.waiting[1:]
			r.nWait -= c.n
			r.tel.finishError(c, start)
			r.obs.finished(r.idx, c, start)
			continue
		}
		if r.nRun+c.n > int(r.lim.maxSeqs) {
			break
		}
		if !c.resumed {
			// prefix-cache lookup at first scheduling
			c.cached = c.matched + c.hist*histRetain*hits
			c.pending = math.Max(c.prompt-c.cached, 1)
		}
		need := admitBlocks(c)
		sharedAfter := r.sharedBlocksWith(c.n)
		if r.used+need+sharedAfter > total*(1-watermark) && r.nRun > 0 {
			break
		}
		tokens := float64(c.n) * c.pending
		var dur, steps float64
		if start > earliest+1e-9 || tokens > pmax {
			// packed behind other prefills, or chunked: full-budget steps
			steps = tokens / pmax
			dur = steps * full
		} else {
			steps = 1
			dur = r.cost.step(b0, k0, tokens, f)
		}
		front = start + dur
		r.segs = append(r.segs, seg{from: start, to: front, step: dur / steps, tokens: tokens})
		r.waiting = r.waiting[1:]
		r.nWait -= c.n
		r.nRun += c.n
		c.blocks = need
		r.used += need
		r.shared = sharedAfter
		c.ph = phPrefill
		c.done = front
		if c.start == 0 {
			c.start = start
		}
		r.tel.scheduled(c)
		r.running = append(r.running, c)
	}
	r.frontier = front

	// prefill work inside this tick
	var nHi, busyHi float64
	r.cur = r.cur[:0]
	keep := r.segs[:0]
	for _, s := range r.segs {
		ov := overlap(s.from, s.to, t, tEnd)
		if ov > 0 {
			busyHi += ov
			nHi += ov / s.step
			r.pfTokens += s.tokens * ov / (s.to - s.from)
			r.cur = append(r.cur, s)
		}
		if s.to > tEnd {
			keep = append(keep, s)
		}
	}
	r.segs = keep
	tauHi := tauLo
	if nHi > 0 {
		tauHi = busyHi / nHi
	}

	// decode: every decoding cohort advances one token per engine step
	anyDecode := b0 > 0
	for _, c := range r.running {
		if c.ph == phPrefill && c.done < tEnd {
			anyDecode = true
			break
		}
	}
	nLo := 0.0
	if anyDecode {
		nLo = math.Max(dt-busyHi, 0) / tauLo
	}
	r.steps = nHi + nLo
	r.busy = busyHi + nLo*tauLo
	var gapsHi, gapsLo float64
	finished := false
	for _, c := range r.running {
		from := t
		if c.ph == phPrefill {
			if c.done >= tEnd {
				continue
			}
			from = c.done
			r.prefillDone(c)
		}
		// steps available to this cohort from `from` to the tick's end
		var hi, lo float64
		if from <= t {
			hi, lo = nHi, nLo
		} else {
			bh := 0.0
			for _, s := range r.cur {
				bh += overlap(s.from, s.to, from, tEnd)
			}
			bh = math.Min(bh, tEnd-from)
			hi = bh / tauHi
			lo = (tEnd - from - bh) / tauLo
		}
		avail := hi + lo
		if avail <= 0 {
			continue
		}
		need := c.out - c.gen
		tokens := math.Min(need, avail)
		n := float64(c.n)
		shareHi := hi / avail
		gapsHi += n * tokens * shareHi
		gapsLo += n * tokens * (1 - shareHi)
		c.gen += tokens
		grow := n * tokens / blockSize
		c.blocks += grow
		r.used += grow
		r.tel.genTok += n * tokens
		if need <= avail {
			tf := from + (tEnd-from)*need/avail
			r.finish(c, tf)
			finished = true
		}
	}
	if finished {
		keepRun := r.running[:0]
		for _, c := range r.running {
			if c.n > 0 {
				keepRun = append(keepRun, c)
			}
		}
		r.running = keepRun
	}
	r.tel.itl.observe(tauHi, gapsHi, 0.12, r.g)
	r.tel.itl.observe(tauLo, gapsLo, 0.08, r.g)
	r.obs.gaps(r.idx, tEnd, gapsHi, tauHi, gapsLo, tauLo)
	if r.tel.iter != nil {
		if nHi > 0 {
			r.tel.iter.observe(b0+r.pfTokens/nHi, nHi, 0.1, r.g)
		}
		if b0 > 0 {
			r.tel.iter.observe(b0, nLo, 0.03, r.g)
		}
	}

	// out of blocks: preempt the newest running requests (recompute)
	r.shared = r.sharedBlocksWith(0)
	for r.used+r.shared > total && len(r.running) > 1 {
		c := r.running[len(r.running)-1]
		r.running = r.running[:len(r.running)-1]
		r.preemptCohort(c, tEnd)
	}
	r.gpuTick(dt, f, nHi+nLo, b0, k0)
}

// sharedBlocksWith is the shared-prefix blocks in use with extra more
// running requests: one copy per distinct system prompt in use.
func (r *replica) sharedBlocksWith(extra int) float64 {
	active := math.Min(float64(r.p.nPrefixes), float64(r.nRun+extra))
	return active * r.p.sys * r.lastEnv.match / blockSize
}

// prefillDone moves a cohort from prefill to decode at c.done.
func (r *replica) prefillDone(c *cohort) {
	c.ph = phDecode
	if c.resumed {
		// the gap a preempted request saw between two tokens
		gap := c.done - c.lastTok
		r.tel.itl.observe(gap, float64(c.n), 0.05, r.g)
		r.obs.resumeGap(r.idx, c.done, gap, float64(c.n))
		c.resumed = false
		return
	}
	c.first = c.done
	c.gen = 1
	r.tel.firstToken(c)
	r.obs.firstToken(r.idx, c)
}

// finish ends a cohort at tf.
func (r *replica) finish(c *cohort, tf float64) {
	r.used -= c.blocks
	r.nRun -= c.n
	r.tel.finish(c, tf)
	r.obs.finished(r.idx, c, tf)
	c.n = 0
}

// preemptCohort frees a cohort's blocks and puts it back at the head of
// the queue with its prompt and generated tokens to recompute (vLLM V1's
// RECOMPUTE preemption; its blocks are evicted under pressure).
func (r *replica) preemptCohort(c *cohort, t float64) {
	r.used -= c.blocks
	c.blocks = 0
	r.nRun -= c.n
	r.nWait += c.n
	c.preempt++
	r.preempted += float64(c.n)
	r.tel.preempts += float64(c.n)
	if c.ph == phDecode || c.resumed {
		c.resumed = true
		c.lastTok = t
		c.pending = c.prompt - c.matched + c.gen
	} else {
		c.pending = c.prompt - c.matched
		c.cached = c.matched
	}
	c.ph = phWaiting
	c.ready = t
	r.waiting = append(r.waiting, nil)
	copy(r.waiting[1:], r.waiting)
	r.waiting[0] = c
	r.shared = r.sharedBlocksWith(0)
}

// stop ends a replica (capacity_loss): in-flight requests are lost.
func (r *replica) stop() {
	r.gone = true
	r.pipe, r.waiting, r.running, r.segs = nil, nil, nil, nil
	r.used, r.shared, r.nRun, r.nWait = 0, 0, 0, 0
}

func overlap(a0, a1, b0, b1 float64) float64 {
	return math.Max(0, math.Min(a1, b1)-math.Max(a0, b0))
}

func cmpF(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
