package reqsim

import (
	"slices"
	"sort"
)

// hist is a cumulative-at-render Prometheus histogram.
type hist struct {
	bounds     []float64
	counts     []float64 // per bucket, +Inf last
	sum, count float64
}

func newHist(bounds []float64) *hist {
	return &hist{bounds: bounds, counts: make([]float64, len(bounds)+1)}
}

func (h *hist) observe(v float64) {
	i := sort.SearchFloat64s(h.bounds, v) // first bound ≥ v: le is inclusive
	h.counts[i]++
	h.sum += v
	h.count++
}

// Bucket layouts as the engines declare them (vLLM V1
// vllm/v1/metrics/loggers.py, SGLang python/sglang/srt/metrics/collector.py,
// TensorRT-LLM tensorrt_llm/metrics/collector.py).
var (
	bTTFT = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
		20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	bITL = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
		20.0, 40.0, 80.0}
	bLatency = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
		120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
	bIter = []float64{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}

	bSGTTFT = []float64{0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400}
	bSGITL  = []float64{0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040,
		0.060, 0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1, 2, 4, 6, 8}
	bSGE2E   = []float64{0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800, 2400}
	bSGQueue = []float64{0, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60, 70, 80, 90, 100, 200, 300,
		400, 500, 600, 700, 800, 900, 1000, 1200, 1400, 1600, 1800, 2000, 2500, 3000}
	bSGTokens = []float64{100, 300, 500, 700, 1000, 1500, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10000,
		12000, 15000, 20000, 22000, 25000, 30000, 35000, 40000, 66000, 99000, 132000, 300000, 600000, 900000, 1100000}

	bTRTPrefill      = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 640, 2560}
	bTRTPrefillBatch = []float64{64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768}
)

// tokenBuckets is vLLM's 1-2-5 series up to max_model_len.
func tokenBuckets(maxLen int) []float64 {
	var out []float64
	for e := 1; ; e *= 10 {
		for _, m := range []int{1, 2, 5} {
			if m*e > maxLen {
				return out
			}
			out = append(out, float64(m*e))
		}
	}
}

// tel is one replica's exported state since it (re)started.
type tel struct {
	arrivals, preempts               float64
	promptTok, genTok, cachedTok     float64
	finish                           [nFinish]float64
	ttft, itl, tpot, e2e, queue      *hist
	prefill, decode, promptLen       *hist
	genLen, iter, prefillBatch       *hist
	busy, memBusy, compBusy, energyJ float64
	// interval state for gauges that report the last interval
	lastHitQ, lastHitH, hitRate float64
	prevBusy, prevMem, prevComp float64
	prevT, prevGen              float64
	util, dram, sm, genRate     float64
	powerViol, thermViol        float64 // dcgm violation counters, ns
}

// finishedAll counts the finished requests, every reason.
func (t *tel) finishedAll() float64 {
	n := 0.0
	for _, v := range t.finish {
		n += v
	}
	return n
}

func newTel(pol policy, maxLen int) *tel {
	tok := tokenBuckets(maxLen)
	t := &tel{ttft: newHist(bTTFT), itl: newHist(bITL), tpot: newHist(bITL), e2e: newHist(bLatency),
		queue: newHist(bLatency), prefill: newHist(bLatency), decode: newHist(bLatency),
		promptLen: newHist(tok), genLen: newHist(tok), iter: newHist(bIter), prefillBatch: newHist(bTRTPrefillBatch)}
	switch pol {
	case sglangPF:
		t.ttft, t.itl, t.e2e, t.queue = newHist(bSGTTFT), newHist(bSGITL), newHist(bSGE2E), newHist(bSGQueue)
		t.promptLen, t.genLen = newHist(bSGTokens), newHist(bSGTokens)
	case trtIFB:
		t.prefill = newHist(bTRTPrefill)
	}
	return t
}

// step records a finished step's device time.
func (t *tel) step(rp *replica, end float64) {
	c := rp.step
	d := end - rp.stepStart
	t.busy += d
	total := c.fixed + c.batch + c.context + c.prefill
	if total > 0 {
		mem := (c.context + 0.8*c.fixed) / total
		t.memBusy += d * mem
		t.compBusy += d * (c.batch + c.prefill + 0.2*c.fixed) / total
	}
	n := float64(c.decodes + c.prefillTok)
	t.iter.observe(n)
	if c.prefillTok > 0 {
		t.prefillBatch.observe(float64(c.prefillTok))
	}
}

// window accumulates one window's truth from the model's own requests.
type window struct {
	start, end, recent         float64
	ttft                       []float64
	itlV                       []float64
	itlW                       []float64
	itlSum, itlN               float64
	ttftRecentSum, ttftRecentN float64
	itlRecentSum, itlRecentN   float64
	queue, prefill, outside    float64
	e2e                        float64
	finished, errors           float64
	// the decode tokens' step cost drivers (seconds at full clock, and the
	// clock's slowdown), token-weighted
	cFixed, cBatch, cCtx, cPre, cInv, cN float64
}

func (w *window) in(t float64) bool { return t >= w.start && t < w.end }

func (w *window) addITL(v float64) {
	w.itlSum += v
	w.itlN++
	if n := len(w.itlV); n > 0 && w.itlV[n-1] == v {
		w.itlW[n-1]++
		return
	}
	w.itlV = append(w.itlV, v)
	w.itlW = append(w.itlW, 1)
}

// p95 is the exact 95th percentile of the recorded values (the smallest
// value with at least 95% of the weight at or below it).
func p95(vals, weights []float64) float64 {
	if len(vals) == 0 {
		return 0
	}
	idx := make([]int, len(vals))
	total := 0.0
	for i := range idx {
		idx[i] = i
		if weights == nil {
			total++
		} else {
			total += weights[i]
		}
	}
	slices.SortFunc(idx, func(a, b int) int {
		switch {
		case vals[a] < vals[b]:
			return -1
		case vals[a] > vals[b]:
			return 1
		}
		return 0
	})
	acc := 0.0
	for _, i := range idx {
		if weights == nil {
			acc++
		} else {
			acc += weights[i]
		}
		if acc >= 0.95*total {
			return vals[i]
		}
	}
	return vals[idx[len(idx)-1]]
}

// WindowStats is one window as the model saw it.
type WindowStats struct {
	TTFT, Queue, Prefill, Outside, ITL, E2E, ErrorRate float64
	TTFTRecent, ITLRecent                              float64
	TTFTP95, ITLP95                                    float64
	Requests                                           int
}

func (w *window) stats() WindowStats {
	div := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	n := float64(len(w.ttft))
	sum := 0.0
	for _, v := range w.ttft {
		sum += v
	}
	return WindowStats{TTFT: div(sum, n), Queue: div(w.queue, w.finished), Prefill: div(w.prefill, w.finished),
		Outside: div(w.outside, w.finished), ITL: div(w.itlSum, w.itlN), E2E: div(w.e2e, w.finished),
		ErrorRate: div(w.errors, w.finished), TTFTRecent: div(w.ttftRecentSum, w.ttftRecentN),
		ITLRecent: div(w.itlRecentSum, w.itlRecentN), TTFTP95: p95(w.ttft, nil), ITLP95: p95(w.itlV, w.itlW),
		Requests: int(w.finished)}
}
