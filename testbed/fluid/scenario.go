package fluid

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// env is the exogenous state at one instant: everything outside the engine
// that a fault can move.
type env struct {
	rate       float64 // base traffic, fleet arrivals/s
	sc         scales  // base traffic's prompt/output/history scales
	longRate   float64 // very long prompts, fleet arrivals/s
	tenantRate float64 // a new tenant's arrivals/s
	clock      float64 // SM clock over its maximum
	match      float64 // probability the shared system prompt matches the cache
	errFrac    float64 // share of requests failing server-side
	hotShare   float64 // share the router sends replica 0 (0: its policy)
	outside    float64 // extra seconds before the engine queue
	down       int     // replicas (the last ones) no longer serving
}

// faultState is a scenario's drawn knobs in one instance.
type faultState struct {
	def    *scenarioDef
	knob   float64 // the magnitude knob (see each scenario)
	knob2  float64 // a second, scenario-specific value
	start  float64 // for timed events (healthy_burst)
	dur    float64
	mode   string
	reason string
	score  float64 // predicted symptom score at full intensity (orders compound causes)
}

// scenarioDef is one catalogue entry.
type scenarioDef struct {
	name, summary string
	causes        []string
	hard          bool // a hard negative: truth is healthy
	minReplicas   int
	loads         [2]float64 // wide baseline load range
	order         int        // prepare order within a compound
	// smallModel keeps the draw to the 8B model: only there can the KV read
	// outgrow the weights while the pool keeps room.
	smallModel bool
	// shape changes the mix, pool or telemetry before the load is set.
	shape func(p *plan, f *faultState, g *rng)
	// tune sets the knobs once the baseline rate is known.
	tune func(p *plan, f *faultState, g *rng)
	// apply moves the environment at time t; w is the onset ramp (0..1).
	apply func(p *plan, f *faultState, e *env, t, w float64)
}

// narrow is the middle of the load range, for moderate draws.
func (d *scenarioDef) narrow() [2]float64 {
	lo, hi := d.loads[0], d.loads[1]
	span := hi - lo
	return [2]float64{lo + span*0.25, hi - span*0.25}
}

// ScenarioInfo describes one catalogue scenario.
type ScenarioInfo struct {
	// Name is what Options.Scenario takes.
	Name string
	// Causes are the cause ids of its truth; empty for hard negatives.
	Causes []string
	// Summary says what changes and how the magnitude scales it.
	Summary string
}

// Scenarios lists the catalogue: faults first, then hard negatives.
// Options.Scenario also takes "a+b" for two faults at once (see
// CompoundPairs).
func Scenarios() []ScenarioInfo {
	out := make([]ScenarioInfo, 0, len(catalogue))
	for _, d := range catalogue {
		out = append(out, ScenarioInfo{Name: d.name, Causes: append([]string(nil), d.causes...), Summary: d.summary})
	}
	return out
}

// compoundable are the faults that may be paired.
var compoundable = []string{"arrival_surge", "gpu_throttle", "prefix_cache_loss", "frontend_delay",
	"long_prompt_burst", "context_growth", "error_burst", "kv_pressure", "prompt_shift"}

// contradict are pairs that would undo each other's mechanism.
var contradict = map[[2]string]string{
	{"context_growth", "kv_pressure"}:       "one sizes the pool to fill, the other to keep room",
	{"context_growth", "prefix_cache_loss"}: "context growth needs its history to hit the cache",
	{"long_prompt_burst", "prompt_shift"}:   "both move the prompt-length distribution",
	{"context_growth", "prompt_shift"}:      "one shortens the new part of each prompt, the other lengthens it",
}

// CompoundPairs lists every allowed "a+b" scenario.
func CompoundPairs() []string {
	var out []string
	for i, a := range compoundable {
		for _, b := range compoundable[i+1:] {
			if _, bad := contradict[pairKey(a, b)]; !bad {
				out = append(out, a+"+"+b)
			}
		}
	}
	return out
}

func pairKey(a, b string) [2]string {
	if a > b {
		a, b = b, a
	}
	return [2]string{a, b}
}

// lookup resolves a scenario name (or "a+b") to its definitions.
func lookup(name string) ([]*scenarioDef, error) {
	parts := strings.Split(name, "+")
	if len(parts) > 2 {
		return nil, fmt.Errorf("scenario %q: at most two faults", name)
	}
	var defs []*scenarioDef
	for _, n := range parts {
		var d *scenarioDef
		for _, c := range catalogue {
			if c.name == n {
				d = c
			}
		}
		if d == nil {
			return nil, fmt.Errorf("unknown scenario %q (see fluid.Scenarios)", n)
		}
		defs = append(defs, d)
	}
	if len(defs) == 2 {
		a, b := defs[0].name, defs[1].name
		ok := func(n string) bool {
			for _, c := range compoundable {
				if c == n {
					return true
				}
			}
			return false
		}
		if a == b || !ok(a) || !ok(b) {
			return nil, fmt.Errorf("scenario %q: pair two different faults of %s", name, strings.Join(compoundable, ", "))
		}
		if why, bad := contradict[pairKey(a, b)]; bad {
			return nil, fmt.Errorf("scenario %q: %s and %s contradict each other (%s)", name, a, b, why)
		}
		sort.SliceStable(defs, func(i, j int) bool { return defs[i].order < defs[j].order })
	}
	return defs, nil
}

// symptom thresholds: a score of 1 is "just reaches an on-call alarm".
const (
	alarmTTFT = 1.7
	alarmITL  = 1.35
)

// score rates how far st moved from base: 1 at the alarm, more beyond; an
// overloaded prediction scores high.
func score(base, st steadyState) float64 {
	if !st.ok || math.IsInf(st.ttft, 1) {
		return 50
	}
	s := math.Log(st.ttft/base.ttft) / math.Log(alarmTTFT)
	s = math.Max(s, math.Log(st.itl/base.itl)/math.Log(alarmITL))
	return math.Max(s, 0)
}

// ratioScore is score's analogue for a plain latency ratio.
func ratioScore(r, alarm float64) float64 { return math.Max(math.Log(r)/math.Log(alarm), 0) }

// bisect finds k in [lo, hi] with f(k) = target for an increasing f; it
// returns lo or hi when the target lies outside.
func bisect(lo, hi float64, f func(float64) float64, target float64) float64 {
	if f(lo) >= target {
		return lo
	}
	if f(hi) < target {
		return hi
	}
	for i := 0; i < 50; i++ {
		mid := (lo + hi) / 2
		if f(mid) < target {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}

// geo interpolates geometrically (a, b > 0).
func geo(a, b, m float64) float64 { return a * math.Pow(b/a, m) }

// lin interpolates linearly.
func lin(a, b, m float64) float64 { return a + (b-a)*m }

// with returns the base environment changed by fn.
func (p *plan) with(fn func(e *env)) env {
	e := p.baseEnv()
	fn(&e)
	return e
}

var catalogue = []*scenarioDef{
	{
		name:    "arrival_surge",
		causes:  []string{"queue_saturation"},
		summary: "arrivals rise past what the replicas admit; magnitude sets the post-surge load from just-visible to 1.6x capacity",
		loads:   [2]float64{0.2, 0.7}, order: 5,
		tune: func(p *plan, f *faultState, _ *rng) {
			base := p.predict(p.baseEnv())
			sc := func(a float64) float64 { return score(base, p.predict(p.with(func(e *env) { e.rate *= a }))) }
			a0 := bisect(1, 1.6/p.load, sc, 1)
			a1 := math.Max(1.6/p.load, a0*1.2)
			f.knob = lin(a0, a1, p.m)
			f.score = sc(f.knob)
		},
		apply: func(_ *plan, f *faultState, e *env, _, w float64) { e.rate *= 1 + (f.knob-1)*w },
	},
	{
		name:    "capacity_loss",
		causes:  []string{"capacity_loss"},
		summary: "replicas stop serving (series end, or up but routed nothing) and the rest absorb their share; magnitude sets the survivors' load",
		loads:   [2]float64{0.2, 0.85}, minReplicas: 2, order: 1,
		shape: func(p *plan, f *faultState, g *rng) {
			f.mode = "gone"
			if g.bernoulli(0.4) {
				f.mode = "idle"
			}
		},
		tune: func(p *plan, f *faultState, _ *rng) {
			n := float64(p.replicas)
			k := 1.0
			var post float64
			for pass := 0; pass < 3; pass++ {
				kk := k
				sc := func(rho float64) float64 {
					p.load = rho * (n - kk) / n
					p.rate = p.load * p.capRep * n
					base := p.predict(p.baseEnv())
					return score(base, p.predict(p.with(func(e *env) { e.down = int(kk) })))
				}
				r0 := bisect(0.3, 1.6, sc, 1)
				post = lin(r0, math.Max(1.6, r0*1.1), p.m)
				k = clamp(math.Ceil(n*(1-0.85/post)), 1, n-1)
			}
			p.load = post * (n - k) / n
			p.rate = p.load * p.capRep * n
			f.knob = k
			f.knob2 = post
			base := p.predict(p.baseEnv())
			f.score = score(base, p.predict(p.with(func(e *env) { e.down = int(k) })))
		},
		apply: func(_ *plan, f *faultState, e *env, _, w float64) {
			if w > 0 {
				e.down = int(f.knob)
			}
		},
	},
	{
		name:    "long_prompt_burst",
		causes:  []string{"prefill_contention"},
		summary: "a stream of a few very long prompts (the tail) crowds decode and the prefill queue; magnitude sets their rate",
		loads:   [2]float64{0.2, 0.6}, order: 6,
		shape: func(p *plan, f *faultState, g *rng) {
			p.longLen = longLength(p, g.uniform(1.5, 4))
			p.rebuildGroups()
		},
		tune: func(p *plan, f *faultState, _ *rng) {
			const maxShare = 0.08 // "a few": the base mix's p90 stays put
			var phi0, phi1 float64
			for i := 0; i < 6; i++ {
				base := p.predict(p.baseEnv())
				sc := func(phi float64) float64 {
					return score(base, p.predict(p.with(func(e *env) { e.longRate = phi * e.rate })))
				}
				phi0 = bisect(1e-4, maxShare, sc, 1)
				phi1 = bisect(1e-4, maxShare, sc, ratioScore(20, alarmTTFT))
				longer := longLength(p, 1.5*p.longLen/p.lim.budget)
				shorter := longLength(p, p.longLen/p.lim.budget/1.4)
				perWindow := geo(phi0, math.Max(phi1, phi0*1.01), p.m) * p.rate * windowLen
				switch {
				case perWindow < 15 && shorter < p.longLen:
					// too rare to show reliably in 5 minutes: shorter, more of them
					p.longLen = shorter
				case phi1 >= 0.75*maxShare && longer > p.longLen && perWindow >= 30:
					// the severe end needs more than a few: longer ones
					p.longLen = longer
				default:
					i = 99
				}
				p.rebuildGroups()
			}
			f.knob = geo(phi0, math.Max(phi1, phi0*1.01), p.m)
			f.knob2 = p.longLen
			base := p.predict(p.baseEnv())
			f.score = score(base, p.predict(p.with(func(e *env) { e.longRate = f.knob * e.rate })))
		},
		apply: func(_ *plan, f *faultState, e *env, _, w float64) { e.longRate = f.knob * e.rate * w },
	},
	{
		name:    "prompt_shift",
		causes:  []string{"chunked_prefill_mismatch"},
		summary: "the whole prompt-length distribution moves past the token budget; magnitude sets p90 prompt from 1.1x to 3.5x max_num_batched_tokens",
		loads:   [2]float64{0.15, 0.45}, order: 4,
		shape: func(p *plan, f *faultState, g *rng) {
			// a baseline p90 of 0.6-0.85 budgets: the shift crosses it
			target := g.uniform(0.6, 0.85) * p.lim.budget
			p.fitPrompts(target / p.lim.budget)
			if q := p.promptQuantile(0.9, 1); q < target {
				p.uniq.mean *= (target - p.sys - p.history0) / (q - p.sys - p.history0)
				p.rebuildGroups()
			}
		},
		tune: func(p *plan, f *faultState, _ *rng) {
			target := p.lim.budget * lin(1.1, 3.5, p.m)
			f.knob = math.Max((target-p.sys-p.history0)/p.uniq.quantile(0.9), 1.2)
			f.knob2 = target
			base := p.predict(p.baseEnv())
			f.score = score(base, p.predict(p.with(func(e *env) { e.sc.prompt = f.knob })))
		},
		apply: func(_ *plan, f *faultState, e *env, _, w float64) { e.sc.prompt *= 1 + (f.knob-1)*w },
	},
	{
		name:    "kv_pressure",
		causes:  []string{"kv_cache_pressure"},
		summary: "outputs (and max_tokens) grow several-fold at steady arrivals on a pool sized so it fills and preempts; magnitude sets output growth and demand over pool",
		loads:   [2]float64{0.15, 0.4}, order: 2,
		tune: func(p *plan, f *faultState, _ *rng) {
			mul := lin(2.5, 4.5, p.m)
			over := lin(0.7, 1.25, p.m)
			pool := p.lim.poolTokens
			for i := 0; i < 12; i++ {
				p.lim.poolTokens = 1e12
				st := p.predict(p.with(func(e *env) { e.sc.out = mul }))
				idle := p.cost.step(0, 0, 0, 1)
				if st.ok && st.tau <= 2.6*idle || i == 11 {
					break
				}
				p.load *= 0.85
				p.rate = p.load * p.capRep * float64(p.replicas)
			}
			inc := p.predict(p.with(func(e *env) { e.sc.out = mul }))
			d := p.demandFor(p.with(func(e *env) { e.sc.out = mul }), 1/float64(p.replicas))
			demandTok := inc.batch*(d.kvPriv+blockSize/2) + float64(p.nPrefixes)*p.sys
			p.lim.poolTokens = pool
			p.setPoolTokens(math.Min(pool, demandTok/over))
			f.knob = mul
			f.knob2 = demandTok / p.lim.poolTokens
			f.score = 3 + p.m
		},
		apply: func(_ *plan, f *faultState, e *env, _, w float64) { e.sc.out *= 1 + (f.knob-1)*w },
	},
	{
		name:    "context_growth",
		causes:  []string{"memory_bandwidth_saturation"},
		summary: "each request carries a long cached conversation history, so KV read per decode step grows several-fold with prefill flat and the pool keeping room; magnitude sets the ITL rise from 1.35x toward 2.4x, capped where the pool would fill",
		loads:   [2]float64{0.2, 0.6}, order: 3, smallModel: true,
		shape: func(p *plan, f *faultState, g *rng) {
			p.history0 = math.Round(g.uniform(0, 300))
			p.fitPrompts(0.6)
		},
		tune: func(p *plan, f *faultState, _ *rng) {
			target := geo(1.35, 2.4, p.m)
			maxH := math.Min(float64(p.maxLen)-p.promptQuantile(0.99, 1)-p.maxTok, 120000)
			var h, u float64
			for i := 0; i < 6; i++ {
				base := p.predict(p.baseEnv())
				bd := p.demandFor(p.baseEnv(), 1)
				grown := func(x, uniq float64) env {
					return p.with(func(e *env) { e.sc.history, e.sc.prompt = x, uniq })
				}
				// follow-up turns carry the history and a shorter new message
				shorter := func(x float64) float64 {
					pf := func(uq float64) float64 { return p.predict(grown(x, uq)).prefill / base.prefill }
					return bisect(0.1, 1, pf, 1.1)
				}
				itlR := func(x float64) float64 {
					st := p.predict(grown(x, shorter(x)))
					if !st.ok {
						return 1e9
					}
					return st.itl / base.itl
				}
				kvR := func(x float64) float64 { return p.demandFor(grown(x, shorter(x)), 1).kvPriv / bd.kvPriv }
				// the pool must keep room, also when the batch swings up
				// (a few standard deviations of a Poisson-like batch)
				const maxUse = 0.85
				// Near saturation the batch's swings grow like τ/τ_empty; the
				// predictor runs ~30% light on the batch in this regime.
				use := func(x float64) float64 {
					st := p.predict(grown(x, shorter(x)))
					amp := st.tau / p.cost.step(0, 0, 0, 1)
					b := 1.3 * math.Max(st.batch, 1)
					return 1.3 * st.poolFrac * (1 + 4*math.Sqrt(amp/b))
				}
				want := math.Max(bisect(p.history0, maxH, itlR, target), bisect(p.history0, maxH, kvR, 2.6))
				feasible := bisect(p.history0, maxH, use, maxUse)
				if want > feasible && p.memUtil < 0.95 {
					p.setPoolTokens(p.poolTokensAt(0.95) * p.pert.kvCapacity)
					feasible = bisect(p.history0, maxH, use, maxUse)
				}
				h = math.Min(want, feasible)
				u = shorter(h)
				inc := p.predict(grown(h, u))
				if inc.ok && kvR(h) >= 2.4 && inc.itl >= 1.2*base.itl {
					f.score = score(base, inc)
					break
				}
				p.load *= 0.85
				p.rate = p.load * p.capRep * float64(p.replicas)
			}
			f.knob, f.knob2 = h, u
		},
		apply: func(p *plan, f *faultState, e *env, _, w float64) {
			e.sc.history = p.history0 + (f.knob-p.history0)*w
			e.sc.prompt *= 1 + (f.knob2-1)*w
		},
	},
	{
		name:    "gpu_throttle",
		causes:  []string{"gpu_throttling"},
		summary: "GPU clocks fall (thermal, power cap, hw slowdown); magnitude sets the clock factor from an ITL rise of 1.35x to 3.2x",
		loads:   [2]float64{0.2, 0.7}, order: 7,
		shape: func(p *plan, f *faultState, g *rng) {
			f.reason = g.choose("hw_thermal_slowdown", "sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_power_brake")
		},
		tune: func(p *plan, f *faultState, _ *rng) {
			base := p.predict(p.baseEnv())
			itlR := func(drop float64) float64 {
				st := p.predict(p.with(func(e *env) { e.clock = 1 - drop }))
				if !st.ok {
					return 1e9
				}
				return st.itl / base.itl
			}
			drop := bisect(0, 0.8, itlR, geo(1.35, 3.2, p.m))
			f.knob = clamp(1-drop, 0.2, 0.92)
			f.score = score(base, p.predict(p.with(func(e *env) { e.clock = f.knob })))
		},
		apply: func(_ *plan, f *faultState, e *env, _, w float64) { e.clock = 1 - (1-f.knob)*w },
	},
	{
		name:    "prefix_cache_loss",
		causes:  []string{"prefix_cache_regression"},
		summary: "the shared system prompt stops matching the prefix cache at the same prompts; magnitude sets the share of matches lost",
		loads:   [2]float64{0.3, 0.6}, order: 4,
		shape: func(p *plan, f *faultState, g *rng) {
			// a large shared system prompt (RAG template, few-shot examples)
			p.sys = math.Max(p.sys, math.Round(p.uniq.mean*g.uniform(1.5, 4)))
			p.match = math.Max(p.match, g.uniform(0.8, 0.95))
			p.fitPrompts(0.6)
		},
		tune: func(p *plan, f *faultState, _ *rng) {
			base := p.predict(p.baseEnv())
			sc := func(loss float64) float64 {
				return score(base, p.predict(p.with(func(e *env) { e.match *= 1 - loss })))
			}
			l0 := bisect(0, 1, sc, 1)
			f.knob = lin(l0, 1, p.m)
			f.score = sc(f.knob)
		},
		apply: func(p *plan, f *faultState, e *env, _, w float64) { e.match *= 1 - f.knob*w },
	},
	{
		name:    "error_burst",
		causes:  []string{"request_errors"},
		summary: "requests fail server-side (finished_reason=\"error\", HTTP 5xx); magnitude sets the share from 3% to 25%",
		loads:   [2]float64{0.2, 0.8}, order: 8,
		shape: func(p *plan, f *faultState, _ *rng) {
			if p.names == "v0" && p.opts.Names == "" {
				p.names, p.era = "v1", "0.13" // drawn, not asked for: keep the error series
			}
			if p.names == "v0" {
				p.fam.http = true // V0 has no "error" finished_reason: the 5xx are the only trace
			} else if p.era == "0.10" {
				p.era = "0.11"
			}
		},
		tune: func(p *plan, f *faultState, _ *rng) {
			f.knob = lin(0.03, 0.25, p.m)
			f.score = f.knob / 0.03
		},
		apply: func(_ *plan, f *faultState, e *env, _, w float64) { e.errFrac = f.knob * w },
	},
	{
		name:    "router_skew",
		causes:  []string{"load_imbalance"},
		summary: "the router sends a disproportionate share to one replica; magnitude sets that replica's load",
		loads:   [2]float64{0.25, 0.55}, minReplicas: 3, order: 1,
		tune: func(p *plan, f *faultState, _ *rng) {
			n := float64(p.replicas)
			sc := func(hot float64) float64 {
				base := p.predict(p.baseEnv())
				return score(base, p.predict(p.with(func(e *env) { e.hotShare = hot / (n * p.load) })))
			}
			h0 := bisect(p.load, 2, sc, 1)
			hot := lin(h0, math.Max(1.6, h0*1.1), p.m)
			if s := hot / (n * p.load); s > 0.85 {
				p.load = hot / (0.85 * n)
				p.rate = p.load * p.capRep * n
			}
			f.knob = hot / (n * p.load)
			f.knob2 = hot
			f.score = sc(hot)
		},
		apply: func(p *plan, f *faultState, e *env, _, w float64) {
			n := float64(p.replicas)
			e.hotShare = 1/n + (f.knob-1/n)*w
		},
	},
	{
		name:    "frontend_delay",
		causes:  []string{"outside_engine"},
		summary: "time before the engine queue (API server, tokenizer) grows; magnitude sets the added delay from ~0.9x to ~25x the baseline TTFT",
		loads:   [2]float64{0.2, 0.8}, order: 9,
		tune: func(p *plan, f *faultState, _ *rng) {
			base := p.predict(p.baseEnv())
			f.knob = base.ttft * geo(0.9, 25, p.m)
			f.score = ratioScore((base.ttft+f.knob)/base.ttft, alarmTTFT)
		},
		apply: func(_ *plan, f *faultState, e *env, _, w float64) { e.outside += f.knob * w },
	},

	// hard negatives
	{
		name:    "healthy",
		summary: "steady traffic with noise, a slow drift and short bursts within capacity",
		hard:    true, loads: [2]float64{0.2, 0.6},
		shape: func(p *plan, f *faultState, g *rng) {
			p.driftAmp = g.uniform(0.02, 0.04)
			for i, n := 0, g.intn(4); i < n; i++ {
				mul := math.Min(g.uniform(1.15, 1.35), 0.95/math.Max(p.load, 0.1))
				p.bursts = append(p.bursts, burst{start: g.uniform(600, p.at-30), dur: g.uniform(5, 15), mul: math.Max(mul, 1)})
			}
		},
		apply: func(*plan, *faultState, *env, float64, float64) {},
	},
	{
		name:    "healthy_busy",
		summary: "steady high load (0.6-0.85 of capacity), unchanged between the windows",
		hard:    true, loads: [2]float64{0.6, 0.85},
		shape: func(p *plan, f *faultState, g *rng) {
			p.driftAmp = g.uniform(0, 0.015)
			p.noiseSig = 0.03
		},
		apply: func(*plan, *faultState, *env, float64, float64) {},
	},
	{
		name:    "healthy_burst",
		summary: "one 10-30 s burst past capacity early in the incident window that drains before its last 2 minutes",
		hard:    true, loads: [2]float64{0.25, 0.5},
		tune: func(p *plan, f *faultState, g *rng) {
			f.start = p.at - windowLen + g.uniform(20, 60)
			f.dur = g.uniform(10, 30)
			f.knob = g.uniform(1.0, 1.2) / p.load
			// the window's mean ITL sees the burst's slower steps for its
			// length plus the time its requests keep decoding
			base := p.predict(p.baseEnv())
			bump := func() float64 {
				st := p.predict(p.with(func(e *env) { e.rate *= f.knob }))
				r, gain := 6.0, 3.0
				if st.ok {
					r, gain = math.Max(st.itl/base.itl, st.ttft/base.ttft), st.batch/base.batch
				}
				dec := p.base.meanOut(scales{out: 1}) * math.Min(st.tau, 1)
				return (r - 1) * gain * (f.dur + dec) / windowLen
			}
			for i := 0; i < 40 && bump() > 0.12; i++ {
				if f.dur > 12 {
					f.dur *= 0.85
				} else if f.knob*p.load > 1.0 {
					f.knob = math.Max(1.0/p.load, f.knob*0.97)
				} else {
					break
				}
			}
			shrink := math.Pow(0.7, float64(p.attempt))
			f.dur = math.Max(10, f.dur*shrink)
			f.knob = math.Max(1, 1+(f.knob-1)*shrink)
		},
		apply: func(_ *plan, f *faultState, e *env, t, _ float64) {
			edge := 2.0
			x := smoothstep((t-f.start)/edge) * (1 - smoothstep((t-f.start-f.dur)/edge))
			e.rate *= 1 + (f.knob-1)*x
		},
	},
	{
		name:    "diurnal_growth",
		summary: "arrivals rise 15-35% over the hour before and into the incident window, staying well within capacity",
		hard:    true, loads: [2]float64{0.3, 0.6},
		tune: func(p *plan, f *faultState, g *rng) {
			f.knob = g.uniform(0.15, 0.35)
			for i := 0; i < 40; i++ {
				base := p.predict(p.baseEnv())
				inc := p.predict(p.with(func(e *env) { e.rate *= 1 + f.knob }))
				if p.load*(1+f.knob) <= 0.85 && inc.ok && ratioOK(base, inc, 1.12) {
					break
				}
				if p.load > 0.15 {
					p.load = math.Max(0.15, p.load*0.9)
					p.rate = p.load * p.capRep * float64(p.replicas)
				} else if f.knob > 0.15 {
					f.knob = math.Max(0.15, f.knob-0.02)
				}
			}
		},
		apply: func(p *plan, f *faultState, e *env, t, _ float64) {
			e.rate *= 1 + f.knob*clamp((t-(p.at-baselineBy))/baselineBy, 0, 1)
		},
	},
	{
		name:    "new_tenant",
		summary: "a tenant adds 5-15% more requests with 2-4x longer prompts, still within capacity",
		hard:    true, loads: [2]float64{0.3, 0.6},
		shape: func(p *plan, f *faultState, g *rng) {
			p.tenantMul = g.uniform(2, 4)
			for p.tenantMul > 2 && p.sys+p.uniq.quantile(0.9)*p.tenantMul > 0.9*p.lim.budget {
				p.tenantMul -= 0.25
			}
			p.rebuildGroups()
		},
		tune: func(p *plan, f *faultState, g *rng) {
			f.knob = g.uniform(0.05, 0.15)
			// longer prompts take longer to prefill at any load: shorten
			// them first, then the tenant's share, then the load
			for i := 0; i < 40; i++ {
				base := p.predict(p.baseEnv())
				inc := p.predict(p.with(func(e *env) { e.tenantRate = f.knob * e.rate }))
				if inc.ok && ratioOK(base, inc, 1.12) {
					break
				}
				switch {
				case p.tenantMul > 2:
					p.tenantMul = math.Max(2, p.tenantMul-0.25)
					p.rebuildGroups()
				case f.knob > 0.05:
					f.knob = math.Max(0.05, f.knob*0.85)
				case p.load > 0.2:
					p.load = math.Max(0.2, p.load*0.9)
					p.rate = p.load * p.capRep * float64(p.replicas)
				}
			}
			f.knob2 = p.tenantMul
		},
		apply: func(_ *plan, f *faultState, e *env, _, w float64) { e.tenantRate = f.knob * e.rate * w },
	},
}

// ratioOK reports whether the predicted TTFT, ITL and e2e stay within lim.
func ratioOK(base, inc steadyState, lim float64) bool {
	return inc.ttft <= lim*base.ttft && inc.itl <= lim*base.itl
}

// longLength is a long prompt of mul token budgets, kept inside
// max_model_len and a sixth of the pool.
func longLength(p *plan, mul float64) float64 {
	l := math.Max(mul, 1.2) * p.lim.budget
	l = math.Min(l, float64(p.maxLen)/2)
	l = math.Min(l, p.lim.poolTokens/6)
	return math.Round(l)
}
