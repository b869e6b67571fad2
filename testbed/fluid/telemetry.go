package fluid

import "math"

// Bucket bounds, as the engines define them.
var (
	// vllm/v1/metrics/buckets.py: TIME_TO_FIRST_TOKEN_BUCKETS,
	// INTER_TOKEN_LATENCY_BUCKETS, REQUEST_LATENCY_BUCKETS,
	// ITERATION_TOKENS_BUCKETS, REQUEST_PARAMS_N_BUCKETS,
	// REQUEST_NUM_PREEMPTIONS_BUCKETS (same values inline in
	// vllm/v1/metrics/loggers.py before the module existed).
	bucketsTTFTv1 = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
		10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	bucketsITLv1 = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
		10.0, 20.0, 40.0, 80.0}
	bucketsLatencyV1 = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
		120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
	bucketsIterV1   = []float64{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}
	bucketsParamsN  = []float64{1, 2, 5, 10, 20}
	bucketsPreemptN = []float64{1, 2, 3, 4, 5, 10, 20}

	// vllm/engine/metrics.py (V0, ~v0.6-v0.8): shorter TTFT/TPOT/latency
	// lists; iteration tokens with enforce_eager ("8096" as upstream).
	bucketsTTFTv0    = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0}
	bucketsTPOTv0    = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5}
	bucketsLatencyV0 = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0}
	bucketsIterV0    = []float64{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8096}
)

// buckets125 is vLLM's build_1_2_5_buckets(max_model_len)
// (vllm/v1/metrics/buckets.py): 1, 2, 5, 10, 20, 50, ... up to max.
func buckets125(max int) []float64 {
	var out []float64
	for e := 1.0; ; e *= 10 {
		for _, m := range []float64{1, 2, 5} {
			if m*e > float64(max) {
				return out
			}
			out = append(out, m*e)
		}
	}
}

// hist is a classic histogram: per-bucket (not cumulative) integer counts,
// the last one +Inf.
type hist struct {
	bounds []float64
	logs   []float64 // log of each bound
	counts []float64
	sum    float64
	count  float64
	carry  float64 // fractional observations not yet counted
}

func newHist(bounds []float64) *hist {
	h := &hist{bounds: bounds, counts: make([]float64, len(bounds)+1), logs: make([]float64, len(bounds))}
	for i, b := range bounds {
		h.logs[i] = math.Log(b)
	}
	return h
}

// observe records n observations (n may be fractional: the fraction waits
// in a carry, so _count stays an integer) of a value spread lognormally
// around v with log-sigma sigma, mean-preserving. Few observations are drawn
// one by one; many are split over the buckets by the distribution's CDF.
func (h *hist) observe(v, n, sigma float64, g *rng) {
	if h == nil || n <= 0 {
		return
	}
	h.carry += n
	k := math.Floor(h.carry + 1e-9)
	if k < 1 {
		return
	}
	h.carry -= k
	if v <= 0 || sigma <= 0 {
		h.counts[h.bucket(v)] += k
		h.sum += k * math.Max(v, 0)
		h.count += k
		return
	}
	if k <= 4 {
		tab := spreadTable(sigma)
		for i := 0.0; i < k; i++ {
			x := v * tab[g.r.Uint64()>>56]
			h.counts[h.bucket(x)]++
			h.sum += x
		}
		h.count += k
		return
	}
	mu := math.Log(v) - sigma*sigma/2
	u := g.float()
	prev := 0.0
	for i, lb := range h.logs {
		z := (lb - mu) / sigma
		var cum float64
		switch {
		case z < -8:
			continue
		case z > 8:
			cum = k
		default:
			cum = math.Min(math.Floor(k*normCDF(z)+u), k)
		}
		h.counts[i] += cum - prev
		prev = cum
		if cum == k {
			break
		}
	}
	h.counts[len(h.bounds)] += k - prev
	h.sum += k * v
	h.count += k
}

// spreads holds, per log-sigma the model uses, 256 equiprobable mean-one
// lognormal multipliers (midpoints of 256 quantile slices): drawing one is
// a table lookup instead of an exp. Built once; read-only afterwards.
var spreads = func() []spread {
	var out []spread
	for _, s := range []float64{0.05, 0.08, 0.1, 0.12, 0.15, 0.2, 0.25, 0.3} {
		out = append(out, spread{s, makeSpread(s)})
	}
	return out
}()

type spread struct {
	sigma float64
	tab   *[256]float64
}

func makeSpread(sigma float64) *[256]float64 {
	t := new([256]float64)
	sum := 0.0
	for i := range t {
		t[i] = math.Exp(sigma * normQuantile((float64(i)+0.5)/256))
		sum += t[i]
	}
	for i := range t {
		t[i] *= 256 / sum
	}
	return t
}

func spreadTable(sigma float64) *[256]float64 {
	for _, s := range spreads {
		if s.sigma == sigma {
			return s.tab
		}
	}
	return makeSpread(sigma)
}

// bucket is the index of the first bound >= x.
func (h *hist) bucket(x float64) int {
	lo, hi := 0, len(h.bounds)
	for lo < hi {
		m := (lo + hi) / 2
		if h.bounds[m] >= x {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo
}

// repTel is one replica's cumulative telemetry, as the engine, its API
// server and the GPU report it.
type repTel struct {
	promptTok, genTok, prefixQ, prefixH, cachedTok float64
	preempts                                       float64
	success                                        [numOutcomes]float64
	http                                           [2][3]float64 // handler × 2xx/4xx/5xx

	ttft, itl, reqTPOT, e2e, queue, inference, prefill, decode        *hist
	promptLen, genLen, maxGen, maxTokens, paramsN, iter, kvComp, nPre *hist

	// GPU state (smoothed) and counters
	util, dram, tensor, sm, power, temp, clock float64
	energy, powerViol, thermViol               float64
	tokRate, nvBytes                           float64 // tokens/s through the model; NVLink bytes sent
	throttled                                  bool

	chatShare float64
	g         *rng
	v0        bool
}

func newRepTel(p *plan, g *rng) *repTel {
	v0 := p.names == "v0"
	ttft, itl, lat, iter := bucketsTTFTv1, bucketsITLv1, bucketsLatencyV1, bucketsIterV1
	if v0 {
		ttft, itl, lat, iter = bucketsTTFTv0, bucketsTPOTv0, bucketsLatencyV0, bucketsIterV0
	}
	tok := buckets125(p.maxLen)
	t := &repTel{
		ttft: newHist(ttft), itl: newHist(itl), reqTPOT: newHist(itl),
		e2e: newHist(lat), queue: newHist(lat), inference: newHist(lat), prefill: newHist(lat), decode: newHist(lat),
		promptLen: newHist(tok), genLen: newHist(tok), maxGen: newHist(tok), maxTokens: newHist(tok),
		paramsN: newHist(bucketsParamsN), iter: newHist(iter), kvComp: newHist(tok), nPre: newHist(bucketsPreemptN),
		clock: 1, temp: 35, chatShare: 0.6 + 0.35*g.float(), g: g, v0: v0,
	}
	return t
}

// scheduled counts a prefix-cache lookup (vLLM counts queried and hit
// tokens each time a request is scheduled).
func (t *repTel) scheduled(c *cohort) {
	n := float64(c.n)
	q := c.prompt
	if c.resumed {
		q += c.gen
	}
	t.prefixQ += n * q
	t.prefixH += n * math.Max(q-c.pending, 0)
}

// firstToken records what vLLM records at a request's first token.
func (t *repTel) firstToken(c *cohort) {
	n := float64(c.n)
	t.ttft.observe(c.first-c.arrive, n, 0.25, t.g)
	t.promptTok += n * c.prompt
	t.cachedTok += n * c.cached
	t.genTok += n
}

// finish records a finished request: its finished_reason, the HTTP
// response, and the per-request histograms vLLM observes at the end.
func (t *repTel) finish(c *cohort, tf float64) {
	n := float64(c.n)
	t.success[c.outcome] += n
	t.http[t.handler()][0] += n
	t.e2e.observe(tf-c.arrive, n, 0.15, t.g)
	t.queue.observe(c.start-c.enq, n, 0.3, t.g)
	t.inference.observe(tf-c.start, n, 0.15, t.g)
	t.prefill.observe(c.first-c.start, n, 0.2, t.g)
	t.decode.observe(tf-c.first, n, 0.15, t.g)
	if c.gen > 1 {
		t.reqTPOT.observe((tf-c.first)/(c.gen-1), n, 0.1, t.g)
	}
	t.promptLen.observe(c.prompt, n, 0.12, t.g)
	t.genLen.observe(c.gen, n, 0.12, t.g)
	t.maxGen.observe(c.maxTok, n, 0, t.g)
	t.maxTokens.observe(c.maxTok, n, 0, t.g)
	t.paramsN.observe(1, n, 0, t.g)
	t.kvComp.observe(math.Max(c.prompt-c.cached, 0), n, 0.12, t.g)
	t.nPre.observe(float64(c.preempt), n, 0, t.g)
}

// finishError records a server-side failure: finished_reason "error" where
// the version has it, and a 5xx from the API server.
func (t *repTel) finishError(c *cohort, _ float64) {
	n := float64(c.n)
	if !t.v0 {
		t.success[outError] += n
	}
	t.http[t.handler()][2] += n
}

func (t *repTel) handler() int {
	if t.g.float() < t.chatShare {
		return 0
	}
	return 1
}

// gpuTick updates the replica's GPU counters from the tick's work.
func (r *replica) gpuTick(dt, f, steps, b0, k0 float64) {
	t := r.tel
	gc := r.p.gpu
	util := clamp(r.busy/dt, 0, 1)
	bytes := steps * (r.cost.weights + r.cost.kvBytes*k0)
	flops := r.cost.fpt * (steps*b0 + r.pfTokens)
	dram := clamp(bytes/(dt*gc.hbmBW), 0, 1)
	tensor := clamp(flops/(dt*gc.flops)*1.4, 0, 1)
	a := dt / 2 // a 2 s time constant, like NVML's sampling windows
	t.util += a * (util - t.util)
	t.dram += a * (dram - t.dram)
	t.tensor += a * (tensor - t.tensor)
	sm := util * (0.55 + 0.4*math.Min(1, tensor/0.6+0.3*dram))
	t.sm += a * (sm - t.sm)
	t.clock = f
	t.throttled = f < 0.99
	load := clamp(0.2*t.util+0.45*t.dram/0.8+0.55*t.tensor/0.5, 0, 1)
	power := gc.idleW + (gc.tdp-gc.idleW)*load*math.Pow(f, 1.2)
	reason := r.p.throttleReason()
	if t.throttled && (reason == "sw_power_cap" || reason == "hw_power_brake") {
		power = math.Min(power, gc.tdp*(0.35+0.5*f))
	}
	t.power += a * (power - t.power)
	temp := 28 + 50*t.power/gc.tdp
	if t.throttled && (reason == "hw_thermal_slowdown" || reason == "sw_thermal_slowdown") {
		temp = math.Max(temp, 87) // held at the slowdown threshold
	}
	t.temp += a / 10 * (temp - t.temp) // thermal mass: slower than power
	t.energy += t.power * dt * 1000
	t.tokRate += a * ((steps*b0+r.pfTokens)/dt - t.tokRate)
	t.nvBytes += nvlinkRate(r.p, t) * dt
	if t.throttled {
		switch reason {
		case "sw_power_cap", "hw_power_brake":
			t.powerViol += dt * 1e6
		case "hw_thermal_slowdown", "sw_thermal_slowdown":
			t.thermViol += dt * 1e6
		}
	}
}
