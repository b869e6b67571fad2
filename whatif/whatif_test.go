package whatif

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/whyslow/whyslow/rules"
)

// obsFrom builds observations whose gaps follow m exactly.
func obsFrom(m StepModel, rows [][3]float64) []Window {
	var out []Window
	for _, r := range rows {
		prefillPerRep, batch, ctx := r[0], r[1], r[2]
		// gap = a + b·(pre·gap) + c·batch + d·batch·ctx, solved for gap
		gap := (m.Fixed + m.PerDecode*batch + m.PerContextToken*batch*ctx) / (1 - m.PerPrefillToken*prefillPerRep)
		out = append(out, Window{sigITLMean: gap, sigBatch: batch, sigCtx: ctx, sigTargets: 2, sigPrefillTPS: 2 * prefillPerRep})
	}
	return out
}

func TestFitRecoversCoefficients(t *testing.T) {
	want := StepModel{Fixed: 0.012, PerPrefillToken: 40e-6, PerDecode: 0.2e-3, PerContextToken: 50e-9}
	rows := [][3]float64{{500, 10, 800}, {2000, 30, 1200}, {4000, 60, 900}, {1000, 80, 2500}, {6000, 20, 4000},
		{3000, 45, 1500}, {800, 120, 1000}, {5000, 100, 3000}}
	f, err := FitStep(obsFrom(want, rows))
	if err != nil {
		t.Fatal(err)
	}
	got := f.Model
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"fixed", got.Fixed, want.Fixed}, {"prefill", got.PerPrefillToken, want.PerPrefillToken},
		{"decode", got.PerDecode, want.PerDecode}, {"context", got.PerContextToken, want.PerContextToken}} {
		if math.Abs(c.got/c.want-1) > 0.01 {
			t.Errorf("%s: got %g, want %g", c.name, c.got, c.want)
		}
	}
	if f.R2 < 0.999 || f.N != len(rows) {
		t.Errorf("R² %.4f over %d observations, want ≈1 over %d", f.R2, f.N, len(rows))
	}
}

func TestFitNeverNegative(t *testing.T) {
	// gaps that fall as the batch grows would want a negative decode cost
	obs := []Window{}
	for i, b := range []float64{10, 20, 40, 80, 160} {
		obs = append(obs, Window{sigITLMean: 0.05 - 0.002*float64(i), sigBatch: b, sigCtx: 1000, sigTargets: 1, sigPrefillTPS: 100})
	}
	f, err := FitStep(obs)
	if err != nil {
		t.Fatal(err)
	}
	m := f.Model
	if m.Fixed < 0 || m.PerPrefillToken < 0 || m.PerDecode < 0 || m.PerContextToken < 0 {
		t.Errorf("negative coefficient: %+v", m)
	}
}

func TestMissingSeriesNoPrediction(t *testing.T) {
	obs := obsFrom(StepModel{Fixed: 0.01}, [][3]float64{{1, 1, 1}, {2, 2, 2}, {3, 3, 3}, {4, 4, 4}})
	for _, o := range obs {
		delete(o, sigBatch)
	}
	_, err := FitStep(obs)
	var me *MissingError
	if !errors.As(err, &me) {
		t.Fatalf("err = %v, want a MissingError", err)
	}
	if !strings.HasPrefix(err.Error(), "no prediction: missing series") || !strings.Contains(err.Error(), sigBatch) {
		t.Errorf("err = %q, want it to name %s", err, sigBatch)
	}
	// the incident replay needs the arrivals
	in := &Inputs{Engine: "vllm", Scheduler: rules.Scheduler{Known: true, MaxNumBatchedTokens: 8192, MaxNumSeqs: 256},
		Inc: Window{sigPromptMean: 1000}, Base: Window{}}
	_, err = Build(in)
	if !errors.As(err, &me) || !strings.Contains(err.Error(), sigArrival) {
		t.Errorf("Build: err = %v, want a MissingError naming %s", err, sigArrival)
	}
}

func TestReplayBounds(t *testing.T) {
	base := Config{Policy: PolicyVLLM, Step: StepModel{Fixed: 0.01, PerPrefillToken: 50e-6, PerDecode: 1e-4},
		PromptMean: 1000, PromptSigma: 0.5, OutputMean: 100, OutputSigma: 0.5, Budget: 8192, MaxSeqs: 256, KVTokens: 200000, Seed: 1}
	// far past capacity: the request bound stops it
	flood := base
	flood.Rate = 1000
	r := Replay(flood)
	if r.Truncated != "requests" {
		t.Errorf("flood: truncated %q, want requests", r.Truncated)
	}
	// a step of one microsecond with constant work: the step bound stops it
	fast := base
	fast.Step = StepModel{Fixed: 1e-6}
	fast.Rate = 40
	fast.OutputMean, fast.OutputSigma = 1e6, 0
	r = Replay(fast)
	if r.Truncated != "steps" || r.Steps != MaxReplaySteps {
		t.Errorf("fast: truncated %q after %d steps, want steps after %d", r.Truncated, r.Steps, MaxReplaySteps)
	}
	// a light load runs its whole span
	light := base
	light.Rate = 2
	r = Replay(light)
	if r.Truncated != "" || r.Span != ReplaySeconds-ReplayWarmup || len(r.TTFT) == 0 {
		t.Errorf("light: truncated %q, span %.0f, %d TTFTs", r.Truncated, r.Span, len(r.TTFT))
	}
}

func TestReplayPoliciesRespond(t *testing.T) {
	// more KV than a tight pool: preemption (vLLM, SGLang) or waiting
	// (TensorRT-LLM) makes TTFT worse than with a roomy pool
	for _, pol := range []string{PolicyVLLM, PolicySGLang, PolicyTRT} {
		c := Config{Policy: pol, Step: StepModel{Fixed: 0.01, PerPrefillToken: 30e-6, PerDecode: 1e-4, PerContextToken: 20e-9},
			Rate: 6, PromptMean: 1500, PromptSigma: 0.6, OutputMean: 400, OutputSigma: 0.6, Budget: 8192, MaxSeqs: 256,
			KVTokens: 400000, ReserveOut: 1600, Seed: 3}
		roomy := Replay(c)
		c.KVTokens = 30000
		tight := Replay(c)
		if weightedP95(tight.TTFT, ones(len(tight.TTFT))) <= weightedP95(roomy.TTFT, ones(len(roomy.TTFT))) {
			t.Errorf("%s: a tight pool did not raise TTFT p95", pol)
		}
	}
}

func ones(n int) []float64 {
	w := make([]float64, n)
	for i := range w {
		w[i] = 1
	}
	return w
}

func TestPromptSigma(t *testing.T) {
	// a lognormal with σ 0.6: p90/mean = exp(1.2816·0.6 − 0.18)
	w := Window{sigPromptMean: 1000, sigPromptP90: 1000 * math.Exp(1.2816*0.6-0.18)}
	if s := promptSigma(w); math.Abs(s-0.6) > 1e-6 {
		t.Errorf("σ = %g, want 0.6", s)
	}
}

func TestPromptTailKeepsQuantilesAndMean(t *testing.T) {
	q := []Quantile{{0.9, 4000}, {0.99, 7700}, {0.999, 16000}}
	body := fitBody(q, 1550)
	const n = 200000
	var xs []float64
	sum := 0.0
	for i := 0; i < n; i++ {
		x := quantileAt(q, body, normalScore((float64(i)+0.5)/n))
		xs = append(xs, x)
		sum += x
	}
	if m := sum / n; math.Abs(m/1550-1) > 0.01 {
		t.Errorf("mean %.0f, want 1550", m)
	}
	for _, a := range q {
		if got := xs[int(a.U*n)]; math.Abs(got/a.V-1) > 0.01 {
			t.Errorf("quantile %.3f = %.0f, want %.0f", a.U, got, a.V)
		}
	}
}

func TestNoneHelps(t *testing.T) {
	m := &Model{Incident: Metrics{TTFTP95: 2, ITLP95: 0.05}}
	pred := func(ttft, ttftHigh, itl float64) *Prediction {
		return &Prediction{TTFTP95: Range{Median: ttft, Low: ttft * 0.9, High: ttftHigh}, ITLP95: Range{Median: itl, Low: itl, High: itl}}
	}
	for _, c := range []struct {
		name string
		p    *Prediction
		want bool
	}{
		{"TTFT −30%, seeds agree", pred(1.4, 1.6, 0.05), true},
		{"TTFT −5%: inside the band", pred(1.9, 1.95, 0.05), false},
		{"TTFT −20%, a seed above the incident", pred(1.6, 2.1, 0.05), false},
		{"inter-token −40%", pred(2, 2.1, 0.03), true},
		{"both worse", pred(3, 3.2, 0.06), false},
	} {
		if got := m.Helps(c.p); got != c.want {
			t.Errorf("%s: Helps = %v, want %v", c.name, got, c.want)
		}
	}
	worse, better := pred(3, 3.2, 0.06), pred(1.4, 1.6, 0.05)
	if s := m.NoneHelps([]*Prediction{worse, worse}); !strings.HasPrefix(s, "no catalogued fix is predicted to help: ") {
		t.Errorf("NoneHelps(no help) = %q", s)
	}
	if s := m.NoneHelps([]*Prediction{worse, better}); s != "" {
		t.Errorf("NoneHelps(one helps) = %q, want empty", s)
	}
	if s := m.NoneHelps(nil); s != "" {
		t.Errorf("NoneHelps(nothing predicted) = %q, want empty", s)
	}
}

// The replay's prefix hits keep the window's measured rate: each request's
// share spreads around it, and near the cap the spread narrows instead of
// the cap cutting the top off (which served fewer tokens from the cache
// than the counters said, and replayed prefill work that never ran).
func TestReplayKeepsTheHitRate(t *testing.T) {
	for _, hit := range []float64{0.3, 0.86, 0.95} {
		c := Config{Policy: PolicyVLLM, Step: StepModel{Fixed: 0.01, PerPrefillToken: 30e-6}, Rate: 2, PromptMean: 2000,
			PromptSigma: 0.3, OutputMean: 2, OutputSigma: 0.1, Hit: hit, Budget: 8192, MaxSeqs: 256, KVTokens: 1 << 20, Seed: 7}
		res := Replay(c)
		if r := res.CachedTokens / res.PromptTokens; math.Abs(r/hit-1) > 0.03 {
			t.Errorf("hit rate %.2f: replayed %.3f", hit, r)
		}
	}
}

// TestShortWindowsAreNotMissingSeries: sub-windows that each have every
// series, but too few of them (a young incident's windows), are said to
// be too short, not to miss the fit's series.
func TestShortWindowsAreNotMissingSeries(t *testing.T) {
	obs := obsFrom(StepModel{Fixed: 0.01}, [][3]float64{{1, 1, 1}, {2, 2, 2}})
	_, err := FitStep(obs)
	var me *MissingError
	if !errors.As(err, &me) || len(me.Series) != 0 {
		t.Fatalf("err = %#v, want a MissingError without series", err)
	}
	if want := "no prediction: the windows are too short (2 sub-windows with every series, the fit needs 4) for the step-time fit"; err.Error() != want {
		t.Errorf("err = %q, want %q", err, want)
	}
}

// TestFitReserve: a TensorRT-LLM replica whose reservations (prompt +
// 2,400 output tokens) hit its pool now and then queues a few requests;
// the window's averages alone read 4× the mean output (1,600), and the
// fit recovers a reservation near the true one from the waiting and the
// peak running. Without waiting there is nothing to fit.
func TestFitReserve(t *testing.T) {
	c := Config{Policy: PolicyTRT, Step: StepModel{Fixed: 0.01, PerPrefillToken: 30e-6, PerDecode: 1e-4},
		Rate: 2, PromptMean: 1500, PromptSigma: 0.6, OutputMean: 400, OutputSigma: 0.6, Budget: 8192, MaxSeqs: 256,
		KVTokens: 60000, Replicas: 1, Represents: 1, Clock: 1}
	truth := c
	truth.ReserveOut, truth.Seed = 2400, Seeds[0]
	observed := Replay(truth).Waiting
	if observed <= 0.01 {
		t.Fatalf("the true reservation queues %.3f requests: no wall to fit", observed)
	}
	m := &Model{cfg: c, replicas: 1, rate: c.Rate, In: &Inputs{}}
	m.cfg.ReserveOut = 1600
	// the pool holds at most 60000/(1500+2400) = 15 reservations
	w := Window{sigWaiting: observed, sigRunPeak: 15}
	got := m.fitReserve(w)
	t.Logf("waiting %.3f: fitted reservation %d", observed, got)
	if got < 2000 || got > 2800 {
		t.Errorf("fitted reservation %d, want about 2400 (waiting %.3f)", got, observed)
	}
	if got := m.fitReserve(Window{sigWaiting: 0, sigRunPeak: 15}); got != 1600 {
		t.Errorf("without waiting: %d, want the averages' 1600", got)
	}
}

// TestReserveOutSkewed: under a skewed routing the queue and the running
// sit on the busiest replica, which is where the reservation wall is.
// Five replicas of a 360,000-token pool, 2,500-token prompts: the hot
// replica runs 80 of the 100 requests and holds every waiting one, so it
// is full at 360000/80 − 2500 = 2000 reserved output tokens. The scope's
// averages (20 running per replica) read 16,000; an even routing keeps
// the averages' reading; without the spreads there is nothing to place
// the queue on.
func TestReserveOutSkewed(t *testing.T) {
	w := Window{sigWaiting: 150, sigRunning: 100, sigWaitSpread: 5, sigRunSpread: 4}
	if got := reserveOut(w, 360000, 5, true, 2500, 200); got != 2000 {
		t.Errorf("skewed: %d, want 2000 (the hot replica's wall)", got)
	}
	if got := reserveOut(w, 360000, 5, false, 2500, 200); got != 15500 {
		t.Errorf("even routing: %d, want the averages' 15500", got)
	}
	delete(w, sigRunSpread)
	if got := reserveOut(w, 360000, 5, true, 2500, 200); got != 15500 {
		t.Errorf("no running_spread: %d, want the averages' 15500", got)
	}
	if got := reserveOut(Window{sigWaiting: 2, sigRunning: 100}, 360000, 5, true, 2500, 200); got != 800 {
		t.Errorf("under one waiting per replica: %d, want 4× the mean output (800)", got)
	}
}

// TestFitPrefillFromTheTTFT: the sub-windows of one incident cannot
// split the gap between the prefill cost and the rest, and a prefill
// cost fitted 1.4× too high runs the replay close to saturation. The
// window's measured TTFT mean sets it back near the true one, or, where
// the time outside the engine is not known, its queue; a window whose
// TTFT no prefill cost in range reproduces keeps the fitted model.
func TestFitPrefillFromTheTTFT(t *testing.T) {
	truth := StepModel{Fixed: 0.012, PerPrefillToken: 40e-6, PerDecode: 0.1e-3, PerContextToken: 50e-9}
	obs := obsFrom(truth, [][3]float64{{500, 10, 800}, {2000, 30, 1200}, {4000, 60, 900}, {1000, 80, 2500}, {6000, 20, 4000}})
	c := Config{Policy: PolicyVLLM, Step: truth, Clock: 1, Rate: 8.0, PromptMean: 2000, PromptSigma: 0.5, OutputMean: 150,
		OutputSigma: 0.6, Budget: 8192, MaxSeqs: 256, KVTokens: 1 << 21, Replicas: 1, Represents: 1}
	observed, waiting := 0.0, 0.0
	for _, s := range Seeds {
		c.Seed = s
		r := Replay(c)
		observed += weightedMean(r.TTFT, r.TTFTW) / float64(len(Seeds))
		waiting += r.Waiting / float64(len(Seeds))
	}
	wrong := truth
	wrong.PerPrefillToken *= 1.4
	fitted := refitWithPrefill(obs, Fit{}, wrong.PerPrefillToken)
	m := &Model{In: &Inputs{}, Fit: fitted, cfg: c, replicas: 1, rate: c.Rate}
	m.cfg.Step = fitted.Model
	m.fitPrefill(Window{sigTTFTMean: observed}, obs, true, true)
	got := m.Fit.Model.PerPrefillToken
	t.Logf("TTFT mean %.3fs: prefill cost %.1f µs/token (true %.1f, fitted %.1f)", observed, got*1e6, truth.PerPrefillToken*1e6, wrong.PerPrefillToken*1e6)
	if math.Abs(got/truth.PerPrefillToken-1) > 0.1 {
		t.Errorf("prefill cost %.1f µs/token, want about %.1f", got*1e6, truth.PerPrefillToken*1e6)
	}
	if m.cfg.Step != m.Fit.Model {
		t.Errorf("the replay's step %+v is not the fit's %+v", m.cfg.Step, m.Fit.Model)
	}
	// a TTFT of a day: no prefill cost in range makes it
	m = &Model{In: &Inputs{}, Fit: fitted, cfg: c, replicas: 1, rate: c.Rate}
	m.cfg.Step = fitted.Model
	m.fitPrefill(Window{sigTTFTMean: 86400}, obs, true, true)
	if m.Fit.Model != fitted.Model {
		t.Errorf("an unreachable TTFT moved the fit: %+v", m.Fit.Model)
	}
	// without the TTFT mean or a queue there is nothing to fit on
	m.fitPrefill(Window{}, obs, true, true)
	if m.Fit.Model != fitted.Model {
		t.Errorf("a missing TTFT mean moved the fit: %+v", m.Fit.Model)
	}
	// without the time outside the engine a TTFT mean above the replay's
	// cannot tell the prefill from it: the queue decides, where requests
	// queue
	m.fitPrefill(Window{sigTTFTMean: 86400}, obs, false, true)
	if m.Fit.Model != fitted.Model {
		t.Errorf("a TTFT mean without the outside time moved the fit: %+v", m.Fit.Model)
	}
	if waiting < queueSeen {
		t.Fatalf("the truth queues %.2f requests: no queue to fit on", waiting)
	}
	// TensorRT-LLM's queue fits its reservation, not the prefill
	m.fitPrefill(Window{sigTTFTMean: 86400, sigWaiting: waiting}, obs, false, false)
	if m.Fit.Model != fitted.Model {
		t.Errorf("the queue moved the fit where it fits the reservation: %+v", m.Fit.Model)
	}
	m.fitPrefill(Window{sigTTFTMean: 86400, sigWaiting: waiting}, obs, false, true)
	got = m.Fit.Model.PerPrefillToken
	t.Logf("waiting %.2f: prefill cost %.1f µs/token", waiting, got*1e6)
	if math.Abs(got/truth.PerPrefillToken-1) > 0.1 {
		t.Errorf("from the queue: prefill cost %.1f µs/token, want about %.1f", got*1e6, truth.PerPrefillToken*1e6)
	}
	// the time outside is unknown, but the replay's engine alone takes
	// longer than the window's whole TTFT mean: the mean bounds it
	m = &Model{In: &Inputs{}, Fit: fitted, cfg: c, replicas: 1, rate: c.Rate}
	m.cfg.Step = fitted.Model
	m.fitPrefill(Window{sigTTFTMean: observed}, obs, false, false)
	got = m.Fit.Model.PerPrefillToken
	t.Logf("TTFT mean %.3fs as a bound: prefill cost %.1f µs/token", observed, got*1e6)
	if math.Abs(got/truth.PerPrefillToken-1) > 0.1 {
		t.Errorf("from the TTFT mean as a bound: prefill cost %.1f µs/token, want about %.1f", got*1e6, truth.PerPrefillToken*1e6)
	}
}

// TestHistogramKeepsTheMean: coarse buckets filled log-uniformly put the
// mean off the counters'; FitMean tilts the draws inside the buckets to
// it, and the draws follow.
func TestHistogramKeepsTheMean(t *testing.T) {
	h := NewHistogram([]float64{500, 1000, 2000, 5000, 10000}, []float64{10, 40, 30, 15, 5, 0})
	top := 12000.0
	loose := h.Mean(top)
	for _, want := range []float64{0.9 * loose, 1.06 * loose} {
		h.FitMean(top, want)
		if got := h.Mean(top); math.Abs(got/want-1) > 1e-6 {
			t.Errorf("mean %.1f, want %.1f (log-uniform %.1f)", got, want, loose)
		}
		rng := rand.New(rand.NewPCG(1, 2))
		s := 0.0
		const n = 200000
		for i := 0; i < n; i++ {
			s += h.draw(rng, top)
		}
		if math.Abs(s/n/want-1) > 0.01 {
			t.Errorf("drawn mean %.1f, want %.1f", s/n, want)
		}
	}
	// a mean no tilt reaches leaves the fill log-uniform
	h.FitMean(top, 50*loose)
	if got := h.Mean(top); got != loose {
		t.Errorf("an unreachable mean moved the fill: %.1f, log-uniform %.1f", got, loose)
	}
}
