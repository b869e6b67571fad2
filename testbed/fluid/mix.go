package fluid

import "math"

// The request mix is a grid of classes: quantile bins of a lognormal unique
// prompt part times quantile bins of a lognormal output length. Each class
// carries the bin's conditional mean, so the grid reproduces the
// distributions' means and tails without per-request draws.
var (
	promptBins = []float64{0.25, 0.25, 0.2, 0.15, 0.1, 0.05}
	outputBins = []float64{0.35, 0.35, 0.2, 0.1}
)

// reqClass is one cell of the grid (before the run's time-varying scales).
type reqClass struct {
	w       float64 // share of its group's arrivals
	unique  float64 // prompt tokens unique to the request
	out     float64 // output tokens when it stops on its own
	lengthP float64 // share of the class that runs into max_tokens
}

// group is a population of requests sharing a mix (the base traffic, a
// stream of very long prompts, a new tenant).
type group struct {
	classes []reqClass
	cum     []float64
	shared  float64 // system-prompt tokens (a shared, cacheable prefix)
	maxTok  float64 // max_tokens the clients send
}

// lognormal is a distribution given by its mean and log-sigma.
type lognormal struct{ mean, sigma float64 }

func (l lognormal) mu() float64 { return math.Log(l.mean) - l.sigma*l.sigma/2 }

// quantile returns the q-quantile.
func (l lognormal) quantile(q float64) float64 {
	return math.Exp(l.mu() + l.sigma*normQuantile(q))
}

// binMeans returns the conditional mean of each quantile bin, and for each
// bin the share above cap and the mean below it (cap <= 0: no cap).
func (l lognormal) binMeans(bins []float64, cap float64) (means, above, below []float64) {
	mu, s := l.mu(), l.sigma
	partial := func(z float64) float64 { return l.mean * normCDF(z-s) } // E[X; X<x] with z=(ln x-mu)/s
	q0 := 0.0
	zc := math.Inf(1)
	if cap > 0 {
		zc = (math.Log(cap) - mu) / s
	}
	for _, w := range bins {
		q1 := math.Min(q0+w, 1)
		za, zb := math.Inf(-1), math.Inf(1)
		if q0 > 0 {
			za = normQuantile(q0)
		}
		if q1 < 1 {
			zb = normQuantile(q1)
		}
		m := (partial(zb) - partial(za)) / (q1 - q0)
		means = append(means, m)
		// the part of the bin below the cap
		zt := math.Min(zb, zc)
		var ab, be float64
		if zt <= za {
			ab, be = 1, l.quantile(q0)
		} else {
			massBelow := normCDF(zt) - normCDF(za)
			ab = 1 - massBelow/(q1-q0)
			be = (partial(zt) - partial(za)) / massBelow
		}
		above = append(above, ab)
		below = append(below, be)
		q0 = q1
	}
	return means, above, below
}

// newGroup builds a group's grid.
func newGroup(unique, out lognormal, shared, maxTok float64) group {
	g := group{shared: shared, maxTok: maxTok}
	pm, _, _ := unique.binMeans(promptBins, 0)
	_, above, below := out.binMeans(outputBins, maxTok)
	acc := 0.0
	for i, pw := range promptBins {
		for j, ow := range outputBins {
			c := reqClass{w: pw * ow, unique: pm[i], out: math.Max(1, below[j]), lengthP: above[j]}
			g.classes = append(g.classes, c)
			acc += c.w
			g.cum = append(g.cum, acc)
		}
	}
	g.cum[len(g.cum)-1] = 1
	return g
}

// scales are the run's time-varying multipliers on a group's mix.
type scales struct {
	prompt  float64 // on unique prompt tokens
	out     float64 // on output tokens and max_tokens
	history float64 // cached conversation history added to each prompt
}

// meanOut returns the mean output tokens of g under sc.
func (g *group) meanOut(sc scales) float64 {
	s := 0.0
	for _, c := range g.classes {
		s += c.w * (c.lengthP*g.maxTok + (1-c.lengthP)*c.out) * sc.out
	}
	return s
}

// meanPrompt returns the mean prompt tokens of g under sc.
func (g *group) meanPrompt(sc scales) float64 {
	s := 0.0
	for _, c := range g.classes {
		s += c.w * c.unique * sc.prompt
	}
	return s + g.shared + sc.history
}
