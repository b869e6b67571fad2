package fluid

import "math"

// costModel is the engine's step-cost function: the wall time of one engine
// iteration as a function of the decode batch, the KV tokens the batch reads,
// the prefill tokens scheduled into the step and the clock factor.
//
//	mem   = (weights + kvBytes·K) / bw · f^-memExp      streaming weights and KV
//	comp  = (P + B) · flopsPerToken / flops · f^-1      matmul work of every token
//	gpu   = mem + comp − overlap·mem·comp/(mem+comp)    partial overlap of the two
//	step  = overhead · f^-ovhExp + perSeq·B + gpu
//
// The overlap term hides up to half of the smaller part when both are large,
// so the curve is additive where one part dominates and sub-additive where
// they meet: the step grows with every driver at once, never as a max().
type costModel struct {
	overhead float64 // s per step: scheduler, launches, TP all-reduce latency
	perSeq   float64 // s per decoding sequence: sampling, detokenisation, bookkeeping
	weights  float64 // bytes of weights streamed per step, per GPU
	kvBytes  float64 // KV bytes per token, per GPU
	bw       float64 // effective HBM bytes/s
	fpt      float64 // FLOPs per token, per GPU
	flops    float64 // effective FLOP/s
	overlap  float64 // 0..1
	memExp   float64 // how strongly memory time follows the SM clock
	ovhExp   float64 // how strongly the per-step overhead follows it
}

// step returns the seconds one engine step takes.
func (c *costModel) step(b, k, p, f float64) float64 {
	if f <= 0 {
		f = 1
	}
	mem := (c.weights + c.kvBytes*k) / c.bw * math.Pow(f, -c.memExp)
	comp := (p + b) * c.fpt / c.flops / f
	gpu := mem + comp
	if gpu > 0 {
		gpu -= c.overlap * mem * comp / (mem + comp)
	}
	return c.overhead*math.Pow(f, -c.ovhExp) + c.perSeq*b + gpu
}

// newCostModel derives the coefficients from the hardware and model, each
// scaled by its perturbation factor (1 = nominal).
func newCostModel(m modelSpec, g gpuClass, tp int, pert perturbation) costModel {
	ovh := 3.2e-3
	if tp > 1 {
		ovh += float64(m.layers) * 2 * 7e-6 // two all-reduces per layer
	}
	return costModel{
		overhead: ovh * pert.overhead,
		perSeq:   18e-6 * pert.overhead,
		weights:  m.params * 2 / float64(tp),
		kvBytes:  float64(m.layers*m.kvHeads*m.headDim*2*2) / float64(tp),
		bw:       g.hbmBW * 0.8 * pert.bandwidth,
		fpt:      2 * m.params / float64(tp),
		flops:    g.flops * 0.5 * pert.prefill,
		overlap:  0.5,
		memExp:   0.6,
		ovhExp:   0.3,
	}
}

// perturbation scales the cost coefficients and the KV capacity (wide draws
// move each by up to ±50%).
type perturbation struct {
	prefill, overhead, bandwidth, kvCapacity float64
}

// demand is a replica's steady load, for the predictor: arrival rate and the
// per-request means of the request mix.
type demand struct {
	lam     float64 // requests/s
	out     float64 // output tokens per request
	ctx     float64 // KV tokens a decoding sequence reads per step (prompt + out/2)
	kvPriv  float64 // KV tokens a running request holds privately (pool)
	outside float64 // s before the engine queue
	// classes are the computed prompt tokens per request, with weights
	// summing to 1, for the prefill service-time moments.
	classes []demandClass
}

type demandClass struct{ w, pc float64 }

func (d demand) meanPC() float64 {
	s := 0.0
	for _, c := range d.classes {
		s += c.w * c.pc
	}
	return s
}

// limits are a replica's scheduler and memory bounds.
type limits struct {
	budget     float64 // max_num_batched_tokens
	maxSeqs    float64
	poolTokens float64 // KV pool in tokens
}

// steadyState is the predictor's answer for one demand.
type steadyState struct {
	ok                   bool // a stable fixed point within the limits
	tau                  float64
	batch, kv, prefill   float64 // B, K, prefill tokens per step
	ttft, itl, queueWait float64
	poolFrac             float64
}

// steady solves the fluid fixed point of continuous batching. The engine
// runs one prefill step per request (a prompt past the budget takes
// several full-budget steps) and decode-only steps in between, so per second
//
//	busy  = λ·E[s]                      time in prefill steps (s: their cost)
//	steps = λ·E[n] + (1 − busy)/τ_dec   n: prefill steps per request
//	τ̄    = 1/steps,  B = λ·out·τ̄,  K = B·ctx
//
// iterated from the empty engine (monotone: it converges to the smallest
// fixed point if one exists). TTFT adds the prefill server's M/G/1 wait
// (Pollaczek–Khinchine) over the prompt classes.
func (c *costModel) steady(d demand, f float64, lim limits) steadyState {
	pc := d.meanPC()
	tau := c.step(0, 0, 0, f)
	conv := false
	var es, es2, busy float64
	service := func(b, k float64) (es, es2, en float64) {
		pmax := math.Max(lim.budget-b, 16)
		for _, cl := range d.classes {
			s, n := c.step(b, k, cl.pc, f), 1.0
			if cl.pc > pmax {
				n = cl.pc / pmax
				s = n * c.step(b, k, pmax, f)
			}
			es += cl.w * s
			es2 += cl.w * s * s
			en += cl.w * n
		}
		return es, es2, en
	}
	for i := 0; i < 2000; i++ {
		b := d.lam * d.out * tau
		k := b * d.ctx
		var en float64
		es, es2, en = service(b, k)
		busy = d.lam * es
		if busy >= 1 || b > 1e6 {
			break
		}
		tn := 1 / (d.lam*en + (1-busy)/c.step(b, k, 0, f))
		if tn > 30 {
			break
		}
		if math.Abs(tn-tau) < 1e-9*math.Max(1, tau) {
			tau, conv = tn, true
			break
		}
		tau = tn
	}
	st := steadyState{tau: tau}
	st.batch = d.lam * d.out * tau
	st.kv = st.batch * d.ctx
	st.prefill = d.lam * pc * tau
	st.itl = tau
	wait := math.Inf(1)
	if busy < 1 {
		wait = d.lam * es2 / (2 * (1 - busy))
	}
	st.queueWait = wait
	st.ttft = d.outside + tau/2 + wait + es
	blocks := st.batch * (d.kvPriv/blockSize + 0.5)
	st.poolFrac = blocks * blockSize / lim.poolTokens
	st.ok = conv && busy < 1 && st.batch <= lim.maxSeqs && st.poolFrac <= 0.92
	return st
}

// kneeRatio is where a replica's capacity is set: the arrival rate at which
// the mean step has grown to this multiple of the empty engine's step (or a
// limit binds first). Past it, latency climbs steeply.
const kneeRatio = 3.5

// capacity returns the replica's estimated capacity in requests/s for the
// mix shape of d (d.lam ignored).
func (c *costModel) capacity(d demand, f float64, lim limits) float64 {
	idle := c.step(0, 0, 0, f)
	good := func(lam float64) bool {
		d.lam = lam
		st := c.steady(d, f, lim)
		return st.ok && st.tau <= kneeRatio*idle && st.queueWait < 10*idle
	}
	lo, hi := 0.0, 1.0
	for good(hi) && hi < 1e5 {
		lo, hi = hi, hi*2
	}
	for i := 0; i < 40; i++ {
		mid := (lo + hi) / 2
		if good(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}
