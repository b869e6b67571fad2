package diagnose

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/whyslow/whyslow/query"
	"github.com/whyslow/whyslow/rules"
	"github.com/whyslow/whyslow/verdict"
)

// DataSpanner is implemented by a metrics source that knows the time range
// of every sample it holds (the embedded store of a bundle, a --scrape
// sample or a sidecar; found through wrappers, query.As). An
// insufficient-data verdict uses it to say where the data lies; other
// sources are searched from spanBefore before the incident time to
// spanAfter after it.
type DataSpanner interface {
	DataSpan() (start, end time.Time)
}

// The search range around the incident time for a source that is no
// DataSpanner (a remote Prometheus).
const (
	spanBefore = 7 * 24 * time.Hour
	spanAfter  = 24 * time.Hour
)

// dataSpan is the stretch of time some series have samples in.
type dataSpan struct{ start, end time.Time }

// diagnosis finds why a triage had too little data. Its queries run only
// for an insufficient verdict.
type diagnosis struct {
	ctx       context.Context
	opts      *Options
	rs        *rules.Ruleset // nil when no engine was detected
	now, base map[string]float64
	search    dataSpan
	// exact says search is the source's own data range (DataSpanner).
	exact bool
}

// diagnoseInsufficient returns the first reason that holds, in the order
// of the InsufficientCode constants. A check whose query fails is skipped.
func diagnoseInsufficient(ctx context.Context, opts *Options, rs *rules.Ruleset, now, base map[string]float64) *verdict.InsufficientReason {
	d := &diagnosis{ctx: ctx, opts: opts, rs: rs, now: now, base: base,
		search: dataSpan{opts.At.Add(-spanBefore), opts.At.Add(spanAfter)}}
	if ds, ok := query.As[DataSpanner](opts.Metrics); ok {
		start, end := ds.DataSpan()
		if start.IsZero() && end.IsZero() {
			return &verdict.InsufficientReason{Code: verdict.InsufficientNoEngine,
				Message: "the source holds no samples at all: check that the bundle's metrics.om (or the scraped endpoint) has data"}
		}
		d.search, d.exact = dataSpan{start, end}, true
	}
	if r := d.engineReason(); r != nil {
		return r
	}
	scoped, ok := d.scopedSpan()
	if r := d.selectorReason(scoped, ok); r != nil {
		return r
	}
	if r := d.learningReason(scoped, ok); r != nil {
		return r
	}
	if ok {
		if r := d.windowReason(scoped); r != nil {
			return r
		}
		if r := d.baselineReason(scoped); r != nil {
			return r
		}
	}
	return d.signalReason()
}

// pool is the rulesets the triage could have read: the given one, the
// named engine's, or every candidate.
func (d *diagnosis) pool() []*rules.Ruleset {
	switch {
	case d.opts.Ruleset != nil:
		return []*rules.Ruleset{d.opts.Ruleset}
	case d.opts.Engine != "" && d.opts.Engine != "auto":
		for _, rs := range d.opts.Rulesets {
			if rs.Engine == d.opts.Engine {
				return []*rules.Ruleset{rs}
			}
		}
	}
	return d.opts.Rulesets
}

// enginePool is the ruleset of the engine the triage read, with all its
// shapes (the one it read may be a shape whose own series are missing), or
// the whole pool when none was detected.
func (d *diagnosis) enginePool() []*rules.Ruleset {
	pool := d.pool()
	if d.rs == nil {
		return pool
	}
	for _, rs := range pool {
		if rs.Engine == d.rs.Engine {
			return []*rules.Ruleset{rs}
		}
	}
	return []*rules.Ruleset{d.rs}
}

// engineSelectors are the vector selectors of the rulesets' (and their
// shapes') detect expressions for the selector: the series that say an
// engine is there.
func engineSelectors(pool []*rules.Ruleset, selector string) []string {
	var out []string
	seen := map[string]bool{}
	add := func(s *rules.Signal) {
		if s == nil {
			return
		}
		expr, err := s.Render(selector, "5m", nil)
		if err != nil {
			return
		}
		for _, vs := range vectorSelectors(expr) {
			if !seen[vs] {
				seen[vs] = true
				out = append(out, vs)
			}
		}
	}
	for _, rs := range pool {
		add(rs.Detect)
		for _, sh := range rs.Shapes {
			add(sh.Detect)
		}
	}
	return out
}

// vectorSelectors lists the vector selectors of a PromQL expression, as PromQL.
func vectorSelectors(expr string) []string {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return nil
	}
	var out []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			c := *vs
			c.OriginalOffset, c.Offset, c.Timestamp, c.StartOrEnd = 0, 0, nil, 0
			out = append(out, c.String())
		}
		return nil
	})
	return out
}

// metricNames lists the metric names of a PromQL expression.
func metricNames(expr string) []string {
	var out []string
	seen := map[string]bool{}
	for _, vs := range vectorSelectors(expr) {
		name := vs
		if i := strings.IndexByte(vs, '{'); i >= 0 {
			name = vs[:i]
		}
		if name != "" && !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	return out
}

// presentNear reports whether any of the selectors (every scope's: the
// query goes to Options.Shared) has a sample in the incident window (an
// instant query at its end); false on an error, so the full search decides.
func (d *diagnosis) presentNear(sels []string) bool {
	if len(sels) == 0 || d.opts.Window <= 0 {
		return false
	}
	rng := model.Duration(d.opts.Window).String()
	parts := make([]string, len(sels))
	for i, s := range sels {
		parts[i] = fmt.Sprintf("count(last_over_time(%s[%s]))", s, rng)
	}
	v, _, err := d.opts.Shared.Query(d.ctx, strings.Join(parts, " or "), d.opts.At)
	return err == nil && len(v) > 0
}

// spanOf is the stretch of the search range in which any of the selectors
// has samples, to the second, asked of m (Options.Shared for selectors
// without the scope's). A range query over the whole search range finds
// it to one step (a point at t stands for samples in (t - step, t], so a
// coarse span can end a step after the data, past --at); the first and
// the last point are then searched again, a step back from each, at a
// finer step until it is a second. The finer points end on the coarse
// one, so their windows tile the coarse window: each search finds the
// same second whatever the steps on the way.
func (d *diagnosis) spanOf(m query.Metrics, sels []string) (dataSpan, bool, error) {
	if len(sels) == 0 {
		return dataSpan{}, false, nil
	}
	step := max(time.Second, (d.search.end.Sub(d.search.start) / spanPoints).Round(time.Second))
	first, last, err := d.pointsOf(m, sels, d.search.start, d.search.end.Add(step), step)
	if err != nil || first.IsZero() {
		return dataSpan{}, false, err
	}
	for step > time.Second {
		fine := max(time.Second, (step / spanPoints).Round(time.Second))
		back := (step + fine - 1) / fine * fine // whole fine steps, at least a coarse one
		if f, _, err := d.pointsOf(m, sels, first.Add(-back), first, fine); err == nil && !f.IsZero() {
			first = f
		}
		if _, l, err := d.pointsOf(m, sels, last.Add(-back), last, fine); err == nil && !l.IsZero() {
			last = l
		}
		step = fine
	}
	sp := dataSpan{first, last}
	if sp.start.Before(d.search.start) {
		sp.start = d.search.start
	}
	if sp.end.After(d.search.end) {
		sp.end = d.search.end
	}
	return sp, true, nil
}

// spanPoints is about how many points one query of a data-span search
// reads. A range query's cost grows with its points, so a few short
// queries (a week found to the second in seven, ~320 points) cost less
// than one long one and two refinements (2,700 points).
const spanPoints = 60

// pointsOf is the first and last point, from start to end at step, at
// which any of the selectors has a sample in the step before it; zero
// times when none has.
func (d *diagnosis) pointsOf(m query.Metrics, sels []string, start, end time.Time, step time.Duration) (first, last time.Time, err error) {
	rng := model.Duration(step).String()
	parts := make([]string, len(sels))
	for i, s := range sels {
		parts[i] = fmt.Sprintf("count(last_over_time(%s[%s]))", s, rng)
	}
	mat, _, err := m.QueryRange(d.ctx, strings.Join(parts, " or "), start, end, step)
	if err != nil {
		return time.Time{}, time.Time{}, err
	}
	for _, ss := range mat {
		for _, p := range ss.Values {
			t := p.Timestamp.Time()
			if first.IsZero() || t.Before(first) {
				first = t
			}
			if t.After(last) {
				last = t
			}
		}
	}
	return first, last, nil
}

// where says which part of the source was searched, for messages.
func (d *diagnosis) where() string {
	if d.exact {
		return "the source"
	}
	return fmt.Sprintf("the source between %s and %s (%s)", stamp(d.search.start), stamp(d.search.end),
		d.advice("7 days before --at to a day after", "7 days before the incident to a day after"))
}

func (d *diagnosis) engineReason() *verdict.InsufficientReason {
	pool := d.pool()
	sels := engineSelectors(pool, "")
	// The engine's series around the incident settle it with one instant
	// query; the range search below reads every series of the engine in
	// the source (every scope of a fleet), so it runs only when they are
	// missing there.
	if d.presentNear(sels) {
		return nil
	}
	if _, ok, err := d.spanOf(d.opts.Shared, sels); err != nil || ok {
		return nil
	}
	names := enginesOf(pool)
	// Another engine's series, when the engine was named.
	var others []string
	candidates := d.opts.Rulesets
	if d.opts.OtherEngines != nil {
		candidates = append(append([]*rules.Ruleset(nil), candidates...), d.opts.OtherEngines()...)
	}
	for _, rs := range candidates {
		if containsRS(pool, rs) {
			continue
		}
		if _, ok, err := d.spanOf(d.opts.Shared, engineSelectors([]*rules.Ruleset{rs}, "")); err == nil && ok {
			others = append(others, rs.Engine)
		}
	}
	if len(others) > 0 {
		return &verdict.InsufficientReason{Code: verdict.InsufficientNoEngine, Message: fmt.Sprintf(
			"no %s series in %s, but it holds %s series: %s",
			strings.Join(names, "/"), d.where(), strings.Join(others, ", "),
			d.advice(fmt.Sprintf("use --engine %s (or --engine auto)", others[0]), fmt.Sprintf("set engine: %s (or auto) in the daemon's config", others[0])))}
	}
	// A source whyslow can name but not triage alone says what it is and
	// what to point whyslow at instead.
	for _, r := range recognised {
		if _, ok, err := d.spanOf(d.opts.Shared, []string{r.match}); err == nil && ok {
			return &verdict.InsufficientReason{Code: verdict.InsufficientNoEngine, Message: fmt.Sprintf(
				"no %s series in %s, but %s series (%s): %s",
				strings.Join(names, "/"), d.where(), r.what, r.names, r.hint)}
		}
	}
	// One metric per engine is enough to say what was looked for.
	var metrics []string
	for _, rs := range pool {
		if ms := engineSelectors([]*rules.Ruleset{rs}, ""); len(ms) > 0 {
			metrics = append(metrics, metricNames(ms[0])...)
		}
	}
	what := names[0] + " series"
	if len(names) > 1 {
		what = "series of a known engine (" + strings.Join(names, ", ") + ")"
	}
	return &verdict.InsufficientReason{Code: verdict.InsufficientNoEngine, Message: fmt.Sprintf(
		"no %s in %s (looked for %s, …): point whyslow at the engine's /metrics, or at the Prometheus that scrapes it",
		what, d.where(), strings.Join(metrics, ", "))}
}

// recognised are sources found without any engine's series that whyslow
// names rather than calling them nothing (docs/engines.md, "Wrappers and
// routers": the prefixes and where each was read).
var recognised = []struct{ what, names, match, hint string }{
	{"the endpoint picker's (Gateway API Inference Extension / llm-d EPP)", "inference_pool_*, inference_objective_*",
		`{__name__=~"inference_pool_.+|inference_objective_.+|inference_model_.+"}`,
		"the picker sees pool averages, not why a request was slow; point whyslow at the model server pods the InferencePool selects (each pod's /metrics: vllm:*, sglang:*), or at the Prometheus that scrapes them"},
	{"NVIDIA Dynamo's frontend", "dynamo_frontend_*",
		`{__name__=~"dynamo_frontend_.+"}`,
		"the frontend sees what clients see, the engine's series are on the workers; scrape each worker's system port (DYN_SYSTEM_PORT, /metrics: vllm:*, sglang:*, trtllm_*) beside the frontend"},
	{"Ray Serve's own", "ray_serve_*",
		`{__name__=~"ray_serve_.+"}`,
		"Ray Serve LLM exports the engine's series (ray_vllm_*) only with log_engine_metrics: true in the LLMConfig; set it, then point whyslow at the Ray metrics agent's /metrics again"},
	{"NVIDIA Triton's", "nv_inference_*, nv_trt_llm_*",
		`{__name__=~"nv_inference_.+|nv_trt_llm_.+"}`,
		"Triton's per-model counters have no TTFT or inter-token histograms and are not read; serve TensorRT-LLM with trtllm-serve (trtllm_*) or through Dynamo"},
}

func enginesOf(pool []*rules.Ruleset) []string {
	var out []string
	for _, rs := range pool {
		if !containsString(out, rs.Engine) {
			out = append(out, rs.Engine)
		}
	}
	if len(out) == 0 {
		out = []string{"engine"}
	}
	return out
}

func containsRS(pool []*rules.Ruleset, rs *rules.Ruleset) bool {
	for _, p := range pool {
		if p == rs {
			return true
		}
	}
	return false
}

func containsString(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// scopedSpan is where the scope's engine series have samples.
func (d *diagnosis) scopedSpan() (dataSpan, bool) {
	pool := d.enginePool()
	sp, ok, err := d.spanOf(d.opts.Metrics, engineSelectors(pool, d.opts.Selector))
	if err != nil {
		return dataSpan{}, false
	}
	return sp, ok
}

// maxLabelValues is how many values of a label an insufficient-data
// message lists.
const maxLabelValues = 10

func (d *diagnosis) selectorReason(_ dataSpan, found bool) *verdict.InsufficientReason {
	if found || strings.TrimSpace(d.opts.Selector) == "" {
		return nil
	}
	ms, err := parser.NewParser(parser.Options{}).ParseMetricSelector("{" + d.opts.Selector + "}")
	if err != nil {
		return nil
	}
	pool := d.enginePool()
	sels := engineSelectors(pool, "")
	all, ok, err := d.spanOf(d.opts.Shared, sels)
	if err != nil || !ok {
		return nil
	}
	rng := model.Duration(max(time.Minute, all.end.Sub(all.start)+time.Minute).Round(time.Second)).String()
	var parts []string
	seen := map[string]bool{}
	for _, m := range ms {
		if m.Name == model.MetricNameLabel || seen[m.Name] {
			continue
		}
		seen[m.Name] = true
		vals := d.labelValues(m.Name, sels, rng, all.end)
		switch {
		case len(vals) == 0:
			parts = append(parts, "no series has the label "+m.Name)
		case len(vals) > maxLabelValues:
			parts = append(parts, fmt.Sprintf("%s values: %s, … (%d in all)", m.Name, strings.Join(vals[:maxLabelValues], ", "), len(vals)))
		default:
			parts = append(parts, m.Name+" values: "+strings.Join(vals, ", "))
		}
	}
	msg := fmt.Sprintf("the selector {%s} matched no %s series in %s", d.opts.Selector, strings.Join(enginesOf(pool), "/"), d.where())
	if len(parts) > 0 {
		msg += "; " + strings.Join(parts, "; ")
	}
	return &verdict.InsufficientReason{Code: verdict.InsufficientSelector, Message: msg + ": " +
		d.advice("fix --selector (or incident.yaml's selector)", "fix the scope (the config's detect.group_by, or the API's scope=)")}
}

// labelValues lists the values the engine's series (every scope's) carry
// for a label, sorted.
func (d *diagnosis) labelValues(name string, sels []string, rng string, at time.Time) []string {
	seen := map[string]bool{}
	for _, s := range sels {
		v, _, err := d.opts.Shared.Query(d.ctx, fmt.Sprintf("count by (%s) (last_over_time(%s[%s]))", name, s, rng), at)
		if err != nil {
			continue
		}
		for _, smp := range v {
			if val := string(smp.Metric[model.LabelName(name)]); val != "" {
				seen[val] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for v := range seen {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

func (d *diagnosis) windowReason(data dataSpan) *verdict.InsufficientReason {
	inc := dataSpan{d.opts.At.Add(-d.opts.Window), d.opts.At}
	if !data.end.Before(inc.start) && !data.start.After(inc.end) {
		return nil
	}
	return &verdict.InsufficientReason{Code: verdict.InsufficientOutsideData, Message: fmt.Sprintf(
		"the incident window %s → %s lies outside the scope's data, which runs from %s to %s: %s",
		stamp(inc.start), stamp(inc.end), stamp(data.start), stamp(data.end),
		d.advice("give an --at inside that range (e.g. --at "+data.end.UTC().Format(time.RFC3339)+")",
			"the daemon's store does not hold that time (see its retention)"))}
}

// advice is the CLI's advice, or the daemon's (which takes no flags).
func (d *diagnosis) advice(cli, daemon string) string {
	if d.opts.Daemon {
		return daemon
	}
	return cli
}

// learningReason is the daemon's learning state when the baseline window
// starts before the scope's data (or no data was found, and a learning
// daemon has too little history for one): the state, not a wrong
// --baseline or --at, is why there is nothing to compare with.
func (d *diagnosis) learningReason(data dataSpan, found bool) *verdict.InsufficientReason {
	l := d.opts.Learning
	if l == nil {
		return nil
	}
	bs := d.opts.At.Add(-d.opts.Baseline - d.opts.Window)
	if found && !data.start.After(bs) {
		return nil
	}
	msg := l.Message + ": nothing to compare with yet"
	if found {
		msg = fmt.Sprintf("%s: the scope's data starts at %s, so the baseline window %s → %s holds nothing yet",
			l.Message, stamp(data.start), stamp(bs), stamp(d.opts.At.Add(-d.opts.Baseline)))
	}
	if l.NeededMinutes > 0 {
		msg += fmt.Sprintf("; the daemon compares with the history there is once it holds %d minutes", l.NeededMinutes)
	}
	return &verdict.InsufficientReason{Code: verdict.InsufficientLearning, Message: msg}
}

// learningGaps replaces the baseline window's gaps (every signal is
// missing there while the daemon learns) with one that says why.
func learningGaps(gaps []verdict.DataGap, why string) []verdict.DataGap {
	out := gaps[:0:0]
	for _, g := range gaps {
		if g.Window != "baseline" {
			out = append(out, g)
		}
	}
	return append(out, verdict.DataGap{Signal: "baseline", Window: "baseline", Reason: why})
}

func (d *diagnosis) baselineReason(data dataSpan) *verdict.InsufficientReason {
	bs := d.opts.At.Add(-d.opts.Baseline - d.opts.Window)
	be := d.opts.At.Add(-d.opts.Baseline)
	ss := ""
	if d.rs != nil {
		ss = d.rs.Verdict.SamplesSignal
	}
	n, haveSamples := d.base[ss]
	if !data.start.After(bs) && (ss == "" || (haveSamples && n >= 2)) {
		return nil
	}
	history := d.opts.At.Sub(data.start)
	if history < 0 {
		history = 0
	}
	at := d.advice("--at", "the incident")
	msg := fmt.Sprintf("the baseline window %s → %s (%s before %s) is not covered: ", stamp(bs), stamp(be), shortDur(d.opts.Baseline), at)
	if !data.start.After(bs) {
		msg += "the scope's data has a gap there; " + d.advice("choose another --baseline", "set another triage.baseline in the daemon's config")
		return &verdict.InsufficientReason{Code: verdict.InsufficientBaseline, Message: msg}
	}
	msg += fmt.Sprintf("the scope's data starts at %s, %s of history before %s", stamp(data.start), shortDur(history), at)
	if most := (history - d.opts.Window).Truncate(time.Minute); most >= d.opts.Window {
		msg += fmt.Sprintf("; "+d.advice("use --baseline %s or less", "set triage.baseline to %s or less"), shortDur(most))
	} else {
		msg += fmt.Sprintf("; a %s window needs at least %s of history for a baseline", shortDur(d.opts.Window), shortDur(2*d.opts.Window))
	}
	if !d.exact || d.opts.Daemon { // a daemon's own store grows; a bundle's does not
		msg += ", or wait until " + stamp(data.start.Add(d.opts.Baseline+d.opts.Window))
	}
	return &verdict.InsufficientReason{Code: verdict.InsufficientBaseline, Message: msg}
}

// requiredRef is one signal the insufficient expression reads, and in
// which window.
type requiredRef struct{ signal, window string }

var refRE = regexp.MustCompile(`"([a-zA-Z0-9_]+)"\s+in\s+(now|base)\b|\b(now|base)\.\??([a-zA-Z0-9_]+)`)

// requiredRefs lists the (signal, window) pairs an expression reads, in order.
func requiredRefs(src string) []requiredRef {
	var out []requiredRef
	seen := map[requiredRef]bool{}
	for _, m := range refRE.FindAllStringSubmatch(src, -1) {
		r := requiredRef{m[1], m[2]}
		if r.signal == "" {
			r = requiredRef{m[4], m[3]}
		}
		if r.window == "base" {
			r.window = "baseline"
		} else {
			r.window = "incident"
		}
		if !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	return out
}

func (d *diagnosis) signalReason() *verdict.InsufficientReason {
	if d.rs == nil {
		return &verdict.InsufficientReason{Code: verdict.InsufficientSignal, Message: "no engine was detected for the scope: " +
			d.advice("name it with --engine", "name it with engine: in the daemon's config")}
	}
	for _, r := range requiredRefs(d.rs.Verdict.Insufficient.Source) {
		m := d.now
		if r.window == "baseline" {
			m = d.base
		}
		if _, ok := m[r.signal]; ok {
			continue
		}
		title := r.signal
		var metrics []string
		if s := d.rs.Declared(r.signal); s != nil {
			if s.Title != "" {
				title = r.signal + " (" + s.Title + ")"
			}
			if expr, err := s.Render(d.opts.Selector, "5m", nil); err == nil {
				metrics = metricNames(expr)
			}
		}
		msg := fmt.Sprintf("the required signal %s has no value in the %s window", title, r.window)
		switch {
		case r.window == "baseline" && d.base["requests"] == 0 && hasKey(d.base, "requests"):
			msg += ": no request completed in the baseline window; " + d.advice("choose a --baseline with traffic", "set triage.baseline in the daemon's config to a time with traffic")
		case r.window == "incident" && d.now["requests"] == 0 && hasKey(d.now, "requests"):
			msg += ": no request completed in the incident window (the scope was idle)"
		case len(metrics) > 0:
			msg += fmt.Sprintf(": no series of %s matched the scope; check that %s exports them%s",
				strings.Join(metrics, ", "), d.rs.Engine, d.advice(" (--explain shows the query)", ""))
		}
		return &verdict.InsufficientReason{Code: verdict.InsufficientSignal, Message: msg, Signal: r.signal, Window: r.window}
	}
	// Every signal is there: a threshold of the expression failed.
	if n, ok := d.now["requests"]; ok && n < 1 {
		return &verdict.InsufficientReason{Code: verdict.InsufficientSignal, Signal: "requests", Window: "incident",
			Message: "no request completed in the incident window (the scope was idle): nothing to judge"}
	}
	if ss := d.rs.Verdict.SamplesSignal; ss != "" {
		if n, ok := d.now[ss]; ok && n < 2 {
			return &verdict.InsufficientReason{Code: verdict.InsufficientSignal, Signal: ss, Window: "incident",
				Message: fmt.Sprintf("too few samples in the incident window (%.0f): rate() needs at least 2; %s", n,
					d.advice("use a longer --window", "set a longer triage.window in the daemon's config"))}
		}
	}
	return &verdict.InsufficientReason{Code: verdict.InsufficientSignal, Message: "the ruleset's insufficient condition held: see the data gaps" +
		d.advice(" (--explain shows every signal)", "")}
}

func hasKey(m map[string]float64, k string) bool {
	_, ok := m[k]
	return ok
}

// stamp renders a time for messages: "2026-01-01 01:23:00 UTC".
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") }

// shortDur renders 1h0m0s as 1h and 35m0s as 35m.
func shortDur(d time.Duration) string {
	s := d.Round(time.Second).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	if math.Abs(d.Seconds()) < 1 {
		return "0s"
	}
	return s
}
