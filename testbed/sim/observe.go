package sim

import (
	"math"
	"sort"
)

// WindowStats is what the model itself saw in one window (truth.yaml
// observed; plan/models.md): means over the window, from request and
// engine-step records, never from the emitted metrics. Requests count for
// TTFT, queue, prefill and outside when they get their first token, for
// e2e when they finish (stop or length); per-replica values are over the
// replicas serving in the window.
type WindowStats struct {
	TTFTMean             float64 `yaml:"ttft_mean"`
	QueueMean            float64 `yaml:"queue_mean"`
	PrefillMean          float64 `yaml:"prefill_mean"`
	OutsideMean          float64 `yaml:"outside_mean"` // before the engine queue: API server, tokenizer
	ITLMean              float64 `yaml:"itl_mean"`     // mean gap between consecutive output tokens
	E2EMean              float64 `yaml:"e2e_mean"`
	ArrivalRate          float64 `yaml:"arrival_rate"` // req/s, fleet
	RunningMean          float64 `yaml:"running_mean"` // running requests per replica, time mean
	KVTokensPerRunning   float64 `yaml:"kv_tokens_per_running"`
	PrefillTokensPerStep float64 `yaml:"prefill_tokens_per_step"` // incl. recompute after preemption
	StepTimeMean         float64 `yaml:"step_time_mean"`
	ClockFactor          float64 `yaml:"clock_factor"`    // 1 = full clocks
	ErrorRate            float64 `yaml:"error_rate"`      // server-side failures / finished
	PreemptionRate       float64 `yaml:"preemption_rate"` // per s, fleet
	// Beyond models.md: client aborts / finished (abort_storm), the
	// replicas serving and the arrival rate per serving replica
	// (capacity_loss).
	AbortRate             float64 `yaml:"abort_rate"`
	ServingReplicas       int     `yaml:"serving_replicas"`
	ArrivalRatePerReplica float64 `yaml:"arrival_rate_per_replica"`
}

// Observed is the truth's view of the baseline and incident windows of
// incident.yaml.
type Observed struct {
	Baseline WindowStats `yaml:"baseline"`
	Incident WindowStats `yaml:"incident"`
	// Recent is the incident window's last 2 minutes (recentWindow): TTFT
	// and inter-token means only, whether the slowdown still holds at `at`.
	Recent RecentStats `yaml:"recent"`
	// P95 are the 95th percentiles of TTFT (per request) and of the gaps
	// between output tokens, baseline and incident window: what a user's
	// dashboard shows (not written to truth.yaml).
	P95 [2]TailStats `yaml:"-"`
}

// TailStats are one window's 95th percentiles, in seconds.
type TailStats struct{ TTFT, ITL float64 }

// RecentStats are the means of the last minutes of the incident window.
type RecentStats struct {
	TTFTMean float64 `yaml:"ttft_mean"`
	ITLMean  float64 `yaml:"itl_mean"`
}

// ITLAttribution splits the change of the step cost between the windows
// over its drivers, in seconds: the engine's cost function evaluated at the
// baseline's mean drivers, one driver at a time moved to the incident's
// mean, averaged over all 24 orders (Shapley). Total is the sum.
type ITLAttribution struct {
	Batch   float64 `yaml:"batch"`
	Context float64 `yaml:"context"`
	Prefill float64 `yaml:"prefill"`
	Clock   float64 `yaml:"clock"`
	Total   float64 `yaml:"total"`
}

// winAcc accumulates one window.
type winAcc struct {
	lo, hi float64 // (lo, hi] in simulated seconds

	nFirst                                 float64
	sumTTFT, sumQueue, sumPrefill, sumOut  float64
	nE2E, sumE2E                           float64
	nGap, sumGap                           float64
	arrivals, finished, errors, aborts     float64
	preempts                               float64
	steps, sumStep, sumPrefillTok, sumClkW float64
	runInt, kvInt                          float64 // ∫ running dt and ∫ KV tokens held dt, summed over replicas
	serving                                int
	ttftTail, gapTail                      logHist
}

// logHist counts values in logarithmic bins 2% wide from 10 µs up, enough
// to read a percentile within 2%.
type logHist struct {
	n    float64
	bins map[int]float64
	// A run of equal values is counted once its value changes: a decode
	// step adds the same gap once per request of its batch, and the
	// logarithm and map update per token were a third of a recording's CPU.
	// The counts, and so the quantiles, are the same as adding one by one.
	last    float64
	lastBin int
	pending float64
}

const logHistBase = 1.02

func (h *logHist) add(v float64) {
	if v <= 0 {
		return
	}
	h.n++
	if v == h.last && h.pending > 0 {
		h.pending++
		return
	}
	h.flush()
	h.last, h.lastBin, h.pending = v, int(math.Floor(math.Log(v/1e-5)/math.Log(logHistBase))), 1
}

// flush adds the pending run to its bin.
func (h *logHist) flush() {
	if h.pending == 0 {
		return
	}
	if h.bins == nil {
		h.bins = map[int]float64{}
	}
	h.bins[h.lastBin] += h.pending
	h.pending = 0
}

// quantile returns the q-quantile (the upper edge of its bin); 0 when empty.
func (h *logHist) quantile(q float64) float64 {
	if h.n == 0 {
		return 0
	}
	h.flush()
	keys := make([]int, 0, len(h.bins))
	for k := range h.bins {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	seen := 0.0
	for _, k := range keys {
		seen += h.bins[k]
		if seen >= q*h.n {
			return 1e-5 * math.Pow(logHistBase, float64(k+1))
		}
	}
	return 1e-5 * math.Pow(logHistBase, float64(keys[len(keys)-1]+1))
}

// observer keeps the truth's statistics of the two windows.
type observer struct {
	win    [2]winAcc // baseline, incident
	recent winAcc    // the incident window's last recentWindow seconds
	at     float64
}

func (o *observer) init(p *plan, replicas int) {
	at := p.at
	base := defaultBaseline.Seconds()
	w := defaultWindow.Seconds()
	if p.pilotSpan > 0 {
		w = p.pilotSpan
	}
	o.at = at
	o.win[0] = winAcc{lo: at - base - w, hi: at - base, serving: replicas}
	o.win[1] = winAcc{lo: at - w, hi: at, serving: replicas}
	o.recent = winAcc{lo: at - math.Min(w, recentWindow), hi: at}
	for i := range o.win {
		if p.onset <= o.win[i].lo {
			o.win[i].serving -= len(p.stopped)
		}
	}
}

// in returns the window that holds t, or nil.
func (o *observer) in(t float64) *winAcc {
	for i := range o.win {
		if t > o.win[i].lo && t <= o.win[i].hi {
			return &o.win[i]
		}
	}
	return nil
}

func (o *observer) arrive(t float64) {
	if a := o.in(t); a != nil {
		a.arrivals++
	}
}

func (o *observer) first(r *request, now float64) {
	if now > o.recent.lo && now <= o.recent.hi {
		o.recent.nFirst++
		o.recent.sumTTFT += now - r.arrival
	}
	if a := o.in(now); a != nil {
		a.nFirst++
		a.sumTTFT += now - r.arrival
		a.ttftTail.add(now - r.arrival)
		a.sumQueue += r.sched - r.queued
		a.sumPrefill += now - r.sched
		a.sumOut += r.queued - r.arrival
	}
}

func (o *observer) gap(now, gap float64) {
	if now > o.recent.lo && now <= o.recent.hi {
		o.recent.nGap++
		o.recent.sumGap += gap
	}
	if a := o.in(now); a != nil {
		a.nGap++
		a.sumGap += gap
		a.gapTail.add(gap)
	}
}

func (o *observer) finish(r *request, now float64) {
	a := o.in(now)
	if a == nil {
		return
	}
	a.finished++
	switch r.reason {
	case "error":
		a.errors++
	case "abort":
		a.aborts++
	default:
		a.nE2E++
		a.sumE2E += now - r.arrival
	}
}

func (o *observer) preempt(now float64) {
	if a := o.in(now); a != nil {
		a.preempts++
	}
}

// step records an engine step ending at now, with the batch it ran.
func (o *observer) step(e *engine, now float64) {
	a := o.in(now)
	if a == nil {
		return
	}
	d := now - e.stepStart
	prefill := 0
	for _, it := range e.batch {
		if it.n > 1 || it.ctx < it.r.prompt {
			prefill += it.n
		}
	}
	a.steps++
	a.sumStep += d
	a.sumClkW += d * e.clock
	a.sumPrefillTok += float64(prefill)
	a.runInt += float64(len(e.running)) * d
	a.kvInt += float64(e.allocatedBlocks()*blockSize) * d
}

// stats turns a window's sums into means.
func (a *winAcc) stats() WindowStats {
	div := func(x, n float64) float64 {
		if n == 0 {
			return 0
		}
		return x / n
	}
	span := a.hi - a.lo
	s := WindowStats{
		TTFTMean: div(a.sumTTFT, a.nFirst), QueueMean: div(a.sumQueue, a.nFirst),
		PrefillMean: div(a.sumPrefill, a.nFirst), OutsideMean: div(a.sumOut, a.nFirst),
		ITLMean: div(a.sumGap, a.nGap), E2EMean: div(a.sumE2E, a.nE2E),
		ArrivalRate:          a.arrivals / span,
		RunningMean:          div(a.runInt, span*float64(a.serving)),
		KVTokensPerRunning:   div(a.kvInt, a.runInt),
		PrefillTokensPerStep: div(a.sumPrefillTok, a.steps),
		StepTimeMean:         div(a.sumStep, a.steps),
		ClockFactor:          div(a.sumClkW, a.sumStep),
		ErrorRate:            div(a.errors, a.finished),
		PreemptionRate:       a.preempts / span,
		AbortRate:            div(a.aborts, a.finished),
		ServingReplicas:      a.serving,
	}
	if a.sumStep == 0 {
		s.ClockFactor = 1
	}
	s.ArrivalRatePerReplica = div(s.ArrivalRate, float64(a.serving))
	s.round()
	return s
}

// round keeps six significant digits, for a readable truth.yaml.
func (s *WindowStats) round() {
	for _, v := range []*float64{&s.TTFTMean, &s.QueueMean, &s.PrefillMean, &s.OutsideMean, &s.ITLMean, &s.E2EMean,
		&s.ArrivalRate, &s.RunningMean, &s.KVTokensPerRunning, &s.PrefillTokensPerStep, &s.StepTimeMean,
		&s.ClockFactor, &s.ErrorRate, &s.PreemptionRate, &s.AbortRate, &s.ArrivalRatePerReplica} {
		*v = sig6(*v)
	}
}

func sig6(v float64) float64 {
	if v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return v
	}
	e := math.Pow(10, 5-math.Floor(math.Log10(math.Abs(v))))
	return math.Round(v*e) / e
}

// observed returns both windows' statistics.
func (o *observer) observed() Observed {
	r := o.recent.stats()
	obs := Observed{Baseline: o.win[0].stats(), Incident: o.win[1].stats(), Recent: RecentStats{TTFTMean: r.TTFTMean, ITLMean: r.ITLMean}}
	for i := range o.win {
		obs.P95[i] = TailStats{TTFT: o.win[i].ttftTail.quantile(0.95), ITL: o.win[i].gapTail.quantile(0.95)}
	}
	return obs
}

// attributeITL evaluates the step cost of cfg at the baseline's and the
// incident's mean drivers and splits the difference by Shapley values over
// batch, context, prefill and clock.
func attributeITL(cfg *engineConfig, b, n WindowStats) ITLAttribution {
	base := [4]float64{b.RunningMean, b.KVTokensPerRunning, b.PrefillTokensPerStep, b.ClockFactor}
	inc := [4]float64{n.RunningMean, n.KVTokensPerRunning, n.PrefillTokensPerStep, n.ClockFactor}
	cost := func(v [4]float64) float64 { return cfg.stepSecondsAt(v[0], v[1], v[2], v[3]) }
	var phi [4]float64
	perm := []int{0, 1, 2, 3}
	orders := 0
	var walk func(k int)
	walk = func(k int) {
		if k == len(perm) {
			v := base
			prev := cost(v)
			for _, d := range perm {
				v[d] = inc[d]
				cur := cost(v)
				phi[d] += cur - prev
				prev = cur
			}
			orders++
			return
		}
		for i := k; i < len(perm); i++ {
			perm[k], perm[i] = perm[i], perm[k]
			walk(k + 1)
			perm[k], perm[i] = perm[i], perm[k]
		}
	}
	walk(0)
	a := ITLAttribution{Batch: phi[0] / float64(orders), Context: phi[1] / float64(orders),
		Prefill: phi[2] / float64(orders), Clock: phi[3] / float64(orders)}
	a.Total = a.Batch + a.Context + a.Prefill + a.Clock
	return a
}
