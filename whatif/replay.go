package whatif

import (
	"math"
	"math/rand/v2"
	"slices"
)

// Replay bounds: simulated time, requests and steps per replay.
const (
	ReplaySeconds  = 420.0
	ReplayWarmup   = 120.0
	MaxReplayReqs  = 20000
	MaxReplaySteps = 100000
	kvBlock        = 16 // tokens per KV block (vLLM, SGLang page, TRT-LLM tokens_per_block default)
)

// Scheduler policies.
const (
	PolicyVLLM   = "vllm"   // mixed chunked batches, recompute preemption
	PolicySGLang = "sglang" // prefill-first batches, retraction
	PolicyTRT    = "trtllm" // in-flight batching, no chunking, reservation
)

// Config is one replica's replay.
type Config struct {
	Policy string
	Step   StepModel
	Clock  float64 // clock fraction (1: the fitted full clock)
	// Rate is the requests per second this replica receives.
	Rate                    float64
	PromptMean, PromptSigma float64
	// PromptTail, when set, shapes the prompt lengths instead of
	// PromptMean and PromptSigma: quantiles (ascending) the draws pass
	// through, log-linear in the normal score between them, with a
	// lognormal body of σ PromptBody below the first.
	PromptTail []Quantile
	PromptBody float64
	// PromptHist, when set, draws the prompt lengths from a histogram
	// instead: a bucket by its count, log-uniform inside it (the bucket
	// past the last bound up to PromptMax, or 1.2× that bound).
	PromptHist              *Histogram
	OutputMean, OutputSigma float64
	PromptCap               int     // 0: no cap
	PromptMax               int     // the longest prompt the window saw (0: unknown); longer draws are cut
	Hit                     float64 // mean share of a prompt served from the prefix cache
	Budget, MaxSeqs         int
	KVTokens                int
	ReserveOut              int     // TensorRT-LLM: tokens reserved for the output
	Outside                 float64 // seconds before the engine, added to TTFT
	// Replicas are simulated behind a round-robin router (default one);
	// Represents is how many real replicas they stand for (a sample's
	// weight); Pinned is the share of arrivals pinned to the first.
	Replicas   int
	Represents float64
	Pinned     float64
	Seed       uint64
}

// Result is a replay's measured window.
type Result struct {
	TTFT, ITL   []float64 // samples from the measured window
	TTFTW, ITLW []float64 // their weights (the real replicas a simulated one stands for)
	Tokens      float64   // output tokens emitted in the measured window, weighted
	// PromptTokens and CachedTokens are the prompts drawn and their share
	// served from the prefix cache, over the whole replay.
	PromptTokens, CachedTokens float64
	Requests                   int
	Steps                      int
	// Waiting is the requests waiting on a real replica, averaged over
	// the measured window and the replicas they stand for (each simulated
	// replica by its weight: a pinned replica stands for one).
	Waiting float64
	// Truncated names the bound that stopped the replay early, if any.
	Truncated string
	Span      float64 // seconds measured
}

type rreq struct {
	arrive           float64
	prompt, cached   int
	out, gen         int
	need, done       int // tokens to prefill before the next token, computed so far
	blocks, reserved int
	chunk            int
	decoding         bool
	admitted         bool
	last             float64
}

type replica struct {
	c                  Config
	waiting, running   []*rreq
	free, total, resvd int
}

func (r *rreq) ctxBase() int { return r.prompt + r.gen - r.need }

func blocks(tokens int) int { return (tokens + kvBlock - 1) / kvBlock }

func (rp *replica) grow(r *rreq, tokens int) bool {
	n := blocks(tokens) - r.blocks
	if n <= 0 {
		return true
	}
	if n > rp.free {
		return false
	}
	rp.free -= n
	r.blocks += n
	return true
}

func (rp *replica) release(r *rreq) {
	rp.free += r.blocks
	r.blocks = 0
	rp.resvd -= r.reserved
	r.reserved = 0
}

// preempt evicts r by recompute: it re-prefills its prompt and output so far.
func (rp *replica) preempt(r *rreq) {
	rp.release(r)
	r.need, r.done = r.prompt+r.gen, 0
	r.chunk, r.decoding = 0, false
	rp.running = slices.DeleteFunc(rp.running, func(x *rreq) bool { return x == r })
	rp.waiting = slices.Insert(rp.waiting, 0, r)
}

// growOrPreempt grows r to tokens, evicting the newest running request
// while the pool is short; false when r itself went.
func (rp *replica) growOrPreempt(r *rreq, tokens int) bool {
	for !rp.grow(r, tokens) {
		v := rp.running[len(rp.running)-1]
		rp.preempt(v)
		if v == r {
			return false
		}
	}
	return true
}

// firstNeed is what the head of the queue must prefill on admission.
func firstNeed(r *rreq) int {
	if r.admitted {
		return r.need
	}
	return r.prompt - r.cached
}

func (rp *replica) admit(r *rreq) {
	rp.waiting = rp.waiting[1:]
	if !r.admitted {
		r.admitted = true
		r.need, r.done = r.prompt-r.cached, 0
	}
	rp.running = append(rp.running, r)
}

func (rp *replica) schedule() {
	for _, r := range rp.running {
		r.chunk, r.decoding = 0, false
	}
	switch rp.c.Policy {
	case PolicySGLang:
		rp.scheduleSGLang()
	case PolicyTRT:
		rp.scheduleTRT()
	default:
		rp.scheduleVLLM()
	}
}

func (rp *replica) scheduleVLLM() {
	budget := rp.c.Budget
	for i := 0; i < len(rp.running) && budget > 0; i++ {
		r := rp.running[i]
		if r.need > 0 {
			n := min(r.need-r.done, budget)
			if !rp.growOrPreempt(r, r.ctxBase()+r.done+n) {
				i--
				continue
			}
			r.chunk, budget = n, budget-n
			continue
		}
		if !rp.growOrPreempt(r, r.prompt+r.gen+1) {
			i--
			continue
		}
		r.decoding = true
		budget--
	}
	for len(rp.waiting) > 0 && budget > 0 && len(rp.running) < rp.c.MaxSeqs {
		r := rp.waiting[0]
		need := firstNeed(r)
		start := r.prompt + r.gen - need
		n := min(need, budget)
		if blocks(start+n)-r.blocks > rp.free {
			break
		}
		rp.admit(r)
		rp.grow(r, start+n)
		r.chunk, budget = n, budget-n
	}
}

func (rp *replica) scheduleSGLang() {
	budget := rp.c.Budget
	for _, r := range rp.running {
		if r.need > 0 && budget > 0 {
			n := min(r.need-r.done, budget)
			if rp.grow(r, r.ctxBase()+r.done+n) {
				r.chunk, budget = n, budget-n
			}
		}
	}
	headroom := rp.total / 10
	for len(rp.waiting) > 0 && budget > 0 && len(rp.running) < rp.c.MaxSeqs {
		r := rp.waiting[0]
		need := firstNeed(r)
		start := r.prompt + r.gen - need
		n := min(need, budget)
		if blocks(start+n)-r.blocks > rp.free-headroom {
			break
		}
		rp.admit(r)
		rp.grow(r, start+n)
		r.chunk, budget = n, budget-n
	}
	if budget < rp.c.Budget {
		return
	}
	for i := 0; i < len(rp.running); i++ {
		r := rp.running[i]
		if r.need > 0 {
			continue
		}
		if !rp.growOrPreempt(r, r.prompt+r.gen+1) {
			break
		}
		r.decoding = true
	}
}

func (rp *replica) scheduleTRT() {
	for _, r := range rp.running {
		rp.grow(r, r.prompt+r.gen+1)
		r.decoding = true
	}
	tok := 0
	for len(rp.waiting) > 0 && len(rp.running) < rp.c.MaxSeqs {
		r := rp.waiting[0]
		res := blocks(r.prompt + rp.c.ReserveOut)
		if rp.resvd+res > rp.total {
			break
		}
		n := r.prompt - r.cached
		if tok > 0 && tok+n > rp.c.Budget {
			break
		}
		rp.admit(r)
		r.reserved, rp.resvd = res, rp.resvd+res
		rp.grow(r, r.prompt)
		r.chunk, tok = n, tok+n
	}
}

// Replay runs c.Replicas replicas (at least one) behind a router under c
// and measures the window after the warm-up.
func Replay(c Config) Result {
	rng := rand.New(rand.NewPCG(c.Seed, 0x3a7))
	total := max(c.KVTokens/kvBlock, 1)
	if c.MaxSeqs <= 0 {
		c.MaxSeqs = 1 << 30
	}
	if c.Budget <= 0 {
		c.Budget = 1 << 30
	}
	clock := c.Clock
	if clock <= 0 {
		clock = 1
	}
	k := max(1, c.Replicas)
	reps := make([]*replica, k)
	busy := make([]bool, k)
	ends := make([]float64, k)
	weight := make([]float64, k) // the real replicas each simulated one stands for
	for i := range reps {
		reps[i] = &replica{c: c, free: total, total: total}
		weight[i] = 1
		if n := c.Represents; n > float64(k) {
			weight[i] = n / float64(k)
			if c.Pinned > 0 && k > 1 {
				weight[i] = (n - 1) / float64(k-1)
			}
		}
	}
	if c.Pinned > 0 && k > 1 {
		weight[0] = 1
	}
	var res Result
	draw := func(t float64) *rreq {
		var p float64
		switch {
		case c.PromptHist != nil:
			p = c.PromptHist.draw(rng, float64(c.PromptMax))
		case len(c.PromptTail) > 0:
			p = quantileAt(c.PromptTail, c.PromptBody, rng.NormFloat64())
		default:
			p = c.PromptMean * math.Exp(c.PromptSigma*rng.NormFloat64()-c.PromptSigma*c.PromptSigma/2)
		}
		if c.PromptMax > 0 {
			p = math.Min(p, float64(c.PromptMax))
		}
		if c.PromptCap > 0 {
			p = math.Min(p, float64(c.PromptCap))
		}
		prompt := max(1, int(p))
		o := c.OutputMean * math.Exp(c.OutputSigma*rng.NormFloat64()-c.OutputSigma*c.OutputSigma/2)
		out := max(1, int(math.Round(o)))
		if c.Policy == PolicyTRT && c.ReserveOut > 0 {
			out = min(out, c.ReserveOut)
		}
		// each request's share spreads around the window's hit rate
		// (±60%), narrowed near the top so that the cap at 0.98 does not
		// pull the mean below the hit rate the counters measured
		spread := math.Max(0, math.Min(0.6*c.Hit, 0.98-c.Hit))
		cached := int((c.Hit+spread*(2*rng.Float64()-1))*float64(prompt)) / kvBlock * kvBlock
		cached = max(0, min(cached, prompt-1))
		return &rreq{arrive: t, prompt: prompt, cached: cached, out: out}
	}
	// start schedules replica i's next step at t; false when it idles.
	start := func(i int, t float64) {
		rp := reps[i]
		busy[i] = false
		if len(rp.waiting) == 0 && len(rp.running) == 0 {
			return
		}
		rp.schedule()
		pre, dec, ctx := 0, 0, 0
		for _, r := range rp.running {
			pre += r.chunk
			if r.decoding {
				dec++
				ctx += r.prompt + r.gen
			}
		}
		if pre == 0 && dec == 0 {
			return // nothing fits until something finishes or arrives
		}
		busy[i], ends[i] = true, t+c.Step.Seconds(pre, dec, ctx, clock)
		res.Steps++
	}
	// finish applies replica i's step at its end t.
	finish := func(i int, t float64) {
		rp := reps[i]
		measured := t >= ReplayWarmup && t <= ReplaySeconds
		keep := rp.running[:0]
		for _, r := range rp.running {
			emit := false
			if r.chunk > 0 {
				r.done += r.chunk
				if r.done >= r.need {
					r.need, r.done, emit = 0, 0, true
				}
			} else if r.decoding {
				emit = true
			}
			r.chunk, r.decoding = 0, false
			if !emit {
				keep = append(keep, r)
				continue
			}
			r.gen++
			if measured {
				res.Tokens += weight[i]
				if r.gen == 1 {
					res.TTFT = append(res.TTFT, t-r.arrive+c.Outside)
					res.TTFTW = append(res.TTFTW, weight[i])
				} else {
					res.ITL = append(res.ITL, t-r.last)
					res.ITLW = append(res.ITLW, weight[i])
				}
			}
			r.last = t
			if r.gen >= r.out {
				rp.release(r)
				res.Requests++
				continue
			}
			keep = append(keep, r)
		}
		clear(rp.running[len(keep):])
		rp.running = keep
	}
	next := math.Inf(1)
	if c.Rate > 0 {
		next = rng.ExpFloat64() / c.Rate
	}
	arrivals, rr := 0, 0
	t := 0.0
	waited := 0.0 // requests waiting × seconds, over the measured window
	wait := func(from, to float64) {
		if dt := math.Min(to, ReplaySeconds) - math.Max(from, ReplayWarmup); dt > 0 {
			n := 0.0
			for i, rp := range reps {
				n += float64(len(rp.waiting)) * weight[i]
			}
			waited += n * dt
		}
	}
	for {
		step := -1
		tn := next
		for i := range reps {
			if busy[i] && ends[i] < tn {
				step, tn = i, ends[i]
			}
		}
		wait(t, tn)
		if tn > ReplaySeconds {
			t = ReplaySeconds
			break
		}
		t = tn
		if step >= 0 {
			finish(step, t)
			start(step, t)
			if res.Steps >= MaxReplaySteps {
				res.Truncated = "steps"
				break
			}
			continue
		}
		if arrivals >= MaxReplayReqs {
			res.Truncated = "requests"
			break
		}
		arrivals++
		next += rng.ExpFloat64() / c.Rate
		r := draw(t)
		res.PromptTokens += float64(r.prompt)
		res.CachedTokens += float64(r.cached)
		if blocks(r.prompt+1) > total {
			// an engine refuses a prompt its whole pool cannot hold (past
			// max_model_len) instead of holding its queue behind it
			continue
		}
		i := 0
		if k > 1 && !(c.Pinned > 0 && rng.Float64() < c.Pinned) {
			rr = (rr + 1) % k // round-robin: the even split a gateway makes
			i = rr
		}
		reps[i].waiting = append(reps[i].waiting, r)
		if !busy[i] {
			start(i, t)
		}
	}
	res.Span = math.Max(0, math.Min(t, ReplaySeconds)-ReplayWarmup)
	if res.Span > 0 {
		total := 0.0
		for _, w := range weight {
			total += w
		}
		res.Waiting = waited / res.Span / total
	}
	return res
}

// Quantile is a length at a cumulative share U.
type Quantile struct{ U, V float64 }

// normalScore is the standard normal quantile of u.
func normalScore(u float64) float64 { return math.Sqrt2 * math.Erfinv(2*u-1) }

// quantileAt maps the normal score z through the anchors q: below the
// first, a lognormal body of σ body; between two, log-linear in z; past
// the last, the last segment's slope continued.
func quantileAt(q []Quantile, body, z float64) float64 {
	z0 := normalScore(q[0].U)
	if z <= z0 {
		return q[0].V * math.Exp(body*(z-z0))
	}
	for i := 1; i < len(q); i++ {
		zi := normalScore(q[i].U)
		if z <= zi {
			f := (z - z0) / (zi - z0)
			return math.Exp(math.Log(q[i-1].V) + f*(math.Log(q[i].V)-math.Log(q[i-1].V)))
		}
		z0 = zi
	}
	slope := body
	if n := len(q); n >= 2 {
		slope = (math.Log(q[n-1].V) - math.Log(q[n-2].V)) / (normalScore(q[n-1].U) - normalScore(q[n-2].U))
	}
	return q[len(q)-1].V * math.Exp(slope*(z-z0))
}

// fitBody is the body's σ that gives the anchored distribution the mean
// (bisection; the mean falls as σ grows), within [0.05, 2.5].
func fitBody(q []Quantile, mean float64) float64 {
	meanOf := func(body float64) float64 {
		const n = 2000
		s := 0.0
		for i := 0; i < n; i++ {
			s += quantileAt(q, body, normalScore((float64(i)+0.5)/n))
		}
		return s / n
	}
	lo, hi := 0.05, 2.5
	for i := 0; i < 40; i++ {
		mid := (lo + hi) / 2
		if meanOf(mid) > mean {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}

// Histogram is a length distribution as bucket bounds and the
// observations per bucket (one more count than bounds: past the last).
type Histogram struct {
	Les, Counts []float64
	total       float64
	// tilt shapes a draw inside its bucket: density ∝ x^(tilt−1), 0
	// log-uniform (see FitMean).
	tilt float64
}

// NewHistogram checks the layout; nil when it holds no observation.
func NewHistogram(les, counts []float64) *Histogram {
	if len(les) == 0 || len(counts) != len(les)+1 {
		return nil
	}
	h := &Histogram{Les: les, Counts: counts}
	for _, c := range counts {
		h.total += c
	}
	if h.total <= 0 {
		return nil
	}
	return h
}

// Mean is the histogram's mean under draw's buckets.
func (h *Histogram) Mean(top float64) float64 {
	s := 0.0
	for i, c := range h.Counts {
		lo, hi := h.bucket(i, top)
		s += c * tiltedMean(lo, hi, h.tilt)
	}
	return s / h.total
}

// FitMean shapes the draws inside the buckets so that the histogram's
// mean is mean (the exact one, from the token counters): the buckets
// place a length only within a factor of 2–2.5 on coarse layouts, and a
// log-uniform fill there can put the mean several percent off the
// counters' (it stays log-uniform where no tilt within ±3 reaches it).
func (h *Histogram) FitMean(top, mean float64) {
	if mean <= 0 {
		return
	}
	h.tilt = 0
	if h.Mean(top) == mean {
		return
	}
	lo, hi := -3.0, 3.0
	h.tilt = lo
	below := h.Mean(top) > mean
	h.tilt = hi
	above := h.Mean(top) < mean
	if below || above {
		h.tilt = 0
		return
	}
	for i := 0; i < 50; i++ {
		h.tilt = (lo + hi) / 2
		if h.Mean(top) < mean {
			lo = h.tilt
		} else {
			hi = h.tilt
		}
	}
	h.tilt = (lo + hi) / 2
}

// tiltedMean is the mean of a length on [lo, hi] with density ∝
// x^(tilt−1).
func tiltedMean(lo, hi, tilt float64) float64 {
	switch {
	case hi <= lo:
		return lo
	case math.Abs(tilt) < 1e-9:
		return (hi - lo) / math.Log(hi/lo)
	case math.Abs(tilt+1) < 1e-9:
		return math.Log(hi/lo) / (1/lo - 1/hi)
	}
	b := tilt
	return b / (b + 1) * (math.Pow(hi, b+1) - math.Pow(lo, b+1)) / (math.Pow(hi, b) - math.Pow(lo, b))
}

func (h *Histogram) bucket(i int, top float64) (lo, hi float64) {
	switch {
	case i == 0:
		lo, hi = math.Min(1, h.Les[0]), h.Les[0]
	case i == len(h.Les):
		lo = h.Les[i-1]
		hi = 1.2 * lo
		if top > lo {
			hi = top
		}
	default:
		lo, hi = h.Les[i-1], h.Les[i]
	}
	return math.Max(lo, 1), math.Max(hi, 1)
}

func (h *Histogram) draw(rng *rand.Rand, top float64) float64 {
	u := rng.Float64() * h.total
	i := 0
	for ; i < len(h.Counts)-1; i++ {
		if u < h.Counts[i] {
			break
		}
		u -= h.Counts[i]
	}
	lo, hi := h.bucket(i, top)
	u = rng.Float64()
	if math.Abs(h.tilt) < 1e-9 || hi <= lo {
		return lo * math.Exp(u*math.Log(hi/lo))
	}
	b := h.tilt
	return math.Pow(math.Pow(lo, b)+u*(math.Pow(hi, b)-math.Pow(lo, b)), 1/b)
}
