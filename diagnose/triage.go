// Package diagnose walks the fixed diagnosis over PromQL signals and builds a Verdict.
package diagnose

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/common/model"

	"github.com/whyslow/whyslow/query"
	"github.com/whyslow/whyslow/rules"
	"github.com/whyslow/whyslow/verdict"
)

// Options configure one triage. Zero values get defaults.
type Options struct {
	// Metrics answers the PromQL (embedded store or remote Prometheus). Required.
	Metrics query.Metrics
	// Ruleset, when set, is used as is (its engine wins over Engine).
	Ruleset *rules.Ruleset
	// Rulesets are the candidates when Ruleset is nil: the one whose engine
	// is Engine, or when Engine is "auto" (or empty) the one whose detect
	// expression finds the most series.
	Rulesets []*rules.Ruleset
	// OtherEngines, when set, returns the rulesets of engines not among
	// Rulesets; it is called only when a named engine's series are
	// missing, to say which engine the source does hold (so those need
	// compiling only then).
	OtherEngines func() []*rules.Ruleset
	// At is the end of the incident window. Required.
	At time.Time
	// Window is the incident window's length (default 5m).
	Window time.Duration
	// Baseline is how far back the baseline window ends (default 1h).
	Baseline time.Duration
	// Selector is the scope's PromQL label matchers without braces; may be empty.
	Selector string
	// Engine is "auto" (or empty) or the engine name (vllm, sglang, trtllm).
	Engine string
	// Scheduler holds the incident's scheduler settings; when not Known the
	// ruleset's engine defaults for the GPU apply.
	Scheduler rules.Scheduler
	// GPU is the GPU class (e.g. "H100"), empty when unknown. When empty,
	// Run infers it from the model label of the scope's GPU counters
	// (whyslow_gpu_* or dcgm-exporter's DCGM_FI_*) and says so in
	// Verdict.GPU.
	GPU string
	// GPUSource says where GPU came from (e.g. "--gpu", "incident.yaml"),
	// for Verdict.GPU's detail; optional.
	GPUSource string
	// Explain fills Verdict.Signals and every rule outcome.
	Explain bool
	// BaselineWithoutRates says the baseline window holds an engine's
	// lifetime counters scaled to an assumed lifetime (a bare `--scrape` of
	// an engine that exports no start time): its ratios, means and
	// quantiles are exact, its rates and counts are not, so those are gaps
	// no rule reads, never a guess.
	BaselineWithoutRates bool
	// TargetLabels identify a target inside the scope (default ["pod",
	// "instance"]: Kubernetes service discovery adds pod, a bare scrape has
	// only instance; grouping by both works for either). The first one is
	// the label spans and GPU series are joined on.
	TargetLabels []string
	// Concurrency bounds the queries in flight (default 4).
	Concurrency int
	// MaxTargets is how many of the worst targets to list per signal (default 3).
	MaxTargets int
	// Traces, when set, adds step 4's correlation of the slowest traced
	// requests with their pods' metrics (correlate.go).
	Traces Traces
	// SLOs are user bounds on signals of the incident window (ParseSLO): a
	// breach makes the verdict an anomaly on its own.
	SLOs []verdict.SLO
	// Shared, when set, answers the queries that read every scope's series
	// (an insufficient-data diagnosis's engine checks) instead of Metrics,
	// so triages sharing one (a SharedQueries) run them once. It must hold
	// the data Metrics does.
	Shared query.Metrics
	// Daemon says the triage runs inside the daemon (or its replay):
	// insufficient-data advice names its config, never a CLI flag.
	Daemon bool
	// Learning is the daemon's learning state (less history than the
	// baseline it wants), or nil: the verdict carries it, and a baseline
	// window before the history is that state (learning_baseline), not a
	// wrong --baseline.
	Learning *verdict.Learning
}

// ErrNoData means no metrics source answered any query.
var ErrNoData = errors.New("no query succeeded")

// noDataError is ErrNoData carrying the first query's failure, so that
// callers can both test errors.Is(err, ErrNoData) and reach the source's
// own error (e.g. an unreachable server) with errors.As.
type noDataError struct{ err error }

func (e noDataError) Error() string        { return ErrNoData.Error() + ": " + e.err.Error() }
func (e noDataError) Is(target error) bool { return target == ErrNoData }
func (e noDataError) Unwrap() error        { return e.err }

func (o *Options) defaults() error {
	if o.Metrics == nil {
		return errors.New("triage: no metrics source")
	}
	if o.At.IsZero() {
		return errors.New("triage: no evaluation time")
	}
	if o.Window <= 0 {
		o.Window = 5 * time.Minute
	}
	if o.Baseline <= 0 {
		o.Baseline = time.Hour
	}
	if o.Baseline < o.Window {
		return fmt.Errorf("triage: baseline offset %s is shorter than the window %s, so the windows overlap", o.Baseline, o.Window)
	}
	if len(o.TargetLabels) == 0 {
		o.TargetLabels = rules.DefaultTargetLabels
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 4
	}
	if o.MaxTargets <= 0 {
		o.MaxTargets = 3
	}
	if o.Engine == "" {
		o.Engine = "auto"
	}
	if o.Ruleset == nil && len(o.Rulesets) == 0 {
		return errors.New("triage: no ruleset")
	}
	if o.Shared == nil {
		o.Shared = o.Metrics
	}
	return nil
}

// scopeLabels validates the selector and returns its equality matchers.
func scopeLabels(sel string) (map[string]string, error) {
	out, err := rules.ScopeLabels(sel)
	if err != nil {
		return nil, fmt.Errorf("triage: selector %q: %w", sel, err)
	}
	return out, nil
}

// signalQuery is one PromQL evaluation of the triage.
type signalQuery struct {
	signal  *rules.Signal
	expr    string
	at      time.Time
	window  string // "incident", "baseline" or "targets"
	result  model.Vector
	warns   []string
	err     error
	success bool
}

// runQueries evaluates the queries with bounded concurrency: n goroutines
// take them in turn. A goroutine per query would grow a fresh stack for
// every PromQL evaluation (a tenth of a fleet cycle's CPU). From a source
// whose range steps are exact (query.ExactSteps) the queries of one
// expression at evenly spaced times are one range query (queryGroups).
func runQueries(ctx context.Context, m query.Metrics, qs []*signalQuery, n int) {
	groups := make([][]*signalQuery, 0, len(qs))
	if es, ok := query.As[query.ExactSteps](m); ok && es.ExactSteps() {
		groups = queryGroups(qs)
	} else {
		for _, q := range qs {
			groups = append(groups, []*signalQuery{q})
		}
	}
	run := func(g []*signalQuery) {
		if err := ctx.Err(); err != nil {
			for _, q := range g {
				q.err = err
			}
			return
		}
		if len(g) == 1 {
			q := g[0]
			q.result, q.warns, q.err = m.Query(ctx, q.expr, q.at)
			q.success = q.err == nil
			return
		}
		first, last := g[0].at, g[len(g)-1].at
		mat, warns, err := m.QueryRange(ctx, g[0].expr, first, last, g[1].at.Sub(first))
		for _, q := range g {
			q.warns, q.err, q.success = warns, err, err == nil
			if err == nil {
				q.result = vectorAt(mat, q.at)
			}
		}
	}
	if n == 1 {
		for _, g := range groups {
			run(g)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, len(groups)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(len(groups)); i = next.Add(1) - 1 {
				run(groups[i])
			}
		}()
	}
	wg.Wait()
}

// queryGroups puts the queries of one expression whose times are evenly
// spaced (a signal's incident and baseline windows; its baseline
// sub-windows) in one group, in time order, and every other query in a
// group of its own. A range query over a group costs about what one of
// its instant queries does: the expression is parsed and its series
// selected once. Per-target queries stay alone: their results are ranked
// in the order an instant query gives.
func queryGroups(qs []*signalQuery) [][]*signalQuery {
	var groups [][]*signalQuery
	byExpr := map[string]int{} // expr → its group
	for _, q := range qs {
		i, ok := byExpr[q.expr]
		if !ok || q.window == "targets" {
			byExpr[q.expr] = len(groups)
			groups = append(groups, []*signalQuery{q})
			continue
		}
		groups[i] = append(groups[i], q)
	}
	out := groups[:0:0]
	for _, g := range groups {
		if len(g) > 1 {
			sort.SliceStable(g, func(a, b int) bool { return g[a].at.Before(g[b].at) })
			if evenlySpaced(g) {
				out = append(out, g)
				continue
			}
		}
		for _, q := range g {
			out = append(out, []*signalQuery{q})
		}
	}
	return out
}

// evenlySpaced reports whether the (time-ordered) queries' times are
// distinct and one step apart, a whole millisecond (a range query's
// points are milliseconds).
func evenlySpaced(g []*signalQuery) bool {
	step := g[1].at.Sub(g[0].at)
	if step <= 0 || step%time.Millisecond != 0 {
		return false
	}
	for i := 2; i < len(g); i++ {
		if g[i].at.Sub(g[i-1].at) != step {
			return false
		}
	}
	return true
}

// vectorAt is the instant vector at t of a range query's result: each
// series' point at t, as the instant query at t answers.
func vectorAt(mat model.Matrix, t time.Time) model.Vector {
	ts := model.TimeFromUnixNano(t.UnixNano())
	var out model.Vector
	for _, ss := range mat {
		i := sort.Search(len(ss.Values), func(i int) bool { return ss.Values[i].Timestamp >= ts })
		if i < len(ss.Values) && ss.Values[i].Timestamp == ts {
			out = append(out, &model.Sample{Metric: ss.Metric, Value: ss.Values[i].Value, Timestamp: ts})
		}
	}
	return out
}

// scalar reduces a scope-level result to one number; NaN and ±Inf count as no data.
func scalar(v model.Vector) (float64, bool) {
	found, best := false, 0.0
	for _, s := range v {
		f := float64(s.Value)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			continue
		}
		if !found || f > best {
			best, found = f, true
		}
	}
	return best, found
}

// Run triages one scope: it evaluates every signal of the ruleset at the
// incident and baseline windows, walks the steps and builds the Verdict. An
// error means whyslow failed (bad options, context cancelled, or no query
// succeeded); a scope without data gets a verdict with status insufficient_data.
func Run(ctx context.Context, opts Options) (*verdict.Verdict, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	scopeLbls, err := scopeLabels(opts.Selector)
	if err != nil {
		return nil, err
	}
	win := model.Duration(opts.Window).String()
	v := &verdict.Verdict{
		SchemaVersion: verdict.SchemaVersion,
		Status:        verdict.StatusInsufficientData,
		Severity:      verdict.SeverityNone,
		Phase:         verdict.PhaseNone,
		Scope:         verdict.Scope{Selector: opts.Selector, Labels: scopeLbls},
		At:            opts.At.UTC(),
		Incident:      verdict.Window{Start: opts.At.Add(-opts.Window).UTC(), End: opts.At.UTC()},
		Baseline:      verdict.Window{Start: opts.At.Add(-opts.Baseline - opts.Window).UTC(), End: opts.At.Add(-opts.Baseline).UTC()},
		Headline:      []verdict.Comparison{},
		Causes:        []verdict.Cause{},
		RuledOut:      []verdict.RuledOut{},
		Steps:         []verdict.Step{},
		DataGaps:      []verdict.DataGap{},
		Learning:      opts.Learning,
	}

	rs, warns, err := pickRuleset(ctx, &opts, win)
	v.Warnings = appendWarnings(v.Warnings, warns...)
	if err != nil {
		return nil, err
	}
	if rs == nil {
		v.Engine = opts.Engine
		v.DataGaps = append(v.DataGaps, verdict.DataGap{Signal: "engine", Window: "incident",
			Reason: "no series of a known engine (" + strings.Join(enginesOf(opts.Rulesets), ", ") + ") matched the scope"})
		v.InsufficientReason = diagnoseInsufficient(ctx, &opts, nil, nil, nil)
		return v, nil
	}
	v.Engine = rs.Engine
	if sh := rs.Shape(); sh != nil {
		v.EngineShape = &verdict.EngineShape{Name: sh.Name, Title: sh.Title}
	}
	v.DataGaps = append(v.DataGaps, besideEngineGaps(ctx, &opts, win)...)
	// Dynamo's frontend beside the worker: the clients' view of the
	// headline and the gate (diagnose/client.go); not read, its gap says why.
	frontend, frontendWhy := false, ""
	for i, g := range v.DataGaps {
		if g.Signal == "client_view" {
			frontend, frontendWhy = true, frontendModels(ctx, &opts, scopeLbls, win)
		}
		// The endpoint picker's pool averages: context rows of the
		// verdict, never facts of the walk (diagnose/pool.go).
		if g.Signal == "pool_context" {
			var why string
			if v.PoolContext, why = readPoolContext(ctx, &opts, scopeLbls, win, opts.At.Add(-opts.Baseline)); v.PoolContext == nil {
				v.DataGaps[i].Reason += " (" + why + ")"
			}
		}
	}
	if v.PoolContext != nil {
		v.DataGaps = dropGap(v.DataGaps, "pool_context")
	}

	// One query per signal and window, plus the per-target views: rendered once.
	// Without Dynamo's frontend beside the engine its signals are not
	// queried (their values would be dropped below); --explain still shows
	// their PromQL.
	var qs []*signalQuery
	unqueried := map[string]string{}
	baseAt := opts.At.Add(-opts.Baseline)
	for _, s := range rs.Signals {
		expr, err := s.Render(opts.Selector, win, nil)
		if err != nil {
			return nil, fmt.Errorf("triage: signal %s: %w", s.Name, err)
		}
		if s.FrontendOf != "" && !frontend {
			unqueried[s.Name] = expr
			continue
		}
		qs = append(qs, &signalQuery{signal: s, expr: expr, at: opts.At, window: "incident"},
			&signalQuery{signal: s, expr: expr, at: baseAt, window: "baseline"})
		if s.Targets {
			texpr, err := s.Render(opts.Selector, win, opts.TargetLabels)
			if err != nil {
				return nil, fmt.Errorf("triage: signal %s: %w", s.Name, err)
			}
			qs = append(qs, &signalQuery{signal: s, expr: texpr, at: opts.At, window: "targets"})
		}
	}
	// The GPU class, when not given, comes from the GPU counters: one more
	// query, run alongside the signals.
	var gpu gpuInference
	gpuDone := make(chan struct{})
	if opts.GPU == "" {
		go func() {
			defer close(gpuDone)
			gpu = inferGPU(ctx, opts.Metrics, rs.Known, opts.Selector, opts.TargetLabels[0], win, opts.At)
		}()
	} else {
		close(gpuDone)
		gpu.class = &verdict.GPUClass{Class: opts.GPU, Source: verdict.GPUSourceGiven, Detail: opts.GPUSource}
	}
	runQueries(ctx, opts.Metrics, qs, opts.Concurrency)
	<-gpuDone
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("triage: %w", err)
	}
	v.GPU = gpu.class

	now, base := map[string]float64{}, map[string]float64{}
	exprs := unqueried
	var failed, ok int
	var firstErr error
	targetSets := map[string]bool{}
	for _, q := range qs {
		v.Warnings = appendWarnings(v.Warnings, q.warns...)
		if q.err != nil {
			failed++
			if firstErr == nil {
				firstErr = q.err
			}
			if q.window != "targets" {
				v.DataGaps = append(v.DataGaps, verdict.DataGap{Signal: q.signal.Name, Window: q.window, Reason: "query failed: " + q.err.Error()})
			}
			continue
		}
		ok++
		switch q.window {
		case "incident":
			exprs[q.signal.Name] = q.expr
			if f, found := scalar(q.result); found {
				now[q.signal.Name] = f
			}
		case "baseline":
			if f, found := scalar(q.result); found {
				base[q.signal.Name] = f
			}
		case "targets":
			ts := worstTargets(q.signal.Name, q.signal.Unit, q.result, opts.TargetLabels)
			for _, t := range ts {
				targetSets[labelsKey(t.Labels)] = true
			}
			if len(ts) >= 2 && imbalanced(ts, q.signal.Unit) {
				if len(ts) > opts.MaxTargets {
					ts = ts[:opts.MaxTargets]
				}
				v.Targets = append(v.Targets, ts...)
			}
		}
	}
	if ok == 0 && failed > 0 {
		return nil, fmt.Errorf("triage: %w", noDataError{firstErr})
	}
	v.Warnings = appendWarnings(v.Warnings, gpu.warnings...)

	if frontend && frontendWhy == "" {
		frontendWhy = frontendRequests(rs, now, base)
	}
	if !frontend || frontendWhy != "" {
		dropFrontend(rs, now, base)
	}
	if frontend && frontendWhy != "" {
		for i := range v.DataGaps {
			if v.DataGaps[i].Signal == "client_view" {
				v.DataGaps[i].Reason += " (" + frontendWhy + ")"
			}
		}
	}
	gaps := zeroGauges(rs, now, base)
	if opts.BaselineWithoutRates {
		if g := dropBaselineRates(rs, base); g != nil {
			gaps = append(gaps, *g)
		}
	}
	coverage, covGap := baselineCoverage(rs, now, base)
	if covGap != nil {
		gaps = append(gaps, *covGap)
	}
	gpuClass := ""
	if v.GPU != nil {
		gpuClass = v.GPU.Class
	}
	clockFracFromClass(now, base, gpuClass)
	v.Attribution = Attribute(now, base, gpuClass, scopeLbls["model_name"])
	facts := rules.Facts{
		Now: now, Base: base, Engine: rs.Engine, Scheduler: opts.Scheduler,
		Targets: len(targetSets), Attr: AttrMap(v.Attribution), Gaps: missingWords(rs, now, base),
	}
	if v.GPU != nil {
		facts.GPU = rules.GPU{Class: v.GPU.Class, MemoryGiB: GPUMemoryGiB(v.GPU.Class)}
	}
	if !opts.BaselineWithoutRates {
		sigma, sub := baselineNoise(ctx, &opts, rs, baseAt, now, base)
		facts.Z = noiseZ(sigma, sub, opts.Window, now, base)
	}
	breaches, err := checkSLOs(opts.SLOs, rs, now)
	if err != nil {
		return nil, err
	}
	facts.Breached = len(breaches) > 0
	v.SLOBreaches = breaches
	les := bucketBounds(ctx, &opts, rs, win, now, base)
	walkFacts := facts
	walkFacts.Z = unresolvedRises(facts.Z, les, now, base)
	walkFacts.Now = tailReadRises(ctx, &opts, rs, win, les, now, base)
	out := rs.Walk(walkFacts)
	corr := correlate(ctx, &opts, rs, facts, out, v)
	v.DataGaps = append(v.DataGaps, gaps...)
	buildVerdict(v, rs, out, &opts, now, base, gpu, coverage, les)
	corr.fill(v)
	if v.Status == verdict.StatusAnomaly && v.Phase == verdict.PhaseNone {
		v.Phase = sloPhase(breaches)
	}
	for i := range v.Headline {
		if z, ok := facts.Z[v.Headline[i].Signal]; ok {
			v.Headline[i].Noise = &z
		}
	}
	if frontend && frontendWhy == "" {
		applyClientView(v, rs, now, base, facts.Z)
	}
	if v.Status != verdict.StatusInsufficientData {
		v.DegradedBaseline = degradedBaseline(base, &opts)
	}
	if v.Status == verdict.StatusInsufficientData {
		v.InsufficientReason = diagnoseInsufficient(ctx, &opts, rs, now, base)
		if v.InsufficientReason != nil && v.InsufficientReason.Code == verdict.InsufficientLearning {
			v.DataGaps = learningGaps(v.DataGaps, v.InsufficientReason.Message)
		}
	}
	if opts.Explain {
		for _, s := range rs.Signals {
			v.Signals = append(v.Signals, verdict.SignalValue{Name: s.Name, Expr: exprs[s.Name], Now: valuePtr(now, s.Name),
				Baseline: valuePtr(base, s.Name), Unit: s.Unit, Noise: valuePtr(facts.Z, s.Name)})
		}
	}
	return v, nil
}

// bucketBounds finds the bucket layout of the headline's quantile signals
// (histogram_quantile over a *_bucket series): one `count by (le)` query per
// signal with a value, so that a quantile interpolated inside a coarse
// bucket can say so. A signal whose query fails or finds nothing is left
// out.
func bucketBounds(ctx context.Context, opts *Options, rs *rules.Ruleset, win string, now, base map[string]float64) map[string][]float64 {
	out := map[string][]float64{}
	for _, name := range headlineSignals(rs) {
		_, okN := now[name]
		_, okB := base[name]
		sels := bucketSelectors(rs.Declared(name), opts.Selector, win)
		for _, q := range []struct {
			at time.Time
			ok bool
		}{{opts.At, okN}, {opts.At.Add(-opts.Baseline), okB}} {
			if q.ok && len(sels) > 0 && out[name] == nil {
				out[name] = queryLes(ctx, opts.Metrics, sels, win, q.at)
			}
		}
	}
	return out
}

// unresolvedRises returns z with the noise of each quantile that rose
// without crossing a bucket bound set to 0 for the walk: inside one bucket
// histogram_quantile interpolates linearly, so a shift of requests within
// a wide bucket (vLLM TTFT 0.1–0.25 s) reads as ×1.4 where the requests'
// own p95 moved ×1.2. Such a rise is not resolved by the histogram: no
// evidence beyond the noise. The headline keeps the measured z.
func unresolvedRises(z map[string]float64, les map[string][]float64, now, base map[string]float64) map[string]float64 {
	var out map[string]float64
	for name, bounds := range les {
		zv, okZ := z[name]
		n, okN := now[name]
		b, okB := base[name]
		if !okZ || !okN || !okB || zv <= 0 || n <= b || len(bounds) == 0 || n > bounds[len(bounds)-1] {
			continue
		}
		if crossedBound(bounds, b, n) {
			continue
		}
		if out == nil {
			out = maps.Clone(z)
		}
		out[name] = 0
	}
	if out == nil {
		return z
	}
	return out
}

// crossedBound reports whether a bound of the sorted bounds lies in (b, n].
func crossedBound(bounds []float64, b, n float64) bool {
	i := sort.Search(len(bounds), func(k int) bool { return bounds[k] > b })
	return i < len(bounds) && bounds[i] <= n
}

// tailReadRises returns now with each headline quantile that rose across
// a bucket bound read again from its bucket counts by tailQuantile, in both
// windows, where that reads a smaller rise: the walk gets base × the tail
// read's ratio. histogram_quantile spreads a bucket's requests evenly
// between its bounds, so a p95 that just crossed into a wide bucket (vLLM's
// TTFT 0.1–0.25 s) reads far inside it: a diurnal growth's 0.0988 → 0.138 s
// (×1.40) where the requests' own p95 moved ×1.10. A baseline quantile in
// the first bucket (vLLM's inter-token 0–10 ms) is read as that bucket's
// upper bound. Two queries per such signal; the headline keeps the PromQL
// values.
func tailReadRises(ctx context.Context, opts *Options, rs *rules.Ruleset, win string, les map[string][]float64, now, base map[string]float64) map[string]float64 {
	var out map[string]float64
	for name, bounds := range les {
		n, okN := now[name]
		b, okB := base[name]
		if !okN || !okB || b <= 0 || n <= b || len(bounds) == 0 || !crossedBound(bounds, b, n) {
			continue
		}
		phi, ok := quantileOf(rs.Declared(name), opts.Selector, win)
		if !ok {
			continue
		}
		nowLes, nowCounts := BucketCounts(ctx, opts.Metrics, rs, name, opts.Selector, win, opts.At)
		baseLes, baseCounts := BucketCounts(ctx, opts.Metrics, rs, name, opts.Selector, win, opts.At.Add(-opts.Baseline))
		tn, okN := tailQuantile(phi, nowLes, nowCounts)
		tb, okB := tailQuantile(phi, baseLes, baseCounts)
		if !okB && len(baseLes) > 0 && b <= baseLes[0] {
			// The first bucket has no lower bound to read a tail from:
			// the baseline is known only to lie below its upper bound,
			// so the rise the counts show is measured from there.
			tb, okB = baseLes[0], true
		}
		if !okN || !okB || tb <= 0 || tn/tb >= n/b {
			continue
		}
		if out == nil {
			out = maps.Clone(now)
		}
		out[name] = b * tn / tb
	}
	if out == nil {
		return now
	}
	return out
}

// quantileOf returns the φ of a signal that is one histogram_quantile.
func quantileOf(s *rules.Signal, selector, win string) (float64, bool) {
	if s == nil {
		return 0, false
	}
	expr, err := s.Render(selector, win, nil)
	if err != nil {
		return 0, false
	}
	_, rest, found := strings.Cut(expr, "histogram_quantile(")
	if !found || strings.Contains(rest, "histogram_quantile(") {
		return 0, false
	}
	arg, _, _ := strings.Cut(rest, ",")
	phi, err := strconv.ParseFloat(strings.TrimSpace(arg), 64)
	if err != nil || phi <= 0 || phi >= 1 {
		return 0, false
	}
	return phi, true
}

// tailQuantile reads the φ-quantile of a histogram (finite bounds les,
// requests per bucket, the last past the last bound) with the share of
// requests above a latency falling as a power of it inside the bucket (a
// straight line between the bucket's bounds on log-log axes: the tail of a
// latency distribution) instead of histogram_quantile's even spread, which
// puts a wide bucket's tail requests too far from its lower bound. It is
// undefined (ok false) in the first bucket and in a bucket that holds the
// whole rest of the tail; past the last bound it is that bound, as in
// histogram_quantile.
func tailQuantile(phi float64, les, counts []float64) (float64, bool) {
	if len(les) == 0 || len(counts) != len(les)+1 {
		return 0, false
	}
	total := 0.0
	for _, c := range counts {
		total += c
	}
	if total <= 0 {
		return 0, false
	}
	rank, below := phi*total, 0.0
	for i, c := range counts {
		if c <= 0 || below+c < rank {
			below += c
			continue
		}
		if i == len(les) {
			return les[i-1], true
		}
		if i == 0 || les[i-1] <= 0 {
			return 0, false
		}
		lo, hi := les[i-1], les[i]
		sLo, sHi := (total-below)/total, (total-below-c)/total
		if sHi <= 0 {
			return 0, false
		}
		alpha := math.Log(sLo/sHi) / math.Log(hi/lo)
		return lo * math.Pow(sLo/(1-phi), 1/alpha), true
	}
	return 0, false
}

// bucketSelectors returns the *_bucket vector selectors of s's query
// rendered over win (the rendered query, not the template: a map may write
// the quantile with {{.Quantile}}), or nil when s reads no
// histogram_quantile.
func bucketSelectors(s *rules.Signal, selector, win string) []string {
	if s == nil || s.Expr == "" {
		return nil
	}
	expr, err := s.Render(selector, win, nil)
	if err != nil || !strings.Contains(expr, "histogram_quantile") {
		return nil
	}
	var sels []string
	for _, vs := range vectorSelectors(expr) {
		if name, _, _ := strings.Cut(vs, "{"); strings.HasSuffix(name, "_bucket") {
			sels = append(sels, vs)
		}
	}
	return sels
}

// queryLes returns the finite le bounds the bucket selectors hold over win
// ending at at: one `count by (le)` query; nil when it fails.
func queryLes(ctx context.Context, m query.Metrics, sels []string, win string, at time.Time) []float64 {
	parts := make([]string, len(sels))
	for i, sel := range sels {
		parts[i] = fmt.Sprintf("count by (le) (last_over_time(%s[%s]))", sel, win)
	}
	vec, _, err := m.Query(ctx, strings.Join(parts, " or "), at)
	if err != nil {
		return nil
	}
	return bucketLes(vec)
}

// bucketLes returns the finite, sorted le bounds of a `count by (le)` result.
func bucketLes(vec model.Vector) []float64 {
	var les []float64
	for _, s := range vec {
		f, err := strconv.ParseFloat(string(s.Metric["le"]), 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			continue
		}
		les = append(les, f)
	}
	sort.Float64s(les)
	return les
}

// pickRuleset chooses the ruleset: the given one, the one for the named
// engine, or (auto) the one whose detect query finds the most series. An
// engine with several shipped shapes (rules.Shape) is read through the
// first shape, in file order, whose detect query finds series.
func pickRuleset(ctx context.Context, opts *Options, win string) (*rules.Ruleset, []string, error) {
	var pool []*rules.Ruleset
	switch {
	case opts.Ruleset != nil:
		if len(opts.Ruleset.Shapes) == 0 {
			return opts.Ruleset, nil, nil
		}
		pool = []*rules.Ruleset{opts.Ruleset}
	case opts.Engine != "auto":
		for _, rs := range opts.Rulesets {
			if rs.Engine == opts.Engine {
				pool = []*rules.Ruleset{rs}
			}
		}
		if pool == nil {
			return nil, nil, fmt.Errorf("triage: no ruleset for engine %q", opts.Engine)
		}
		if len(pool[0].Shapes) == 0 {
			return pool[0], nil, nil
		}
	default:
		pool = opts.Rulesets
	}
	var qs []*signalQuery
	var cands, engineOf []*rules.Ruleset
	for _, rs := range pool {
		variants := rs.Shapes
		if len(variants) == 0 {
			variants = []*rules.Ruleset{rs}
		}
		for _, c := range variants {
			if c.Detect == nil {
				continue
			}
			expr, err := c.Detect.Render(opts.Selector, win, nil)
			if err != nil {
				return nil, nil, fmt.Errorf("triage: detect %s: %w", c.Engine, err)
			}
			qs = append(qs, &signalQuery{signal: c.Detect, expr: expr, at: opts.At, window: "incident"})
			cands, engineOf = append(cands, c), append(engineOf, rs)
		}
	}
	if len(qs) == 0 {
		if len(pool) == 1 {
			return pool[0], nil, nil
		}
		return nil, nil, errors.New("triage: engine auto needs rulesets with detect expressions")
	}
	runQueries(ctx, opts.Metrics, qs, opts.Concurrency)
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("triage: %w", err)
	}
	var best *rules.Ruleset
	bestN, failed := 0.0, 0
	var warns []string
	var firstErr error
	taken := map[*rules.Ruleset]bool{} // engines whose first matching shape is known
	for i, q := range qs {
		warns = append(warns, q.warns...)
		if q.err != nil {
			failed++
			if firstErr == nil {
				firstErr = q.err
			}
			continue
		}
		n, ok := scalar(q.result)
		if !ok || n <= 0 || taken[engineOf[i]] {
			continue
		}
		taken[engineOf[i]] = true
		if n > bestN {
			best, bestN = cands[i], n
		}
	}
	if failed == len(qs) {
		return nil, warns, fmt.Errorf("triage: detect engine: %w", noDataError{firstErr})
	}
	if best == nil && opts.Engine != "auto" {
		// A named engine whose shapes all miss is read through its richest
		// shape, so the verdict lists what is missing instead of nothing.
		return cands[0], warns, nil
	}
	return best, warns, nil
}

func worstTargets(signal, unit string, vec model.Vector, targetLabels []string) []verdict.Target {
	ts := make([]verdict.Target, 0, len(vec))
	for _, s := range vec {
		f := float64(s.Value)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			continue
		}
		lbls := map[string]string{}
		for _, l := range targetLabels {
			if val, ok := s.Metric[model.LabelName(l)]; ok {
				lbls[l] = string(val)
			}
		}
		if len(lbls) == 0 {
			continue
		}
		ts = append(ts, verdict.Target{Labels: lbls, Signal: signal, Value: f, Unit: unit})
	}
	sort.SliceStable(ts, func(i, j int) bool {
		if ts[i].Value != ts[j].Value {
			return ts[i].Value > ts[j].Value
		}
		return labelsKey(ts[i].Labels) < labelsKey(ts[j].Labels)
	})
	return ts
}

// Imbalance thresholds: the worst target is listed only when it is at least
// imbalanceRatio times the median target and above it by more than the
// unit's noise floor, so a fleet whose targets agree lists none.
const imbalanceRatio = 1.25

var imbalanceFloor = map[string]float64{
	"seconds": 0.005, "fraction": 0.05, "percent": 5, "requests": 1, "count": 1, "tokens": 16,
}

// imbalanced reports whether the worst of the targets (sorted worst first)
// differs materially from the median target.
func imbalanced(ts []verdict.Target, unit string) bool {
	worst := ts[0].Value
	vals := make([]float64, len(ts))
	for i, t := range ts {
		vals[i] = t.Value
	}
	sort.Float64s(vals)
	med := vals[len(vals)/2]
	if len(vals)%2 == 0 {
		med = (vals[len(vals)/2-1] + vals[len(vals)/2]) / 2
	}
	if worst-med <= imbalanceFloor[unit] {
		return false
	}
	return med <= 0 || worst >= imbalanceRatio*med
}

func labelsKey(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k + "=" + m[k] + ",")
	}
	return b.String()
}

func appendWarnings(dst []string, ws ...string) []string {
	for _, w := range ws {
		dup := false
		for _, d := range dst {
			if d == w {
				dup = true
				break
			}
		}
		if !dup {
			dst = append(dst, w)
		}
	}
	return dst
}

func valuePtr(m map[string]float64, k string) *float64 {
	// NaN and ±Inf are no value: JSON null, "n/a" in the renderings.
	if f, ok := m[k]; ok && !math.IsNaN(f) && !math.IsInf(f, 0) {
		return &f
	}
	return nil
}

// besideEngine are series of what runs in front of an engine, found
// beside the engine's: each is a stated gap until it is read (Run drops
// the gap then), never silently ignored (docs/engines.md §9).
var besideEngine = []struct{ signal, families, reason string }{
	{"client_view", frontendTTFT + "_count|" + frontendITL + "_count",
		"NVIDIA Dynamo's frontend is scraped beside the engine (dynamo_frontend_time_to_first_token_seconds, " +
			"dynamo_frontend_inter_token_latency_seconds) but its series could not be read for this scope: the headline " +
			"is the engine's, and time between the frontend and the engine is judged from the engine's series only"},
	{"pool_context", "inference_pool_average_queue_size|inference_pool_average_kv_cache_utilization|inference_pool_ready_pods",
		"the endpoint picker's pool averages are scraped beside the engine (inference_pool_average_queue_size, " +
			"inference_pool_average_kv_cache_utilization, inference_pool_ready_pods) but could not be read for this scope: " +
			"the verdict has no pool context, only the engine's own queue and KV series"},
}

// besideEngineGaps runs one query of every scope's series (Options.Shared:
// a cycle runs it once) and returns a gap for each source found.
func besideEngineGaps(ctx context.Context, opts *Options, win string) []verdict.DataGap {
	parts := make([]string, len(besideEngine))
	for i, b := range besideEngine {
		parts[i] = `label_replace(count(last_over_time({__name__=~"` + b.families + `"}[` + win + `])), "source", "` + b.signal + `", "", "")`
	}
	v, _, err := opts.Shared.Query(ctx, strings.Join(parts, " or "), opts.At)
	if err != nil {
		return nil
	}
	var out []verdict.DataGap
	for _, b := range besideEngine {
		for _, s := range v {
			if string(s.Metric["source"]) == b.signal && s.Value > 0 {
				out = append(out, verdict.DataGap{Signal: b.signal, Window: "incident", Reason: b.reason})
			}
		}
	}
	return out
}

// BucketLayout returns the finite le bounds of the histogram a quantile
// signal reads (its rendered query over win, at at), or nil when the
// signal is no histogram_quantile or nothing answers. whatif uses it to
// read a replay's samples the way the engine's histogram reads requests.
func BucketLayout(ctx context.Context, m query.Metrics, rs *rules.Ruleset, signal, selector, win string, at time.Time) []float64 {
	sels := bucketSelectors(rs.Signal(signal), selector, win)
	if len(sels) == 0 {
		return nil
	}
	return queryLes(ctx, m, sels, win, at)
}

// BucketCounts returns the histogram a quantile signal reads as its
// finite le bounds and the observations in each bucket over win ending at
// at (the last entry: past the last bound), or nil when the signal is no
// histogram_quantile or nothing answers.
func BucketCounts(ctx context.Context, m query.Metrics, rs *rules.Ruleset, signal, selector, win string, at time.Time) (les, counts []float64) {
	sels := bucketSelectors(rs.Signal(signal), selector, win)
	if len(sels) == 0 {
		return nil, nil
	}
	parts := make([]string, len(sels))
	for i, sel := range sels {
		parts[i] = fmt.Sprintf("sum by (le) (increase(%s[%s]))", sel, win)
	}
	vec, _, err := m.Query(ctx, strings.Join(parts, " or "), at)
	if err != nil || len(vec) == 0 {
		return nil, nil
	}
	cum := map[float64]float64{}
	inf := math.NaN()
	for _, sm := range vec {
		f, err := strconv.ParseFloat(string(sm.Metric["le"]), 64)
		switch {
		case err != nil || math.IsNaN(f):
		case math.IsInf(f, 1):
			inf = float64(sm.Value)
		default:
			les = append(les, f)
			cum[f] = float64(sm.Value)
		}
	}
	if len(les) == 0 || math.IsNaN(inf) {
		return nil, nil
	}
	sort.Float64s(les)
	prev := 0.0
	for _, le := range les {
		counts = append(counts, math.Max(0, cum[le]-prev))
		prev = math.Max(prev, cum[le])
	}
	counts = append(counts, math.Max(0, inf-prev))
	return les, counts
}
