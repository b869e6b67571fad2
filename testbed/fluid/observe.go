package fluid

// winAcc accumulates the model's internals over one window.
type winAcc struct {
	ttft, queue, prefill, outside, nFirst float64
	itlSum, itlN                          float64
	e2eSum, e2eN                          float64
	arrivals                              float64
	runSum, runN                          float64
	kvHeld, kvRun                         float64
	pfTok, steps, stepTime                float64
	clockSum, clockN                      float64
	errors, finished                      float64
	preempts                              float64
}

// observer measures the truth from the model's internals, never from the
// emitted metrics: fleet-wide and per replica, for the baseline and the
// incident window.
type observer struct {
	bounds [2][2]float64
	fleet  [2]winAcc
	rep    [][2]winAcc
	repArr [][2]float64  // arrivals routed to each replica
	grpArr [3][2]float64 // arrivals by group: base, long prompts, tenant
	// recent is the incident window's last recentLen seconds (TTFT and
	// inter-token means only): whether the symptom still holds at its end.
	recent       winAcc
	recentBounds [2]float64
}

// recentLen is the end of the incident window whose means say whether a
// slowdown still holds (whyslow's persistence check reads 2 minutes).
const recentLen = 120.0

func newObserver(p *plan) *observer {
	inc := [2]float64{p.at - windowLen, p.at}
	base := [2]float64{inc[0] - baselineBy, inc[1] - baselineBy}
	return &observer{bounds: [2][2]float64{base, inc}, rep: make([][2]winAcc, p.replicas), repArr: make([][2]float64, p.replicas),
		recentBounds: [2]float64{p.at - recentLen, p.at}}
}

func (o *observer) inRecent(t float64) bool { return t >= o.recentBounds[0] && t < o.recentBounds[1] }

// win returns the window holding t, or -1.
func (o *observer) win(t float64) int {
	for i, b := range o.bounds {
		if t >= b[0] && t < b[1] {
			return i
		}
	}
	return -1
}

// each applies fn to the fleet and the replica accumulators of window w.
func (o *observer) each(w, idx int, fn func(a *winAcc)) {
	fn(&o.fleet[w])
	if idx >= 0 {
		fn(&o.rep[idx][w])
	}
}

func (o *observer) arrivals(t float64, group, n int) {
	if w := o.win(t); w >= 0 {
		o.fleet[w].arrivals += float64(n)
		o.grpArr[group][w] += float64(n)
	}
}

func (o *observer) repArrival(idx int, t float64) {
	if w := o.win(t); w >= 0 {
		o.repArr[idx][w]++
	}
}

func (o *observer) firstToken(idx int, c *cohort) {
	w := o.win(c.first)
	if w < 0 {
		return
	}
	n := float64(c.n)
	if o.inRecent(c.first) {
		o.recent.ttft += n * (c.first - c.arrive)
		o.recent.nFirst += n
	}
	o.each(w, idx, func(a *winAcc) {
		a.ttft += n * (c.first - c.arrive)
		a.queue += n * (c.start - c.enq)
		a.prefill += n * (c.first - c.start)
		a.outside += n * (c.enq - c.arrive)
		a.nFirst += n
	})
}

func (o *observer) finished(idx int, c *cohort, t float64) {
	w := o.win(t)
	if w < 0 {
		return
	}
	n := float64(c.n)
	o.each(w, idx, func(a *winAcc) {
		a.finished += n
		if c.outcome == outError {
			a.errors += n
			return
		}
		a.e2eSum += n * (t - c.arrive)
		a.e2eN += n
	})
}

func (o *observer) gaps(idx int, t, nHi, tauHi, nLo, tauLo float64) {
	w := o.win(t - tickDT/2)
	if w < 0 || nHi+nLo <= 0 {
		return
	}
	if o.inRecent(t - tickDT/2) {
		o.recent.itlSum += nHi*tauHi + nLo*tauLo
		o.recent.itlN += nHi + nLo
	}
	o.each(w, idx, func(a *winAcc) {
		a.itlSum += nHi*tauHi + nLo*tauLo
		a.itlN += nHi + nLo
	})
}

func (o *observer) resumeGap(idx int, t, gap, n float64) {
	w := o.win(t)
	if w < 0 {
		return
	}
	if o.inRecent(t) {
		o.recent.itlSum += n * gap
		o.recent.itlN += n
	}
	o.each(w, idx, func(a *winAcc) {
		a.itlSum += n * gap
		a.itlN += n
	})
}

// tick adds one replica's tick state.
func (o *observer) tick(r *replica, mid float64) {
	w := o.win(mid)
	if w < 0 {
		return
	}
	o.each(w, r.idx, func(a *winAcc) {
		a.runSum += r.decB
		a.runN++
		a.kvHeld += (r.used + r.shared) * blockSize
		a.kvRun += float64(r.nRun)
		a.pfTok += r.pfTokens
		a.steps += r.steps
		a.stepTime += r.busy
		a.clockSum += r.lastEnv.clock
		a.clockN++
		a.preempts += r.preempted
	})
}

// Window is one window's means of the model's internals (truth.yaml
// observed.baseline / observed.incident).
type Window struct {
	// TTFTMean is the mean time to first token (s), over requests that got
	// their first token in the window.
	TTFTMean float64 `yaml:"ttft_mean"`
	// QueueMean is the mean time in the engine queue (s).
	QueueMean float64 `yaml:"queue_mean"`
	// PrefillMean is the mean time from scheduling to first token (s).
	PrefillMean float64 `yaml:"prefill_mean"`
	// OutsideMean is the mean time before the engine queue (s).
	OutsideMean float64 `yaml:"outside_mean"`
	// ITLMean is the mean gap between consecutive output tokens (s).
	ITLMean float64 `yaml:"itl_mean"`
	// E2EMean is the mean request latency (s), over requests finished in
	// the window (server-side failures excluded).
	E2EMean float64 `yaml:"e2e_mean"`
	// ArrivalRate is the fleet's arrivals per second.
	ArrivalRate float64 `yaml:"arrival_rate"`
	// RunningMean is the decoding requests per replica, mean over replicas
	// and time.
	RunningMean float64 `yaml:"running_mean"`
	// KVTokensPerRunning is the KV tokens held per running request.
	KVTokensPerRunning float64 `yaml:"kv_tokens_per_running"`
	// PrefillTokensPerStep is the prompt tokens computed per engine step,
	// recompute after preemption included.
	PrefillTokensPerStep float64 `yaml:"prefill_tokens_per_step"`
	// StepTimeMean is the mean engine step (s).
	StepTimeMean float64 `yaml:"step_time_mean"`
	// ClockFactor is the SM clock over its maximum (1 = full clocks).
	ClockFactor float64 `yaml:"clock_factor"`
	// ErrorRate is server-side failures over finished requests.
	ErrorRate float64 `yaml:"error_rate"`
	// PreemptionRate is the fleet's preemptions per second.
	PreemptionRate float64 `yaml:"preemption_rate"`
}

func div(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// window turns an accumulator into means.
func (a *winAcc) window() Window {
	return Window{
		TTFTMean:             div(a.ttft, a.nFirst),
		QueueMean:            div(a.queue, a.nFirst),
		PrefillMean:          div(a.prefill, a.nFirst),
		OutsideMean:          div(a.outside, a.nFirst),
		ITLMean:              div(a.itlSum, a.itlN),
		E2EMean:              div(a.e2eSum, a.e2eN),
		ArrivalRate:          a.arrivals / windowLen,
		RunningMean:          div(a.runSum, a.runN),
		KVTokensPerRunning:   div(a.kvHeld, a.kvRun),
		PrefillTokensPerStep: div(a.pfTok, a.steps),
		StepTimeMean:         div(a.stepTime, a.steps),
		ClockFactor:          div(a.clockSum, a.clockN),
		ErrorRate:            div(a.errors, a.finished),
		PreemptionRate:       a.preempts / windowLen,
	}
}

// Observed is truth.yaml's observed: the baseline and incident windows.
type Observed struct {
	// Baseline is incident.yaml's baseline window.
	Baseline Window `yaml:"baseline"`
	// Incident is the incident window.
	Incident Window `yaml:"incident"`
	// Recent is the incident window's last 2 minutes: only ttft_mean and
	// itl_mean are set.
	Recent Window `yaml:"recent"`
}

// ITLAttribution splits the change of the step cost between the windows
// over its drivers (Shapley values, seconds).
type ITLAttribution struct {
	// Batch is the share of the decode batch (running per replica).
	Batch float64 `yaml:"batch"`
	// Context is the share of the KV tokens read per running request.
	Context float64 `yaml:"context"`
	// Prefill is the share of the prefill tokens per step.
	Prefill float64 `yaml:"prefill"`
	// Clock is the share of the clock factor.
	Clock float64 `yaml:"clock"`
	// Total is the sum: the step cost at the incident's drivers minus at
	// the baseline's.
	Total float64 `yaml:"total"`
}

// attribute evaluates the step cost at the baseline's mean drivers and moves
// one driver at a time to the incident's, averaged over all 24 orders.
func attribute(c *costModel, b, i Window) ITLAttribution {
	base := [4]float64{b.RunningMean, b.KVTokensPerRunning, b.PrefillTokensPerStep, b.ClockFactor}
	inc := [4]float64{i.RunningMean, i.KVTokensPerRunning, i.PrefillTokensPerStep, i.ClockFactor}
	if base[3] <= 0 {
		base[3] = 1
	}
	if inc[3] <= 0 {
		inc[3] = 1
	}
	value := func(mask int) float64 {
		var x [4]float64
		for k := range x {
			if mask&(1<<k) != 0 {
				x[k] = inc[k]
			} else {
				x[k] = base[k]
			}
		}
		return c.step(x[0], x[0]*x[1], x[2], x[3])
	}
	// weights |S|!(n-|S|-1)!/n! for n = 4
	weight := [4]float64{6.0 / 24, 2.0 / 24, 2.0 / 24, 6.0 / 24}
	var phi [4]float64
	for k := 0; k < 4; k++ {
		for mask := 0; mask < 16; mask++ {
			if mask&(1<<k) != 0 {
				continue
			}
			size := 0
			for j := 0; j < 4; j++ {
				if mask&(1<<j) != 0 {
					size++
				}
			}
			phi[k] += weight[size] * (value(mask|1<<k) - value(mask))
		}
	}
	return ITLAttribution{Batch: phi[0], Context: phi[1], Prefill: phi[2], Clock: phi[3],
		Total: phi[0] + phi[1] + phi[2] + phi[3]}
}
