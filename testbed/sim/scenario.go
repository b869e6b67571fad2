package sim

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"time"
)

// ScenarioInfo describes one scenario of the catalogue.
type ScenarioInfo struct {
	Name    string // scenario name, e.g. "kv_pressure"
	Cause   string // the cause id it injects; "" for healthy variants
	Summary string // one line
}

// routerMode is how requests are spread over replicas.
type routerMode int

const (
	routeRoundRobin routerMode = iota
	routeLeastQueue
	routeSkewed
)

// String returns the router mode name.
func (m routerMode) String() string {
	switch m {
	case routeRoundRobin:
		return "round_robin"
	case routeLeastQueue:
		return "least_queue"
	case routeSkewed:
		return "skewed"
	}
	return fmt.Sprintf("routerMode(%d)", int(m))
}

// traffic is the offered load and client behaviour at one point in time.
type traffic struct {
	rate                    float64 // requests/s for the whole fleet
	promptMean, promptSigma float64 // unique part of the prompt (lognormal)
	outMean, outSigma       float64 // output tokens (lognormal), capped at maxTokens
	maxTokens               int
	sharedFrac              float64 // fraction of requests that carry a shared system prefix
	cacheable               float64 // fraction of those whose prefix is identical (cacheable)
	prefixFrom, prefixN     int     // which prefixes of the plan are in use
	abortProb               float64 // client abort probability
	abortMin, abortMax      float64 // abort delay after arrival, seconds
	frontend                float64 // seconds spent in the API server before the engine queue
	longRate                float64 // extra long prompts per second (fleet)
	longMin, longMax        int
	clock                   float64 // GPU clock factor (1 = full clocks)
	throttle                string  // active throttle reason
	router                  routerMode
	hotFrac                 float64 // share of traffic sent to replica 0 when skewed
	errorProb               float64 // probability that the server fails a request
	errorMin, errorMax      float64 // failure delay after reaching the engine, seconds
	tenantRate              float64 // a new tenant's requests per second (fleet), from the onset
	tenantPrompt            float64 // mean prompt of the tenant's requests (lognormal, no shared prefix)
}

// burst is a short rise of the arrival rate.
type burst struct{ start, end, mul float64 }

// plan is one drawn instance of a scenario.
type plan struct {
	def        *scenarioDef // the first scenario of a compound
	name       string       // scenario name, "a+b" for a compound
	causes     []string
	seed       int64
	cfg        engineConfig
	replicas   int
	prefixLens []int
	base, inc  traffic
	ramp       float64
	onset, at  float64 // seconds since start
	diurnalAmp float64
	diurnalPh  float64
	bursts     []burst
	load       float64 // baseline load relative to estimated capacity
	params     map[string]any
	notes      string

	magnitude  float64   // the fault's magnitude (a compound's larger one)
	magnitudes []float64 // a compound's, in causes order
	// errorReason says the replicas model a vLLM release that exports
	// finished_reason="error": every draw except the narrow draws of the
	// scenarios that predate it.
	errorReason bool
	stopped     []int // replicas that stop serving at the onset
	// growth is the relative rise of arrivals from growthFrom to growthTo
	// (diurnal_growth), held after.
	growth, growthFrom, growthTo float64
	// pilotSpan, on a pilot run's plan, is how long its measured window is.
	pilotSpan float64
	negBase   *negBase // hard negatives: the baseline's pilot
}

type scenarioDef struct {
	ScenarioInfo
	// setup is the narrow draw. The scenarios that predate wide draws keep
	// theirs as it was, so a seed draws the same instance.
	setup func(r *rand.Rand, p *plan)
	// wide is the wide draw of a healthy variant.
	wide func(r *rand.Rand, p *plan)
	// fault is a fault scenario's injection for wide, compound and (for the
	// newer scenarios) narrow draws.
	fault *fault
	// legacy marks the scenarios whose narrow draw predates wide draws.
	legacy bool
}

const (
	defaultOnset = 75 * 60 // warm-up and a baseline hour
	defaultAfter = 8 * 60  // `at` is this long after onset
	// recentWindow is the end of the incident window over which triage
	// checks that a slowdown still holds (rules.RecentWindow).
	recentWindow = 2 * 60
	// burstTail bounds how long requests admitted during a burst keep
	// decoding after it drained (their end-to-end time), with a margin.
	burstTail = 75
)

func uni(r *rand.Rand, lo, hi float64) float64 { return lo + (hi-lo)*r.Float64() }

func pickStr(r *rand.Rand, xs ...string) string { return xs[r.IntN(len(xs))] }

func round16(v float64) int { return int(math.Round(v/blockSize)) * blockSize }

// baseDraw fills the parts every scenario shares: model, GPU, replicas and
// a healthy traffic mix at load ρ.
func (p *plan) baseDraw(r *rand.Rand, models, gpus []string, replicas []int, rho float64) {
	m := modelSpecs[models[r.IntN(len(models))]]
	g := gpuSpecs[gpus[r.IntN(len(gpus))]]
	p.cfg = newEngineConfig(PolicyVLLM, m, g, 0.9)
	p.replicas = replicas[r.IntN(len(replicas))]
	p.prefixLens = make([]int, 32)
	for i := range p.prefixLens {
		p.prefixLens[i] = round16(uni(r, 256, 1536))
	}
	p.base = traffic{
		promptMean: uni(r, 500, 1400), promptSigma: 0.9,
		outMean: uni(r, 120, 320), outSigma: 0.8, maxTokens: 2048,
		sharedFrac: uni(r, 0.4, 0.7), cacheable: 1, prefixFrom: 0, prefixN: 16,
		abortProb: 0.002, abortMin: 1, abortMax: 30,
		frontend: 0.004, clock: 1, router: routeLeastQueue,
	}
	if r.IntN(2) == 0 {
		p.base.router = routeRoundRobin
	}
	p.setLoad(rho)
	p.ramp = 45
	p.onset = defaultOnset
	p.at = defaultOnset + defaultAfter
	p.diurnalAmp = uni(r, 0.04, 0.1)
	p.diurnalPh = uni(r, 0, 2*math.Pi)
	p.bursts = nil
	for t := uni(r, 60, 600); t < p.onset+defaultAfter+600; t += uni(r, 480, 1200) {
		p.bursts = append(p.bursts, burst{start: t, end: t + uni(r, 30, 80), mul: uni(r, 1.15, 1.3)})
	}
}

// setLoad sets the baseline rate to ρ × the estimated fleet capacity.
func (p *plan) setLoad(rho float64) {
	p.load = rho
	p.base.rate = rho * p.capacity(p.base) * float64(p.replicas)
}

// meanPrompt is the expected prompt length of a traffic mix and the
// expected fraction served from the prefix cache.
func (p *plan) meanPrompt(t traffic) (prompt, hitFrac float64) {
	avg := 0.0
	for i := 0; i < t.prefixN; i++ {
		avg += float64(p.prefixLens[t.prefixFrom+i])
	}
	if t.prefixN > 0 {
		avg /= float64(t.prefixN)
	}
	prompt = t.promptMean + t.sharedFrac*avg
	hitFrac = t.sharedFrac * t.cacheable * avg / prompt
	return prompt, hitFrac
}

// estimate is a mean-value model of one replica at a given rate: the step
// time t, the running requests n and the KV tokens they hold. ok is false
// when the fixed point does not exist (beyond capacity).
func (c *engineConfig) estimate(rate, prompt, hitFrac, out, clock float64) (t, n, kv float64, ok bool) {
	pNew := prompt * (1 - hitFrac)
	budget := float64(c.sched.MaxNumBatchedTokens)
	ctx := prompt + out/2
	own := pNew + out/2 // shared prefix blocks are held once, not per request
	t = 0.01
	for i := 0; i < 300; i++ {
		pre := rate * pNew * t
		n = rate*out*t + rate*t*math.Ceil(pNew/budget)
		if pre+n > budget*0.95 || n > float64(c.sched.MaxNumSeqs)*0.95 {
			return t, n, n * own, false
		}
		s := stepCost{}
		s.flops = 2*c.model.params*(n+pre) + 4*float64(c.model.layers*c.model.dModel)*(n*ctx+pre*prompt/2)
		s.bytes = (n*ctx + pre*prompt/2) * c.model.kvBytesPerToken()
		s.tokens = int(n + pre)
		s.batchLen = int(n)
		c.finish(&s, clock)
		if s.seconds > 30 {
			return t, n, n * own, false
		}
		if math.Abs(s.seconds-t) < 1e-7 {
			t = s.seconds
			break
		}
		t = 0.5*t + 0.5*s.seconds
	}
	kv = n * own
	return t, n, kv, kv < 0.92*float64(c.numBlocks*blockSize)
}

// capacity is the highest per-replica request rate the estimate sustains.
func (p *plan) capacity(t traffic) float64 {
	prompt, hit := p.meanPrompt(t)
	lo, hi := 0.0, 2000.0
	for i := 0; i < 40; i++ {
		mid := (lo + hi) / 2
		if _, _, _, ok := p.cfg.estimate(mid, prompt, hit, t.outMean, math.Max(t.clock, 0.1)); ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// at interpolates between the baseline and the incident mix.
func (p *plan) trafficAt(t float64) traffic {
	if t < p.onset {
		return p.base
	}
	x := 1.0
	if p.ramp > 0 {
		x = math.Min(1, (t-p.onset)/p.ramp)
	}
	lerp := func(a, b float64) float64 { return a + (b-a)*x }
	c := p.inc
	c.rate = lerp(p.base.rate, p.inc.rate)
	c.promptMean = lerp(p.base.promptMean, p.inc.promptMean)
	c.outMean = lerp(p.base.outMean, p.inc.outMean)
	c.sharedFrac = lerp(p.base.sharedFrac, p.inc.sharedFrac)
	c.cacheable = lerp(p.base.cacheable, p.inc.cacheable)
	c.abortProb = lerp(p.base.abortProb, p.inc.abortProb)
	c.frontend = lerp(p.base.frontend, p.inc.frontend)
	c.clock = lerp(p.base.clock, p.inc.clock)
	c.hotFrac = lerp(1/float64(p.replicas), p.inc.hotFrac)
	c.errorProb = lerp(p.base.errorProb, p.inc.errorProb)
	return c
}

// rateAt is the arrival rate at t with diurnal drift and bursts.
func (p *plan) rateAt(t float64, tr *traffic) float64 {
	rate := tr.rate * (1 + p.diurnalAmp*math.Sin(2*math.Pi*t/(6*3600)+p.diurnalPh))
	for _, b := range p.bursts {
		if t >= b.start && t < b.end {
			rate *= b.mul
		}
	}
	if p.growth > 0 && t > p.growthFrom {
		rate *= 1 + p.growth*math.Min(1, (t-p.growthFrom)/(p.growthTo-p.growthFrom))
	}
	return rate
}

func (p *plan) maxRate() float64 {
	m := 1.0
	for _, b := range p.bursts {
		m = math.Max(m, b.mul)
	}
	return math.Max(p.base.rate, p.inc.rate) * (1 + p.diurnalAmp) * m * 1.01 * (1 + p.growth)
}

// scenarios is the catalogue.
var scenarios = []*scenarioDef{
	{ScenarioInfo: ScenarioInfo{"healthy", "", "noisy but fine: diurnal drift and short bursts within capacity"}, setup: func(r *rand.Rand, p *plan) {
		p.baseDraw(r, []string{"8B", "70B"}, []string{"H100", "A100", "H200"}, []int{1, 1, 2, 3}, uni(r, 0.3, 0.5))
		p.inc = p.base
	}},
	{ScenarioInfo: ScenarioInfo{"healthy_busy", "", "hard negative: a busy but stable hour (load ≈0.7, no queue growth, no preemption)"}, setup: func(r *rand.Rand, p *plan) {
		p.baseDraw(r, []string{"8B", "70B"}, []string{"H100", "A100", "H200"}, []int{1, 2}, uni(r, 0.62, 0.72))
		for i := range p.bursts {
			p.bursts[i].mul = 1.08
		}
		p.inc = p.base
	}},
	{ScenarioInfo: ScenarioInfo{"healthy_burst", "", "hard negative: a 15–30 s arrival burst, briefly past capacity, early in the incident window; drained well before its end"}, setup: func(r *rand.Rand, p *plan) {
		p.baseDraw(r, []string{"8B", "70B"}, []string{"H100", "A100", "H200"}, []int{1, 2}, uni(r, 0.3, 0.4))
		p.inc = p.base
		peak, dur := uni(r, 0.95, 1.2), uni(r, 15, 30)
		p.drainingBurst(peak, dur)
	}},
	{ScenarioInfo: ScenarioInfo{"arrival_surge", "queue_saturation", "arrival rate rises beyond capacity; the waiting queue grows"}, setup: func(r *rand.Rand, p *plan) {
		p.baseDraw(r, []string{"8B", "70B"}, []string{"H100", "A100", "H200"}, []int{1, 1, 2, 3}, uni(r, 0.35, 0.5))
		p.inc = p.base
		l := uni(r, 1.1, 1.3)
		p.inc.rate = p.base.rate * l / p.load
		p.params["onset_load"] = l
	}},
	{ScenarioInfo: ScenarioInfo{"long_prompt_burst", "prefill_contention", "a few 32k–100k-token prompts occupy the token budget; prefills of other requests stall"}, setup: func(r *rand.Rand, p *plan) {
		p.baseDraw(r, []string{"8B", "70B"}, []string{"H100", "A100", "H200"}, []int{1, 1, 2}, uni(r, 0.3, 0.45))
		p.inc = p.base
		// The long prompts keep coming until `at`: each replica gets five
		// in every recentWindow on average, so the incident is ongoing at
		// `at` and not an episode that happened to end. On slow
		// configurations (70B on A100 with a 2048-token budget) that means
		// shorter long prompts, so the replica is not mostly prefilling;
		// and a long prompt holds at most 12% of the KV pool, so the
		// mechanism is prefill contention, not a memory wall.
		p.longPrompts(uni(r, 0.15, 0.25), 5.0/recentWindow)
	}},
	{ScenarioInfo: ScenarioInfo{"prompt_shift", "chunked_prefill_mismatch", "mean prompt length ×4 against a fixed chunk budget; prefills take many steps and waiting requests stall"}, setup: func(r *rand.Rand, p *plan) {
		p.baseDraw(r, []string{"8B", "70B"}, []string{"H100", "A100", "H200"}, []int{1, 1, 2}, 0.3)
		budget := float64(p.cfg.sched.MaxNumBatchedTokens)
		p.base.promptMean = budget * uni(r, 0.25, 0.4)
		p.base.sharedFrac = 0.15
		p.setLoad(uni(r, 0.3, 0.4))
		p.inc = p.base
		mul := uni(r, 3.6, 4.4)
		p.inc.promptMean = p.base.promptMean * mul
		p.inc.rate = uni(r, 0.85, 0.95) * p.capacity(p.inc) * float64(p.replicas)
		p.params["prompt_mul"] = mul
	}},
	{ScenarioInfo: ScenarioInfo{"kv_pressure", "kv_cache_pressure", "outputs grow several-fold on a small KV cache; the block pool fills and requests are preempted"}, setup: func(r *rand.Rand, p *plan) {
		p.baseDraw(r, []string{"8B", "70B"}, []string{"H100", "A100", "H200"}, []int{1, 1, 2}, uni(r, 0.3, 0.4))
		p.base.maxTokens = 8192
		p.inc = p.base
		// Size the pool from the demand (kvPool).
		p.kvPool(uni(r, 2.5, 4), uni(r, 1.2, 1.5))
	}},
	{ScenarioInfo: ScenarioInfo{"bandwidth_bound", "memory_bandwidth_saturation", "long shared contexts and large decode batches make decode steps HBM-bound"}, setup: func(r *rand.Rand, p *plan) {
		p.baseDraw(r, []string{"8B"}, []string{"H100", "H200"}, []int{1, 1, 2}, uni(r, 0.3, 0.4))
		for i := 16; i < 24; i++ {
			p.prefixLens[i] = round16(uni(r, 8000, 14000))
		}
		p.inc = p.base
		p.inc.sharedFrac, p.inc.prefixFrom, p.inc.prefixN = 0.97, 16, 4+r.IntN(4)
		p.inc.promptMean = uni(r, 150, 300)
		p.inc.outMean = p.base.outMean * uni(r, 2, 3)
		p.inc.rate = uni(r, 0.9, 0.96) * p.capacity(p.inc) * float64(p.replicas)
	}},
	{ScenarioInfo: ScenarioInfo{"gpu_throttle", "gpu_throttling", "GPU clocks drop (thermal or power cap); every step is slower"}, setup: func(r *rand.Rand, p *plan) {
		p.baseDraw(r, []string{"8B", "70B"}, []string{"H100", "A100", "H200"}, []int{1, 1, 2}, uni(r, 0.25, 0.35))
		p.inc = p.base
		p.inc.clock = uni(r, 0.45, 0.65)
		p.inc.throttle = pickStr(r, "hw_thermal_slowdown", "sw_power_cap", "hw_slowdown")
		p.ramp = 90
		p.params["clock_factor"] = p.inc.clock
		p.params["throttle_reason"] = p.inc.throttle
	}},
	{ScenarioInfo: ScenarioInfo{"prefix_cache_loss", "prefix_cache_regression", "shared system prompts stop matching (e.g. a timestamp in the prefix); hit rate falls and prefill work rises"}, setup: func(r *rand.Rand, p *plan) {
		p.baseDraw(r, []string{"8B", "70B"}, []string{"H100", "A100", "H200"}, []int{1, 1, 2}, 0.3)
		for i := 0; i < 16; i++ {
			p.prefixLens[i] = round16(uni(r, 1500, 4000))
		}
		p.base.sharedFrac = uni(r, 0.85, 0.95)
		p.base.prefixN = 4 + r.IntN(8)
		p.base.promptMean = uni(r, 200, 500)
		p.inc = p.base
		p.inc.cacheable = uni(r, 0.02, 0.1)
		capNoCache := p.capacity(p.inc)
		p.base.rate = uni(r, 0.6, 0.8) * capNoCache * float64(p.replicas)
		p.load = p.base.rate / (p.capacity(p.base) * float64(p.replicas))
		p.inc.rate = p.base.rate
		p.params["cacheable_after"] = p.inc.cacheable
	}},
	{ScenarioInfo: ScenarioInfo{"abort_storm", "", "hard negative: clients abort 8–25% of requests early (finished_reason=\"abort\"); the engine serves the rest as before"}, setup: func(r *rand.Rand, p *plan) {
		p.baseDraw(r, []string{"8B", "70B"}, []string{"H100", "A100", "H200"}, []int{1, 1, 2}, uni(r, 0.3, 0.45))
		p.inc = p.base
		p.inc.abortProb = uni(r, 0.08, 0.25)
		p.inc.abortMin, p.inc.abortMax = 0.2, 4
		p.params["abort_probability"] = p.inc.abortProb
	}},
	{ScenarioInfo: ScenarioInfo{"router_skew", "load_imbalance", "the router sends most traffic to one replica, which saturates while the others idle"}, setup: func(r *rand.Rand, p *plan) {
		p.baseDraw(r, []string{"8B", "70B"}, []string{"H100", "A100", "H200"}, []int{3, 4}, uni(r, 0.45, 0.55))
		p.base.router = routeRoundRobin
		p.inc = p.base
		p.inc.router = routeSkewed
		p.inc.hotFrac = math.Min(0.92, uni(r, 1.15, 1.4)/(float64(p.replicas)*p.load))
		p.params["hot_fraction"] = p.inc.hotFrac
	}},
	{ScenarioInfo: ScenarioInfo{"frontend_delay", "outside_engine", "the API server (tokenizer/HTTP) adds 0.6–2.5 s before requests reach the engine queue"}, setup: func(r *rand.Rand, p *plan) {
		p.baseDraw(r, []string{"8B", "70B"}, []string{"H100", "A100", "H200"}, []int{1, 1, 2}, uni(r, 0.3, 0.45))
		p.inc = p.base
		p.inc.frontend = uni(r, 0.6, 2.5)
		p.params["frontend_delay_seconds"] = p.inc.frontend
	}},
}

// drainingBurst adds a burst at the onset to peak × capacity for dur
// seconds. It is over at `at` by construction: the queue it builds,
// (peak-1) × dur seconds of work, drains at the spare capacity (1-load);
// the requests it admitted finish within their end-to-end time. All of
// that ends before the last recentWindow of the incident window (the span
// an on-call engineer asks "is it still slow?" about), with a margin.
func (p *plan) drainingBurst(peak, dur float64) {
	drain := math.Max(0, peak-1) * dur / (1 - p.load)
	p.at = p.onset + math.Max(4*60, dur+drain+burstTail+recentWindow)
	p.bursts = append(p.bursts, burst{start: p.onset, end: p.onset + dur, mul: peak / p.load})
	p.params["burst_load"] = peak
	p.params["burst_seconds"] = math.Round(dur)
	p.params["burst_over_before_at_seconds"] = math.Round(p.at - p.onset - dur - drain)
}

// kvPool sizes the block pool of kv_pressure for outputs ×mul, so the
// truth holds by construction: the incident's KV demand (running sequences
// × the tokens each holds, from the mean-value model with an unbounded
// pool, counting shared prefixes once) exceeds the pool by over, while the
// baseline's, counted without any prefix sharing (a small pool evicts
// cached prefixes), stays at most 35% of it so that its peaks stay clear of
// the wall; and the incident traffic would fit the GPU's compute and
// max_num_seqs if the pool were large enough.
func (p *plan) kvPool(mul, over float64) {
	var kvBase, kvInc, pool float64
	for try := 0; ; try++ {
		p.inc.outMean = p.base.outMean * mul
		var okBase, okInc bool
		kvBase, okBase = p.kvDemand(p.base, false)
		kvInc, okInc = p.kvDemand(p.inc, true)
		pool = math.Max(kvInc/over, kvBase/0.35)
		if okBase && okInc && kvInc/pool >= math.Min(1.2, over) || try == 20 {
			break
		}
		if !okInc {
			mul *= 0.92 // compute or max_num_seqs would bind: smaller outputs
		} else {
			mul *= 1.1 // not enough demand over the baseline's
		}
	}
	blocks := int(math.Ceil(pool / blockSize))
	// Check the baseline against the engine model itself: a pilot run
	// of the baseline traffic on the chosen pool must keep the peak
	// below 75% (a baseline already at the wall collapses into
	// recompute storms); otherwise grow the pool and the outputs
	// together, which keeps the incident's demand over the pool.
	for try := 0; try < 4; try++ {
		p.cfg.gpuMemUtil = memUtilForBlocks(p.cfg.model, p.cfg.gpu, p.cfg.tp, blocks)
		p.cfg.numBlocks = blocksFor(p.cfg.model, p.cfg.gpu, p.cfg.tp, p.cfg.gpuMemUtil)
		peak := float64(p.pilotPeakBlocks(600)) / float64(p.cfg.numBlocks)
		if peak < 0.75 {
			break
		}
		grow := peak / 0.6
		blocks = int(float64(blocks) * grow)
		mul *= grow
		p.inc.outMean = p.base.outMean * mul
		kvInc, _ = p.kvDemand(p.inc, true)
	}
	p.params["output_mul"] = mul
	p.params["kv_demand_over_pool"] = math.Round(kvInc/float64(p.cfg.numBlocks*blockSize)*100) / 100
	p.params["baseline_kv_demand_fraction"] = math.Round(kvBase/float64(p.cfg.numBlocks*blockSize)*100) / 100
}

// pilotPeakBlocks runs the baseline alone (no bursts) for d simulated
// seconds with the plan's engine configuration and returns the peak number
// of referenced blocks of any replica.
func (p *plan) pilotPeakBlocks(d float64) int {
	q := *p
	q.inc = q.base
	q.bursts = nil
	q.params = map[string]any{}
	w := newWorldFromPlan(&q, Options{Names: "v1", GPUSeries: "none", ScrapeInterval: 15 * time.Second, Start: DefaultStart})
	_ = w.run(context.Background(), d)
	peak := 0
	for _, e := range w.engines {
		peak = max(peak, e.peakUsed)
	}
	return peak
}

// kvDemand is the mean KV-cache demand, in tokens, of one replica serving
// the traffic mix t with an unbounded block pool: running sequences × the
// private tokens each holds (prompt not served from the prefix cache plus
// the output so far, rounded up to blocks), plus the shared prefixes those
// sequences reference (or, without sharing, every prefix held privately).
// Output lengths are lognormal, so a decoding sequence holds on average
// E[out²]/(2·E[out]) = exp(σ²)·mean/2 output tokens. ok is false when the
// traffic would not fit the replica even with an unbounded pool (compute,
// token budget or max_num_seqs bind first).
func (p *plan) kvDemand(t traffic, sharing bool) (tokens float64, ok bool) {
	c := p.cfg
	c.numBlocks = math.MaxInt32 / blockSize
	prompt, hit := p.meanPrompt(t)
	if !sharing {
		hit = 0
	}
	// The per-replica rate at the incident's diurnal phase.
	rate := t.rate / float64(p.replicas) * (1 + p.diurnalAmp*math.Sin(2*math.Pi*p.at/(6*3600)+p.diurnalPh))
	_, n, kv, ok := c.estimate(rate, prompt, hit, t.outMean, math.Max(t.clock, 0.1))
	kv += n * (math.Exp(t.outSigma*t.outSigma) - 1) * t.outMean / 2
	avgPrefix := 0.0
	for i := 0; i < t.prefixN; i++ {
		avgPrefix += float64(p.prefixLens[t.prefixFrom+i])
	}
	if t.prefixN > 0 {
		avgPrefix /= float64(t.prefixN)
	}
	shared := 0.0
	if sharing {
		shared = avgPrefix * math.Min(float64(t.prefixN), n*t.sharedFrac)
	}
	return kv + n*blockSize/2 + shared, ok
}

// longPrompts adds a stream of 32k–100k-token prompts that keeps each
// replica prefilling them about busy of the time, and at least minRate per
// second per replica.
func (p *plan) longPrompts(busy, minRate float64) {
	lo, hi := 32000, 100000
	for hi > lo+4000 && (p.longPromptSeconds((lo+hi)/2)*minRate > busy || float64(hi) > 0.12*float64(p.cfg.numBlocks*blockSize)) {
		hi -= 4000
	}
	perReplica := math.Max(busy/p.longPromptSeconds((lo+hi)/2), minRate)
	p.inc.longMin, p.inc.longMax = lo, hi
	p.inc.longRate = perReplica * float64(p.replicas)
	p.params["long_prompts_per_minute"] = p.inc.longRate * 60
	p.params["long_prompt_max_tokens"] = hi
	p.params["long_prompt_busy_fraction"] = math.Round(perReplica*p.longPromptSeconds((lo+hi)/2)*100) / 100
}

// longPromptSeconds estimates how long one replica spends prefilling a
// prompt of n tokens alone.
func (p *plan) longPromptSeconds(n int) float64 {
	budget := p.cfg.sched.MaxNumBatchedTokens
	total := 0.0
	for done := 0; done < n; done += budget {
		s := stepCost{}
		p.cfg.itemCost(&s, done, min(budget, n-done))
		p.cfg.finish(&s, 1)
		total += s.seconds
	}
	return total
}

// Scenarios lists the catalogue in a stable order.
func Scenarios() []ScenarioInfo {
	out := make([]ScenarioInfo, len(scenarios))
	for i, s := range scenarios {
		out[i] = s.ScenarioInfo
	}
	return out
}

func findScenario(name string) (*scenarioDef, error) {
	for _, s := range scenarios {
		if s.Name == name {
			return s, nil
		}
	}
	names := make([]string, len(scenarios))
	for i, s := range scenarios {
		names[i] = s.Name
	}
	sort.Strings(names)
	return nil, fmt.Errorf("unknown scenario %q (known: %v)", name, names)
}

// newPlan draws one narrow instance of a scenario.
func newPlan(name string, seed int64) (*plan, error) { return drawPlan(name, seed, false, 0) }

// drawPlan draws one instance of a scenario or compound "a+b": narrow or
// wide, with the fault magnitude fixed when m > 0.
func drawPlan(name string, seed int64, wide bool, m float64) (*plan, error) {
	defs, err := parseScenario(name)
	if err != nil {
		return nil, err
	}
	def := defs[0]
	h := uint64(14695981039346656037)
	for _, c := range []byte(name) {
		h = (h ^ uint64(c)) * 1099511628211
	}
	r := rand.New(rand.NewPCG(uint64(seed), h))
	p := &plan{def: def, name: name, seed: seed, params: map[string]any{}}
	switch {
	case len(defs) == 1 && def.legacy && !wide:
		def.setup(r, p)
		if def.Cause != "" {
			p.causes = []string{def.Cause}
		}
		if def.fault != nil && def.fault.legacyM != nil && def.Cause != "" {
			p.magnitude = math.Round(def.fault.legacyM(p)*1000) / 1000
		}
	default:
		// Newer scenarios and wide draws: a stream of their own, so the
		// narrow draws above stay as they are.
		p.errorReason = true
		if wide {
			r = rand.New(rand.NewPCG(uint64(seed), h^wideStream))
		}
		switch {
		case len(defs) > 1 || def.fault != nil:
			p.drawFaults(r, defs, wide, m)
		case wide:
			def.wide(r, p)
		default:
			def.setup(r, p)
		}
	}
	if p.inc.rate == 0 {
		p.inc.rate = p.base.rate
	}
	// vLLM refuses to start when max_model_len does not fit the KV cache;
	// operators lower --max-model-len instead.
	if fit := p.cfg.numBlocks * blockSize / 1024 * 1024; fit < p.cfg.maxModelLen {
		p.cfg.maxModelLen = fit
		p.params["max_model_len"] = fit
	}
	p.params["model"] = p.cfg.model.name
	p.params["gpu"] = p.cfg.gpu.class
	p.params["tensor_parallel"] = p.cfg.tp
	p.params["replicas"] = p.replicas
	p.params["num_gpu_blocks"] = p.cfg.numBlocks
	p.params["gpu_memory_utilization"] = p.cfg.gpuMemUtil
	p.params["baseline_load"] = math.Round(p.load*1000) / 1000
	p.params["baseline_rate_rps"] = math.Round(p.base.rate*1000) / 1000
	p.params["incident_rate_rps"] = math.Round(p.inc.rate*1000) / 1000
	p.params["prompt_mean_tokens"] = math.Round(p.base.promptMean)
	p.params["incident_prompt_mean_tokens"] = math.Round(p.inc.promptMean)
	p.params["output_mean_tokens"] = math.Round(p.base.outMean)
	p.params["incident_output_mean_tokens"] = math.Round(p.inc.outMean)
	p.params["router"] = p.base.router.String()
	summary := def.Summary
	for _, d := range defs[1:] {
		summary += "; " + d.Summary
	}
	p.notes = fmt.Sprintf("simulated %s: %s (whyslow sim, seed %d); %d× %s on %s (TP=%d)",
		name, summary, seed, p.replicas, p.cfg.model.name, p.cfg.gpu.class, p.cfg.tp)
	if wide {
		p.notes = strings.Replace(p.notes, "(whyslow sim, seed", "(whyslow sim, wide draw, seed", 1)
	}
	return p, nil
}

// sinceStart converts simulated seconds to a time.
func sinceStart(start time.Time, s float64) time.Time {
	return start.Add(time.Duration(math.Round(s*1e6)) * time.Microsecond)
}
