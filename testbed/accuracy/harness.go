package accuracy

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/whyslow/whyslow/collectors/bundle"
	"github.com/whyslow/whyslow/collectors/store"
	"github.com/whyslow/whyslow/diagnose"
	"github.com/whyslow/whyslow/rules"
	"github.com/whyslow/whyslow/verdict"
)

// An engine model records incident instances with their truth. Two are
// scored: testbed/sim (discrete events) and testbed/fluid (a fluid queueing
// model written separately, sharing no code with it), so that a rule fitted
// to one model's quirks shows up on the other.
type engineModel interface {
	// Name is "sim" or "fluid".
	Name() string
	// Scenarios lists the single scenarios; Compounds the "a+b" pairs.
	Scenarios() []string
	Compounds() []string
	// Record draws one instance.
	Record(ctx context.Context, c Draw) (*Instance, error)
}

// extraModels are the engine models registered by other files (fluid).
var extraModels = map[string]engineModel{}

// Draw is one instance to record: a model's scenario (or "a+b" compound)
// at a seed, with the telemetry variant.
type Draw struct {
	Model     string
	Scenario  string
	Seed      int64
	Names     string // "v1" or "v0"
	GPUSeries string // "whyslow", "dcgm", "both" or "none"
	// Wide draws from the harness's wide ranges (loads, cost coefficients,
	// replicas, magnitudes); false draws a moderate, clearly visible one.
	Wide bool
}

// String names the draw for test output.
func (d Draw) String() string {
	w := ""
	if d.Wide {
		w = "/wide"
	}
	return fmt.Sprintf("%s:%s/seed=%d/%s/gpu=%s%s", d.Model, d.Scenario, d.Seed, d.Names, d.GPUSeries, w)
}

// Instance is a recorded incident: the bundle's metrics and incident
// description, and the truth the model knows from its own internals.
type Instance struct {
	Metrics   []byte
	At        time.Time
	Window    time.Duration
	Baseline  time.Duration
	Selector  string
	GPU       string
	Scheduler rules.Scheduler
	Truth     Truth
}

// Truth is what a model injected and measured (plan: models.md).
type Truth struct {
	// Engine is the engine the model rendered ("vllm", "sglang", "trtllm").
	Engine    string
	Causes    []string
	Magnitude float64
	Band      string // subtle, moderate, severe; "none" for healthy
	Params    map[string]any
	// Base and Inc are the model's own window means (not read from the
	// metrics): TTFT and its parts, inter-token latency, errors.
	Base, Inc WindowTruth
	// ITL splits the change of the model's step cost over its drivers, in
	// seconds (Shapley over batch, context, prefill, clock).
	ITL ITLTruth
	// Unobservable says why the instance's exposition cannot show the fault
	// at all (its only symptom lives in a family the instance does not
	// export); empty when it can. Such instances are reported, not scored.
	Unobservable string
}

// WindowTruth is one window as the model saw it. TTFTRecent and ITLRecent
// are the means of its last 2 minutes (set for the incident window).
// TTFTP95 and ITLP95 are the window's 95th percentiles of the requests' TTFT
// and of the gaps between output tokens, from the model's own requests; 0
// when the model does not know them (the harness then reads them from the
// instance's exported histograms, as a dashboard would).
type WindowTruth struct {
	TTFT, Queue, Prefill, Outside, ITL, E2E, ErrorRate float64
	TTFTRecent, ITLRecent                              float64
	TTFTP95, ITLP95                                    float64
}

// ITLTruth is the model's split of the change of its step cost.
type ITLTruth struct {
	Batch, Context, Prefill, Clock, Total float64
}

// Visible reports whether the injected fault reached a symptom an on-call
// engineer would be paged for, by the model's own numbers and the bars of the
// verdict's anomaly: TTFT mean ×1.5 (and +50 ms) over the window and over
// its last 2 minutes, inter-token latency mean ×1.4 (and +5 ms) over the
// window and ×1.25 over its last 2 minutes, or 3% of requests failing (e2e is
// TTFT plus output length × inter-token latency: longer outputs alone
// lengthen it without anything getting slower). A fault that stayed below
// every bar, or was over before the window's end, is reported separately
// and not scored for top-1: there was nothing (left) to explain.
func (t Truth) Visible() bool {
	if t.Unobservable != "" {
		return false
	}
	b, n := t.Base, t.Inc
	recent := func(now, base, bar, abs float64) bool { return now == 0 || (now >= bar*base && now-base >= abs) }
	switch {
	case b.TTFT > 0 && n.TTFT >= 1.5*b.TTFT && n.TTFT-b.TTFT >= 0.05 && recent(n.TTFTRecent, b.TTFT, 1.5, 0.05):
		return true
	case b.ITL > 0 && n.ITL >= 1.4*b.ITL && n.ITL-b.ITL >= 0.005 && recent(n.ITLRecent, b.ITL, 1.25, 0.004):
		return true
	case n.ErrorRate >= 0.03:
		return true
	}
	return false
}

// FeltBar is how far a TTFT or inter-token p95 must rise over the window for
// the fault to count as one a user felt: every such fault is scored, whatever
// its means did.
const FeltBar = 1.3

// FeltP95 returns how far the TTFT and inter-token p95 rose between the
// windows: the model's own percentiles where it knows them, else the
// verdict's headline percentiles (read from the instance's exported
// histograms, as a dashboard shows them); 0 where neither is known.
func (o *Outcome) FeltP95() (ttft, itl float64) {
	ratio := func(now, base float64) float64 {
		if base <= 0 || now <= 0 {
			return 0
		}
		return now / base
	}
	ttft, itl = ratio(o.Truth.Inc.TTFTP95, o.Truth.Base.TTFTP95), ratio(o.Truth.Inc.ITLP95, o.Truth.Base.ITLP95)
	if o.Verdict == nil {
		return ttft, itl
	}
	for _, c := range o.Verdict.Headline {
		if c.Now == nil || c.Baseline == nil {
			continue
		}
		switch {
		case c.Signal == "ttft_p95" && o.Truth.Base.TTFTP95 == 0:
			ttft = ratio(*c.Now, *c.Baseline)
		case c.Signal == "tpot_p95" && o.Truth.Base.ITLP95 == 0:
			itl = ratio(*c.Now, *c.Baseline)
		}
	}
	return ttft, itl
}

// Felt reports whether a user would have felt the fault: its TTFT or
// inter-token p95 rose at least FeltBar times over the window.
func (o *Outcome) Felt() bool {
	ttft, itl := o.FeltP95()
	return ttft >= FeltBar || itl >= FeltBar
}

// Scored reports whether a fault is scored: it is observable and reached a
// symptom, by the model's means (Visible) or by a p95 a user felt.
func (o *Outcome) Scored() bool {
	return !o.Healthy() && o.Truth.Unobservable == "" && (o.Truth.Visible() || o.Felt())
}

// Outcome is one draw triaged against its truth.
type Outcome struct {
	Draw    Draw
	Truth   Truth
	Verdict *verdict.Verdict
}

// Top is the verdict's top cause id, or its status when it has none.
func (o *Outcome) Top() string { return Top(o.Verdict) }

// InTop reports whether a truth cause is among the first n ranked causes.
func (o *Outcome) InTop(n int) bool {
	for i, c := range o.Verdict.Causes {
		if i >= n {
			break
		}
		for _, t := range o.Truth.Causes {
			if c.ID == t {
				return true
			}
		}
	}
	return false
}

// Healthy reports whether the truth is healthy.
func (o *Outcome) Healthy() bool { return len(o.Truth.Causes) == 0 }

// Compound reports whether two causes were injected.
func (o *Outcome) Compound() bool { return len(o.Truth.Causes) > 1 }

// Right is top-1 correctness: the top cause is a truth cause (for a
// compound fault, either of the two in the top two); a healthy draw is right
// when it is not reported as an anomaly.
func (o *Outcome) Right() bool {
	switch {
	case o.Healthy():
		return o.Verdict.Status != verdict.StatusAnomaly
	case o.Compound():
		return o.InTop(2)
	}
	return o.InTop(1)
}

// Right3 is top-3 correctness.
func (o *Outcome) Right3() bool {
	if o.Healthy() {
		return o.Right()
	}
	return o.InTop(3)
}

// triageInstance loads an instance into a fresh embedded store and triages
// it as `whyslow why --bundle` would.
func triageInstance(ctx context.Context, in *Instance, rss []*rules.Ruleset, explain bool) (*verdict.Verdict, error) {
	st, err := store.Open(store.Options{})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	if _, err := bundle.ReadMetrics(ctx, "metrics.om", in.Metrics, st); err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	return diagnose.Run(ctx, diagnose.Options{Metrics: st, Rulesets: rss, Engine: "auto", At: in.At, Window: in.Window,
		Baseline: in.Baseline, Selector: in.Selector, GPU: in.GPU, Scheduler: in.Scheduler, Explain: explain})
}

// runDraws records and triages the draws, parallel at most n at once.
func runDraws(ctx context.Context, models map[string]engineModel, ds []Draw, rss []*rules.Ruleset, n int, explain bool) ([]*Outcome, error) {
	out := make([]*Outcome, len(ds))
	errs := make([]error, len(ds))
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(1, n))
	for i, d := range ds {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			in, err := models[d.Model].Record(ctx, d)
			if err != nil {
				errs[i] = fmt.Errorf("%s: %w", d, err)
				return
			}
			v, err := triageInstance(ctx, in, rss, explain)
			if err != nil {
				errs[i] = fmt.Errorf("%s: %w", d, err)
				return
			}
			out[i] = &Outcome{Draw: d, Truth: in.Truth, Verdict: v}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// drawPlan is which draws a run makes: per model, `per` instances of every
// single scenario and `compound` of the compound pairs (cycled), from one
// seed. Training and validation use disjoint seed streams.
type drawPlan struct {
	seed     uint64
	per      int
	compound int
	wide     bool
	only     string
}

// validationStream separates the validation seeds from the training ones:
// no rule or threshold is tuned on draws from this stream, and a stream is
// scored once: 0x7a11d scored the rulebook of 2026-12-01, 0x7a11e that of
// 2026-12-02 03:31, 0x7a11f that of 2026-12-02 07:40, 0x7a120 that of
// 2026-12-02 10:30, 0x7a121 that of 2026-12-02 15:30, 0x7a122 that of
// 2026-12-03 02:30, 0x7a123 that of 2026-12-03 03:10, 0x7a124 that of
// 2026-12-03 06:30, 0x7a125 that of 2026-12-03 07:00, 0x7a126 that of
// 2026-12-03 09:40, 0x7a127 that of 2026-12-03 12:10, 0x7a128 that of
// 2026-12-03 14:10, 0x7a129 that of 2026-12-03 15:20, 0x7a12a that of
// 2026-12-03 17:10, 0x7a12b that of 2026-12-03 18:40, 0x7a12c that of
// 2026-12-04 16:10, 0x7a12d that of 2026-12-04 16:30 and 0x7a12e that of
// 2026-12-04 16:45; each was then read for what it missed, so the rulebook
// after that is scored on a new one.
const validationStream = 0x7a12e

func (p drawPlan) draws(models []engineModel, stream uint64) []Draw {
	r := rand.New(rand.NewPCG(p.seed, stream))
	names := []string{"v1", "v0"}
	gpus := []string{"whyslow", "dcgm", "both", "none"}
	var ds []Draw
	add := func(m engineModel, sc string, i int) {
		d := Draw{Model: m.Name(), Scenario: sc, Seed: r.Int64N(1 << 40), Names: names[(i+r.IntN(2))%2],
			GPUSeries: gpus[r.IntN(4)], Wide: p.wide}
		if onlyMatches(p.only, sc) {
			ds = append(ds, d)
		}
	}
	for _, m := range models {
		for _, sc := range m.Scenarios() {
			for i := 0; i < p.per; i++ {
				add(m, sc, i)
			}
		}
		cs := m.Compounds()
		for i := 0; i < p.compound && len(cs) > 0; i++ {
			add(m, cs[i%len(cs)], i)
		}
	}
	return ds
}

// tally is a top-1/top-3 count.
type tally struct{ n, right, right3 int }

func (t *tally) add(o *Outcome) {
	t.n++
	if o.Right() {
		t.right++
	}
	if o.Right3() {
		t.right3++
	}
}

func (t tally) String() string {
	return fmt.Sprintf("%d: top-1 %.1f%%, top-3 %.1f%%", t.n, pct(t.right, t.n), pct(t.right3, t.n))
}

// Report scores outcomes: overall, per model, per cause, per magnitude band,
// compound faults, hard negatives, the confusion table and the reliability of
// the confidences.
type Report struct {
	All, Single, Compound   tally
	ByModel, ByCause        map[string]*tally
	ByEngine, ByModelCause  map[string]*tally
	ByBand, ByModelBand     map[string]*tally
	Healthy, FalseAlarms    int
	NotVisible, NotVisRight int
	// FeltOnly counts scored faults that only a p95 showed (below every
	// mean bar of Truth.Visible); CalledHealthy the scored faults whose
	// verdict was not an anomaly.
	FeltOnly, CalledHealthy int
	// FeltNegatives counts healthy truths whose p95 moved past FeltBar
	// (a model's negative a user would feel); FeltNegativesPaged those the
	// verdict called an anomaly.
	FeltNegatives, FeltNegativesPaged int
	// NoCause counts anomaly verdicts without a ranked cause (must be 0).
	NoCause   int
	Confusion map[string]map[string]int
	// Reliability bins the top cause's confidence: per bin, how many top
	// causes got a confidence in it and how many of them were right.
	// AllReliability does the same over every ranked cause.
	Reliability, AllReliability Bins
	// ModelReliability is Reliability per engine model; ModelHealthy and
	// ModelCalledHealthy count false alarms and faults called healthy per
	// model.
	ModelReliability                map[string]*Bins
	ModelFalseAlarms, ModelCalledHy map[string]int
	Misses                          []*Outcome
}

// scoreOutcomes builds the report.
func scoreOutcomes(outs []*Outcome) *Report {
	r := &Report{ByModel: map[string]*tally{}, ByCause: map[string]*tally{}, ByBand: map[string]*tally{},
		ByModelBand: map[string]*tally{}, ByEngine: map[string]*tally{}, ByModelCause: map[string]*tally{},
		Confusion: map[string]map[string]int{}, ModelReliability: map[string]*Bins{},
		ModelFalseAlarms: map[string]int{}, ModelCalledHy: map[string]int{}}
	get := func(m map[string]*tally, k string) *tally {
		if m[k] == nil {
			m[k] = &tally{}
		}
		return m[k]
	}
	for _, o := range outs {
		v := o.Verdict
		if v.Status == verdict.StatusAnomaly && len(v.Causes) == 0 {
			r.NoCause++
		}
		truth := "healthy"
		if !o.Healthy() {
			truth = strings.Join(o.Truth.Causes, "+")
		}
		if r.Confusion[truth] == nil {
			r.Confusion[truth] = map[string]int{}
		}
		if o.Healthy() && o.Felt() {
			// A healthy truth whose p95 moved past the felt bar: users felt
			// it, so the gate may page on it, and need not; it is neither a
			// false alarm nor a scored fault, and is counted apart.
			r.FeltNegatives++
			if v.Status == verdict.StatusAnomaly {
				r.FeltNegativesPaged++
			}
			continue
		}
		if o.Healthy() {
			r.Healthy++
			r.Confusion[truth][o.Top()]++
			if v.Status == verdict.StatusAnomaly {
				r.FalseAlarms++
				r.ModelFalseAlarms[o.Draw.Model]++
				r.Misses = append(r.Misses, o)
			}
			continue
		}
		if !o.Scored() {
			r.NotVisible++
			if o.Right() {
				r.NotVisRight++
			}
			continue
		}
		if !o.Truth.Visible() {
			r.FeltOnly++
		}
		if v.Status != verdict.StatusAnomaly {
			r.CalledHealthy++
			r.ModelCalledHy[o.Draw.Model]++
		}
		r.Confusion[truth][o.Top()]++
		r.All.add(o)
		get(r.ByModel, o.Draw.Model).add(o)
		get(r.ByEngine, o.Draw.Model+"/"+o.Truth.Engine).add(o)
		get(r.ByBand, o.Truth.Band).add(o)
		get(r.ByModelBand, o.Draw.Model+"/"+o.Truth.Band).add(o)
		if o.Compound() {
			r.Compound.add(o)
		} else {
			r.Single.add(o)
			get(r.ByCause, o.Truth.Causes[0]).add(o)
			get(r.ByModelCause, o.Draw.Model+"/"+o.Truth.Causes[0]).add(o)
		}
		if len(v.Causes) > 0 {
			mr := r.ModelReliability[o.Draw.Model]
			if mr == nil {
				mr = &Bins{}
				r.ModelReliability[o.Draw.Model] = mr
			}
			r.Reliability.Add(v.Causes[0].Confidence, o.InTop(1))
			mr.Add(v.Causes[0].Confidence, o.InTop(1))
		}
		for _, c := range v.Causes {
			r.AllReliability.Add(c.Confidence, slices.Contains(o.Truth.Causes, c.ID))
		}
		if !o.Right() {
			r.Misses = append(r.Misses, o)
		}
	}
	return r
}

// Bins is a reliability table: stated confidences in ten bins of 0.1,
// with per bin how many were stated, their sum, and how many were right.
type Bins [10]struct {
	N, Right int
	Stated   float64
}

// Add counts one stated confidence and whether it was right.
func (bs *Bins) Add(confidence float64, right bool) {
	b := &bs[min(9, max(0, int(confidence*10)))]
	b.N++
	b.Stated += confidence
	if right {
		b.Right++
	}
}

// ECE is the expected calibration error: the gap between each bin's mean
// stated confidence and its accuracy, weighted by the bin's count.
func ECE(bins Bins) float64 {
	total, sum := 0, 0.0
	for _, b := range bins {
		if b.N == 0 {
			continue
		}
		sum += math.Abs(b.Stated - float64(b.Right)) // N·|mean stated − accuracy|
		total += b.N
	}
	if total == 0 {
		return 0
	}
	return sum / float64(total)
}

// binsString renders a reliability table: per bin, right / n and the mean
// stated confidence.
func binsString(bins Bins) string {
	var b strings.Builder
	for i, bin := range bins {
		if bin.N > 0 {
			fmt.Fprintf(&b, " [%.1f-%.1f) %d/%d=%.0f%% (stated %.0f%%)", float64(i)/10, float64(i+1)/10, bin.Right, bin.N,
				pct(bin.Right, bin.N), 100*bin.Stated/float64(bin.N))
		}
	}
	return b.String()
}

// String renders the report.
func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "scored (faults a user felt: a p95 ×%.1f or a mean bar) %s; single %s; compound (a truth cause in the top two) %s\n", FeltBar, r.All, r.Single, r.Compound)
	fmt.Fprintf(&b, "faults called healthy %d of %d scored (%.1f%%); scored only by a p95 %d\n", r.CalledHealthy, r.All.n, pct(r.CalledHealthy, r.All.n), r.FeltOnly)
	fmt.Fprintf(&b, "healthy truths a user felt (p95 ×%.1f; neither scored nor false alarms) %d, of which paged %d\n", FeltBar, r.FeltNegatives, r.FeltNegativesPaged)
	fmt.Fprintf(&b, "false alarms %d of %d healthy; anomaly verdicts without a ranked cause %d; faults below every symptom bar %d (of which ranked right anyway %d)\n",
		r.FalseAlarms, r.Healthy, r.NoCause, r.NotVisible, r.NotVisRight)
	for _, group := range []struct {
		name string
		m    map[string]*tally
	}{{"model", r.ByModel}, {"engine", r.ByEngine}, {"band", r.ByBand}, {"model/band", r.ByModelBand}, {"cause", r.ByCause}, {"model/cause", r.ByModelCause}} {
		keys := make([]string, 0, len(group.m))
		for k := range group.m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "  %-6s %-32s %s\n", group.name, k, group.m[k])
		}
	}
	for _, rel := range []struct {
		name string
		bins Bins
	}{{"the top cause's", r.Reliability}, {"every ranked cause's", r.AllReliability}} {
		fmt.Fprintf(&b, "reliability of %s confidence (bin: right / n):%s; ECE %.3f\n", rel.name, binsString(rel.bins), ECE(rel.bins))
	}
	models := make([]string, 0, len(r.ByModel))
	for m := range r.ByModel {
		models = append(models, m)
	}
	sort.Strings(models)
	for _, m := range models {
		fmt.Fprintf(&b, "model %s: %s; called healthy %d of %d; false alarms %d; top cause ECE %.3f:", m, r.ByModel[m],
			r.ModelCalledHy[m], r.ByModel[m].n, r.ModelFalseAlarms[m], r.modelECE(m))
		if mr := r.ModelReliability[m]; mr != nil {
			b.WriteString(binsString(*mr))
		}
		b.WriteString("\n")
	}
	b.WriteString(table(r.Confusion))
	return b.String()
}

// modelECE is the expected calibration error of one model's top causes.
func (r *Report) modelECE(model string) float64 {
	if mr := r.ModelReliability[model]; mr != nil {
		return ECE(*mr)
	}
	return 0
}

// describe is one outcome in a line, for misses.
func describe(o *Outcome) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s truth=%v band=%s status=%s causes=[", o.Draw, o.Truth.Causes, o.Truth.Band, o.Verdict.Status)
	for _, c := range o.Verdict.Causes {
		fmt.Fprintf(&b, "%s:%.2f/%.2f ", c.ID, c.Score, c.Confidence)
	}
	fmt.Fprintf(&b, "] true ttft %.3g→%.3g itl %.3g→%.3g", o.Truth.Base.TTFT, o.Truth.Inc.TTFT, o.Truth.Base.ITL, o.Truth.Inc.ITL)
	if ttft, itl := o.FeltP95(); ttft > 0 || itl > 0 {
		fmt.Fprintf(&b, " p95 ttft ×%.2f itl ×%.2f", ttft, itl)
	}
	if a := o.Verdict.Attribution; a != nil {
		for name, s := range map[string]*verdict.LatencySplit{"ttft": a.TTFT, "itl": a.ITL} {
			if s == nil {
				continue
			}
			fmt.Fprintf(&b, " %s:", name)
			for _, p := range s.Parts {
				fmt.Fprintf(&b, "%s=%.0f%% ", p.Component, 100*p.Share)
			}
			fmt.Fprintf(&b, "unexpl=%.0f%%", 100*s.UnexplainedShare)
		}
	}
	fmt.Fprintf(&b, " params=%v", o.Truth.Params)
	return b.String()
}

// parseDraw reads a draw as Draw.String writes it.
func parseDraw(s string) (Draw, error) {
	var d Draw
	model, rest, ok := strings.Cut(s, ":")
	if !ok {
		return d, fmt.Errorf("draw %q: want model:scenario/seed=N/names/gpu=G[/wide]", s)
	}
	parts := strings.Split(rest, "/")
	if len(parts) < 4 {
		return d, fmt.Errorf("draw %q: want model:scenario/seed=N/names/gpu=G[/wide]", s)
	}
	d.Model, d.Scenario, d.Names = model, parts[0], parts[2]
	if _, err := fmt.Sscanf(parts[1], "seed=%d", &d.Seed); err != nil {
		return d, fmt.Errorf("draw %q: %w", s, err)
	}
	d.GPUSeries = strings.TrimPrefix(parts[3], "gpu=")
	d.Wide = len(parts) > 4 && parts[4] == "wide"
	return d, nil
}

func pct(a, b int) float64 {
	if b == 0 {
		return 100
	}
	return 100 * float64(a) / float64(b)
}

func f(p *float64) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf("%.3g", *p)
}

// table renders the confusion table: rows are the truth, columns the top verdict.
func table(conf map[string]map[string]int) string {
	rows := make([]string, 0, len(conf))
	colSet := map[string]bool{}
	for r, cs := range conf {
		rows = append(rows, r)
		for c := range cs {
			colSet[c] = true
		}
	}
	sort.Strings(rows)
	cols := make([]string, 0, len(colSet))
	for c := range colSet {
		cols = append(cols, c)
	}
	sort.Strings(cols)
	var b strings.Builder
	fmt.Fprintf(&b, "%-28s", "truth \\ top verdict")
	for _, c := range cols {
		fmt.Fprintf(&b, " %6.6s", c)
	}
	b.WriteString("\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "%-28s", r)
		for _, c := range cols {
			if n := conf[r][c]; n > 0 {
				fmt.Fprintf(&b, " %6d", n)
			} else {
				fmt.Fprintf(&b, " %6s", ".")
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("columns: ")
	b.WriteString(strings.Join(cols, ", "))
	return b.String()
}

// onlyMatches reports whether a scenario is drawn under -accuracy.only.
func onlyMatches(only, scenario string) bool {
	if only == "" {
		return true
	}
	for _, s := range strings.Split(only, ",") {
		if s != "" && strings.Contains(scenario, s) {
			return true
		}
	}
	return false
}
