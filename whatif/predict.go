package whatif

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/whyslow/whyslow/verdict"
)

// Calibration band: the replay of the incident's own inputs must land
// within these factors of the observed TTFT p95 (and inter-token p95) for
// the fit to be used.
const (
	CalibLow  = 0.8
	CalibHigh = 1.25
	// Unchanged is the relative change below which a prediction is "unchanged".
	Unchanged = verdict.PredictedUnchanged
)

// Seeds are the replay seeds per prediction (median and range).
var Seeds = []uint64{1, 2, 3}

// SimReplicas is the most replicas a replay simulates behind its router;
// more stand for the rest (each sample weighted), which keeps a replay's
// cost flat in the fleet's size.
const SimReplicas = 4

// Fix is a change of the model's inputs; the zero value changes nothing.
type Fix struct {
	// Replicas sets the serving replicas; ReplicasFactor multiplies them.
	Replicas       int
	ReplicasFactor float64
	// MaxNumBatchedTokens and MaxNumSeqs set the scheduler's token budget
	// per step (TensorRT-LLM: max_num_tokens) and running-request bound.
	MaxNumBatchedTokens, MaxNumSeqs int
	// KVFactor multiplies the KV pool (gpu_memory_utilization,
	// --mem-fraction-static, free_gpu_memory_fraction).
	KVFactor float64
	// RestorePrefix, RestoreClock and Rebalance put the baseline's prefix
	// hit rate, the baseline's clocks and an even routing back.
	RestorePrefix, RestoreClock, Rebalance bool
	// PromptCap truncates prompts at the gateway to this many tokens.
	PromptCap int
}

// String names the fix as the flags spell it.
func (f Fix) String() string {
	var parts []string
	if f.Replicas > 0 {
		parts = append(parts, fmt.Sprintf("replicas=%d", f.Replicas))
	}
	if f.ReplicasFactor > 0 {
		parts = append(parts, fmt.Sprintf("replicas×%g", f.ReplicasFactor))
	}
	if f.MaxNumBatchedTokens > 0 {
		parts = append(parts, fmt.Sprintf("max_num_batched_tokens=%d", f.MaxNumBatchedTokens))
	}
	if f.MaxNumSeqs > 0 {
		parts = append(parts, fmt.Sprintf("max_num_seqs=%d", f.MaxNumSeqs))
	}
	if f.KVFactor > 0 {
		parts = append(parts, fmt.Sprintf("kv×%g", f.KVFactor))
	}
	if f.RestorePrefix {
		parts = append(parts, "prefix hits restored")
	}
	if f.RestoreClock {
		parts = append(parts, "clocks restored")
	}
	if f.Rebalance {
		parts = append(parts, "routing rebalanced")
	}
	if f.PromptCap > 0 {
		parts = append(parts, fmt.Sprintf("prompt cap %d", f.PromptCap))
	}
	if len(parts) == 0 {
		return "no change"
	}
	return strings.Join(parts, ", ")
}

// Range is a prediction's median and its range over the seeds.
type Range struct{ Median, Low, High float64 }

// Metrics are what the user feels: TTFT and inter-token p95 (seconds) and
// output throughput (tokens/s over the scope).
type Metrics struct{ TTFTP95, ITLP95, Throughput float64 }

// Prediction is one fix's predicted effect.
type Prediction struct {
	Fix                         Fix
	TTFTP95, ITLP95, Throughput Range
	// Trade says the fix improves one latency and worsens the other.
	Trade string

	histTTFT, histITL float64 // the replay's p95s read through the histograms' buckets
}

// Model is the fitted, calibrated model of one incident.
type Model struct {
	In       *Inputs
	Fit      Fit
	Observed Metrics
	// Replayed is the replay of the incident's own inputs, before scaling;
	// Incident is after: what the changes of a fix are relative to (the
	// observed p95s are interpolated inside histogram buckets, the
	// predictions are not).
	Replayed, Incident Metrics
	// ScaleTTFT and ScaleITL are observed over replayed: the predictions'
	// scale (Poor when outside the calibration band).
	ScaleTTFT, ScaleITL float64
	// ScaleThroughput is observed over replayed throughput (not banded:
	// a replay of arrivals below capacity serves what arrives).
	ScaleThroughput float64
	cfg             Config // the incident's replica
	replicas        float64
	rate            float64 // scope arrivals
	// pinned is the share of the arrivals pinned to one replica (session
	// affinity, a hash ring) on top of its even share of the rest (0: even).
	pinned float64
}

// Poor says the replay of the incident's own inputs missed the observed
// TTFT or inter-token p95 by more than the calibration band: the
// predictions are then the replay's relative changes applied to the
// observed values, and say so.
func (m *Model) Poor() bool { return !inBand(m.ScaleTTFT) || !inBand(m.ScaleITL) }

// Quality is the fit's quality in words.
func (m *Model) Quality() string {
	q := fmt.Sprintf("replayed incident / observed: TTFT p95 ×%.2f, inter-token p95 ×%.2f", 1/m.ScaleTTFT, 1/m.ScaleITL)
	if m.Poor() {
		return "poor (" + q + fmt.Sprintf(", outside %.2f–%.2f): the predictions are relative changes scaled to the observed values", CalibLow, CalibHigh)
	}
	return "good (" + q + ")"
}

// required are the incident window's series every prediction needs.
var required = []string{sigArrival, sigPromptMean, sigGenMean, sigTargets, sigKVPerRun, sigCtx, sigTTFTP95, sigITLP95}

// Build fits the step model, sizes the pool and the scheduler, and
// calibrates against the incident. A *MissingError says why nothing can
// be predicted.
func Build(in *Inputs) (*Model, error) {
	if err := need("the incident replay", required, in.Inc); err != nil {
		return nil, err
	}
	if _, ok := prefillRate(in.Inc); !ok {
		if _, ok := in.Inc.get(sigHit); !ok {
			return nil, &MissingError{What: "the prefill work", Series: []string{sigHit, sigPrefillTPS}}
		}
	}
	s := in.Scheduler
	if !s.Known || s.MaxNumBatchedTokens <= 0 {
		return nil, &MissingError{What: "the scheduler", Series: []string{"max_num_batched_tokens (incident.yaml scheduler, the engine's configuration gauges, or a known GPU for the engine default)"}}
	}
	obs := in.Obs
	if len(obs) == 0 {
		obs = []Window{in.Base, in.Inc}
	}
	fit, err := FitStep(obs)
	if err != nil {
		return nil, err
	}
	m := &Model{In: in, Fit: fit}
	w := in.Inc
	v := func(n string) float64 { x, _ := w.get(n); return x }
	m.replicas = math.Max(1, math.Round(v(sigTargets)))
	m.rate = v(sigArrival)
	if sp, ok := w.get(sigSpread); ok && sp >= 1.15 && m.replicas >= 2 {
		// the hottest replica gets pinned + (1 − pinned)/n of the arrivals,
		// rate_spread (max over mean) times the mean share 1/n
		m.pinned = (math.Min(sp, m.replicas) - 1) / (m.replicas - 1)
	}
	hit, ok := w.get(sigHit)
	if !ok {
		pre, _ := prefillRate(w)
		hit = 1 - pre/math.Max(v(sigPromptTPS), 1e-9)
	}
	kv := kvTokens(in)
	c := Config{Policy: policyOf(in.Engine), Step: fit.Model, Clock: 1,
		PromptMean: v(sigPromptMean), PromptSigma: promptSigma(w), PromptMax: promptMax(w), PromptTail: promptTail(w), OutputMean: v(sigGenMean), OutputSigma: 0.8,
		Hit: math.Max(0, math.Min(0.98, hit)), Budget: s.MaxNumBatchedTokens, MaxSeqs: s.MaxNumSeqs, KVTokens: kv}
	if len(c.PromptTail) > 0 {
		c.PromptBody = fitBody(c.PromptTail, c.PromptMean)
	}
	if c.PromptHist = NewHistogram(in.PromptLes, in.PromptCounts); c.PromptHist != nil {
		c.PromptHist.FitMean(float64(c.PromptMax), c.PromptMean)
	}
	if fit.ClockKnown {
		c.Clock = v(sigClock)
	}
	tq, ok1 := w.get(sigTTFTMean)
	q, ok2 := w.get(sigQueueMean)
	p, ok3 := w.get(sigPrefill)
	outsideKnown := ok1 && ok2 && ok3
	if outsideKnown {
		c.Outside = math.Max(0, tq-q-p)
	}
	if c.Policy == PolicyTRT {
		c.ReserveOut = reserveOut(w, kv, m.replicas, m.pinned > 0, c.PromptMean, c.OutputMean)
	}
	m.cfg = c
	// TensorRT-LLM's queue fits its reservation (fitReserve): its
	// prefill cost fits the TTFT mean alone, before the queue is read
	m.fitPrefill(w, obs, outsideKnown, c.Policy != PolicyTRT)
	if c.Policy == PolicyTRT {
		m.cfg.ReserveOut = m.fitReserve(w)
	}
	m.Observed = Metrics{TTFTP95: v(sigTTFTP95), ITLP95: v(sigITLP95), Throughput: v(sigGenTPS)}
	own := m.replay(Fix{})
	m.Replayed = Metrics{TTFTP95: own.TTFTP95.Median, ITLP95: own.ITLP95.Median, Throughput: own.Throughput.Median}
	// the replay read as the engine's histograms read the requests, so
	// that the interpolation inside a bucket does not count as misfit
	m.ScaleTTFT = ratio(m.Observed.TTFTP95, own.histTTFT)
	m.ScaleITL = ratio(m.Observed.ITLP95, own.histITL)
	m.ScaleThroughput = 1
	if m.Observed.Throughput > 0 && m.Replayed.Throughput > 0 {
		m.ScaleThroughput = m.Observed.Throughput / m.Replayed.Throughput
	}
	m.Incident = Metrics{TTFTP95: m.Replayed.TTFTP95 * m.ScaleTTFT, ITLP95: m.Replayed.ITLP95 * m.ScaleITL,
		Throughput: m.Replayed.Throughput * m.ScaleThroughput}
	if m.Replayed.TTFTP95 <= 0 || m.Replayed.ITLP95 <= 0 || m.Observed.TTFTP95 <= 0 || m.Observed.ITLP95 <= 0 {
		return nil, &MissingError{What: "the calibration", Series: []string{sigTTFTP95, sigITLP95}}
	}
	return m, nil
}

// reserveOut is the output tokens TensorRT-LLM reserves per request
// (GUARANTEED_NO_EVICT admits a request when prompt + max_tokens fit the
// blocks not yet reserved) as the window's averages show them: 4× the
// mean output, or, where requests waited at a full reservation, what
// fills a pool of kv tokens per replica at the running of the replica
// they waited on. The wall is a replica's: under a skewed routing
// (skewed) the queue and the running sit on the busiest replica, read as
// the averages times waiting_spread and running_spread where exported
// (the scope's averages would spread them over replicas that hold no
// queue, and read the wall several times too high).
func reserveOut(w Window, kv int, replicas float64, skewed bool, promptMean, outMean float64) int {
	out := int(4 * outMean)
	wt, ok := w.get(sigWaiting)
	run, ok2 := w.get(sigRunning)
	if !ok || !ok2 {
		return out
	}
	wt, run = wt/replicas, run/replicas
	if skewed {
		ws, ok3 := w.get(sigWaitSpread)
		rs, ok4 := w.get(sigRunSpread)
		if ok3 && ok4 && ws >= 1 && rs >= 1 {
			wt, run = wt*ws, run*rs
		}
	}
	if wt >= 1 && run >= 1 {
		out = max(out, int(float64(kv)/run-promptMean))
	}
	return out
}

// fitReserve fits the reservation (max_tokens is not exported) where the
// averages cannot tell it: a wall the reservations hit now and then (a
// longer max_tokens) holds requests back too seldom to show in the mean
// waiting per replica. Requests waited while the busiest replica never
// ran more than running_peak, so the reservation is at most what fills
// the pool at that peak; between the averages' reading and that bound it
// is the one whose replay queues as many requests as the window's waiting
// (bisection on the mean over the seeds: one seed's queue near a wall
// swings too much to fit on).
func (m *Model) fitReserve(w Window) int {
	lo := m.cfg.ReserveOut
	wt, ok := w.get(sigWaiting)
	peak, ok2 := w.get(sigRunPeak)
	if !ok || !ok2 || wt <= 0 || peak < 1 {
		return lo
	}
	hi := int(float64(m.cfg.KVTokens)/peak - m.cfg.PromptMean)
	if hi <= lo {
		return lo
	}
	want := wt / m.replicas
	waiting := func(reserve int) float64 {
		c := m.configFor(Fix{})
		c.ReserveOut = reserve
		return meanOverSeeds(c, func(r Result) float64 { return r.Waiting })
	}
	if waiting(lo) >= want {
		return lo
	}
	if waiting(hi) <= want {
		return hi
	}
	for range reserveSteps {
		mid := (lo + hi) / 2
		if waiting(mid) < want {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}

// reserveSteps are fitReserve's bisection steps (the bound over 2^5).
const reserveSteps = 5

// The prefill cost's calibration: the factors of the fitted cost it may
// take, the bisection's steps, and the queue per replica (the window's or
// the replay's) below which a queue says nothing about it.
const (
	prefillLow, prefillHigh = 0.5, 2.0
	prefillSteps            = 6
	queueSeen               = 0.5
)

// fitPrefill sets the prefill cost per token from what the window measured
// of it. The sub-windows move prefill tokens, decode batch and context
// together (one incident's load rises or falls as a whole), so the
// step-time fit splits the gap between them poorly, and the prefill cost
// is what sets both a prompt's own prefill time and how close to
// saturation a replica runs: a replay near it queues many times what the
// window measured. The prefill cost is the one (between half and twice the
// fitted one, the other coefficients fitted again with it held, so that
// the sub-windows' gaps stay fitted) whose replay reproduces, as a mean
// over the seeds (bisection):
//   - the window's TTFT mean, where the time outside the engine is known
//     (outsideKnown: TTFT, queue and prefill means), or where it is not
//     but the replay's engine alone takes longer than that mean (the time
//     outside is never negative: the mean bounds the engine's); a TTFT
//     mean above the replay's without the outside time cannot tell the
//     prefill from time before the engine;
//   - else the window's mean waiting per replica, where the window or the
//     replay queues at all (queueSeen) and the queue may fit the prefill
//     (byWaiting; TensorRT-LLM's queue fits its reservation instead,
//     fitReserve: one measured queue fits one unknown);
//   - else nothing: the fitted cost stays.
//
// Where no cost in that range reproduces it (a queue the KV pool makes),
// the fitted one stays too.
func (m *Model) fitPrefill(w Window, obs []Window, outsideKnown, byWaiting bool) {
	fitted := m.Fit
	if fitted.Model.PerPrefillToken <= 0 {
		return
	}
	measure := func(r Result) float64 { return weightedMean(r.TTFT, r.TTFTW) }
	want, ok := w.get(sigTTFTMean)
	byQueue := !outsideKnown || !ok || want <= 0
	refit := func(k float64) Fit { return refitWithPrefill(obs, fitted, k*fitted.Model.PerPrefillToken) }
	at := func(k float64) float64 {
		c := m.configFor(Fix{})
		c.Step = refit(k).Model
		return meanOverSeeds(c, measure)
	}
	if byQueue && ok && want > 0 && at(1) > want {
		// the time outside the engine is unknown but not negative: a
		// replay whose engine alone takes longer than the window's whole
		// TTFT mean prefills too dearly
		byQueue = false
	}
	if byQueue {
		wt, ok := w.get(sigWaiting)
		if !ok || !byWaiting {
			return
		}
		measure, want = func(r Result) float64 { return r.Waiting }, wt/m.replicas
	}
	if byQueue && math.Max(want, at(1)) < queueSeen {
		return // nobody queues: the queue says nothing of the prefill
	}
	lo, hi := math.Log(prefillLow), math.Log(prefillHigh)
	if at(prefillLow) >= want {
		return // the replay is this slow however cheap the prefill: not its doing
	}
	if at(prefillHigh) <= want {
		return // nor this fast however dear
	}
	for range prefillSteps {
		mid := (lo + hi) / 2
		if at(math.Exp(mid)) < want {
			lo = mid
		} else {
			hi = mid
		}
	}
	f := refit(math.Exp((lo + hi) / 2))
	m.Fit, m.cfg.Step = f, f.Model
}

// meanOverSeeds is measure of c's replay, averaged over Seeds: near a
// wall one seed's queue swings too much to fit on.
func meanOverSeeds(c Config, measure func(Result) float64) float64 {
	sum := 0.0
	for _, seed := range Seeds {
		c.Seed = seed
		sum += measure(Replay(c))
	}
	return sum / float64(len(Seeds))
}

// weightedMean is the mean of xs weighted by ws (0 without samples).
func weightedMean(xs, ws []float64) float64 {
	s, n := 0.0, 0.0
	for i, x := range xs {
		s += x * ws[i]
		n += ws[i]
	}
	if n == 0 {
		return 0
	}
	return s / n
}

func inBand(x float64) bool { return x >= CalibLow && x <= CalibHigh }

func ratio(a, b float64) float64 {
	if b <= 0 {
		return math.Inf(1)
	}
	return a / b
}

// kvTokens is one replica's pool: the context a running request holds
// over its share of the pool, averaged over the windows that have both.
func kvTokens(in *Inputs) int {
	var sum float64
	n := 0
	for _, w := range []Window{in.Inc, in.Base} {
		ctx, ok1 := w.get(sigCtx)
		per, ok2 := w.get(sigKVPerRun)
		if ok1 && ok2 && per > 0 {
			sum += ctx / per
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return int(sum / float64(n))
}

// promptSigma is the lognormal σ of the prompt lengths from their mean and
// p90 (ln(p90/mean) = zσ − σ²/2, z = 1.2816), or from the p99 (z = 2.3263)
// when no lognormal has that p90, or 0.8 without either.
func promptSigma(w Window) float64 {
	mean, ok := w.get(sigPromptMean)
	if !ok || mean <= 0 {
		return 0.8
	}
	for _, q := range []struct {
		name string
		z    float64
	}{{sigPromptP90, 1.2816}, {sigPromptP99, 2.3263}} {
		v, ok := w.get(q.name)
		if !ok || v <= 0 {
			continue
		}
		d := q.z*q.z - 2*math.Log(v/mean)
		if d >= 0 {
			return math.Max(0.05, q.z-math.Sqrt(d))
		}
	}
	if _, ok := w.get(sigPromptP90); ok {
		return 1.2816 // the p90 is as far above the mean as a lognormal's goes
	}
	return 0.8
}

// promptTail is the window's prompt-length quantiles (p90, p99, p99.9,
// as exported; increasing), or nil without a p90.
func promptTail(w Window) []Quantile {
	var q []Quantile
	for _, a := range []struct {
		name string
		u    float64
	}{{sigPromptP90, 0.9}, {sigPromptP99, 0.99}, {sigPromptP999, 0.999}} {
		v, ok := w.get(a.name)
		if !ok || v <= 0 || (len(q) > 0 && v <= q[len(q)-1].V) {
			break
		}
		q = append(q, Quantile{U: a.u, V: v})
	}
	if len(q) == 0 || q[0].U != 0.9 {
		return nil
	}
	return q
}

// promptMax is the longest prompt the replay draws: 1.2× the window's
// p99.9 prompt, or 2× its p99; 0 (no cap) without either.
func promptMax(w Window) int {
	if v, ok := w.get(sigPromptP999); ok && v > 0 {
		return int(1.2 * v)
	}
	if v, ok := w.get(sigPromptP99); ok && v > 0 {
		return int(2 * v)
	}
	return 0
}

func policyOf(engine string) string {
	switch engine {
	case "sglang":
		return PolicySGLang
	case "trtllm":
		return PolicyTRT
	}
	return PolicyVLLM
}

// Check says whether the model can apply f: a *MissingError names the
// series the fix needs.
func (m *Model) Check(f Fix) error {
	switch {
	case f.RestorePrefix:
		if err := need("prefix hits restored", []string{sigHit}, m.In.Base, m.In.Inc); err != nil {
			return err
		}
	case f.RestoreClock:
		if !m.Fit.ClockKnown {
			return &MissingError{What: "clocks restored", Series: []string{sigClock}}
		}
		if err := need("clocks restored", []string{sigClock}, m.In.Base); err != nil {
			return err
		}
	case f.Rebalance:
		if err := need("routing rebalanced", []string{sigSpread}, m.In.Inc); err != nil {
			return err
		}
		if m.replicas < 2 {
			return fmt.Errorf("routing rebalanced: one replica serves the scope")
		}
	}
	return nil
}

// Predict replays the incident with f applied.
func (m *Model) Predict(f Fix) (*Prediction, error) {
	if err := m.Check(f); err != nil {
		return nil, err
	}
	p := m.replay(f)
	scale := func(r Range, s float64) Range { return Range{r.Median * s, r.Low * s, r.High * s} }
	p.TTFTP95 = scale(p.TTFTP95, m.ScaleTTFT)
	p.ITLP95 = scale(p.ITLP95, m.ScaleITL)
	p.Throughput = scale(p.Throughput, m.ScaleThroughput)
	p.Fix = f
	dt := p.TTFTP95.Median/m.Incident.TTFTP95 - 1
	di := p.ITLP95.Median/m.Incident.ITLP95 - 1
	switch {
	case dt < -Unchanged && di > Unchanged:
		p.Trade = fmt.Sprintf("trades inter-token latency for TTFT: TTFT p95 %+.0f%%, inter-token p95 %+.0f%%", 100*dt, 100*di)
	case di < -Unchanged && dt > Unchanged:
		p.Trade = fmt.Sprintf("trades TTFT for inter-token latency: inter-token p95 %+.0f%%, TTFT p95 %+.0f%%", 100*di, 100*dt)
	}
	return p, nil
}

// replay runs the replica classes under f with every seed.
func (m *Model) replay(f Fix) *Prediction {
	c := m.configFor(f)
	var ttft, itl, thr, hTTFT, hITL []float64
	for _, seed := range Seeds {
		c.Seed = seed
		r := Replay(c)
		ttft = append(ttft, weightedP95(r.TTFT, r.TTFTW))
		itl = append(itl, weightedP95(r.ITL, r.ITLW))
		hTTFT = append(hTTFT, histP95(r.TTFT, r.TTFTW, m.In.Buckets[sigTTFTP95]))
		hITL = append(hITL, histP95(r.ITL, r.ITLW, m.In.Buckets[sigITLP95]))
		tokens := 0.0
		if r.Span > 0 {
			tokens = r.Tokens / r.Span
		}
		thr = append(thr, tokens)
	}
	return &Prediction{TTFTP95: rangeOf(ttft), ITLP95: rangeOf(itl), Throughput: rangeOf(thr),
		histTTFT: rangeOf(hTTFT).Median, histITL: rangeOf(hITL).Median}
}

// configFor is the replay's configuration with f applied.
func (m *Model) configFor(f Fix) Config {
	c := m.cfg
	n := m.replicas
	if f.Replicas > 0 {
		n = float64(f.Replicas)
	}
	if f.ReplicasFactor > 0 {
		n = math.Max(1, math.Round(n*f.ReplicasFactor))
	}
	if f.MaxNumBatchedTokens > 0 {
		c.Budget = f.MaxNumBatchedTokens
	}
	if f.MaxNumSeqs > 0 {
		c.MaxSeqs = f.MaxNumSeqs
	}
	if f.KVFactor > 0 {
		c.KVTokens = int(float64(c.KVTokens) * f.KVFactor)
	}
	if f.RestorePrefix {
		// restoring puts back hits that were lost, never takes away ones
		// the incident gained (a longer cached history)
		if base, _ := m.In.Base.get(sigHit); base > c.Hit {
			c.Hit = math.Min(0.98, base)
		}
	}
	if f.RestoreClock {
		c.Clock, _ = m.In.Base.get(sigClock)
	}
	if f.PromptCap > 0 {
		c.PromptCap = f.PromptCap
	}
	// up to SimReplicas replicas behind the router stand for the n
	c.Replicas = int(math.Min(n, SimReplicas))
	c.Represents = n
	k := float64(c.Replicas)
	c.Rate = m.rate * k / n
	if m.pinned > 0 && !f.Rebalance && n >= 2 && k >= 2 {
		// the pinned share stays on the first replica; the rest is split
		// evenly over all n
		c.Rate = m.rate * (m.pinned + k*(1-m.pinned)/n)
		c.Pinned = m.rate * m.pinned / c.Rate
	}
	return c
}

// histP95 is the 95th percentile of the weighted samples as
// histogram_quantile reads them from buckets with the bounds les: linear
// inside the bucket that holds the rank, the highest bound past the last.
// Without bounds it is the samples' own p95.
func histP95(xs, ws, les []float64) float64 {
	if len(les) == 0 || len(xs) == 0 {
		return weightedP95(xs, ws)
	}
	counts := make([]float64, len(les)+1)
	total := 0.0
	for i, x := range xs {
		counts[sort.SearchFloat64s(les, x)] += ws[i]
		total += ws[i]
	}
	rank := 0.95 * total
	acc := 0.0
	for i, c := range counts {
		if acc+c >= rank && c > 0 {
			if i == len(les) {
				return les[len(les)-1]
			}
			lo := 0.0
			if i > 0 {
				lo = les[i-1]
			}
			return lo + (les[i]-lo)*(rank-acc)/c
		}
		acc += c
	}
	return les[len(les)-1]
}

func rangeOf(xs []float64) Range {
	s := slices.Clone(xs)
	sort.Float64s(s)
	return Range{Median: s[len(s)/2], Low: s[0], High: s[len(s)-1]}
}

// weightedP95 is the 95th percentile of xs weighted by ws.
func weightedP95(xs, ws []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	idx := make([]int, len(xs))
	total := 0.0
	for i := range idx {
		idx[i] = i
		total += ws[i]
	}
	sort.Slice(idx, func(a, b int) bool { return xs[idx[a]] < xs[idx[b]] })
	acc := 0.0
	for _, i := range idx {
		acc += ws[i]
		if acc >= 0.95*total {
			return xs[i]
		}
	}
	return xs[idx[len(idx)-1]]
}

// Config is the incident's replica as the replay runs it.
func (m *Model) Config() Config { return m.cfg }
