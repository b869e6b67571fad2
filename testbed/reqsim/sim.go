package reqsim

import (
	"container/heap"
	"math"
	"math/rand/v2"
)

// traffic is the request mix at one moment.
type traffic struct {
	rate         float64 // requests/s over all replicas
	promptMedian float64
	promptSigma  float64
	longShare    float64 // share of requests from the long-prompt component
	longMedian   float64
	longMax      float64 // cap of the long component (0: none)
	outMedian    float64
	outSigma     float64
	maxTok       int
	hit          float64 // mean share of a prompt served from the prefix cache
	ctxExtra     float64 // extra cached conversation history per request, tokens
	errShare     float64
	abortShare   float64
	outside      float64 // mean API-server/tokenizer delay, s
	promptCap    int     // the gateway truncates prompts to this (0: no cap)
}

// world is one segment's simulation: replicas, router, arrivals.
type world struct {
	eng   *engine
	reps  []*replica
	rng   *rand.Rand
	now   float64
	end   float64
	mix   func(t float64) traffic
	clock func(rep int, t float64) float64
	// route picks a replica among the accepting ones.
	hot      float64 // share of traffic sent to replica 0 (0: none)
	leastReq bool
	rr       int
	pending  pendingHeap
	nextArr  float64
	// lifecycle hooks of the segment
	events []event
	// observers
	onArrive func(r *req)
	onScrape func(t float64)
	scrapeAt float64
	scrapeDT float64
	// accounting
	arrived, finished, lost int
}

// event changes a replica at a time (loss, restart).
type event struct {
	at float64
	fn func(w *world)
}

type pendingHeap []*req

func (h pendingHeap) Len() int           { return len(h) }
func (h pendingHeap) Less(i, j int) bool { return h[i].enq < h[j].enq }
func (h pendingHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *pendingHeap) Push(x any)        { *h = append(*h, x.(*req)) }
func (h *pendingHeap) Pop() any {
	old := *h
	n := len(old)
	x := old[n-1]
	old[n-1] = nil
	*h = old[:n-1]
	return x
}

// lognormal draws a lognormal with the given median and sigma.
func lognormal(rng *rand.Rand, median, sigma float64) float64 {
	return median * math.Exp(sigma*rng.NormFloat64())
}

// newRequest draws one request from the mix at t.
func (w *world) newRequest(t float64, m traffic) *req {
	rng := w.rng
	var p float64
	long := m.longShare > 0 && rng.Float64() < m.longShare
	if long {
		p = lognormal(rng, m.longMedian, 0.35)
		if m.longMax > 0 {
			p = math.Min(p, m.longMax*(0.9+0.1*rng.Float64()))
		}
	} else {
		p = lognormal(rng, m.promptMedian, m.promptSigma)
	}
	// a Pareto tail on top of the lognormal body
	if rng.Float64() < 0.02 {
		p *= math.Pow(1-rng.Float64(), -1/1.8)
	}
	p += m.ctxExtra * (0.5 + rng.Float64())
	maxLen := w.eng.hw.maxLen
	prompt := int(math.Max(8, math.Min(p, float64(maxLen-m.maxTok-1))))
	if m.promptCap > 0 {
		prompt = min(prompt, max(8, m.promptCap))
	}
	outMedian := m.outMedian
	if long {
		// long documents in, short answers out (summaries, extraction, RAG)
		outMedian *= 0.25
	}
	out := int(math.Max(1, lognormal(rng, outMedian, m.outSigma)))
	out = min(out, m.maxTok)
	hitShare := m.hit * (0.4 + 1.2*rng.Float64())
	if m.ctxExtra > 0 {
		// the history is a prefix the cache holds
		hitShare = math.Max(hitShare, math.Min(0.98, (m.ctxExtra*0.98+float64(prompt-int(m.ctxExtra))*m.hit)/float64(prompt)))
	}
	cached := int(math.Min(hitShare, 0.98)*float64(prompt)) / blockTokens * blockTokens
	cached = min(cached, prompt-1)
	r := &req{arrive: t, prompt: prompt, cached: max(cached, 0), out: out, maxTok: m.maxTok, sched: -1}
	r.enq = t + m.outside*(0.5+rng.ExpFloat64()*0.5)
	if rng.Float64() < m.errShare {
		r.fail = true
	} else if rng.Float64() < m.abortShare {
		r.abortAt = 1 + rng.IntN(max(1, out))
		if r.abortAt >= out {
			r.abortAt = 0
		}
	}
	return r
}

// route picks the replica for a request.
func (w *world) route() *replica {
	if w.hot > 0 && w.reps[0].accepting && w.rng.Float64() < w.hot {
		return w.reps[0]
	}
	var best *replica
	if w.leastReq {
		for _, rp := range w.reps {
			if !rp.accepting {
				continue
			}
			if best == nil || len(rp.waiting)+len(rp.running) < len(best.waiting)+len(best.running) {
				best = rp
			}
		}
		return best
	}
	for i := 0; i < len(w.reps); i++ {
		w.rr = (w.rr + 1) % len(w.reps)
		if w.reps[w.rr].accepting {
			return w.reps[w.rr]
		}
	}
	return nil
}

// kick starts a step on an idle replica with work.
func (w *world) kick(rp *replica, t float64) {
	if rp.stepping || !rp.alive {
		return
	}
	if len(rp.waiting) == 0 && len(rp.running) == 0 {
		return
	}
	rp.clock = w.clock(rp.id, t)
	if !w.eng.schedule(rp, t) {
		return
	}
	c := w.eng.cost(rp)
	rp.step = c
	rp.stepping = true
	rp.stepStart = t
	rp.stepEnd = t + c.seconds()
}

// run advances the segment to its end.
func (w *world) run() {
	m := w.mix(w.now)
	w.nextArr = w.now + w.rng.ExpFloat64()/m.rate
	ev := 0
	for {
		t := math.Min(w.end, w.nextArr)
		kind := 0 // 0 end, 1 arrival, 2 enqueue, 3 step, 4 scrape, 5 event
		if w.nextArr <= t {
			kind = 1
		}
		if len(w.pending) > 0 && w.pending[0].enq < t {
			t, kind = w.pending[0].enq, 2
		}
		var stepRep *replica
		for _, rp := range w.reps {
			if rp.stepping && rp.stepEnd < t {
				t, kind, stepRep = rp.stepEnd, 3, rp
			}
		}
		if w.scrapeDT > 0 && w.scrapeAt < t {
			t, kind = w.scrapeAt, 4
		}
		if ev < len(w.events) && w.events[ev].at < t {
			t, kind = w.events[ev].at, 5
		}
		w.now = t
		switch kind {
		case 0:
			return
		case 1:
			m := w.mix(t)
			r := w.newRequest(t, m)
			w.arrived++
			if w.onArrive != nil {
				w.onArrive(r)
			}
			heap.Push(&w.pending, r)
			m2 := w.mix(t)
			w.nextArr = t + w.rng.ExpFloat64()/m2.rate
		case 2:
			r := heap.Pop(&w.pending).(*req)
			rp := w.route()
			if rp == nil {
				w.lost++
				continue
			}
			r.rep = rp.id
			rp.tel.arrivals++
			rp.waiting = append(rp.waiting, r)
			w.kick(rp, t)
		case 3:
			rp := stepRep
			rp.stepping = false
			rp.tel.step(rp, t)
			w.eng.finishStep(rp, t)
			w.kick(rp, t)
		case 4:
			w.onScrape(t)
			w.scrapeAt += w.scrapeDT
		case 5:
			w.events[ev].fn(w)
			ev++
			for _, rp := range w.reps {
				w.kick(rp, t)
			}
		}
	}
}

// inFlight counts the requests inside the replicas and the API server.
func (w *world) inFlight() int {
	n := len(w.pending)
	for _, rp := range w.reps {
		n += len(rp.waiting) + len(rp.running)
	}
	return n
}

// drop removes a replica's requests (it stopped): they are lost.
func (w *world) drop(rp *replica) {
	for _, r := range rp.running {
		rp.release(r)
	}
	w.lost += len(rp.waiting) + len(rp.running)
	rp.waiting, rp.running = nil, nil
	rp.stepping = false
	rp.free, rp.reservedBlocks = rp.total, 0
}
