package fluid

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// hardLimit is how far a hard negative's latency means may move.
const hardLimit = 1.25

// ratio is incident over baseline (1 when both are zero).
func ratio(i, b float64) float64 {
	if b == 0 {
		if i == 0 {
			return 1
		}
		return 1e9
	}
	return i / b
}

// checker collects failed conditions.
type checker struct{ fails []string }

func (c *checker) need(ok bool, format string, args ...any) {
	if !ok {
		c.fails = append(c.fails, fmt.Sprintf(format, args...))
	}
}

func (c *checker) err() error {
	if len(c.fails) == 0 {
		return nil
	}
	return errors.New(strings.Join(c.fails, "; "))
}

// verify checks that the truth's mechanism shows in the model's own
// measurements. A single fault gets its full check; each fault of a compound
// only its cause's core (the other fault may move the rest).
func verify(b *Bundle) error {
	in := b.in
	o := b.Truth.Observed
	c := &checker{}
	single := len(in.p.faults) == 1
	for _, f := range in.p.faults {
		checkFault(c, f, o.Baseline, o.Incident, in, single)
	}
	return c.err()
}

func checkFault(c *checker, f *faultState, bw, iw Window, in *internals, strict bool) {
	r := func(get func(w Window) float64) float64 { return ratio(get(iw), get(bw)) }
	ttft := r(func(w Window) float64 { return w.TTFTMean })
	itl := r(func(w Window) float64 { return w.ITLMean })
	e2e := r(func(w Window) float64 { return w.E2EMean })
	arr := r(func(w Window) float64 { return w.ArrivalRate })
	pf := r(func(w Window) float64 { return w.PrefillTokensPerStep })
	kv := r(func(w Window) float64 { return w.KVTokensPerRunning })
	visible := ttft >= 1.3 || itl >= 1.2 || e2e >= 1.3
	// steady arrivals, up to Poisson noise at low rates
	tol := 0.15 + 3/math.Sqrt(math.Max(1, bw.ArrivalRate*windowLen))
	steady := math.Abs(arr-1) <= tol
	name := f.def.name
	switch name {
	case "arrival_surge":
		c.need(arr >= 1.1, "%s: arrivals x%.2f, want >= 1.1", name, arr)
		if strict {
			c.need(visible, "%s: latency not visible (ttft x%.2f, itl x%.2f)", name, ttft, itl)
		}
	case "capacity_loss":
		c.need(in.stopped >= 1, "%s: no replica stopped", name)
		if strict {
			c.need(steady, "%s: arrivals x%.2f, want steady", name, arr)
			c.need(visible, "%s: latency not visible (ttft x%.2f, itl x%.2f)", name, ttft, itl)
		}
	case "long_prompt_burst":
		c.need(in.grpArr[1][1] >= 5 && in.grpArr[1][0] == 0, "%s: %.0f long prompts in the window (baseline %.0f)",
			name, in.grpArr[1][1], in.grpArr[1][0])
		if strict {
			c.need(pf >= 1.1, "%s: prefill tokens/step x%.2f, want >= 1.1", name, pf)
			c.need(steady, "%s: arrivals x%.2f, want steady", name, arr)
			c.need(visible, "%s: latency not visible (ttft x%.2f, itl x%.2f)", name, ttft, itl)
		}
	case "prompt_shift":
		c.need(in.p.promptQuantile(0.9, f.knob) > in.p.lim.budget, "%s: p90 prompt within the budget", name)
		if strict {
			c.need(pf >= 1.3, "%s: prefill tokens/step x%.2f, want >= 1.3", name, pf)
			c.need(steady, "%s: arrivals x%.2f, want steady", name, arr)
			c.need(ttft >= 1.3, "%s: ttft x%.2f, want >= 1.3", name, ttft)
		}
	case "kv_pressure":
		c.need(iw.PreemptionRate >= 0.02 && iw.PreemptionRate > 5*bw.PreemptionRate,
			"%s: preemptions %.3f/s (baseline %.3f/s), want the pool to preempt", name, iw.PreemptionRate, bw.PreemptionRate)
		if strict {
			c.need(steady, "%s: arrivals x%.2f, want steady", name, arr)
			c.need(visible, "%s: latency not visible (ttft x%.2f, itl x%.2f)", name, ttft, itl)
		}
	case "context_growth":
		c.need(kv >= 2, "%s: KV tokens per running x%.2f, want >= 2", name, kv)
		if strict {
			c.need(pf < 1.5, "%s: prefill tokens/step x%.2f, want < 1.5", name, pf)
			c.need(itl >= 1.1, "%s: itl x%.2f, want up", name, itl)
			c.need(iw.PreemptionRate <= 0.02*iw.ArrivalRate, "%s: preemptions %.3f/s, want little or none", name, iw.PreemptionRate)
			c.need(steady, "%s: arrivals x%.2f, want steady", name, arr)
		}
	case "gpu_throttle":
		c.need(iw.ClockFactor < 0.97*bw.ClockFactor, "%s: clock factor %.3f, want below %.3f", name, iw.ClockFactor, bw.ClockFactor)
		if strict {
			c.need(itl >= 1.15, "%s: itl x%.2f, want >= 1.15", name, itl)
		}
	case "prefix_cache_loss":
		c.need(pf >= 1.2, "%s: prefill tokens/step x%.2f, want >= 1.2", name, pf)
		if strict {
			c.need(steady, "%s: arrivals x%.2f, want steady", name, arr)
			c.need(ttft >= 1.2, "%s: ttft x%.2f, want >= 1.2", name, ttft)
		}
	case "error_burst":
		c.need(iw.ErrorRate >= 0.02 && bw.ErrorRate < 0.005, "%s: error rate %.3f (baseline %.3f)", name, iw.ErrorRate, bw.ErrorRate)
	case "router_skew":
		hot := in.rep[0]
		hr := ratio(hot[1].TTFTMean, hot[0].TTFTMean)
		hi := ratio(hot[1].ITLMean, hot[0].ITLMean)
		share := in.repArr[0][1] / maxf(1, sum(in.repArr, 1))
		c.need(share > 1.3/float64(len(in.repArr)), "%s: hot replica share %.2f", name, share)
		c.need(hr >= 1.3 || hi >= 1.2, "%s: hot replica ttft x%.2f itl x%.2f, want visible", name, hr, hi)
		if strict {
			c.need(steady, "%s: arrivals x%.2f, want steady", name, arr)
		}
	case "frontend_delay":
		out := r(func(w Window) float64 { return w.OutsideMean })
		c.need(out >= 2 && iw.OutsideMean-bw.OutsideMean >= 0.5*bw.TTFTMean,
			"%s: outside x%.2f (+%.3fs on a %.3fs TTFT)", name, out, iw.OutsideMean-bw.OutsideMean, bw.TTFTMean)
	default: // hard negatives
		c.need(ttft <= hardLimit && itl <= hardLimit && e2e <= hardLimit,
			"%s: latency moved (ttft x%.3f, itl x%.3f, e2e x%.3f), want within x%.2f", name, ttft, itl, e2e, hardLimit)
		c.need(iw.ErrorRate < 0.005 && iw.PreemptionRate <= bw.PreemptionRate+0.01, "%s: errors or preemption appeared", name)
		if name == "healthy_burst" {
			c.need(in.lateWait <= maxf(2*in.baseWait, 4), "%s: queue of %.0f in the window's last 2 minutes", name, in.lateWait)
		}
	}
}

func maxf(a, b float64) float64 {
	if a > b {
		return a
	}
	return b
}

func sum(x [][2]float64, w int) float64 {
	s := 0.0
	for _, v := range x {
		s += v[w]
	}
	return s
}
