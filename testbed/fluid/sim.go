package fluid

import (
	"context"
	"math"
)

// sim is one run of a plan: the fleet, its router and its recorders.
type sim struct {
	p       *plan
	reps    []*replica
	obs     *observer
	reg     *registry
	g       *rng // arrivals and routing
	noise   *rng // scrape noise
	ar      float64
	keyed   []*cohort // this tick's cohorts by (replica, group, class, outcome)
	touched []int
	// lateWait is the fleet's largest waiting queue in the incident
	// window's last two minutes; baseWait the same over the baseline window.
	lateWait, baseWait float64
	stopped            int
}

func newSim(p *plan) *sim {
	s := &sim{p: p, g: newRNG(p.drawSeed, 10), noise: newRNG(p.drawSeed, 11)}
	s.obs = newObserver(p)
	for i := 0; i < p.replicas; i++ {
		c := p.cost
		c.overhead *= p.jitter[i]
		c.bw /= p.jitter[i]
		r := &replica{idx: i, cost: c, lim: p.lim, p: p, g: newRNG(p.drawSeed, 100+uint64(i)), obs: s.obs}
		r.tel = newRepTel(p, newRNG(p.drawSeed, 200+uint64(i)))
		r.lastEnv = p.baseEnv()
		s.reps = append(s.reps, r)
	}
	s.reg = s.buildRegistry()
	s.keyed = make([]*cohort, p.replicas*3*len(promptBins)*len(outputBins)*numOutcomes)
	return s
}

// keep reports whether a scrape at time t is written (Trim keeps the two
// windows and a look-back before each).
func (s *sim) keep(t float64) bool {
	if !s.p.opts.Trim {
		return true
	}
	inc0 := s.p.at - windowLen
	base0 := inc0 - baselineBy
	return (t >= base0-lookback && t <= base0+windowLen) || (t >= inc0-lookback && t <= s.p.at)
}

// run advances the fleet from the engine start to the end of the incident
// window.
func (s *sim) run(ctx context.Context) error {
	p := s.p
	nTicks := int(math.Round(p.at / tickDT))
	every := int(math.Round(p.scrape / tickDT))
	live := func(i int) bool { return !s.reps[i].gone }
	expect := 1
	for k := every; k <= nTicks; k += every {
		if s.keep(float64(k) * tickDT) {
			expect++
		}
	}
	for k := 0; k < nTicks; k++ {
		if k%4000 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		t := float64(k) * tickDT
		e := s.envAt(t)
		for i, r := range s.reps {
			stop := i >= p.replicas-e.down
			if !stop {
				continue
			}
			if s.capacityMode() == "gone" && !r.gone {
				r.stop()
				s.stopped++
			} else if !r.down && !r.gone {
				r.down = true
				s.stopped++
			}
		}
		s.arrive(t, e)
		waiting := 0
		for _, r := range s.reps {
			if r.gone {
				continue
			}
			r.tick(t, tickDT, e)
			s.obs.tick(r, t+tickDT/2)
			waiting += r.nWait
		}
		end := t + tickDT
		if end > p.at-recentTail && end <= p.at {
			s.lateWait = math.Max(s.lateWait, float64(waiting))
		}
		if w := s.obs.win(t + tickDT/2); w == 0 {
			s.baseWait = math.Max(s.baseWait, float64(waiting))
		}
		if s.keep(end) {
			s.reg.snapshot((k+1)%every, int64(math.Round((end+epochUnix)*1000)), expect, live)
		}
	}
	return nil
}

func (s *sim) capacityMode() string {
	for _, f := range s.p.faults {
		if f.def.name == "capacity_loss" {
			return f.mode
		}
	}
	return "gone"
}

// envAt is the exogenous state at t: the baseline with its noise, drift and
// bursts, then every fault at its onset ramp.
func (s *sim) envAt(t float64) env {
	p := s.p
	e := p.baseEnv()
	a := math.Exp(-tickDT / 20)
	s.ar = a*s.ar + p.noiseSig*math.Sqrt(1-a*a)*s.g.normal()
	mul := math.Exp(s.ar-p.noiseSig*p.noiseSig/2) * (1 + p.driftAmp*math.Sin(2*math.Pi*t/p.driftPer+p.driftPh))
	for _, b := range p.bursts {
		x := smoothstep((t-b.start)/1.5) * (1 - smoothstep((t-b.start-b.dur)/1.5))
		mul *= 1 + (b.mul-1)*x
	}
	e.rate *= mul
	w := 0.0
	if t >= onsetAt {
		w = math.Max(smoothstep((t-onsetAt)/p.ramp), 1e-9)
	}
	for _, f := range p.faults {
		f.def.apply(p, f, &e, t, w)
	}
	return e
}

// shares returns the router's cumulative split of arrivals over replicas.
func (s *sim) shares(e env, cum []float64) []float64 {
	cum = cum[:0]
	w := make([]float64, len(s.reps))
	alive := 0
	for i, r := range s.reps {
		if !r.gone && !r.down {
			alive++
			w[i] = 1
		}
	}
	switch {
	case alive == 0:
		w[0] = 1
	case e.hotShare > 0 && w[0] > 0 && alive > 1:
		rest := (1 - e.hotShare) / float64(alive-1)
		for i := range w {
			if w[i] > 0 {
				w[i] = rest
			}
		}
		w[0] = e.hotShare
	case s.p.router == "least_loaded":
		mean := 0.0
		for i, r := range s.reps {
			if w[i] > 0 {
				mean += float64(r.nRun + r.nWait)
			}
		}
		mean /= float64(alive)
		for i, r := range s.reps {
			if w[i] > 0 {
				w[i] = math.Exp(-1.5 * (float64(r.nRun+r.nWait) - mean) / (mean + 4))
			}
		}
	}
	total := 0.0
	for _, x := range w {
		total += x
	}
	acc := 0.0
	for _, x := range w {
		acc += x / total
		cum = append(cum, acc)
	}
	cum[len(cum)-1] = 1
	return cum
}

// arrive draws the tick's arrivals, routes them and groups them into
// cohorts in the replicas' API servers.
func (s *sim) arrive(t float64, e env) {
	p := s.p
	cum := s.shares(e, make([]float64, 0, len(s.reps)))
	type src struct {
		g    *group
		rate float64
		sc   scales
	}
	srcs := [3]src{
		{&p.base, e.rate, e.sc},
		{&p.long, e.longRate, scales{prompt: 1, out: e.sc.out, history: e.sc.history}},
		{&p.tenant, e.tenantRate, scales{prompt: 1, out: e.sc.out, history: e.sc.history}},
	}
	for _, k := range s.touched {
		s.keyed[k] = nil
	}
	s.touched = s.touched[:0]
	nCls := len(promptBins) * len(outputBins)
	for gi, sr := range srcs {
		if sr.rate <= 0 || len(sr.g.classes) == 0 {
			continue
		}
		n := s.g.poisson(sr.rate * tickDT)
		s.obs.arrivals(t, gi, n)
		for a := 0; a < n; a++ {
			ri := s.g.pick(cum)
			r := s.reps[ri]
			if r.gone {
				continue
			}
			s.obs.repArrival(ri, t)
			if s.g.bernoulli(0.002) {
				r.tel.http[r.tel.handler()][1]++ // rejected by request validation
				continue
			}
			ci := s.g.pick(sr.g.cum)
			cl := &sr.g.classes[ci]
			u := s.g.float()
			oc := outStop
			switch {
			case u < e.errFrac:
				oc = outError
			case u < e.errFrac+p.abortP:
				oc = outAbort
			case s.g.float() < cl.lengthP:
				oc = outLength
			}
			key := ((ri*3+gi)*nCls+ci)*numOutcomes + oc
			if c := s.keyed[key]; c != nil {
				c.n++
				continue
			}
			maxTok := sr.g.maxTok * sr.sc.out
			c := &cohort{n: 1, outcome: oc, maxTok: maxTok}
			c.prompt = math.Round(cl.unique*sr.sc.prompt + sr.g.shared + sr.sc.history)
			c.matched = sr.g.shared * e.match
			c.hist = sr.sc.history
			switch oc {
			case outLength:
				c.out = maxTok
			case outAbort:
				c.out = math.Max(1, 0.3*cl.out*sr.sc.out)
			default:
				c.out = math.Max(1, math.Min(cl.out*sr.sc.out, maxTok))
			}
			c.arrive = t + s.g.float()*tickDT
			delay := (p.outsideBase+e.outside)*math.Exp(0.25*s.g.normal()-0.03) + 2e-6*c.prompt
			c.ready = c.arrive + delay
			s.keyed[key] = c
			s.touched = append(s.touched, key)
			r.pipe = append(r.pipe, c)
		}
	}
}
