package sim

import "math"

// request is one inference request moving through the model. Times are
// simulated seconds since the start of the run.
type request struct {
	seq       int64
	prompt    int // prompt tokens
	target    int // output tokens the request will produce (≤ maxTokens)
	maxTokens int
	prefixID  int // shared prefix id, -1 for none
	prefixLen int // tokens of the shared prefix (multiple of blockSize)
	abortAt   float64
	errorAt   float64 // when the server fails it; 0 for never

	arrival float64 // frontend arrival (TTFT and e2e start here)
	queued  float64 // engine arrival (QUEUED)
	replica int

	gen        int // output tokens produced so far
	computed   int // tokens whose KV is in the cache
	ownBlocks  int // blocks held privately
	prefixRef  *prefixEntry
	cached     int // prefix-cache hit tokens at the first scheduling
	sched      float64
	firstToken float64
	lastToken  float64
	hasSched   bool
	hasFirst   bool
	preempts   int
	running    bool
	enq        bool // reached the engine queue
	done       bool
	reason     string
}

// prefixEntry is a computed shared prefix held in the block pool.
type prefixEntry struct {
	id       int
	blocks   int
	refs     int
	lastUsed float64
}

// blockPool is the KV cache: referenced blocks (private blocks of requests
// and prefix blocks with references) and idle cached prefix blocks, which
// count as free and are evicted LRU when an allocation needs them.
type blockPool struct {
	total   int
	used    int
	idle    int
	entries map[int]*prefixEntry
}

func (p *blockPool) free() int { return p.total - p.used }

// take allocates n blocks, evicting idle prefixes if needed.
func (p *blockPool) take(n int) bool {
	if n <= 0 {
		return true
	}
	if p.total-p.used < n {
		return false
	}
	for p.total-p.used-p.idle < n {
		var victim *prefixEntry
		for _, e := range p.entries {
			if e.refs == 0 && (victim == nil || e.lastUsed < victim.lastUsed || (e.lastUsed == victim.lastUsed && e.id < victim.id)) {
				victim = e
			}
		}
		if victim == nil {
			return false
		}
		p.idle -= victim.blocks
		delete(p.entries, victim.id)
	}
	p.used += n
	return true
}

// deque is the waiting queue; preempted requests go to the front.
type deque struct {
	buf        []*request
	head, size int
}

func (d *deque) grow() {
	n := len(d.buf) * 2
	if n == 0 {
		n = 64
	}
	nb := make([]*request, n)
	for i := 0; i < d.size; i++ {
		nb[i] = d.buf[(d.head+i)%len(d.buf)]
	}
	d.buf, d.head = nb, 0
}

func (d *deque) pushBack(r *request) {
	if d.size == len(d.buf) {
		d.grow()
	}
	d.buf[(d.head+d.size)%len(d.buf)] = r
	d.size++
}

func (d *deque) pushFront(r *request) {
	if d.size == len(d.buf) {
		d.grow()
	}
	d.head = (d.head - 1 + len(d.buf)) % len(d.buf)
	d.buf[d.head] = r
	d.size++
}

// front skips requests aborted while waiting.
func (d *deque) front() *request {
	for d.size > 0 {
		r := d.buf[d.head]
		if !r.done {
			return r
		}
		d.popFront()
	}
	return nil
}

func (d *deque) popFront() {
	d.buf[d.head] = nil
	d.head = (d.head + 1) % len(d.buf)
	d.size--
}

type batchItem struct {
	r    *request
	n    int
	ctx  int
	last float64 // the request's previous token time (for ITL)
}

// engine is one replica: scheduler, block pool and the telemetry state.
type engine struct {
	idx     int
	cfg     engineConfig
	pool    blockPool
	waiting deque
	nWait   int
	running []*request
	batch   []batchItem

	busy      bool
	stepStart float64
	stepEnd   float64
	cost      stepCost
	clock     float64 // current clock factor
	peakUsed  int

	tel     *telemetry
	obs     *observer // the truth's window statistics; nil outside a world
	stopped bool      // out of service (capacity_loss)

	// hooks for invariant tests
	onPreempt func(free, need int)
	onFinish  func(r *request, now float64)
}

func newEngine(idx int, cfg engineConfig, tel *telemetry) *engine {
	return &engine{idx: idx, cfg: cfg, pool: blockPool{total: cfg.numBlocks, entries: map[int]*prefixEntry{}},
		tel: tel, clock: 1}
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

func (e *engine) prefixBlocks(r *request) int {
	if r.prefixRef != nil {
		return r.prefixRef.blocks
	}
	return 0
}

// ensure grows r's private allocation so that tokens fit.
func (e *engine) ensure(r *request, tokens int) bool {
	need := ceilDiv(tokens, blockSize) - e.prefixBlocks(r) - r.ownBlocks
	if need <= 0 {
		return true
	}
	if !e.pool.take(need) {
		if e.onPreempt != nil {
			e.onPreempt(e.pool.free(), need)
		}
		return false
	}
	r.ownBlocks += need
	e.peakUsed = max(e.peakUsed, e.pool.used)
	return true
}

// release frees every block r holds.
func (e *engine) release(r *request, now float64) {
	e.pool.used -= r.ownBlocks
	r.ownBlocks = 0
	if pe := r.prefixRef; pe != nil {
		pe.refs--
		pe.lastUsed = now
		if pe.refs == 0 {
			e.pool.used -= pe.blocks
			e.pool.idle += pe.blocks
		}
		r.prefixRef = nil
	}
}

// lookupPrefix returns the cached tokens for r and takes a reference.
func (e *engine) lookupPrefix(r *request, now float64) int {
	if r.prefixID < 0 {
		return 0
	}
	pe := e.pool.entries[r.prefixID]
	if pe == nil {
		return 0
	}
	if pe.refs == 0 {
		e.pool.idle -= pe.blocks
		e.pool.used += pe.blocks
	}
	pe.refs++
	pe.lastUsed = now
	r.prefixRef = pe
	return pe.blocks * blockSize
}

// enqueue adds a request arriving at the engine.
func (e *engine) enqueue(r *request) {
	r.enq = true
	e.waiting.pushBack(r)
	e.nWait++
}

// preempt sends r back to the front of the waiting queue (recompute).
func (e *engine) preempt(r *request, now float64) {
	e.release(r, now)
	r.computed = 0
	r.running = false
	r.preempts++
	e.tel.preemptions++
	if e.obs != nil {
		e.obs.preempt(now)
	}
	e.tel.retractedIn += float64(r.prompt)
	e.tel.retractedOut += float64(r.gen)
	if d := e.tel.rank(r); d != nil {
		d.preemptions++
		d.retractedIn += float64(r.prompt)
		d.retractedOut += float64(r.gen)
	}
	e.waiting.pushFront(r)
	e.nWait++
}

func (e *engine) compactRunning() {
	j := 0
	for _, r := range e.running {
		if !r.done && r.running {
			e.running[j] = r
			j++
		}
	}
	for k := j; k < len(e.running); k++ {
		e.running[k] = nil
	}
	e.running = e.running[:j]
}

// schedule forms the next batch at time now; it returns false when there is
// nothing to run.
func (e *engine) schedule(now float64) bool {
	e.compactRunning()
	e.batch = e.batch[:0]
	switch e.cfg.policy {
	case PolicySGLang:
		e.scheduleSGLang(now)
	default:
		e.scheduleVLLM(now)
	}
	return len(e.batch) > 0
}

func (e *engine) add(r *request, n int) {
	e.batch = append(e.batch, batchItem{r: r, n: n, ctx: r.computed, last: r.lastToken})
}

// scheduleRunning gives each running request its next tokens, preempting
// the newest running request when the pool has no block. It returns the
// remaining budget and whether anything was preempted.
func (e *engine) scheduleRunning(now float64, budget int, decodeOnly, prefillOnly bool) (int, bool) {
	preempted := false
	for i := 0; i < len(e.running) && budget > 0; i++ {
		r := e.running[i]
		need := r.prompt + r.gen - r.computed
		if (decodeOnly && need > 1) || (prefillOnly && need == 1 && r.gen > 0) {
			continue
		}
		n := min(need, budget)
		ok := true
		for !e.ensure(r, r.computed+n) {
			victim := e.running[len(e.running)-1]
			e.running = e.running[:len(e.running)-1]
			e.preempt(victim, now)
			preempted = true
			if victim == r {
				ok = false
				break
			}
		}
		if !ok {
			break
		}
		e.add(r, n)
		budget -= n
	}
	return budget, preempted
}

// admit moves waiting requests into the batch while budget, sequence slots
// and blocks allow. Waiting requests never preempt.
func (e *engine) admit(now float64, budget int) {
	chunked := e.cfg.sched.ChunkedPrefill
	for budget > 0 && len(e.running) < e.cfg.sched.MaxNumSeqs {
		r := e.waiting.front()
		if r == nil {
			return
		}
		total := r.prompt + r.gen
		hit := e.lookupPrefix(r, now)
		need := total - hit
		n := min(need, budget)
		if !chunked && n < need {
			if len(e.batch) > 0 {
				e.release(r, now)
				return
			}
			n = need // a lone prompt larger than the budget runs alone
		}
		reserve := hit + n
		if e.cfg.policy == PolicyTRTLLM {
			reserve = r.prompt + r.maxTokens // GUARANTEED_NO_EVICT
		}
		if !e.ensure(r, reserve) {
			e.release(r, now)
			return
		}
		e.waiting.popFront()
		e.nWait--
		r.computed = hit
		r.running = true
		if !r.hasFirst {
			r.sched = now
			if !r.hasSched {
				r.cached = hit
			}
			r.hasSched = true
		}
		e.tel.prefixQueries += float64(total)
		e.tel.prefixHits += float64(hit)
		if d := e.tel.rank(r); d != nil {
			d.prefixQueries += float64(total)
			d.prefixHits += float64(hit)
		}
		e.running = append(e.running, r)
		e.add(r, n)
		budget -= n
	}
}

func (e *engine) scheduleVLLM(now float64) {
	budget, preempted := e.scheduleRunning(now, e.cfg.sched.MaxNumBatchedTokens, false, false)
	if !preempted {
		e.admit(now, budget)
	}
}

// scheduleSGLang runs a prefill batch when there is prefill work, else a
// decode batch.
func (e *engine) scheduleSGLang(now float64) {
	budget, preempted := e.scheduleRunning(now, e.cfg.sched.MaxNumBatchedTokens, false, true)
	if !preempted {
		e.admit(now, budget)
	}
	if len(e.batch) == 0 {
		e.scheduleRunning(now, math.MaxInt32, true, false)
	}
}

// start begins a step at now if there is work.
func (e *engine) start(now float64) {
	if e.busy || !e.schedule(now) {
		return
	}
	e.cost = stepCost{}
	for _, it := range e.batch {
		e.cfg.itemCost(&e.cost, it.ctx, it.n)
	}
	e.cfg.finish(&e.cost, e.clock)
	e.busy = true
	e.stepStart = now
	e.stepEnd = now + e.cost.seconds
}

// complete applies the effects of the running step at its end time.
func (e *engine) complete(w *world) {
	now := e.stepEnd
	t := e.tel
	if e.obs != nil {
		e.obs.step(e, now)
	}
	t.addStep(&e.cost, e.clock)
	t.iterationTokens.observe(float64(e.cost.tokens), 1)
	t.observeBatch(e.batch)
	itlBatch := 0.0
	for _, it := range e.batch {
		r := it.r
		if r.done || !r.running {
			continue
		}
		r.computed += it.n
		if r.prefixID >= 0 && r.prefixRef == nil && r.computed >= r.prefixLen && e.pool.entries[r.prefixID] == nil {
			// Register the computed prefix: its blocks become shared.
			pe := &prefixEntry{id: r.prefixID, blocks: r.prefixLen / blockSize, refs: 1, lastUsed: now}
			e.pool.entries[r.prefixID] = pe
			r.ownBlocks -= pe.blocks
			r.prefixRef = pe
		}
		if r.computed < r.prompt+r.gen {
			continue
		}
		r.gen++
		t.generationTokens++
		if d := t.rank(r); d != nil {
			d.generationTokens++
		}
		if !r.hasFirst {
			r.hasFirst = true
			r.firstToken = now
			t.promptTokens += float64(r.prompt)
			t.ttft.observe(now-r.arrival, 1)
			if e.obs != nil {
				e.obs.first(r, now)
			}
		} else {
			if it.last == e.stepStart {
				itlBatch++
			} else {
				t.itl.observe(now-it.last, 1)
			}
			if e.obs != nil {
				e.obs.gap(now, now-it.last)
			}
		}
		r.lastToken = now
		if r.gen >= r.target {
			reason := "stop"
			if r.target >= r.maxTokens {
				reason = "length"
			}
			w.finish(e, r, now, reason)
		}
	}
	if itlBatch > 0 {
		t.itl.observe(now-e.stepStart, itlBatch)
	}
	e.busy = false
	e.start(now)
}

// kvUsage is the block-pool occupancy (idle cached blocks count as free).
func (e *engine) kvUsage() float64 {
	return float64(e.pool.used) / float64(e.pool.total)
}

func (e *engine) numRunning() int {
	n := 0
	for _, r := range e.running {
		if !r.done && r.running {
			n++
		}
	}
	return n
}
