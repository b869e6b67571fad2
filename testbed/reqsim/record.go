package reqsim

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// Options selects one instance.
type Options struct {
	// Scenario is a single scenario's name or a compound "a+b".
	Scenario string
	Seed     int64
	// Names picks the vLLM name generation ("v1" current; "v0" the 0.10
	// era with the deprecated names beside the new ones) and, for SGLang,
	// the old inter-token histogram name with "v0". TensorRT-LLM ignores it.
	Names string
	// GPUSeries is "whyslow", "dcgm", "both" or "none".
	GPUSeries string
	// Wide draws replicas, load and magnitude bands from wide ranges.
	Wide bool
	// Engine forces "vllm", "sglang" or "trtllm"; empty draws it from the
	// seed (vLLM half the time, the others a quarter each).
	Engine string
	// Fix applies a remedy to the drawn instance (issue 28's ground truth
	// for whyslow whatif); the zero value changes nothing.
	Fix Fix
}

// Fix is a remedy applied inside the model, after the instance is drawn
// (its arrival rate and fault are as without it).
type Fix struct {
	// Replicas sets the replicas serving during the incident (a
	// replica_loss instance still loses its share on top);
	// ReplicasFactor multiplies them.
	Replicas       int
	ReplicasFactor float64
	// MaxNumBatchedTokens and MaxNumSeqs set the scheduler's token budget
	// per step (TensorRT-LLM: max_num_tokens) and its running bound.
	MaxNumBatchedTokens, MaxNumSeqs int
	// KVFactor multiplies each replica's KV pool.
	KVFactor float64
	// RestorePrefix keeps the baseline's prefix hit rate in the incident;
	// RestoreClock its clocks; Rebalance routes evenly.
	RestorePrefix, RestoreClock, Rebalance bool
	// PromptCap truncates prompts to this many tokens at the gateway.
	PromptCap int
}

// apply changes the drawn plan; the zero Fix leaves it as it was.
func (f Fix) apply(p *plan) {
	if f == (Fix{}) {
		return
	}
	serving := p.replicas - p.lose
	if f.Replicas > 0 {
		serving = f.Replicas
	}
	if f.ReplicasFactor > 0 {
		serving = max(1, int(math.Round(float64(serving)*f.ReplicasFactor)))
	}
	p.replicas = serving + p.lose
	if f.MaxNumBatchedTokens > 0 {
		p.budget = f.MaxNumBatchedTokens
	}
	if f.MaxNumSeqs > 0 {
		p.maxSeqs = f.MaxNumSeqs
	}
	if f.KVFactor > 0 {
		p.hw.kvTokens = int(float64(p.hw.kvTokens) * f.KVFactor)
	}
	if f.RestorePrefix {
		inc, hit := p.inc, p.base.hit
		p.inc = func(t float64, m traffic) traffic {
			m = inc(t, m)
			m.hit = hit
			return m
		}
	}
	if f.RestoreClock {
		p.clockF = 1
	}
	if f.Rebalance {
		p.hot = 0
	}
	if f.PromptCap > 0 {
		p.base.promptCap = f.PromptCap
	}
}

// Bundle is one recorded instance: the exposition and what the incident
// description says, with the truth.
type Bundle struct {
	Metrics          []byte
	At               time.Time
	Window, Baseline time.Duration
	Selector, GPU    string
	Engine           string
	// the scheduler configuration the engine ran
	ChunkedPrefill      bool
	MaxNumBatchedTokens int
	MaxNumSeqs          int
	Truth               Truth
}

// Truth is what the model injected and measured from its own requests.
type Truth struct {
	Causes    []string
	Magnitude float64
	Band      string
	Params    map[string]any
	Base, Inc WindowStats
	ITL       ITLSplit
	// Unobservable says why no exported family can show the fault's cause.
	Unobservable string
	// Accounting over both segments: arrived = finished + in flight + lost.
	Arrived, Finished, InFlight, Lost int
}

// ITLSplit splits the change of the mean step cost a decode token saw
// (Shapley over the batch, context, prefill and clock drivers), seconds.
type ITLSplit struct {
	Batch, Context, Prefill, Clock, Total float64
}

// state is the recording of one instance.
type state struct {
	p    *plan
	eng  *engine
	reps []*replica
	reg  *registry
	win  *window
	w    *world
	wins [2]*window
	tr   Truth
}

// epoch anchors the instances' incident times.
var epoch = time.Date(2026, 3, 2, 14, 0, 0, 0, time.UTC)

// healthyP95 is how far a hard negative's own TTFT and inter-token p95s
// may move; redraws is how often Record draws again when they move more.
const (
	healthyP95 = 1.2
	redraws    = 4
)

// Record simulates one instance and renders its bundle.
//
// A hard negative must be healthy by its own numbers, at the tail too.
// With chunked prefill the inter-token distribution is bimodal (decode-only
// steps, and the few steps that carry a prefill chunk), and a p95 near the
// share of tokens in the slow steps can jump between the modes on a small
// change of load: a negative whose p95s moved more than 1.2× is drawn again
// from a derived seed (Params["redraws"] counts the draws discarded).
func Record(ctx context.Context, o Options) (*Bundle, error) {
	seed := o.Seed
	for i := 0; ; i++ {
		b, err := recordOnce(ctx, o)
		if err != nil || len(b.Truth.Causes) > 0 || i == redraws || healthyTail(b.Truth) {
			if b != nil && i > 0 {
				b.Truth.Params["redraws"] = i
			}
			return b, err
		}
		o.Seed = int64(uint64(seed) + uint64(i+1)*0x9e3779b97f4a7c15>>1)
	}
}

func healthyTail(t Truth) bool {
	ok := func(now, base float64) bool { return base <= 0 || now <= healthyP95*base }
	return ok(t.Inc.TTFTP95, t.Base.TTFTP95) && ok(t.Inc.ITLP95, t.Base.ITLP95)
}

// recordOnce simulates one instance and renders its bundle.
func recordOnce(ctx context.Context, o Options) (*Bundle, error) {
	p, err := newPlan(o)
	if err != nil {
		return nil, err
	}
	o.Fix.apply(p)
	s := &state{p: p}
	s.eng = &engine{pol: p.pol, hw: p.hw, budget: p.budget, maxSeqs: p.maxSeqs, chunked: p.chunked,
		onToken: s.onToken, onFinish: s.onFinish, onSched: func(*replica, *req, float64) {}}
	for i := 0; i < p.replicas; i++ {
		total := p.hw.kvTokens / blockTokens
		s.reps = append(s.reps, &replica{id: i, alive: true, accepting: true, total: total, free: total, clock: 1,
			tel: newTel(p.pol, p.hw.maxLen)})
	}
	s.declare()
	at := epoch.Add(time.Duration(uint64(o.Seed)%997) * time.Minute)
	for seg := 0; seg < 2; seg++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		end := at
		if seg == 0 {
			end = at.Add(-time.Hour)
		}
		s.segment(seg, end)
	}
	t := &s.tr
	t.Causes = slices.Clone(p.causes)
	t.Band, t.Magnitude, t.Params = p.band, round3(p.magnitude), p.params
	if len(t.Causes) == 0 {
		t.Band, t.Magnitude = "none", 0
	}
	t.Base, t.Inc = s.wins[0].stats(), s.wins[1].stats()
	t.ITL = split(s.wins[0], s.wins[1])
	t.Unobservable = p.unobservable()
	sel := `model_name="` + p.hw.model + `"`
	return &Bundle{Metrics: s.reg.write(), At: at, Window: 5 * time.Minute, Baseline: time.Hour, Selector: sel,
		GPU: p.hw.gpu, Engine: p.pol.engine(), ChunkedPrefill: p.chunked, MaxNumBatchedTokens: p.budget,
		MaxNumSeqs: p.maxSeqs, Truth: *t}, nil
}

// unobservable names an instance whose cause shows only in a family it
// does not export.
func (p *plan) unobservable() string {
	if len(p.causes) != 1 {
		return ""
	}
	switch p.causes[0] {
	case "prefix_cache_regression":
		if p.omits(famPrefix) {
			return "the prefix-cache counters, the only sign of the lost hits, are not exported"
		}
	case "request_errors":
		if p.omits(famHTTP) && (p.pol == sglangPF || (p.pol == vllmV1 && p.names == "v0")) {
			return "server errors show only in the HTTP response counters, which this instance does not export"
		}
	case "outside_engine":
		if p.omits(famPhase) {
			return "queue and prefill times, which tell time outside the engine from time in it, are not exported"
		}
	case "chunked_prefill_mismatch":
		if p.pol == sglangPF && p.omits(famPromptLen) {
			return "the prompt-length histogram is not exported (SGLang without --collect-tokens-histogram)"
		}
	}
	return ""
}

// segment runs one simulated segment ending at wall time end: a warm-up,
// then the margin and the window, scraped every scrapeDT.
func (s *state) segment(seg int, end time.Time) {
	p := s.p
	for _, rp := range s.reps {
		rp.waiting, rp.running = nil, nil
		rp.free, rp.reservedBlocks = rp.total, 0
		rp.stepping, rp.alive, rp.accepting, rp.clock = false, true, true, 1
	}
	win := &window{start: warmup + margin, end: segLen, recent: segLen - 120}
	s.win, s.wins[seg] = win, win
	rng := rand.New(rand.NewPCG(uint64(p.opts.Seed), uint64(seg+1)*0x9e37))
	phase := rng.Float64() * 2 * math.Pi
	w := &world{eng: s.eng, reps: s.reps, rng: rng, end: segLen, leastReq: p.leastReq,
		scrapeAt: warmup - scrapeDT, scrapeDT: scrapeDT}
	w.mix = func(t float64) traffic {
		m := p.base
		if seg == 1 {
			m = p.inc(t, m)
		}
		m.rate *= 1 + 0.06*math.Sin(2*math.Pi*t/97+phase)
		return m
	}
	w.clock = func(_ int, t float64) float64 {
		if seg == 1 && p.clockF < 1 {
			return lerp(1, p.clockF, p.strength(t))
		}
		return 1
	}
	endMS := end.UnixMilli()
	w.onScrape = func(t float64) { s.scrape(t, endMS) }
	if seg == 1 {
		s.faultEvents(w)
	}
	s.w = w
	w.run()
	s.scrape(segLen, endMS)
	s.tr.Arrived += w.arrived
	s.tr.Finished += w.finished
	s.tr.InFlight += w.inFlight()
	s.tr.Lost += w.lost
}

// faultEvents schedules the incident segment's replica changes.
func (s *state) faultEvents(w *world) {
	p := s.p
	if p.lose > 0 {
		w.events = append(w.events, event{at: p.onset, fn: func(w *world) {
			for _, rp := range s.reps[len(s.reps)-p.lose:] {
				rp.alive, rp.accepting = false, false
				w.drop(rp)
			}
		}})
	}
	if p.hot > 0 {
		w.events = append(w.events, event{at: p.onset, fn: func(w *world) { w.hot = p.hot }})
	}
	for i, at := range p.restarts {
		rp := s.reps[i]
		w.events = append(w.events,
			event{at: at - 20, fn: func(*world) { rp.accepting = false }},
			event{at: at, fn: func(w *world) { rp.alive = false; w.drop(rp) }},
			event{at: at + 35, fn: func(w *world) {
				rp.alive, rp.accepting = true, true
				rp.tel = newTel(p.pol, p.hw.maxLen)
				rp.tel.prevT = w.now
			}})
	}
	slices.SortStableFunc(w.events, func(a, b event) int {
		switch {
		case a.at < b.at:
			return -1
		case a.at > b.at:
			return 1
		}
		return 0
	})
}

// scrape updates the interval gauges and appends every live replica's
// series at segment time t.
func (s *state) scrape(t float64, endMS int64) {
	for i, rp := range s.reps {
		if !rp.alive {
			continue
		}
		tl := rp.tel
		dt := t - tl.prevT
		if tl.prevT <= 0 || dt <= 0 || dt > 2*scrapeDT {
			dt = scrapeDT
		}
		tl.util = math.Min(1, (tl.busy-tl.prevBusy)/dt)
		tl.dram = math.Min(1, 0.95*(tl.memBusy-tl.prevMem)/dt)
		tl.sm = math.Min(1, 0.9*(tl.compBusy-tl.prevComp)/dt+0.1*tl.util)
		tl.genRate = (tl.genTok - tl.prevGen) / dt
		if q := tl.promptTok - tl.lastHitQ; q > 0 {
			tl.hitRate = (tl.cachedTok - tl.lastHitH) / q
		}
		if rp.clock < 0.99 && tl.util >= 0.02 {
			if s.p.throttle == "sw_power_cap" {
				tl.powerViol += dt * 1e9
			} else {
				tl.thermViol += dt * 1e9
			}
		}
		tl.prevT, tl.prevBusy, tl.prevMem, tl.prevComp, tl.prevGen = t, tl.busy, tl.memBusy, tl.compBusy, tl.genTok
		tl.lastHitQ, tl.lastHitH = tl.promptTok, tl.cachedTok
		if t < warmup {
			continue
		}
		off := int64((i*373)%900 + 50)
		ms := endMS - int64(math.Round((segLen-t)*1000)) - off
		s.reg.scrape(i, ms)
	}
}

// onToken records an output token.
func (s *state) onToken(rp *replica, r *req, t, gap float64, first bool) {
	tl, win := rp.tel, s.win
	tl.genTok++
	in := win.in(t)
	if first {
		v := t - r.arrive
		tl.ttft.observe(v)
		tl.promptTok += float64(r.prompt)
		tl.cachedTok += float64(r.cached)
		if in {
			win.ttft = append(win.ttft, v)
			if t >= win.recent {
				win.ttftRecentSum += v
				win.ttftRecentN++
			}
		}
		return
	}
	tl.itl.observe(gap)
	if !in {
		return
	}
	win.addITL(gap)
	if t >= win.recent {
		win.itlRecentSum += gap
		win.itlRecentN++
	}
	c := rp.step
	win.cFixed += c.fixed
	win.cBatch += c.batch
	win.cCtx += c.context
	win.cPre += c.prefill
	win.cInv += 1 / c.clock
	win.cN++
}

// onFinish records a finished request.
func (s *state) onFinish(rp *replica, r *req, t float64, reason int) {
	tl, win := rp.tel, s.win
	s.w.finished++
	tl.finish[reason]++
	e2e := t - r.arrive
	tl.e2e.observe(e2e)
	queue, prefill := 0.0, 0.0
	if r.sched >= 0 {
		queue = r.sched - r.enq
		tl.queue.observe(queue)
	}
	if r.gen > 0 {
		prefill = r.first - r.sched
		tl.prefill.observe(prefill)
		if r.gen > 1 {
			d := t - r.first
			tl.decode.observe(d)
			tl.tpot.observe(d / float64(r.gen-1))
		}
	}
	tl.promptLen.observe(float64(r.prompt))
	tl.genLen.observe(float64(r.gen))
	if !win.in(t) {
		return
	}
	win.finished++
	if reason == finError {
		win.errors++
	}
	win.e2e += e2e
	win.queue += queue
	win.prefill += prefill
	win.outside += r.enq - r.arrive
}

// split is the Shapley split of the change of the decode tokens' mean
// step cost: cost = (fixed + batch + context + prefill) × slowdown.
func split(b, n *window) ITLSplit {
	if b.cN == 0 || n.cN == 0 {
		return ITLSplit{}
	}
	mean := func(w *window) (f, bt, c, pr, inv float64) {
		return w.cFixed / w.cN, w.cBatch / w.cN, w.cCtx / w.cN, w.cPre / w.cN, w.cInv / w.cN
	}
	f0, b0, c0, p0, i0 := mean(b)
	f1, b1, c1, p1, i1 := mean(n)
	avgInv := (i0 + i1) / 2
	out := ITLSplit{
		Batch:   (b1 - b0 + f1 - f0) * avgInv,
		Context: (c1 - c0) * avgInv,
		Prefill: (p1 - p0) * avgInv,
		Clock:   (i1 - i0) * ((f0 + b0 + c0 + p0) + (f1 + b1 + c1 + p1)) / 2,
	}
	out.Total = out.Batch + out.Context + out.Prefill + out.Clock
	return out
}
