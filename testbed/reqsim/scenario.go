package reqsim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
)

// Scenario is one single fault (or hard negative) the model can inject.
type Scenario struct {
	Name string
	// Causes are the rulebook's cause ids (rulesets/causes.yaml) the fault
	// is; empty for a hard negative (a healthy truth).
	Causes []string
	Doc    string
}

var scenarios = []Scenario{
	{"arrival_surge", []string{"queue_saturation"}, "arrivals rise past what the replicas serve"},
	{"replica_loss", []string{"capacity_loss"}, "replicas stop; the rest take their traffic"},
	{"prompt_shift", []string{"chunked_prefill_mismatch"}, "the prompt distribution moves past the per-step token budget (TensorRT-LLM: max_num_tokens, which it does not chunk by default)"},
	{"long_prompts", []string{"prefill_contention"}, "a stream of long prompts that still fit the budget shares the steps with decodes"},
	{"kv_pressure", []string{"kv_cache_pressure"}, "longer outputs hold more KV; the pool fills and the engine preempts (or, TensorRT-LLM, holds requests back)"},
	{"clock_throttle", []string{"gpu_throttling"}, "the GPUs' clocks drop: every step is slower"},
	{"prefix_loss", []string{"prefix_cache_regression"}, "the prefix-cache hit rate falls: more prompt tokens are computed"},
	{"errors", []string{"request_errors"}, "a share of requests fails in the server (finish reason error, HTTP 500)"},
	{"hot_replica", []string{"load_imbalance"}, "the router sends one replica much more than its share"},
	{"slow_frontend", []string{"outside_engine"}, "the API server / tokenizer delays requests before the engine sees them"},
	{"bandwidth", []string{"memory_bandwidth_saturation"}, "requests carry much more (cached) context: each decode step reads more KV"},
	{"diurnal_growth", nil, "traffic grows within capacity"},
	{"steady_busy", nil, "a busy, steady service"},
	{"rolling_restart", nil, "replicas restart one after another (counters reset)"},
	{"abort_storm", nil, "clients abort many streams: not a server fault"},
	{"new_tenant", nil, "a tenant with longer prompts that still fit"},
}

// compounds are the "a+b" pairs.
var compounds = []string{"clock_throttle+errors", "slow_frontend+clock_throttle", "prefix_loss+errors"}

// Scenarios lists the single scenarios.
func Scenarios() []Scenario { return scenarios }

// CompoundPairs lists the compound scenarios as "a+b".
func CompoundPairs() []string { return compounds }

func scenarioByName(name string) (Scenario, bool) {
	for _, s := range scenarios {
		if s.Name == name {
			return s, true
		}
	}
	return Scenario{}, false
}

// hardware classes: a replica is one TP group.
var hardwareClasses = []hardware{
	{name: "8b-h100", gpu: "H100", product: "NVIDIA H100 80GB HBM3", model: "meta-llama/Llama-3.1-8B-Instruct", tp: 1,
		weightRead: 0.0065, kvRead: 48e-9, perToken: 32e-6, overhead: 0.0055, kvTokens: 300000, smClockMax: 1980, tdp: 700, memGiB: 80, maxLen: 32768},
	{name: "70b-h100", gpu: "H100", product: "NVIDIA H100 80GB HBM3", model: "meta-llama/Llama-3.3-70B-Instruct", tp: 4,
		weightRead: 0.0135, kvRead: 30e-9, perToken: 65e-6, overhead: 0.006, kvTokens: 280000, smClockMax: 1980, tdp: 700, memGiB: 80, maxLen: 32768},
	{name: "70b-h200", gpu: "H200", product: "NVIDIA H200", model: "meta-llama/Llama-3.3-70B-Instruct", tp: 4,
		weightRead: 0.0095, kvRead: 21e-9, perToken: 62e-6, overhead: 0.006, kvTokens: 600000, smClockMax: 1980, tdp: 700, memGiB: 141, maxLen: 32768},
	{name: "8b-a100", gpu: "A100", product: "NVIDIA A100-SXM4-80GB", model: "meta-llama/Llama-3.1-8B-Instruct", tp: 1,
		weightRead: 0.0095, kvRead: 70e-9, perToken: 75e-6, overhead: 0.005, kvTokens: 300000, smClockMax: 1410, tdp: 400, memGiB: 80, maxLen: 32768},
}

// plan is one drawn instance: engine, hardware, traffic, fault.
type plan struct {
	opts      Options
	sc        []Scenario // one, or two for a compound
	causes    []string
	pol       policy
	hw        hardware
	budget    int
	maxSeqs   int
	chunked   bool
	replicas  int
	leastReq  bool
	base      traffic
	band      string
	magnitude float64
	params    map[string]any
	// the fault's shape in the incident segment
	onset     float64 // segment time the fault starts
	ramp      float64 // seconds over which it reaches full strength
	inc       func(t float64, m traffic) traffic
	clockF    float64 // clock factor under the fault
	lose      int     // replicas lost
	hot       float64
	restarts  []float64 // rolling restart times (segment time), replica i at restarts[i]
	omitted   []string
	names     string
	gpuKind   string
	throttle  string // throttle reason
	load      float64
	tightKV   float64 // the incident's KV demand over the pool (kv_pressure)
	outFactor float64
}

// sizeTightPool sizes the KV pool so the baseline's requests fill about
// half of it (a pool that is tight for long outputs: a big model on few
// GPUs, a low memory fraction). TensorRT-LLM's pool is sized on the
// reservations (prompt + max_tokens) it admits against.
func (p *plan) sizeTightPool(rng *rand.Rand) {
	m := p.base
	out := m.outMedian * math.Exp(m.outSigma*m.outSigma/2)
	step := 1.7 * (p.hw.overhead + p.hw.weightRead)
	n := m.rate / float64(p.replicas) * out * step
	x := p.outFactor
	base := n * (meanPrompt(m) + out/2)
	inc := n * x * (meanPrompt(m) + out*x/2)
	fill := 0.55
	if p.pol == trtIFB {
		base = n * (meanPrompt(m) + float64(m.maxTok))
		inc = n * x * (meanPrompt(m) + 4096)
		fill = 0.7
	}
	under := 1.3 // the estimate of the demand is low where requests are preempted
	if p.pol == trtIFB {
		under = 1 // reservations are what they are
	}
	pool := math.Max(under*inc/p.tightKV, base/fill)
	p.hw.kvTokens = max(int(pool), 16*blockTokens*64)
	p.params["kv_tokens"] = p.hw.kvTokens
}

// Segment layout: warm-up, then the emitted range (margin + window).
const (
	warmup   = 150.0
	margin   = 120.0
	winLen   = 300.0
	scrapeDT = 10.0
	segLen   = warmup + margin + winLen
)

// bandOf draws a band: wide draws all three, otherwise moderate.
func bandOf(rng *rand.Rand, wide bool) string {
	if !wide {
		return "moderate"
	}
	return []string{"subtle", "moderate", "moderate", "severe"}[rng.IntN(4)]
}

// pick draws from [lo, hi) of the band's range.
func pick(rng *rand.Rand, band string, subtle, moderate, severe [2]float64) float64 {
	r := moderate
	switch band {
	case "subtle":
		r = subtle
	case "severe":
		r = severe
	}
	return r[0] + (r[1]-r[0])*rng.Float64()
}

// newPlan draws the instance.
func newPlan(o Options) (*plan, error) {
	p := &plan{opts: o, params: map[string]any{}, clockF: 1}
	for _, name := range strings.Split(o.Scenario, "+") {
		s, ok := scenarioByName(name)
		if !ok {
			return nil, fmt.Errorf("reqsim: unknown scenario %q", name)
		}
		p.sc = append(p.sc, s)
		p.causes = append(p.causes, s.Causes...)
	}
	rng := rand.New(rand.NewPCG(uint64(o.Seed), 0x5eed))
	// engine: vLLM half the time, SGLang and TensorRT-LLM a quarter each
	switch u := rng.Float64(); {
	case u < 0.5:
		p.pol = vllmV1
	case u < 0.75:
		p.pol = sglangPF
	default:
		p.pol = trtIFB
	}
	if o.Engine != "" {
		switch o.Engine {
		case "vllm":
			p.pol = vllmV1
		case "sglang":
			p.pol = sglangPF
		case "trtllm":
			p.pol = trtIFB
		default:
			return nil, fmt.Errorf("reqsim: unknown engine %q", o.Engine)
		}
	}
	p.hw = hardwareClasses[rng.IntN(len(hardwareClasses))]
	p.hw.kvTokens = int(float64(p.hw.kvTokens) * (0.6 + 0.6*rng.Float64()))
	p.maxSeqs = 256
	switch p.pol {
	case vllmV1:
		p.chunked = true
		p.budget = 8192
		if p.hw.gpu == "A100" {
			p.budget = 2048
		}
	case sglangPF:
		p.chunked = true
		p.budget = 8192
	case trtIFB:
		p.budget = 8192
	}
	p.names = o.Names
	if p.names == "" {
		p.names = "v1"
	}
	p.gpuKind = o.GPUSeries
	if p.gpuKind == "" {
		p.gpuKind = "whyslow"
	}
	p.replicas = 4
	if o.Wide {
		p.replicas = 2 + rng.IntN(7)
	}
	p.leastReq = rng.IntN(2) == 0
	// traffic
	b := traffic{promptMedian: 500 + 900*rng.Float64(), promptSigma: 0.7 + 0.3*rng.Float64(),
		longShare: 0.1 + 0.1*rng.Float64(), outMedian: 120 + 180*rng.Float64(), outSigma: 0.6 + 0.3*rng.Float64(),
		maxTok: 2048, hit: 0.2 + 0.4*rng.Float64(), errShare: 0.001 * rng.Float64(), abortShare: 0.005 + 0.015*rng.Float64(),
		outside: 0.004 + 0.012*rng.Float64()}
	b.longMedian = math.Min(float64(p.budget)*0.45, b.promptMedian*3)
	p.load = 0.3 + 0.25*rng.Float64()
	if o.Wide {
		p.load = 0.2 + 0.4*rng.Float64()
	}
	p.band = bandOf(rng, o.Wide)
	if len(p.causes) == 0 {
		p.band = "none"
	}
	p.base = b
	p.throttle = []string{"hw_thermal_slowdown", "sw_power_cap", "hw_slowdown"}[rng.IntN(3)]
	p.onset = warmup + margin - 60 - 120*rng.Float64() // 1–3 minutes before the window
	p.ramp = 10 + 20*rng.Float64()
	p.inc = func(_ float64, m traffic) traffic { return m }
	for _, s := range p.sc {
		if err := p.fault(rng, s.Name); err != nil {
			return nil, err
		}
	}
	// the load sets the arrival rate from a capacity estimate
	capRate := p.calibrate(p.base) * float64(p.replicas)
	p.base.rate = p.load * capRate
	if p.tightKV > 0 {
		p.sizeTightPool(rng)
	}
	p.params["engine"] = p.pol.engine()
	p.params["hardware"] = p.hw.name
	p.params["replicas"] = p.replicas
	p.params["load"] = round3(p.load)
	p.params["capacity_per_replica"] = round3(capRate / float64(p.replicas))
	p.params["rate"] = round3(p.base.rate)
	p.params["router"] = map[bool]string{true: "least_requests", false: "round_robin"}[p.leastReq]
	p.params["budget"] = p.budget
	p.params["kv_tokens"] = p.hw.kvTokens
	p.drawOmitted(rng)
	return p, nil
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

// capacity estimates one replica's request throughput at a large decode
// batch: the requests a replica completes per second when it runs full.
func (p *plan) capacity(m traffic) float64 {
	meanPrompt := meanPrompt(m)
	meanOut := m.outMedian * math.Exp(m.outSigma*m.outSigma/2) * (1 - 0.75*m.longShare)
	ctx := meanPrompt + meanOut/2
	n := math.Min(float64(p.maxSeqs), 0.7*float64(p.hw.kvTokens)/(meanPrompt+meanOut))
	if p.pol == trtIFB {
		// GUARANTEED_NO_EVICT admits against prompt + max_tokens
		n = math.Min(n, 0.9*float64(p.hw.kvTokens)/(meanPrompt+float64(m.maxTok)))
	}
	n = math.Min(n, 128)
	step := p.hw.overhead + p.hw.weightRead + n*(p.hw.perToken+ctx*p.hw.kvRead)
	perReq := meanOut*step/n + meanPrompt*(1-m.hit)*p.hw.perToken
	return 1 / perReq
}

// meanPrompt is the mix's mean prompt length.
func meanPrompt(m traffic) float64 {
	return m.promptMedian*math.Exp(m.promptSigma*m.promptSigma/2)*(1-m.longShare) + m.longMedian*m.longShare + m.ctxExtra
}

// strength is the fault's share at segment time t (0 before the onset,
// ramping to 1).
func (p *plan) strength(t float64) float64 {
	if t < p.onset {
		return 0
	}
	return math.Min(1, (t-p.onset)/p.ramp)
}

func lerp(a, b, s float64) float64 { return a + (b-a)*s }

// fault sets the incident segment's change for one scenario.
func (p *plan) fault(rng *rand.Rand, name string) error {
	band := p.band
	prev := p.inc
	set := func(f func(s float64, m traffic) traffic) {
		p.inc = func(t float64, m traffic) traffic {
			m = prev(t, m)
			return f(p.strength(t), m)
		}
	}
	switch name {
	case "arrival_surge":
		// relative to capacity: the incident load
		x := pick(rng, band, [2]float64{0.8, 0.92}, [2]float64{0.92, 1.08}, [2]float64{1.08, 1.4})
		p.magnitude = x
		p.params["incident_load"] = round3(x)
		set(func(s float64, m traffic) traffic {
			m.rate = lerp(m.rate, m.rate*x/p.load, s)
			return m
		})
	case "replica_loss":
		if p.replicas < 2 {
			p.replicas = 2
		}
		k := max(1, int(math.Round(float64(p.replicas)*pick(rng, band, [2]float64{0.2, 0.3}, [2]float64{0.3, 0.45}, [2]float64{0.5, 0.6}))))
		k = min(k, p.replicas-1)
		// the loss must push the rest past their comfortable load
		need := float64(p.replicas-k) / float64(p.replicas) * pick(rng, band, [2]float64{0.62, 0.75}, [2]float64{0.75, 0.95}, [2]float64{0.95, 1.25})
		p.load = need // the baseline load the band's incident load implies
		p.lose = k
		p.magnitude = float64(p.replicas) / float64(p.replicas-k)
		p.params["lost_replicas"] = k
	case "prompt_shift":
		// TensorRT-LLM does not chunk by default: a prompt past max_num_tokens
		// is the same budget mismatch (its fix: enable chunked context or
		// raise max_num_tokens), so the truth is chunked_prefill_mismatch on
		// every engine.
		// the p90 prompt moves past the budget
		x := pick(rng, band, [2]float64{1.1, 1.3}, [2]float64{1.3, 1.8}, [2]float64{1.8, 2.6})
		target := x * float64(p.budget) / math.Exp(1.2816*0.5)
		p.magnitude = x
		p.params["prompt_p90_over_budget"] = round3(x)
		set(func(s float64, m traffic) traffic {
			// about the same prompt-token work arrives as fewer, longer requests
			f := math.Min(1, 1.3*meanPrompt(m)/(target*math.Exp(0.125)))
			m.promptMedian = lerp(m.promptMedian, target, s)
			m.promptSigma = lerp(m.promptSigma, 0.5, s)
			m.longShare = lerp(m.longShare, 0, s)
			m.rate = lerp(m.rate, m.rate*f, s)
			return m
		})
	case "long_prompts":
		x := pick(rng, band, [2]float64{0.2, 0.3}, [2]float64{0.3, 0.5}, [2]float64{0.5, 0.7})
		// within the budget: past it, the p90 prompt would outgrow the
		// budget, which is chunked_prefill_mismatch
		long := float64(p.budget) * (0.6 + 0.3*rng.Float64())
		// the cap is the drawn budget's, read here: a Fix that changes the
		// budget must not change the prompts that arrive
		longMax := float64(p.budget) * 0.95
		p.magnitude = x
		p.params["long_share"] = round3(x)
		set(func(s float64, m traffic) traffic {
			m.longShare = lerp(m.longShare, x, s)
			m.longMedian = lerp(m.longMedian, long, s)
			m.longMax = longMax
			return m
		})
	case "kv_pressure":
		x := pick(rng, band, [2]float64{1.6, 2.2}, [2]float64{2.2, 3}, [2]float64{3, 4.5})
		p.magnitude = x
		p.params["output_factor"] = round3(x)
		p.tightKV = pick(rng, band, [2]float64{0.8, 0.92}, [2]float64{0.92, 1.02}, [2]float64{1.02, 1.2})
		p.params["kv_demand_over_pool"] = round3(p.tightKV)
		p.outFactor = x
		set(func(s float64, m traffic) traffic {
			m.outMedian = lerp(m.outMedian, m.outMedian*x, s)
			m.maxTok = 4096
			return m
		})
	case "clock_throttle":
		c := pick(rng, band, [2]float64{0.78, 0.86}, [2]float64{0.62, 0.78}, [2]float64{0.45, 0.62})
		p.clockF = c
		p.magnitude = 1 / c
		p.params["clock_factor"] = round3(c)
	case "prefix_loss":
		p.base.hit = 0.55 + 0.3*rng.Float64()
		x := pick(rng, band, [2]float64{0.4, 0.6}, [2]float64{0.15, 0.4}, [2]float64{0, 0.15})
		p.magnitude = 1 / math.Max(x, 0.05)
		p.params["hit_factor"] = round3(x)
		p.load = math.Max(p.load, 0.4)
		set(func(s float64, m traffic) traffic {
			m.hit = lerp(m.hit, m.hit*x, s)
			return m
		})
	case "errors":
		x := pick(rng, band, [2]float64{0.03, 0.06}, [2]float64{0.06, 0.15}, [2]float64{0.15, 0.35})
		p.magnitude = x
		p.params["error_share"] = round3(x)
		set(func(s float64, m traffic) traffic {
			m.errShare = lerp(m.errShare, x, s)
			return m
		})
	case "hot_replica":
		if p.replicas < 3 {
			p.replicas = 3
		}
		x := pick(rng, band, [2]float64{1.6, 2.0}, [2]float64{2.0, 2.6}, [2]float64{2.6, 3.5})
		x = math.Min(x, float64(p.replicas)*0.8)
		p.hot = (x - 1) / float64(p.replicas-1) // replica 0 gets x times the even share
		// session affinity or a hash ring, not least-requests, makes a hot replica
		p.leastReq = false
		p.load = pick(rng, band, [2]float64{0.8, 0.9}, [2]float64{0.9, 1.0}, [2]float64{1.0, 1.25}) / x
		p.magnitude = x
		p.params["hot_share_factor"] = round3(x)
	case "slow_frontend":
		x := pick(rng, band, [2]float64{0.12, 0.25}, [2]float64{0.25, 0.8}, [2]float64{0.8, 2.5})
		p.magnitude = x
		p.params["outside_delay_s"] = round3(x)
		set(func(s float64, m traffic) traffic {
			m.outside = lerp(m.outside, m.outside+x, s)
			return m
		})
	case "bandwidth":
		x := pick(rng, band, [2]float64{2, 3}, [2]float64{3, 5}, [2]float64{5, 9})
		// long contexts are served with an FP8 KV cache: a pool that holds them
		p.hw.kvTokens = max(p.hw.kvTokens, 900000)
		p.magnitude = x
		p.params["context_factor"] = round3(x)
		set(func(s float64, m traffic) traffic {
			m.ctxExtra = lerp(0, (x-1)*m.promptMedian*1.4, s)
			return m
		})
	case "diurnal_growth":
		x := 1.08 + 0.12*rng.Float64()
		p.load = math.Min(p.load, 0.45)
		p.params["growth"] = round3(x)
		p.onset = warmup
		p.ramp = margin + winLen
		set(func(s float64, m traffic) traffic {
			m.rate = lerp(m.rate, m.rate*x, s)
			return m
		})
	case "steady_busy":
		p.load = 0.5 + 0.1*rng.Float64()
	case "rolling_restart":
		// two replicas restart in turn inside the window
		p.replicas = max(p.replicas, 3)
		first := warmup + margin + 30 + 60*rng.Float64()
		p.restarts = []float64{first, first + 110}
		p.load = math.Min(p.load, 0.45)
	case "abort_storm":
		x := 0.2 + 0.3*rng.Float64()
		p.params["abort_share"] = round3(x)
		set(func(s float64, m traffic) traffic {
			m.abortShare = lerp(m.abortShare, x, s)
			return m
		})
	case "new_tenant":
		x := 0.08 + 0.08*rng.Float64()
		p.load = math.Min(p.load, 0.45)
		p.params["tenant_share"] = round3(x)
		set(func(s float64, m traffic) traffic {
			// a share x of requests with prompts twice as long: the median
			// moves, the long tail does not
			m.promptMedian = lerp(m.promptMedian, m.promptMedian*(1+x), s)
			return m
		})
	default:
		return fmt.Errorf("reqsim: scenario %q has no fault", name)
	}
	return nil
}

// Optional families an instance may leave out.
const (
	famPrefix    = "prefix_cache"
	famPhase     = "phase_histograms"
	famIteration = "iteration_tokens"
	famHTTP      = "http_requests_total"
	famPromptLen = "prompt_tokens_histogram"
)

// drawOmitted drops optional families at random (a third of the instances
// drop one or two).
func (p *plan) drawOmitted(rng *rand.Rand) {
	opt := []string{famPrefix, famPhase}
	switch p.pol {
	case vllmV1:
		opt = append(opt, famIteration, famHTTP)
	case sglangPF:
		opt = append(opt, famHTTP, famPromptLen)
	case trtIFB:
		opt = append(opt, famIteration)
	}
	if rng.Float64() < 0.33 {
		n := 1 + rng.IntN(2)
		perm := rng.Perm(len(opt))
		for _, i := range perm[:n] {
			p.omitted = append(p.omitted, opt[i])
		}
	}
	names := []string{}
	for _, g := range p.omitted {
		names = append(names, p.familiesOf(g)...)
	}
	p.params["omitted_families"] = names
	p.params["omitted_groups"] = append([]string{}, p.omitted...)
}

// familiesOf names the metric families an optional group holds for the
// instance's engine.
func (p *plan) familiesOf(group string) []string {
	switch p.pol {
	case vllmV1:
		switch group {
		case famPrefix:
			if p.names == "v0" {
				return []string{"vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_hits_total",
					"vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"}
			}
			return []string{"vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"}
		case famPhase:
			return []string{"vllm:request_queue_time_seconds", "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds"}
		case famIteration:
			return []string{"vllm:iteration_tokens_total"}
		case famHTTP:
			return []string{"http_requests_total"}
		}
	case sglangPF:
		switch group {
		case famPrefix:
			return []string{"sglang:cache_hit_rate", "sglang:cached_tokens_total"}
		case famPhase:
			return []string{"sglang:queue_time_seconds"}
		case famHTTP:
			return []string{"sglang:http_requests_total", "sglang:http_responses_total"}
		case famPromptLen:
			return []string{"sglang:prompt_tokens_histogram", "sglang:generation_tokens_histogram"}
		}
	case trtIFB:
		switch group {
		case famPrefix:
			return []string{"trtllm_prompt_cached_tokens_total", "trtllm_kv_cache_hit_rate"}
		case famPhase:
			return []string{"trtllm_request_queue_time_seconds", "trtllm_request_prefill_time_seconds", "trtllm_request_decode_time_seconds"}
		case famIteration:
			return []string{"trtllm_prefill_batch_tokens"}
		}
	}
	return nil
}

func (p *plan) omits(f string) bool {
	for _, x := range p.omitted {
		if x == f {
			return true
		}
	}
	return false
}

// calibrate measures one replica's saturated throughput on the mix m: a
// short simulation with a queue that never empties (arrivals at six
// times the analytic estimate), counting the requests finished after a
// warm-up. It is what the load and the fault bands are relative to.
func (p *plan) calibrate(m traffic) float64 {
	est := p.capacity(m)
	const warm, span = 40.0, 60.0
	done := 0
	e := &engine{pol: p.pol, hw: p.hw, budget: p.budget, maxSeqs: p.maxSeqs, chunked: p.chunked,
		onToken: func(*replica, *req, float64, float64, bool) {},
		onSched: func(*replica, *req, float64) {},
	}
	e.onFinish = func(_ *replica, _ *req, t float64, _ int) {
		if t >= warm {
			done++
		}
	}
	total := p.hw.kvTokens / blockTokens
	rp := &replica{alive: true, accepting: true, total: total, free: total, clock: 1, tel: newTel(p.pol, p.hw.maxLen)}
	m.rate = 6 * est
	m.outside = 0
	w := &world{eng: e, reps: []*replica{rp}, rng: rand.New(rand.NewPCG(uint64(p.opts.Seed), 0xca1)), end: warm + span,
		mix: func(float64) traffic { return m }, clock: func(int, float64) float64 { return 1 }}
	w.run()
	if done == 0 {
		return est
	}
	return float64(done) / span
}
