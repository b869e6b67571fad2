package sim

import (
	"math"
	"math/rand/v2"
	"sort"
)

// histogram is a classic Prometheus histogram with per-bucket (not
// cumulative) counts; counts[len(bounds)] is the +Inf overflow.
type histogram struct {
	bounds []float64
	counts []float64
	sum    float64
	count  float64
}

func newHistogram(bounds []float64) *histogram {
	return &histogram{bounds: bounds, counts: make([]float64, len(bounds)+1)}
}

// observe records value v n times.
func (h *histogram) observe(v, n float64) {
	i := sort.SearchFloat64s(h.bounds, v)
	h.counts[i] += n
	h.sum += v * n
	h.count += n
}

// Bucket layouts (docs/engines.md §2.3; vllm/v1/metrics/buckets.py, vllm/engine/metrics.py for v0).
var (
	bucketsTTFTv1 = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
		10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	bucketsTTFTv0 = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0}
	bucketsITLv1  = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
		20.0, 40.0, 80.0}
	bucketsITLv0     = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5}
	bucketsLatencyv1 = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
		120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
	bucketsLatencyv0 = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0}
	bucketsIterv1    = []float64{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}
	bucketsIterv0    = []float64{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8096}
	bucketsParamsN   = []float64{1, 2, 5, 10, 20}
	bucketsPreempt   = []float64{1, 2, 3, 4, 5, 10, 20}
)

// buckets125 is vLLM's build_1_2_5_buckets: 1, 2, 5, 10, … up to max.
func buckets125(max int) []float64 {
	var out []float64
	for e := 1.0; ; e *= 10 {
		for _, m := range []float64{1, 2, 5} {
			v := m * e
			if v > float64(max) {
				return out
			}
			out = append(out, v)
		}
	}
}

// telemetry is what one replica exposes: counters, histograms and the GPU
// accumulators between ticks.
type telemetry struct {
	prefixQueries, prefixHits     float64
	preemptions                   float64
	promptTokens                  float64
	promptCompute, promptCacheHit float64
	generationTokens              float64
	success                       map[string]float64

	iterationTokens, ttft, itl, reqTPOT                    *histogram
	e2e, queue, prefill, decode, inference                 *histogram
	promptLen, genLen, maxGen, paramsMaxTokens, paramsN    *histogram
	prefillKVComputed, numPreemptions                      *histogram
	accBytes, accFlops, accBusy, accSM, accNVLink, accTime float64
	accClock                                               float64

	gpu gpuState

	engineExtra // SGLang / TRT-LLM only (telemetry_engines.go)
}

// gpuState is the GPU counters of one replica as of the last tick.
type gpuState struct {
	dram, memBusy, smActive, util, tensor float64
	smClock, memClock                     float64
	power, temp                           float64
	throttle                              map[string]float64
	pcieTx, pcieRx, nvlink                float64
	fbUsed, fbTotal                       float64
	// Cumulative since the run started: energy in mJ, and the time the
	// clocks were held down by power capping and by thermal slowdown, in
	// nanoseconds (dcgm-exporter's DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION,
	// DCGM_FI_DEV_POWER_VIOLATION, DCGM_FI_DEV_THERMAL_VIOLATION).
	energyMJ, powerViolationNs, thermalViolationNs float64
}

// throttleReasons are the clock-event reasons of whyslow_gpu_clock_throttle_active.
var throttleReasons = []string{"sw_power_cap", "hw_slowdown", "hw_thermal_slowdown", "sw_thermal_slowdown",
	"hw_power_brake", "gpu_idle", "applications_clocks_setting", "sync_boost", "display_clock"}

func newTelemetry(names string, maxModelLen int) *telemetry {
	ttft, itl, lat, iter := bucketsTTFTv1, bucketsITLv1, bucketsLatencyv1, bucketsIterv1
	if names == "v0" {
		ttft, itl, lat, iter = bucketsTTFTv0, bucketsITLv0, bucketsLatencyv0, bucketsIterv0
	}
	tok := buckets125(maxModelLen)
	t := &telemetry{
		success:           map[string]float64{"stop": 0, "length": 0, "abort": 0, "error": 0},
		iterationTokens:   newHistogram(iter),
		ttft:              newHistogram(ttft),
		itl:               newHistogram(itl),
		reqTPOT:           newHistogram(itl),
		e2e:               newHistogram(lat),
		queue:             newHistogram(lat),
		prefill:           newHistogram(lat),
		decode:            newHistogram(lat),
		inference:         newHistogram(lat),
		promptLen:         newHistogram(tok),
		genLen:            newHistogram(tok),
		maxGen:            newHistogram(tok),
		paramsMaxTokens:   newHistogram(tok),
		paramsN:           newHistogram(bucketsParamsN),
		prefillKVComputed: newHistogram(tok),
		numPreemptions:    newHistogram(bucketsPreempt),
		gpu:               gpuState{throttle: map[string]float64{}},
	}
	return t
}

// addStep accumulates one step's GPU work.
func (t *telemetry) addStep(c *stepCost, clock float64) {
	t.accBytes += c.bytes
	t.accFlops += c.flops
	t.accBusy += c.gpu
	share := 0.0
	if c.gpu > 0 {
		share = math.Min(1, c.compute/c.gpu)
	}
	t.accSM += c.gpu * (0.55 + 0.42*share)
	t.accNVLink += c.nvlink
	t.accClock += c.seconds * clock
	t.accTime += c.seconds
}

// tick turns the accumulated work of the last interval into GPU counters.
func (t *telemetry) tick(cfg *engineConfig, interval, clock float64, reason string, rng *rand.Rand) {
	g := &t.gpu
	tp := float64(cfg.tp)
	jit := func(v float64) float64 { return v * (1 + 0.01*(rng.Float64()*2-1)) }
	clamp := func(v float64) float64 { return math.Max(0, math.Min(1, v)) }
	g.dram = clamp(jit(t.accBytes / (interval * cfg.gpu.bw * tp)))
	g.util = clamp(t.accBusy / interval)
	g.smActive = clamp(jit(t.accSM / interval))
	g.tensor = clamp(jit(t.accFlops / (interval * cfg.gpu.flops * tp * clock)))
	g.memBusy = clamp(jit(0.15*g.util + 0.8*g.dram))
	idle := g.util < 0.05
	if idle {
		g.smClock = cfg.gpu.smClockIdle
	} else {
		g.smClock = math.Round(cfg.gpu.smClockMax*clock/15) * 15
	}
	g.memClock = cfg.gpu.memClockMax
	load := 0.3*g.util + 0.45*g.smActive*clock + 0.35*g.dram
	g.power = cfg.gpu.powerIdle + (cfg.gpu.powerLimit-cfg.gpu.powerIdle)*math.Min(0.92, load)
	g.temp = 32 + 36*g.power/cfg.gpu.powerLimit
	for _, r := range throttleReasons {
		g.throttle[r] = 0
	}
	switch reason {
	case "sw_power_cap":
		g.power = cfg.gpu.powerLimit * (0.985 + 0.01*rng.Float64())
		g.temp = 70 + 4*rng.Float64()
	case "hw_thermal_slowdown", "sw_thermal_slowdown":
		g.temp = 88 + 3*rng.Float64()
	}
	if reason != "" {
		g.throttle[reason] = 1
	}
	if idle {
		g.throttle["gpu_idle"] = 1
	}
	g.power = math.Round(jit(g.power)*100) / 100
	g.temp = math.Round(g.temp)
	g.energyMJ += g.power * interval * 1000
	switch reason {
	case "sw_power_cap":
		g.powerViolationNs += interval * 1e9
	case "hw_thermal_slowdown", "sw_thermal_slowdown":
		g.thermalViolationNs += interval * 1e9
	}
	g.pcieTx = jit(2e6 + 50*t.accFlops/1e9/interval)
	g.pcieRx = jit(3e6 + 30*t.accFlops/1e9/interval)
	g.nvlink = t.accNVLink / interval
	g.fbTotal = cfg.gpu.memBytes
	g.fbUsed = math.Min(cfg.gpu.memBytes*cfg.gpuMemUtil+0.6e9, cfg.gpu.memBytes)
	t.accBytes, t.accFlops, t.accBusy, t.accSM, t.accNVLink, t.accClock, t.accTime = 0, 0, 0, 0, 0, 0, 0
	t.tickExtra(interval)
}
