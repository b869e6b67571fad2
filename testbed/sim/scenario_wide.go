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

// This file holds what the accuracy harness's draws add to the catalogue
// (plan/models.md): wide draws, a magnitude per fault, the newer scenarios
// and compound faults. The narrow draws of the older scenarios stay in
// scenario.go, untouched, so their seeds draw what they always drew.

// fault is how a fault scenario injects its cause into any drawn baseline:
// wide draws, compounds and the newer scenarios' narrow draws go through it.
type fault struct {
	// stage orders the faults of a compound: the traffic shape first, then
	// the rate, the block pool, the clocks, and what is outside the engine.
	stage int
	// limit narrows the baselines the fault allows, for magnitude m.
	limit func(s *baseSpec, m float64)
	// prep changes the baseline before its load is set.
	prep func(r *rand.Rand, p *plan)
	// apply injects the fault at magnitude m into p.inc.
	apply func(r *rand.Rand, p *plan, m float64)
	// legacyM is the magnitude a narrow draw of an older scenario implies.
	legacyM func(p *plan) float64
}

// baseSpec is the range a baseline is drawn from.
type baseSpec struct {
	models, gpus   []string
	minRep, maxRep int
	loadLo, loadHi float64
}

func (s *baseSpec) loads(lo, hi float64) {
	s.loadLo, s.loadHi = math.Max(s.loadLo, lo), math.Min(s.loadHi, hi)
}

func (s *baseSpec) reps(lo, hi int) { s.minRep, s.maxRep = max(s.minRep, lo), min(s.maxRep, hi) }

// wideStream keys the wide draws' random stream apart from the narrow one.
const wideStream = 0x77696465 // "wide"

// Magnitude knobs: m = 0 is barely visible (TTFT ×1.5–2, ITL ×1.3, 3%
// errors), m = 1 severe; each maps m monotonically onto its scenario's
// knob, and the legacy narrow draws invert them.
func lerpM(m, lo, hi float64) float64 { return lo + (hi-lo)*m }

// sqM is lerpM on m², for knobs whose effect turns steep (a queue that
// grows once past capacity).
func sqM(m, lo, hi float64) float64   { return lo + (hi-lo)*m*m }
func invSq(v, lo, hi float64) float64 { return math.Sqrt(invLerp(v, lo, hi)) }
func geoM(m, lo, hi float64) float64  { return lo * math.Pow(hi/lo, m) }
func invLerp(v, lo, hi float64) float64 {
	return math.Max(0, math.Min(1, (v-lo)/(hi-lo)))
}
func invGeo(v, lo, hi float64) float64 {
	if v <= 0 {
		return 0
	}
	return math.Max(0, math.Min(1, math.Log(v/lo)/math.Log(hi/lo)))
}

func paramF(p *plan, k string) float64 {
	switch v := p.params[k].(type) {
	case float64:
		return v
	case int:
		return float64(v)
	}
	return 0
}

const (
	surgeLo, surgeHi       = 0.85, 1.3  // onset load of arrival_surge, on m²
	skewLo, skewHi         = 1.0, 1.45  // router_skew: load of the hot replica, on m²
	lossLo, lossHi         = 0.8, 1.3   // per-replica load after capacity_loss, on m²
	busyLo, busyHi         = 0.06, 0.4  // long_prompt_burst: share of time prefilling long prompts
	shiftLo, shiftHi       = 1.5, 6     // prompt_shift: prompt multiplier
	overLo, overHi         = 1.1, 2     // kv_pressure (legacy draws): incident KV demand over the pool
	kvPreLo, kvPreHi       = 0.03, 3    // kv_pressure: preemptions per second per replica the pool is sized for
	clockLo, clockHi       = 0.8, 0.35  // gpu_throttle: clock factor
	cacheLo, cacheHi       = 0.9, 0.02  // prefix_cache_loss: cacheable share after
	nocacheLo, nocacheHi   = 0.45, 0.85 // prefix_cache_loss: load on the no-cache capacity
	failLo, failHi         = 0.03, 0.25 // abort_storm, error_burst: share of requests
	ttftLo, ttftHi         = 1.8, 12    // frontend_delay: TTFT ratio the delay adds
	itlLo, itlHi           = 1.3, 2.6   // context_growth: step time ratio of the mean-value model
	bwOutLo, bwOutHi       = 1.5, 3     // bandwidth_bound: output multiplier
	contextMin, contextMax = 2.2, 12    // context_growth: KV per running request ×
)

// faults are the fault scenarios' injections.
var faults = map[string]*fault{
	"arrival_surge": {stage: 2,
		// Above 0.7 a surge has no subtle band left.
		limit: func(s *baseSpec, _ float64) { s.loads(0.2, 0.7) },
		apply: func(_ *rand.Rand, p *plan, m float64) {
			// A surge rises: at least 15% over the baseline's load.
			l := math.Max(sqM(m, surgeLo, surgeHi), 1.15*p.load)
			p.inc.rate = l * p.capacity(p.inc) * float64(p.replicas)
			p.params["onset_load"] = l
		},
		legacyM: func(p *plan) float64 { return invSq(paramF(p, "onset_load"), surgeLo, surgeHi) },
	},
	"capacity_loss": {stage: 2,
		limit: func(s *baseSpec, _ float64) { s.reps(2, 8) },
		apply: func(r *rand.Rand, p *plan, m float64) {
			after := sqM(m, lossLo, lossHi)
			n := p.replicas
			// Stop k replicas so that the rest run at `after` while the
			// baseline load stays in range.
			var ks []int
			for k := 1; k < n; k++ {
				if rho := after * float64(n-k) / float64(n); rho >= 0.2 && rho <= 0.75 {
					ks = append(ks, k)
				}
			}
			k := n - 1
			if len(ks) > 0 {
				k = ks[r.IntN(len(ks))]
			}
			p.setLoad(after * float64(n-k) / float64(n))
			p.inc.rate = p.base.rate
			p.stopped = append([]int(nil), r.Perm(n)[:k]...)
			sort.Ints(p.stopped)
			p.params["replicas_stopped"] = k
			p.params["load_after_loss"] = after
		},
	},
	"long_prompt_burst": {stage: 0,
		limit: func(s *baseSpec, m float64) { s.loads(0.2, 0.6-lerpM(m, busyLo, busyHi)) },
		// A long prompt fits 12% of the pool: grow a small pool (within
		// gpu_memory_utilization 0.95) rather than fill it.
		prep: func(_ *rand.Rand, p *plan) {
			c := &p.cfg
			if need := int(36000 / 0.12 / blockSize); c.numBlocks < need {
				c.gpuMemUtil = memUtilForBlocks(c.model, c.gpu, c.tp, min(need, blocksFor(c.model, c.gpu, c.tp, 0.95)))
				c.numBlocks = blocksFor(c.model, c.gpu, c.tp, c.gpuMemUtil)
			}
		},
		apply: func(_ *rand.Rand, p *plan, m float64) {
			p.longPrompts(lerpM(m, busyLo, busyHi), 3.0/recentWindow)
		},
		legacyM: func(p *plan) float64 { return invLerp(paramF(p, "long_prompt_busy_fraction"), busyLo, busyHi) },
	},
	"prompt_shift": {stage: 0,
		limit: func(s *baseSpec, _ float64) { s.loads(0.2, 0.5) },
		prep: func(r *rand.Rand, p *plan) {
			// p90 past the budget from the smallest shift on.
			p.base.promptMean = float64(p.cfg.sched.MaxNumBatchedTokens) * uni(r, 0.32, 0.4)
			p.base.sharedFrac = 0.15
		},
		apply: func(_ *rand.Rand, p *plan, m float64) {
			mul := lerpM(m, shiftLo, shiftHi)
			p.inc.promptMean = p.base.promptMean * mul
			p.inc.rate = lerpM(m, 0.55, 0.95) * p.capacity(p.inc) * float64(p.replicas)
			p.params["prompt_mul"] = mul
		},
		legacyM: func(p *plan) float64 { return invLerp(paramF(p, "prompt_mul"), shiftLo, shiftHi) },
	},
	"kv_pressure": {stage: 3,
		limit: func(s *baseSpec, _ float64) { s.loads(0.2, 0.5) },
		prep:  func(_ *rand.Rand, p *plan) { p.base.maxTokens = 8192 },
		apply: func(r *rand.Rand, p *plan, m float64) {
			p.inc.maxTokens = p.base.maxTokens
			p.kvPoolFor(uni(r, 2.5, 4), geoM(m, kvPreLo, kvPreHi))
		},
		legacyM: func(p *plan) float64 { return invLerp(paramF(p, "kv_demand_over_pool"), overLo, overHi) },
	},
	"bandwidth_bound": {stage: 0,
		limit: func(s *baseSpec, _ float64) {
			s.models, s.gpus = []string{"8B"}, []string{"H100", "H200"}
			s.loads(0.2, 0.5)
		},
		prep: func(r *rand.Rand, p *plan) {
			for i := 16; i < 24; i++ {
				p.prefixLens[i] = round16(uni(r, 8000, 14000))
			}
		},
		apply: func(r *rand.Rand, p *plan, m float64) {
			p.inc.sharedFrac, p.inc.prefixFrom, p.inc.prefixN = 0.97, 16, 4+r.IntN(4)
			p.inc.promptMean = uni(r, 150, 300)
			mul := lerpM(m, bwOutLo, bwOutHi)
			p.inc.outMean = p.base.outMean * mul
			p.inc.rate = lerpM(m, 0.85, 0.96) * p.capacity(p.inc) * float64(p.replicas)
			p.params["output_mul"] = mul
		},
		legacyM: func(p *plan) float64 { return invLerp(p.inc.outMean/p.base.outMean, bwOutLo, bwOutHi) },
	},
	"gpu_throttle": {stage: 4,
		limit: func(s *baseSpec, _ float64) { s.loads(0.2, 0.5) },
		apply: func(r *rand.Rand, p *plan, m float64) {
			p.inc.clock = lerpM(m, clockLo, clockHi)
			p.inc.throttle = pickStr(r, "hw_thermal_slowdown", "sw_power_cap", "hw_slowdown")
			p.ramp = 90
			p.params["clock_factor"] = p.inc.clock
			p.params["throttle_reason"] = p.inc.throttle
		},
		legacyM: func(p *plan) float64 { return invLerp(paramF(p, "clock_factor"), clockLo, clockHi) },
	},
	"prefix_cache_loss": {stage: 0,
		prep: func(r *rand.Rand, p *plan) {
			for i := 0; i < 16; i++ {
				p.prefixLens[i] = round16(uni(r, 1500, 4000))
			}
			p.base.sharedFrac = uni(r, 0.85, 0.95)
			p.base.prefixN = 4 + r.IntN(8)
			p.base.promptMean = uni(r, 200, 500)
		},
		apply: func(_ *rand.Rand, p *plan, m float64) {
			p.inc.cacheable = lerpM(m, cacheLo, cacheHi)
			// The baseline rate is set from the load the incident puts on
			// the capacity without the cache.
			p.base.rate = lerpM(m, nocacheLo, nocacheHi) * p.capacity(p.inc) * float64(p.replicas)
			p.load = p.base.rate / (p.capacity(p.base) * float64(p.replicas))
			p.inc.rate = p.base.rate
			p.params["cacheable_after"] = p.inc.cacheable
		},
		legacyM: func(p *plan) float64 { return invLerp(paramF(p, "cacheable_after"), cacheLo, cacheHi) },
	},
	"abort_storm": {stage: 5,
		apply: func(_ *rand.Rand, p *plan, m float64) {
			p.inc.abortProb = lerpM(m, failLo, failHi)
			p.inc.abortMin, p.inc.abortMax = 0.2, 4
			p.params["abort_probability"] = p.inc.abortProb
		},
		legacyM: func(p *plan) float64 { return invLerp(paramF(p, "abort_probability"), failLo, failHi) },
	},
	"error_burst": {stage: 5,
		apply: func(_ *rand.Rand, p *plan, m float64) {
			p.inc.errorProb = lerpM(m, failLo, failHi)
			p.inc.errorMin, p.inc.errorMax = 0.05, 1.5
			p.params["error_probability"] = p.inc.errorProb
		},
	},
	"router_skew": {stage: 2,
		limit: func(s *baseSpec, _ float64) {
			s.reps(3, 8)
			s.loads(0.25, 0.7)
		},
		apply: func(_ *rand.Rand, p *plan, m float64) {
			hot := sqM(m, skewLo, skewHi)
			n := float64(p.replicas)
			if hot/(n*p.load) > 0.9 {
				p.setLoad(math.Min(0.85, hot/(0.9*n)))
			}
			p.base.router = routeRoundRobin
			p.inc.router = routeSkewed
			p.inc.rate = p.base.rate
			p.inc.hotFrac = math.Min(0.92, hot/(n*p.load))
			p.params["hot_fraction"] = p.inc.hotFrac
			p.params["hot_replica_load"] = p.inc.hotFrac * n * p.load
		},
		legacyM: func(p *plan) float64 {
			return invSq(paramF(p, "hot_fraction")*float64(p.replicas)*p.load, skewLo, skewHi)
		},
	},
	"frontend_delay": {stage: 5,
		apply: func(_ *rand.Rand, p *plan, m float64) {
			base := p.pilot(900).TTFTMean
			p.inc.frontend = p.base.frontend + base*(geoM(m, ttftLo, ttftHi)-1)
			p.params["frontend_delay_seconds"] = p.inc.frontend
			p.params["baseline_ttft_estimate_seconds"] = sig6(base)
		},
		legacyM: func(p *plan) float64 {
			base := p.pilot(900).TTFTMean
			return invGeo(1+(p.inc.frontend-p.base.frontend)/base, ttftLo, ttftHi)
		},
	},
	"context_growth": {stage: 1,
		// Slower steps raise the load: leave the room they need.
		limit: func(s *baseSpec, _ float64) { s.loads(0.2, 0.55) },
		apply: func(r *rand.Rand, p *plan, m float64) { p.contextGrowth(r, geoM(m, itlLo, itlHi)) },
	},
}

// newScenarios are the scenarios added for the accuracy harness; their
// narrow draws go through the same injection as the wide ones.
var newScenarios = []*scenarioDef{
	{ScenarioInfo: ScenarioInfo{"capacity_loss", "capacity_loss",
		"one or more of 2–8 replicas stop serving (their series end); the router sends their share to the rest"}},
	{ScenarioInfo: ScenarioInfo{"context_growth", "memory_bandwidth_saturation",
		"each request carries a long cached context (multi-turn history): KV per running request ×2–12, decode steps read more, prefill flat"}},
	{ScenarioInfo: ScenarioInfo{"error_burst", "request_errors",
		"the server fails 3–25% of requests shortly after they reach the engine (finished_reason=\"error\")"}},
	{ScenarioInfo: ScenarioInfo{"diurnal_growth", "",
		"hard negative: arrivals rise 15–35% over the hour into the incident window, staying well within capacity"},
		setup: func(r *rand.Rand, p *plan) { p.diurnalGrowth(r, false) },
		wide:  func(r *rand.Rand, p *plan) { p.diurnalGrowth(r, true) }},
	{ScenarioInfo: ScenarioInfo{"new_tenant", "",
		"hard negative: a tenant adds 5–15% more requests with 2–4× longer prompts; still within capacity"},
		setup: func(r *rand.Rand, p *plan) { p.newTenant(r, false) },
		wide:  func(r *rand.Rand, p *plan) { p.newTenant(r, true) }},
}

// wideHealthy are the wide draws of the older healthy variants.
var wideHealthy = map[string]func(r *rand.Rand, p *plan){
	"healthy": func(r *rand.Rand, p *plan) {
		p.wideBase(r, baseSpec{loadLo: 0.2, loadHi: 0.6})
		p.settleLoad()
		p.inc = p.base
	},
	"healthy_busy": func(r *rand.Rand, p *plan) {
		p.wideBase(r, baseSpec{loadLo: 0.6, loadHi: 0.85})
		p.settleLoad()
		for i := range p.bursts {
			p.bursts[i].mul = 1.08
		}
		p.inc = p.base
	},
	"healthy_burst": func(r *rand.Rand, p *plan) {
		p.wideBase(r, baseSpec{loadLo: 0.2, loadHi: 0.45})
		p.inc = p.base
		p.drainingBurst(uni(r, 0.95, 1.3), uni(r, 10, 30))
	},
}

func init() {
	for _, s := range scenarios {
		s.legacy = true
		s.fault = faults[s.Name]
		s.wide = wideHealthy[s.Name]
	}
	for _, s := range newScenarios {
		s.fault = faults[s.Name]
		scenarios = append(scenarios, s)
	}
}

// compoundPairs are the fault pairs that can happen together without one
// undoing the other's mechanism (plan/models.md). Excluded: kv_pressure
// with context_growth (one needs a full pool, the other room in it), with
// prompt_shift, long_prompt_burst, arrival_surge or prefix_cache_loss (its
// pool is sized from steady traffic of the baseline's shape); prefix loss
// with context_growth (the contexts are cached prefixes) or prompt_shift
// (opposite baselines); prompt_shift with long_prompt_burst (one prefill
// mechanism hides the other) or arrival_surge (both set the rate).
var compoundPairs = [][2]string{
	{"arrival_surge", "gpu_throttle"}, {"arrival_surge", "prefix_cache_loss"}, {"arrival_surge", "frontend_delay"},
	{"arrival_surge", "long_prompt_burst"}, {"arrival_surge", "context_growth"}, {"arrival_surge", "error_burst"},
	{"gpu_throttle", "prefix_cache_loss"}, {"gpu_throttle", "frontend_delay"}, {"gpu_throttle", "long_prompt_burst"},
	{"gpu_throttle", "context_growth"}, {"gpu_throttle", "error_burst"}, {"gpu_throttle", "kv_pressure"},
	{"gpu_throttle", "prompt_shift"},
	{"prefix_cache_loss", "frontend_delay"}, {"prefix_cache_loss", "long_prompt_burst"}, {"prefix_cache_loss", "error_burst"},
	{"frontend_delay", "long_prompt_burst"}, {"frontend_delay", "context_growth"}, {"frontend_delay", "error_burst"},
	{"frontend_delay", "kv_pressure"}, {"frontend_delay", "prompt_shift"},
	{"long_prompt_burst", "error_burst"}, {"context_growth", "error_burst"},
	{"error_burst", "kv_pressure"}, {"error_burst", "prompt_shift"},
}

// CompoundPairs lists the pairs of fault scenarios that Options.Scenario
// accepts as "a+b".
func CompoundPairs() [][2]string { return append([][2]string(nil), compoundPairs...) }

// ValidScenario reports whether name is a scenario of the catalogue or a
// compound "a+b" of CompoundPairs (in either order).
func ValidScenario(name string) bool {
	_, err := parseScenario(name)
	return err == nil
}

// parseScenario resolves a scenario or compound name.
func parseScenario(name string) ([]*scenarioDef, error) {
	parts := strings.Split(name, "+")
	if len(parts) == 1 {
		d, err := findScenario(name)
		if err != nil {
			return nil, err
		}
		return []*scenarioDef{d}, nil
	}
	if len(parts) != 2 {
		return nil, fmt.Errorf("compound scenario %q: want two faults, a+b", name)
	}
	ok := false
	for _, c := range compoundPairs {
		ok = ok || (c[0] == parts[0] && c[1] == parts[1]) || (c[0] == parts[1] && c[1] == parts[0])
	}
	if !ok {
		return nil, fmt.Errorf("compound scenario %q: not a pair of CompoundPairs", name)
	}
	a, _ := findScenario(parts[0])
	b, _ := findScenario(parts[1])
	return []*scenarioDef{a, b}, nil
}

// drawFaults draws a baseline the faults allow and injects them, each at
// its magnitude (fixed, or drawn: uniform on wide draws, 0.3–0.7 on narrow
// ones), in stage order. Causes are listed by magnitude, larger first.
func (p *plan) drawFaults(r *rand.Rand, defs []*scenarioDef, wide bool, fixed float64) {
	ms := make([]float64, len(defs))
	for i := range defs {
		switch {
		case fixed > 0:
			ms[i] = fixed
		case wide:
			ms[i] = r.Float64()
		default:
			ms[i] = uni(r, 0.3, 0.7)
		}
	}
	spec := baseSpec{minRep: 1, maxRep: 8, loadLo: 0.2, loadHi: 0.9}
	if !wide {
		spec.maxRep, spec.loadLo, spec.loadHi = 2, 0.3, 0.45
	}
	for i, d := range defs {
		if d.fault.limit != nil {
			d.fault.limit(&spec, ms[i])
		}
	}
	if wide {
		p.wideBase(r, spec)
	} else {
		p.narrowBase(r, spec)
	}
	for _, d := range defs {
		if d.fault.prep != nil {
			d.fault.prep(r, p)
		}
	}
	p.setLoad(p.load)
	if wide {
		p.settleLoad()
	}
	p.inc = p.base
	order := make([]int, len(defs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return defs[order[a]].fault.stage < defs[order[b]].fault.stage })
	for _, i := range order {
		defs[i].fault.apply(r, p, ms[i])
		p.params["magnitude_"+defs[i].Name] = math.Round(ms[i]*1000) / 1000
	}
	byM := make([]int, len(defs))
	for i := range byM {
		byM[i] = i
	}
	sort.SliceStable(byM, func(a, b int) bool { return ms[byM[a]] > ms[byM[b]] })
	r4 := func(v float64) float64 { return math.Round(v*1e4) / 1e4 }
	// A change that is no fault of the engine (clients aborting) is in the
	// draw but not in its truth.
	var causal []int
	for _, i := range byM {
		if defs[i].Cause != "" {
			causal = append(causal, i)
		}
	}
	for _, i := range causal {
		p.causes = append(p.causes, defs[i].Cause)
		if len(causal) > 1 {
			p.magnitudes = append(p.magnitudes, r4(ms[i]))
		}
	}
	if len(causal) > 0 {
		p.magnitude = r4(ms[causal[0]])
	}
}

// narrowBase draws a baseline from spec the way the older scenarios do:
// a short list of replica counts and a narrow load range.
func (p *plan) narrowBase(r *rand.Rand, s baseSpec) {
	if s.models == nil {
		s.models = []string{"8B", "70B"}
	}
	if s.gpus == nil {
		s.gpus = []string{"H100", "A100", "H200"}
	}
	reps := []int{s.minRep, s.minRep, min(s.minRep+1, max(s.maxRep, s.minRep+1))}
	p.baseDraw(r, s.models, s.gpus, reps, uni(r, s.loadLo, math.Max(s.loadLo, s.loadHi)))
}

// wideBase draws a baseline from the wide ranges within s: any model and
// GPU class it allows, minRep–maxRep replicas, a load in [loadLo, loadHi],
// and the cost coefficients perturbed: compute efficiency (prefill
// tokens/s), bandwidth efficiency (capped at 0.98 of peak), per-step
// overhead and the KV pool (through gpu_memory_utilization, at most 0.95),
// each ×0.5–1.5.
func (p *plan) wideBase(r *rand.Rand, s baseSpec) {
	if s.models == nil {
		s.models = []string{"8B", "70B"}
	}
	if s.gpus == nil {
		s.gpus = []string{"H100", "A100", "H200"}
	}
	if s.minRep == 0 {
		s.minRep, s.maxRep = 1, 8
	}
	var reps []int
	for n := s.minRep; n <= max(s.maxRep, s.minRep); n++ {
		reps = append(reps, n)
	}
	p.baseDraw(r, s.models, s.gpus, reps, uni(r, s.loadLo, math.Max(s.loadLo, s.loadHi)))
	c := &p.cfg
	c.mfu *= uni(r, 0.5, 1.5)
	c.bwEff = math.Min(0.98, c.bwEff*uni(r, 0.5, 1.5))
	k := uni(r, 0.5, 1.5)
	c.overhead *= k
	c.overheadPerSeq *= k
	blocks := min(int(float64(c.numBlocks)*uni(r, 0.5, 1.5)), blocksFor(c.model, c.gpu, c.tp, 0.95))
	c.gpuMemUtil = memUtilForBlocks(c.model, c.gpu, c.tp, blocks)
	c.numBlocks = blocksFor(c.model, c.gpu, c.tp, c.gpuMemUtil)
	p.setLoad(p.load)
	p.params["wide"] = true
	p.params["mfu"] = math.Round(c.mfu*1000) / 1000
	p.params["bandwidth_efficiency"] = math.Round(c.bwEff*1000) / 1000
	p.params["step_overhead_seconds"] = sig6(c.overhead)
}

// kvPoolFor sizes the block pool for outputs ×mul so that pilot runs of the
// incident traffic (two replicas behind the router, over the span of the
// incident window after the onset) preempt about target times per second
// per replica: preemption sets in abruptly once the KV demand passes the
// pool, so the pool is bisected on the engine model itself rather than on
// the mean-value demand. The baseline's demand, counted without prefix
// sharing, stays at most 35% of the pool and its pilot peak under 75%.
func (p *plan) kvPoolFor(mul, target float64) {
	p.inc.outMean = p.base.outMean * mul
	kvBase, _ := p.kvDemand(p.base, false)
	kvInc, _ := p.kvDemand(p.inc, true)
	c := &p.cfg
	maxBlocks := blocksFor(c.model, c.gpu, c.tp, 0.95)
	setPool := func(blocks int) {
		c.gpuMemUtil = memUtilForBlocks(c.model, c.gpu, c.tp, min(max(blocks, 64), maxBlocks))
		c.numBlocks = blocksFor(c.model, c.gpu, c.tp, c.gpuMemUtil)
	}
	minBlocks := int(math.Ceil(kvBase / 0.35 / blockSize))
	hiBlocks := max(minBlocks, int(kvInc/0.5/blockSize), 64) // large pool: no pressure
	setPool(hiBlocks)
	minBlocks = max(minBlocks, int(float64(p.pilotPeakBlocks(600))/0.75))
	lo := math.Log(float64(max(minBlocks, int(kvInc/2.5/blockSize), 64))) // small pool: storms
	hi := math.Log(float64(max(hiBlocks, minBlocks)))
	reps := min(p.replicas, 2)
	rate := 0.0
	for i := 0; i < 8 && hi > lo; i++ {
		mid := (lo + hi) / 2
		setPool(int(math.Exp(mid)))
		rate = p.pilotOn(p.inc, 1, 480, reps).PreemptionRate / float64(reps)
		if rate > target {
			lo = mid // too much pressure: a larger pool
		} else {
			hi = mid
		}
	}
	setPool(int(math.Exp((lo + hi) / 2)))
	p.params["output_mul"] = mul
	p.params["kv_demand_over_pool"] = math.Round(kvInc/float64(c.numBlocks*blockSize)*100) / 100
	p.params["baseline_kv_demand_fraction"] = math.Round(kvBase/float64(c.numBlocks*blockSize)*100) / 100
	p.params["preemptions_per_second_pilot"] = math.Round(rate*1000) / 1000
}

// settleLoad lowers a high baseline load until a pilot run of it, at 20%
// more arrivals (drift, bursts), neither queues nor preempts: the load is
// relative to the mean-value model's capacity, which some configurations
// do not reach.
func (p *plan) settleLoad() {
	for try := 0; try < 6 && p.load > 0.55; try++ {
		st := p.pilotOf(p.base, 1.2, 600)
		if st.PreemptionRate == 0 && st.QueueMean < math.Max(0.25, 2*st.PrefillMean) {
			return
		}
		p.setLoad(0.9 * p.load)
	}
}

// pilot runs the baseline traffic of one replica alone for d simulated
// seconds and returns the model's statistics after the first five minutes.
func (p *plan) pilot(d float64) WindowStats { return p.pilotOf(p.base, 1, d) }

// contextGrowth makes every request carry one of a set of long cached
// contexts (multi-turn histories, about twice as many as requests run per
// replica, so KV held grows with the context read) and a short new turn.
// The context is sized on the mean-value model (meanStep) so that steps
// slow by target, KV held per running request grows ×2.2–12, prefill
// tokens per step stay about flat, the pool keeps more than half free and
// 20% more arrivals would not tip the replica over; where the baseline
// leaves no such room its load is lowered. Pilot runs of the engine model
// then shrink the context while it still tips over or preempts.
func (p *plan) contextGrowth(r *rand.Rand, target float64) {
	var c contextSize
	for try := 0; ; try++ {
		c = p.sizeContext(target)
		if c.ratio >= 0.95*math.Min(target, itlLo) || p.load <= 0.2 || try == 3 {
			break
		}
		p.setLoad(math.Max(0.2, 0.7*p.load))
		p.inc.rate = p.base.rate
	}
	shape := p.inc
	base := p.pilotOf(shape, 1, 900)
	lens := append([]int(nil), p.prefixLens...)
	scale := make([]float64, 512)
	for i := range scale {
		scale[i] = uni(r, 0.8, 1.2)
	}
	pool := float64(p.cfg.numBlocks * blockSize)
	build := func() traffic {
		p.prefixLens = lens
		for i := 0; i < c.sessions; i++ {
			p.prefixLens = append(p.prefixLens, round16(c.tokens*scale[i]))
		}
		t := shape
		t.sharedFrac, t.cacheable = 1, 1
		t.prefixFrom, t.prefixN = len(lens), c.sessions
		t.promptMean = c.turn
		return t
	}
	ratio, held := c.ratio, c.held
	for i := 0; ; i++ {
		st := p.pilotOf(build(), 1.15, 900)
		ratio = st.ITLMean / base.ITLMean
		held = st.KVTokensPerRunning / base.KVTokensPerRunning
		pf := st.PrefillTokensPerStep / base.PrefillTokensPerStep
		blown := ratio > 2*target || st.PreemptionRate > 0 || st.QueueMean > 4*base.QueueMean+0.5
		if !blown && pf < 1.3 || i == 4 {
			break
		}
		if !blown {
			c.turn = math.Max(32, c.turn*1.1/pf)
		} else {
			c.tokens = math.Max(256, 0.75*c.tokens)
			c.sessions = min(max(int(math.Ceil(2*st.RunningMean)), c.sessions), max(int(0.35*pool/c.tokens), 1), len(scale))
		}
	}
	p.inc = build()
	p.params["context_tokens"] = math.Round(c.tokens)
	p.params["contexts"] = c.sessions
	p.params["turn_prompt_tokens"] = math.Round(c.turn)
	p.params["step_time_ratio_estimate"] = math.Round(c.ratio*100) / 100
	p.params["itl_ratio_pilot"] = math.Round(ratio*100) / 100
	p.params["kv_per_running_ratio_pilot"] = math.Round(held*100) / 100
}

// contextSize is a context_growth incident: context tokens per request, the
// number of distinct contexts, the new turn's prompt tokens, and what the
// mean-value model expects of the step time and KV held per running
// request, relative to the baseline.
type contextSize struct {
	tokens, turn, ratio, held float64
	sessions                  int
	ok                        bool
}

// sizeContext sizes a context_growth incident on the mean-value model.
func (p *plan) sizeContext(target float64) contextSize {
	n := float64(p.replicas)
	rate := p.inc.rate / n
	clock := math.Max(p.inc.clock, 0.1)
	out := p.inc.outMean
	outHeld := math.Exp(p.inc.outSigma*p.inc.outSigma) * out / 2
	pool := float64(p.cfg.numBlocks * blockSize)
	prompt, hit := p.meanPrompt(p.inc)
	fresh := prompt * (1 - hit)
	tb, nb, _ := p.cfg.meanStep(rate, prompt*hit, fresh, out, clock)
	sens := 1.8
	if th, _, ok := p.cfg.meanStep(1.2*rate, prompt*hit, fresh, out, clock); ok {
		sens = math.Max(sens, 1.5*th/tb)
	}
	avg := 0.0
	for i := 0; i < p.inc.prefixN; i++ {
		avg += float64(p.prefixLens[p.inc.prefixFrom+i])
	}
	if p.inc.prefixN > 0 {
		avg /= float64(p.inc.prefixN)
	}
	heldB := p.inc.promptMean + outHeld + blockSize/2 + avg*math.Min(float64(p.inc.prefixN), nb*p.inc.sharedFrac)/math.Max(nb, 1)
	eval := func(l float64) contextSize {
		// The new turn is short: prefill tokens per step (rate × new
		// tokens × step time) stay where they were while steps slow down.
		turn := fresh
		var ti, ni float64
		ok := true
		for i := 0; i < 6; i++ {
			ti, ni, ok = p.cfg.meanStep(rate, l, turn, out, clock)
			turn = math.Max(32, math.Min(p.inc.promptMean, fresh*tb/ti))
		}
		// Bursts and drift must not tip it over: 20% more arrivals stay
		// stable and slow steps not much more than they slow the baseline.
		if th, _, okh := p.cfg.meanStep(1.2*rate, l, turn, out, clock); !okh || th > sens*ti {
			ok = false
		}
		own := turn + outHeld + blockSize/2
		// The contexts stay cached with room to spare: an evicted one is
		// recomputed, which slows every step and evicts more.
		s := min(max(int(math.Ceil(2*ni)), 1), max(int(0.35*pool/l), 1), 512)
		distinct := float64(s) * (1 - math.Pow(1-1/float64(s), ni))
		kv := distinct*l + ni*own
		ratio := ti / tb
		return contextSize{tokens: l, turn: turn, ratio: ratio, held: kv / math.Max(ni, 1) / heldB, sessions: s,
			ok: ok && kv <= 0.45*pool && ratio < 2*itlHi}
	}
	lMax := math.Min(100000, float64(p.cfg.maxModelLen-p.inc.maxTokens)/2)
	// first returns the smallest l in [lo, hi] where good holds, for a
	// good that is false below some l and true above; hi when none.
	first := func(lo, hi float64, good func(contextSize) bool) float64 {
		if !good(eval(hi)) {
			return hi
		}
		for i := 0; i < 40; i++ {
			mid := (lo + hi) / 2
			if good(eval(mid)) {
				hi = mid
			} else {
				lo = mid
			}
		}
		return hi
	}
	// The step-time ratio grows with the context until the decode reads
	// saturate HBM: take the context that reaches target below that, then
	// grow it until KV held per request is at least contextMin ×.
	const lLow = 256
	lSat := lMax
	if !eval(lMax).ok {
		lSat = math.Max(lLow, first(lLow, lMax, func(q contextSize) bool { return !q.ok })*0.97)
	}
	l := first(lLow, lSat, func(q contextSize) bool { return q.ratio >= target })
	if eval(l).held < contextMin {
		best := l
		for i := 1; i <= 30; i++ {
			x := l * math.Pow(lSat/l, float64(i)/30)
			if q := eval(x); q.held > eval(best).held {
				best = x
				if q.held >= contextMin {
					break
				}
			}
		}
		l = best
	}
	if eval(l).held > contextMax {
		l = first(lLow, l, func(q contextSize) bool { return q.held >= contextMax })
	}
	return eval(l)
}

// pilotOf runs traffic t, its rates ×mul, on one replica alone for d
// simulated seconds and returns the model's statistics after the first
// five minutes.
func (p *plan) pilotOf(t traffic, mul, d float64) WindowStats { return p.pilotOn(t, mul, d, 1) }

// pilotOn is pilotOf on n replicas behind the plan's router.
func (p *plan) pilotOn(t traffic, mul, d float64, n int) WindowStats {
	q := *p
	k := float64(n) / float64(q.replicas)
	t.rate *= mul * k
	t.longRate *= mul * k
	t.tenantRate *= mul * k
	q.replicas = n
	q.base, q.inc = t, t
	q.bursts = nil
	q.stopped = nil
	q.growth = 0
	q.diurnalAmp = 0
	q.onset, q.ramp = 0, 0
	q.at = d
	q.pilotSpan = math.Min(d-180, math.Max(d-300, 180)) // after a warm-up
	q.params = map[string]any{}
	w := newWorldFromPlan(&q, Options{Names: "v1", GPUSeries: "none", ScrapeInterval: 15 * time.Second, Start: DefaultStart})
	_ = w.run(context.Background(), d)
	return w.obs.observed().Incident
}

// meanStep is a mean-value model of one replica's steady state at a rate
// of requests each with cached prompt tokens served from the prefix cache,
// fresh prompt tokens to compute and out output tokens: the mean step time
// t (the inter-token gap of a decoding request) and the running requests
// n. Unlike estimate it charges a prefill chunk's context read once per
// chunk and, while prefills are rarer than steps, tells steps that carry a
// chunk (often compute-bound: the chunk attends to the whole cached
// context) from decode-only ones. ok is false past the token budget,
// max_num_seqs, the time prefills alone take, or 30 s steps.
func (c *engineConfig) meanStep(rate, cached, fresh, out, clock float64) (t, n float64, ok bool) {
	budget := float64(c.sched.MaxNumBatchedTokens)
	chunks := math.Max(1, math.Ceil(fresh/budget)) // steps per prefill
	chunk := fresh / chunks
	ctx := cached + fresh + out/2
	lin := 2 * c.model.params
	att := 4 * float64(c.model.layers*c.model.dModel)
	kv := c.model.kvBytesPerToken()
	step := func(n, k float64) float64 { // n decodes and k chunks
		s := stepCost{flops: lin*(n+k*chunk) + att*(n*ctx+k*chunk*(cached+fresh/2)),
			bytes: (n*ctx + k*(cached+fresh)) * kv}
		c.finishAt(&s, clock, n+k, n+k*chunk)
		return s.seconds
	}
	t = 0.01
	for i := 0; i < 300; i++ {
		n = rate * out * t
		k := rate * chunks * t // chunks per step
		if n+k*chunk > budget*0.95 || n+rate*t > float64(c.sched.MaxNumSeqs)*0.95 {
			return t, n, false
		}
		next := step(n, k)
		if k < 1 {
			// Per second, rate×chunks steps carry a chunk, the rest decode.
			busy := rate * chunks * step(n, 1)
			if busy >= 0.95 {
				return t, n, false
			}
			next = 1 / (rate*chunks + (1-busy)/step(n, 0))
		}
		if next > 30 {
			return t, n, false
		}
		if math.Abs(next-t) < 1e-7 {
			return next, n, true
		}
		t = 0.5*t + 0.5*next
	}
	return t, n, true
}

// diurnalGrowth is a baseline whose arrivals rise by 15–35% from the
// baseline window's end to `at`, on a fleet serving at least 4 req/s. Pilot runs at both windows' mean arrival
// rates (growth and drift included; no burst reaches into a window) check
// that the latency means rise by less than ×1.08; otherwise the load comes
// down.
func (p *plan) diurnalGrowth(r *rand.Rand, wide bool) {
	g := uni(r, 0.15, 0.35)
	if wide {
		p.wideBase(r, baseSpec{loadLo: 0.2, loadHi: 0.7 / (1 + g)})
	} else {
		p.baseDraw(r, []string{"8B", "70B"}, []string{"H100", "A100", "H200"}, []int{1, 1, 2}, uni(r, 0.3, 0.5))
	}
	p.quietWindows()
	p.enoughRequests(4)
	p.inc = p.base
	p.growth = g
	p.growthTo = p.at
	p.growthFrom = p.at - defaultBaseline.Seconds()
	for try := 0; try < 8 && !p.withinNegative(p.base); try++ {
		p.setLoad(0.85 * p.load)
		p.inc = p.base
	}
	p.params["arrival_growth"] = math.Round(g*1000) / 1000
	p.params["incident_load"] = math.Round(p.load*(1+g)*1000) / 1000
}

// newTenant adds, from the onset, a tenant sending 5–15% more requests with
// prompts 2–4× the mean (one application: a narrow spread), without
// shared prefixes, on a fleet serving at least 4 req/s. No burst reaches into a window; pilot runs check that
// the latency means rise by less than ×1.08, otherwise the tenant's share,
// its prompts and the load come down in turn.
func (p *plan) newTenant(r *rand.Rand, wide bool) {
	f, k := uni(r, 0.05, 0.15), uni(r, 2, 4)
	// The tenant's prompts fit one step of the token budget: on a 2048
	// budget (A100) they would be chunked and stall everyone's prefills,
	// which is prefill contention, not a harmless tenant.
	gpus := []string{"H100", "H200"}
	if wide {
		p.wideBase(r, baseSpec{loadLo: 0.2, loadHi: 0.6, gpus: gpus})
	} else {
		p.baseDraw(r, []string{"8B", "70B"}, gpus, []int{1, 1, 2}, uni(r, 0.3, 0.45))
	}
	p.quietWindows()
	p.enoughRequests(4)
	prompt, _ := p.meanPrompt(p.base)
	k = math.Max(2, math.Min(k, 0.6*float64(p.cfg.sched.MaxNumBatchedTokens)/prompt))
	set := func() {
		p.inc = p.base
		p.inc.tenantRate = f * p.base.rate
		p.inc.tenantPrompt = k * prompt
	}
	set()
	for try := 0; try < 12 && !p.withinNegative(p.inc); try++ {
		switch try % 3 {
		case 0:
			f = math.Max(0.05, 0.8*f)
		case 1:
			k = math.Max(2, 0.85*k)
		default:
			p.setLoad(0.85 * p.load)
		}
		set()
	}
	p.params["tenant_request_share"] = math.Round(f*1000) / 1000
	p.params["tenant_prompt_mul"] = math.Round(k*100) / 100
}

// withinNegative reports whether pilot runs of the baseline and of the
// incident traffic inc, each at its window's mean arrival rate, keep TTFT,
// ITL and e2e means within ×1.08 of each other (the windows of the engine
// model differ by ±10% on their own). The baseline's pilot is kept while
// the load stays.
func (p *plan) withinNegative(inc traffic) bool {
	mean := func(hi float64) float64 {
		sum := 0.0
		for i := 0; i < 300; i++ {
			t := hi - 300 + float64(i) + 0.5
			tr := p.trafficAt(t)
			sum += p.rateAt(t, &tr) / tr.rate
		}
		return sum / 300
	}
	if p.negBase == nil || p.negBase.load != p.load {
		p.negBase = &negBase{load: p.load, stats: p.pilotOf(p.base, mean(p.at-defaultBaseline.Seconds()), 1800)}
	}
	b := p.negBase.stats
	n := p.pilotOf(inc, mean(p.at), 1800)
	for _, x := range [][2]float64{{b.TTFTMean, n.TTFTMean}, {b.ITLMean, n.ITLMean}, {b.E2EMean, n.E2EMean}} {
		if x[0] > 0 && x[1] > 1.08*x[0] {
			return false
		}
	}
	return true
}

// negBase is a hard negative's baseline pilot at one load.
type negBase struct {
	load  float64
	stats WindowStats
}

// enoughRequests adds replicas (up to 8) until the fleet serves at least
// rate requests per second, so that a window's latency means are not the
// noise of a few hundred requests.
func (p *plan) enoughRequests(rate float64) {
	for p.replicas < 8 && p.base.rate < rate {
		p.replicas++
		p.setLoad(p.load)
	}
}

// quietWindows drops the bursts that reach into either window, so that a
// hard negative's windows differ only by what it injects.
func (p *plan) quietWindows() {
	keep := p.bursts[:0]
	for _, b := range p.bursts {
		clear := true
		for _, hi := range []float64{p.at - defaultBaseline.Seconds(), p.at} {
			if b.end > hi-defaultWindow.Seconds()-burstTail && b.start < hi {
				clear = false
			}
		}
		if clear {
			keep = append(keep, b)
		}
	}
	p.bursts = keep
}
