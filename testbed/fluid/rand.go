package fluid

import (
	"math"
	"math/rand/v2"
)

// rng is the model's only source of randomness: one PCG stream per purpose,
// so that the instance draw and the run's noise never shift each other.
type rng struct{ r *rand.Rand }

func newRNG(seed int64, stream uint64) *rng {
	return &rng{rand.New(rand.NewPCG(uint64(seed)*0x9E3779B97F4A7C15+stream, stream^0xD1B54A32D192ED03))}
}

// float returns a uniform value in [0, 1).
func (g *rng) float() float64 { return g.r.Float64() }

// uniform returns a uniform value in [lo, hi).
func (g *rng) uniform(lo, hi float64) float64 { return lo + (hi-lo)*g.r.Float64() }

// intn returns a uniform integer in [0, n).
func (g *rng) intn(n int) int { return g.r.IntN(n) }

// normal returns a standard normal value.
func (g *rng) normal() float64 { return g.r.NormFloat64() }

// bernoulli reports true with probability p.
func (g *rng) bernoulli(p float64) bool { return g.r.Float64() < p }

// poisson draws a Poisson count: inversion for small means, a rounded
// normal for large ones (the error there is far below the model's).
func (g *rng) poisson(mean float64) int {
	if mean <= 0 {
		return 0
	}
	if mean > 40 {
		n := math.Round(mean + math.Sqrt(mean)*g.r.NormFloat64())
		if n < 0 {
			return 0
		}
		return int(n)
	}
	l := math.Exp(-mean)
	k, p := 0, g.r.Float64()
	for p > l {
		k++
		p *= g.r.Float64()
	}
	return k
}

// pick returns an index drawn with the given cumulative weights (last = 1).
func (g *rng) pick(cum []float64) int {
	u := g.r.Float64()
	for i, c := range cum {
		if u < c {
			return i
		}
	}
	return len(cum) - 1
}

// choose returns one of the strings uniformly.
func (g *rng) choose(opts ...string) string { return opts[g.r.IntN(len(opts))] }

// normCDF is the standard normal CDF.
func normCDF(z float64) float64 { return 0.5 * math.Erfc(-z/math.Sqrt2) }

// normQuantile is the inverse of normCDF.
func normQuantile(q float64) float64 { return math.Sqrt2 * math.Erfinv(2*q-1) }

func clamp(x, lo, hi float64) float64 { return math.Max(lo, math.Min(hi, x)) }

// smoothstep ramps 0→1 over [0, 1] with zero slope at both ends.
func smoothstep(x float64) float64 {
	x = clamp(x, 0, 1)
	return x * x * (3 - 2*x)
}

// round3 keeps three decimals, for parameters written to truth.yaml.
func round3(x float64) float64 { return math.Round(x*1000) / 1000 }
