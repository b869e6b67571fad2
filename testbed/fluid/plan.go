package fluid

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// Timeline (seconds after epoch, the engine's start).
const (
	tickDT     = 0.5        // the model's time step
	onsetAt    = 75 * 60.0  // faults start here
	windowLen  = 5 * 60.0   // incident.yaml window
	baselineBy = 60 * 60.0  // incident.yaml baseline offset
	lookback   = 5 * 60.0   // kept before each window by Trim (for rate())
	epochUnix  = 1767225600 // 2026-01-01T00:00:00Z
	maxRetries = 4          // redraws when a truth check fails
	watermark  = 0.01       // KV blocks vLLM keeps free when admitting
	histRetain = 0.99       // share of a cached history that still hits
	recentTail = 2 * 60.0   // a burst must drain before the window's last 2 minutes
	sysMatchLo = 0.7        // lowest baseline shared-prefix match
	nsPerSec   = float64(time.Second)
)

// epoch is the model's t=0.
var epoch = time.Unix(epochUnix, 0).UTC()

// families are the optional families an instance exposes (real deployments
// differ by version and flags).
type families struct {
	phase     bool // vllm:request_prefill_time_seconds, vllm:request_decode_time_seconds
	iteration bool // vllm:iteration_tokens_total
	cacheInfo bool // vllm:cache_config_info
	preempt   bool // vllm:num_preemptions_total (and request_num_preemptions)
	http      bool // http_requests_total from the API server
	// dcgm-exporter fields beyond its default counters
	dcgmDRAM, dcgmSM, dcgmViolation bool
}

// plan is one drawn instance: hardware, model, mix, load, telemetry shape
// and the faults with their knobs.
type plan struct {
	opts     Options
	name     string
	defs     []*scenarioDef
	faults   []*faultState
	hard     bool
	m        float64
	attempt  int
	drawSeed int64

	gpu      gpuClass
	model    modelSpec
	tp       int
	replicas int
	pert     perturbation
	cost     costModel
	jitter   []float64 // per-replica multiplier on the step cost
	lim      limits
	memUtil  float64
	maxLen   int

	uniq        lognormal
	out         lognormal
	sys         float64
	maxTok      float64
	match       float64 // baseline shared-prefix match probability
	nPrefixes   int
	history0    float64
	abortP      float64
	outsideBase float64
	longLen     float64 // long_prompt_burst prompt length
	tenantMul   float64 // new_tenant prompt multiplier

	base, long, tenant group

	router   string
	load     float64
	capRep   float64 // requests/s per replica at the knee
	rate     float64 // baseline fleet arrivals/s
	noiseSig float64
	driftAmp float64
	driftPer float64
	driftPh  float64
	bursts   []burst

	scrape float64
	at     float64
	ramp   float64

	names     string
	era       string
	gpuSeries string
	fam       families

	params map[string]any
}

// burst is a short multiplicative rise of the arrival rate.
type burst struct{ start, dur, mul float64 }

// draw builds the instance for opts (without the faults' knobs).
func draw(opts Options, defs []*scenarioDef, seed int64, attempt int) (*plan, error) {
	g := newRNG(seed, 1)
	p := &plan{opts: opts, defs: defs, attempt: attempt, drawSeed: seed, params: map[string]any{}}
	names := make([]string, len(defs))
	for i, d := range defs {
		names[i] = d.name
		if d.hard {
			p.hard = true
		}
	}
	p.name = strings.Join(names, "+")
	wide := opts.Wide

	// hardware and model
	if wide {
		p.model = models[g.choose("8B", "70B")]
		p.gpu = gpuClasses[g.choose("H100", "A100", "H200")]
	} else {
		p.model = models["8B"]
		if g.bernoulli(0.3) {
			p.model = models["70B"]
		}
		p.gpu = gpuClasses[g.choose("H100", "H100", "A100", "H200")]
	}
	for _, d := range defs {
		if d.smallModel {
			p.model = models["8B"]
		}
	}
	p.tp = tensorParallel(p.model, p.gpu)
	spread := 0.1
	if wide {
		spread = 0.5
	}
	pf := func() float64 { return 1 + g.uniform(-spread, spread) }
	p.pert = perturbation{prefill: pf(), overhead: pf(), bandwidth: pf(), kvCapacity: pf()}
	for _, d := range defs {
		if d.smallModel {
			p.pert.kvCapacity = math.Max(p.pert.kvCapacity, 1) // and a full-sized pool
		}
	}
	p.cost = newCostModel(p.model, p.gpu, p.tp, p.pert)

	// replicas
	minR, maxR := 1, 2
	for _, d := range defs {
		minR = max(minR, d.minReplicas)
	}
	if wide {
		maxR = 8
	}
	maxR = max(maxR, minR+1)
	p.replicas = minR + g.intn(maxR-minR+1)
	p.jitter = make([]float64, p.replicas)
	for i := range p.jitter {
		p.jitter[i] = 1 + g.uniform(-0.02, 0.02)
	}
	p.router = "least_loaded"
	if g.bernoulli(0.5) {
		p.router = "round_robin"
	}

	// scheduler
	budget, seqs := schedulerDefaults(p.gpu)
	if wide && g.bernoulli(0.3) {
		if g.bernoulli(0.5) {
			budget /= 2
		} else {
			budget *= 2
		}
	}
	p.lim = limits{budget: float64(budget), maxSeqs: float64(seqs)}
	p.setPoolTokens(p.poolTokensAt(0.9) * p.pert.kvCapacity)

	// request mix
	if p.model.params > 20e9 {
		p.uniq = lognormal{g.uniform(250, 1000), g.uniform(0.7, 1.0)}
	} else {
		p.uniq = lognormal{g.uniform(250, 1200), g.uniform(0.7, 1.0)}
	}
	p.sys = math.Round(g.uniform(100, 700))
	p.match = g.uniform(sysMatchLo, 0.95)
	p.nPrefixes = 2 + g.intn(11)
	p.out = lognormal{g.uniform(120, 420), g.uniform(0.6, 0.9)}
	p.maxTok = 512
	for p.maxTok < 2.5*p.out.mean {
		p.maxTok *= 2
	}
	p.abortP = g.uniform(0, 0.003)
	p.outsideBase = g.uniform(0.003, 0.012)
	p.longLen = 0
	p.tenantMul = 1
	p.fitPrompts(0.6)

	// traffic shape
	p.noiseSig = 0.04
	p.driftAmp = g.uniform(0, 0.03)
	p.driftPer = g.uniform(2, 6) * 3600
	p.driftPh = g.uniform(0, 2*math.Pi)

	// timeline
	p.scrape = 15
	if wide && g.bernoulli(0.5) {
		p.scrape = []float64{10, 20, 30}[g.intn(3)]
	}
	atOff := g.uniform(6, 10) * 60
	p.at = math.Round((onsetAt+atOff)/p.scrape) * p.scrape
	p.ramp = g.uniform(30, 90)

	// telemetry shape
	p.names = opts.Names
	if p.names == "" {
		p.names = "v1"
		if wide && g.bernoulli(0.3) {
			p.names = "v0"
		}
	}
	if p.names != "v1" && p.names != "v0" {
		return nil, fmt.Errorf("names %q: want v1 or v0", p.names)
	}
	p.era = "0.13"
	if wide && p.names == "v1" {
		p.era = g.choose("0.10", "0.11", "0.13", "0.13")
	}
	if p.names == "v0" {
		p.era = "0.7"
	}
	p.gpuSeries = opts.GPUSeries
	if p.gpuSeries == "" {
		p.gpuSeries = "whyslow"
		if wide {
			p.gpuSeries = g.choose("whyslow", "dcgm", "both", "none")
		}
	}
	switch p.gpuSeries {
	case "whyslow", "dcgm", "both", "none":
	default:
		return nil, fmt.Errorf("gpu series %q: want whyslow, dcgm, both or none", p.gpuSeries)
	}
	p.fam = families{
		phase:         g.bernoulli(0.8),
		iteration:     g.bernoulli(0.8),
		cacheInfo:     g.bernoulli(0.7),
		preempt:       g.bernoulli(0.85),
		http:          g.bernoulli(0.5),
		dcgmDRAM:      g.bernoulli(0.85),
		dcgmSM:        g.bernoulli(0.6),
		dcgmViolation: g.bernoulli(0.5),
	}

	p.base = newGroup(p.uniq, p.out, p.sys, p.maxTok)

	// load: the intersection of the scenarios' ranges
	lo, hi := 0.2, 0.9
	for _, d := range defs {
		r := d.loads
		if !wide {
			r = d.narrow()
		}
		lo, hi = math.Max(lo, r[0]), math.Min(hi, r[1])
	}
	if !wide && lo == 0.2 && hi == 0.9 {
		lo, hi = 0.35, 0.55
	}
	if hi < lo {
		hi = lo
	}
	p.load = g.uniform(lo, hi)
	return p, nil
}

// poolTokensAt is the KV pool vLLM's profile leaves at a
// gpu_memory_utilization: util·memory minus weights and activations.
func (p *plan) poolTokensAt(util float64) float64 {
	mem := p.gpu.memBytes
	reserve := 2.5*(1<<30) + 0.02*mem
	return (mem*util - p.cost.weights - reserve) / p.cost.kvBytes
}

// setPoolTokens sets the pool directly (rounded to blocks) and derives the
// utilisation vLLM would have been started with and its max_model_len.
func (p *plan) setPoolTokens(tokens float64) {
	mem := p.gpu.memBytes
	reserve := 2.5*(1<<30) + 0.02*mem
	maxTokens := (mem*0.95 - p.cost.weights - reserve) / p.cost.kvBytes
	tokens = math.Min(tokens, maxTokens)
	blocks := math.Floor(tokens / blockSize)
	p.lim.poolTokens = blocks * blockSize
	p.memUtil = math.Round((p.cost.weights+reserve+p.lim.poolTokens*p.cost.kvBytes)/mem*100) / 100
	p.maxLen = 131072
	for p.maxLen > 4096 && float64(p.maxLen) > p.lim.poolTokens {
		p.maxLen /= 2
	}
}

// numBlocks is the pool in blocks (vLLM's num_gpu_blocks).
func (p *plan) numBlocks() int { return int(p.lim.poolTokens / blockSize) }

// fitPrompts shrinks the unique prompt part until the baseline p90 prompt is
// at most frac of the token budget (a healthy baseline fits its budget).
func (p *plan) fitPrompts(frac float64) {
	for i := 0; i < 50 && p.promptQuantile(0.9, 1) > frac*p.lim.budget; i++ {
		p.uniq.mean *= 0.85
		p.sys = math.Round(p.sys * 0.9)
	}
	p.base = newGroup(p.uniq, p.out, p.sys, p.maxTok)
}

// promptQuantile is the q-quantile of the base prompt length with the unique
// part scaled by mul.
func (p *plan) promptQuantile(q, mul float64) float64 {
	return p.sys + p.history0 + p.uniq.quantile(q)*mul
}

// rebuildGroups refreshes the grids after a scenario changed the mix.
func (p *plan) rebuildGroups() {
	p.base = newGroup(p.uniq, p.out, p.sys, p.maxTok)
	if p.longLen > 0 {
		p.long = newGroup(lognormal{p.longLen, 0.25}, p.out, p.sys, p.maxTok)
	}
	if p.tenantMul > 1 {
		p.tenant = newGroup(lognormal{p.uniq.mean * p.tenantMul, p.uniq.sigma}, p.out, p.sys, p.maxTok)
	}
}

// baseEnv is the exogenous state without noise, drift or faults.
func (p *plan) baseEnv() env {
	return env{rate: p.rate, sc: scales{prompt: 1, out: 1, history: p.history0}, clock: 1, match: p.match}
}

// demandFor turns an environment into one replica's steady demand (share of
// the fleet's arrivals).
func (p *plan) demandFor(e env, share float64) demand {
	type part struct {
		g    *group
		rate float64
		sc   scales
	}
	parts := []part{{&p.base, e.rate, e.sc}}
	if e.longRate > 0 && len(p.long.classes) > 0 {
		parts = append(parts, part{&p.long, e.longRate, scales{prompt: 1, out: e.sc.out, history: e.sc.history}})
	}
	if e.tenantRate > 0 && len(p.tenant.classes) > 0 {
		parts = append(parts, part{&p.tenant, e.tenantRate, scales{prompt: 1, out: e.sc.out, history: e.sc.history}})
	}
	total := 0.0
	for _, pt := range parts {
		total += pt.rate
	}
	d := demand{lam: total * share * (1 - e.errFrac), outside: p.outsideBase + e.outside}
	if total <= 0 {
		d.classes = []demandClass{{1, 1}}
		return d
	}
	for _, pt := range parts {
		wg := pt.rate / total
		mo := pt.g.meanOut(pt.sc)
		d.out += wg * mo
		for _, c := range pt.g.classes {
			prompt := c.unique*pt.sc.prompt + pt.g.shared + pt.sc.history
			hit := pt.g.shared*e.match + pt.sc.history*histRetain
			pc := math.Max(prompt-hit, 1)
			d.classes = append(d.classes, demandClass{wg * c.w, pc})
			d.ctx += wg * c.w * (prompt + mo/2)
			d.kvPriv += wg * c.w * (prompt - pt.g.shared*e.match + mo/2)
		}
	}
	// requests that run longer are over-represented in the running set
	d.ctx = d.ctx + 0.15*d.out
	d.kvPriv = d.kvPriv + 0.15*d.out
	return d
}

// predict runs the steady predictor for replica 0 (the hot one, never a
// stopped one) under e.
func (p *plan) predict(e env) steadyState {
	alive := p.replicas - e.down
	share := 1 / float64(alive)
	if e.hotShare > 0 {
		share = e.hotShare
	}
	return p.cost.steady(p.demandFor(e, share), e.clock, p.lim)
}

// calibrateLoad sets the capacity and the baseline fleet rate from p.load.
func (p *plan) calibrateLoad() {
	e := p.baseEnv()
	e.rate = 1 // the mix's shape; capacity sets the rate
	d := p.demandFor(e, 1)
	p.capRep = p.cost.capacity(d, 1, p.lim)
	p.rate = p.load * p.capRep * float64(p.replicas)
}

// band names a magnitude's band.
func band(m float64, hard bool) string {
	switch {
	case hard:
		return "none"
	case m < 1.0/3:
		return "subtle"
	case m < 2.0/3:
		return "moderate"
	}
	return "severe"
}

// omitted lists the optional families this instance does not expose.
func (p *plan) omitted() []string {
	var out []string
	add := func(ok bool, names ...string) {
		if !ok {
			out = append(out, names...)
		}
	}
	add(p.fam.phase, "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds")
	add(p.fam.iteration, "vllm:iteration_tokens_total")
	add(p.fam.cacheInfo, "vllm:cache_config_info")
	add(p.fam.preempt, "vllm:num_preemptions_total")
	add(p.fam.http, "http_requests_total")
	if p.gpuSeries == "dcgm" || p.gpuSeries == "both" {
		add(p.fam.dcgmDRAM, "DCGM_FI_PROF_DRAM_ACTIVE")
		add(p.fam.dcgmSM, "DCGM_FI_PROF_SM_ACTIVE")
		add(p.fam.dcgmViolation, "DCGM_FI_DEV_POWER_VIOLATION", "DCGM_FI_DEV_THERMAL_VIOLATION")
	}
	sort.Strings(out)
	return out
}
