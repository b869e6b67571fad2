// Package detect decides when to triage: the detector evaluates a few
// PromQL triggers per scope against a learned baseline and says which
// scopes fire.
package detect

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/whyslow/whyslow/query"
	"github.com/whyslow/whyslow/verdict"
)

// Built-in detection signals. Each expands to PromQL joined from the
// engines' signal maps (Engine: the vLLM V1 and V0 names, SGLang,
// TensorRT-LLM, ...), so one trigger works against any engine.
const (
	// SignalTTFTP95 is the p95 time to first token, in seconds.
	SignalTTFTP95 = "ttft_p95"
	// SignalTPOTP95 is the p95 inter-token latency (TPOT), in seconds.
	SignalTPOTP95 = "tpot_p95"
	// SignalSuccessRate is the share of finished requests the server did not
	// fail (0–1); client aborts are not failures.
	SignalSuccessRate = "success_rate"
	// SignalQueueGrowth is the slope of the waiting queue, in requests per second.
	SignalQueueGrowth = "queue_growth"
)

// builtin lists the built-in signals.
var builtin = map[string]bool{SignalTTFTP95: true, SignalTPOTP95: true, SignalSuccessRate: true, SignalQueueGrowth: true}

// Detection defaults: they work out of the box against a vLLM sidecar
// scraped every 5 s.
const (
	DefaultShortWindow = time.Minute
	DefaultLongWindow  = 2 * time.Minute
	DefaultBaseline    = time.Hour
	// DefaultFor is three scrape intervals: one noisy scrape never pages, the
	// ranking has a few scrapes of the new regime to work with, and an
	// incident opens within 3 intervals of its signal crossing. A burst
	// that drains (15–30 s past capacity) still pages briefly; a hold of
	// 90 s or more keeps such bursts quiet at the cost of opening later.
	DefaultFor = 15 * time.Second
)

// MinHistory is the least history a baseline is taken from: with less,
// whyslow is still learning the baseline, ratio conditions (detector and
// ruleset) have nothing to compare with, and only absolute triggers and
// mechanisms count. It is twice the default long window: the least
// history in which a baseline window as long as the window compared with
// fits before it without overlapping, so the triggers work from the fourth
// minute after a (re)start. A longer window needs more (twice its length,
// see ChooseBaseline). Too little history is still no false alarm: a
// baseline window needs the trigger's MinRequests like any other, and a
// learned baseline is the highest of the windows the history holds.
const MinHistory = 2 * DefaultLongWindow

// learnRecent is how far back the nearest window of a learned baseline
// ends (less the long window) once the history holds more: an incident of
// the last minutes stays out of the baseline it is compared with while
// that baseline is being learnt.
const learnRecent = 10 * time.Minute

// BaselineChoice is the baseline offset a detection or a triage uses at one
// time, given how much history the store holds: the configured offset
// once the history reaches it, else the history there is (the baseline
// window then starts where the history starts), else none.
type BaselineChoice struct {
	// Offset is how far back the baseline window ends; 0 means no baseline
	// (less than Needed of history).
	Offset time.Duration
	// Configured is the offset asked for (e.g. 1h).
	Configured time.Duration
	// History is how much history the store holds; 0 when unknown.
	History time.Duration
	// Learning says Offset is shorter than Configured (or there is none).
	Learning bool
	// Needed is the least history a baseline needs for this window: the
	// larger of MinHistory and twice the window.
	Needed time.Duration
}

// ChooseBaseline picks the baseline offset for a window of length window
// ending at at, with the history starting at since (zero: unknown, the
// configured offset is used as is). The baseline window must fit in the
// history and must not overlap the window.
func ChooseBaseline(configured, window time.Duration, since, at time.Time) BaselineChoice {
	c := BaselineChoice{Offset: configured, Configured: configured, Needed: max(MinHistory, 2*window)}
	if since.IsZero() || configured <= 0 {
		return c
	}
	c.History = max(at.Sub(since), 0)
	if c.History >= configured+window {
		return c
	}
	c.Learning = true
	off := (c.History - window).Truncate(time.Second)
	if m := off.Truncate(time.Minute); m >= window {
		off = m // whole minutes, as the note says
	}
	if c.History < MinHistory || off < window || off <= 0 {
		c.Offset = 0
		return c
	}
	c.Offset = off
	return c
}

// Note says how the baseline was chosen, for a verdict warning: "" with the
// configured baseline; "baseline 12m (learning: 14 of 60 minutes of
// history)" with a shortened one; "learning the baseline (7 of 60
// minutes)..." without one.
func (c BaselineChoice) Note() string {
	if !c.Learning {
		return ""
	}
	hist, full := int(c.History/time.Minute), int(c.Configured/time.Minute)
	if c.Offset == 0 {
		return fmt.Sprintf("learning the baseline (%d of %d minutes): less than %d minutes of history, so nothing is compared with a baseline; "+
			"only absolute triggers (success rate, queue growth) and mechanism evidence count", hist, full, int(max(c.Needed, MinHistory)/time.Minute))
	}
	return fmt.Sprintf("baseline %s (learning: %d of %d minutes of history)", model.Duration(c.Offset), hist, full)
}

// DefaultGroupBy is the label set that makes a detection scope.
var DefaultGroupBy = []string{"model_name"}

// DetectConfig configures the detector: which triggers run, over which
// windows, and how long a condition must hold before it fires. It is the
// `detect:` section of the daemon's YAML config; zero values get defaults.
type DetectConfig struct {
	// Selector is extra PromQL label matchers (without braces) applied to every query.
	Selector string `yaml:"selector,omitempty" json:"selector,omitempty"`
	// GroupBy are the labels that tell scopes apart (default model_name).
	GroupBy []string `yaml:"group_by,omitempty" json:"group_by,omitempty"`
	// ShortWindow catches a change fast (default 1m).
	ShortWindow time.Duration `yaml:"short_window,omitempty" json:"short_window,omitempty"`
	// LongWindow confirms it (default 2m). Both windows must violate.
	LongWindow time.Duration `yaml:"long_window,omitempty" json:"long_window,omitempty"`
	// Baseline is how far back the reference window ends (default 1h).
	// With less history in the store (a fresh sidecar), ratio conditions
	// compare with the history there is (see ChooseBaseline); with less
	// than MinHistory (or twice the long window) only above/below
	// conditions fire.
	Baseline time.Duration `yaml:"baseline,omitempty" json:"baseline,omitempty"`
	// For is how long a condition must hold before it fires (default 15s;
	// see DefaultFor).
	For time.Duration `yaml:"for,omitempty" json:"for,omitempty"`
	// Triggers replace the built-in defaults when set.
	Triggers []Trigger `yaml:"triggers,omitempty" json:"triggers,omitempty"`
	// MaxSeries bounds the series one query answer may hold (default
	// 100000): the series past it are dropped (counted, see CycleStats),
	// as Prometheus's query.max-samples bounds one query.
	MaxSeries int `yaml:"max_series,omitempty" json:"max_series,omitempty"`
	// MaxScopes bounds the scopes one evaluation judges (default 2000).
	// With more, the evaluations rotate through them (see Covers): each
	// scope is judged every ceil(scopes / MaxScopes) evaluations or so,
	// so one tenant with many series does not starve the others.
	MaxScopes int `yaml:"max_scopes,omitempty" json:"max_scopes,omitempty"`
	// MaxOpenIncidents bounds the incidents the detector keeps open at
	// once (default 100; the daemon's bound, Alertmanager's are
	// alerts.max_open_incidents): a scope that would open one more waits
	// for room.
	MaxOpenIncidents int `yaml:"max_open_incidents,omitempty" json:"max_open_incidents,omitempty"`
	// MaxNotifications bounds the notifications one cycle sends each
	// receiver (default 10; the daemon's bound): with more, those of one
	// kind go as one grouped message ("12 scopes opened").
	MaxNotifications int `yaml:"max_notifications,omitempty" json:"max_notifications,omitempty"`
}

// Detection bounds (DetectConfig's Max* fields): safe for a Prometheus
// holding a few thousand scopes, and well below what runs a fleet
// daemon out of its interval or memory (issue 26: 200,000 series took 437 s
// and 2.8 GB per cycle).
const (
	DefaultMaxSeries        = 100000
	DefaultMaxScopes        = 2000
	DefaultMaxOpenIncidents = 100
	DefaultMaxNotifications = 10
)

// Trigger is one detection condition. It fires for a scope when, in both
// windows, any of its conditions holds: the value reached Ratio times the
// baseline (and rose by at least MinIncrease), went above Above, or went
// below Below.
type Trigger struct {
	// Name identifies the trigger in output and metrics.
	Name string `yaml:"name" json:"name"`
	// Signal is a built-in signal (ttft_p95, tpot_p95, success_rate, queue_growth).
	Signal string `yaml:"signal,omitempty" json:"signal,omitempty"`
	// Expr is custom PromQL used instead of Signal; it may use $sel, $by and $window.
	Expr string `yaml:"expr,omitempty" json:"expr,omitempty"`
	// Ratio fires when value >= Ratio × baseline. Zero disables it.
	Ratio float64 `yaml:"ratio,omitempty" json:"ratio,omitempty"`
	// MinIncrease is the least absolute rise over the baseline for Ratio to count.
	MinIncrease float64 `yaml:"min_increase,omitempty" json:"min_increase,omitempty"`
	// MeanRatio, with a histogram-quantile signal (ttft_p95, tpot_p95) and
	// Ratio, also requires the window's mean (rate of _sum over rate of
	// _count, exact) to reach MeanRatio × the baseline's mean. A quantile
	// interpolated inside coarse buckets jumps between bucket bounds: with
	// vLLM's inter-token buckets 0.025 → 0.05 s a 9% rise of the mean can
	// read as a doubling of p95; a real slowdown moves the mean too. Zero
	// disables the check.
	MeanRatio float64 `yaml:"mean_ratio,omitempty" json:"mean_ratio,omitempty"`
	// Above is an absolute SLO: fires when value > Above.
	Above *float64 `yaml:"above,omitempty" json:"above,omitempty"`
	// Below fires when value < Below (success rate).
	Below *float64 `yaml:"below,omitempty" json:"below,omitempty"`
	// For overrides the detector's hold for this trigger.
	For *time.Duration `yaml:"for,omitempty" json:"for,omitempty"`
	// MinRequests is the least number of requests a window must have seen
	// for its value to count (in the short, the long and, for Ratio, the
	// baseline window), as SREs require a minimum volume before a burn-rate
	// alert: five aborts out of forty warm-up requests is not an error
	// storm. Zero disables the check.
	MinRequests float64 `yaml:"min_requests,omitempty" json:"min_requests,omitempty"`
	// VolumeExpr counts the requests over $window for MinRequests with a
	// custom Expr (built-in signals have their own).
	VolumeExpr string `yaml:"volume_expr,omitempty" json:"volume_expr,omitempty"`
	// Severity of an incident this trigger opens (default warning).
	Severity verdict.Severity `yaml:"severity,omitempty" json:"severity,omitempty"`
}

func ptr[T any](v T) *T { return &v }

// DefaultTriggers returns the built-in triggers: TTFT p95 at 2× baseline,
// TPOT p95 at 1.5× baseline with its mean at 1.2× (each window, baseline
// included, with at least 20 requests), success rate below 98% (critical;
// at least 50 requests per window), and a waiting queue growing by more
// than one request every 5 s.
func DefaultTriggers() []Trigger {
	return []Trigger{
		{Name: "ttft_p95", Signal: SignalTTFTP95, Ratio: 2, MinIncrease: 0.1, MinRequests: 20, Severity: verdict.SeverityWarning},
		{Name: "tpot_p95", Signal: SignalTPOTP95, Ratio: 1.5, MinIncrease: 0.01, MeanRatio: 1.2, MinRequests: 20, Severity: verdict.SeverityWarning},
		{Name: "success_rate", Signal: SignalSuccessRate, Below: ptr(0.98), MinRequests: 50, Severity: verdict.SeverityCritical},
		{Name: "queue_growth", Signal: SignalQueueGrowth, Above: ptr(0.2), Severity: verdict.SeverityWarning},
	}
}

// WithDefaults returns c with every zero value replaced by its default.
func (c DetectConfig) WithDefaults() DetectConfig {
	if len(c.GroupBy) == 0 {
		c.GroupBy = append([]string(nil), DefaultGroupBy...)
	}
	if c.ShortWindow == 0 {
		c.ShortWindow = DefaultShortWindow
	}
	if c.LongWindow == 0 {
		c.LongWindow = DefaultLongWindow
	}
	if c.Baseline == 0 {
		c.Baseline = DefaultBaseline
	}
	if c.For == 0 {
		c.For = DefaultFor
	}
	if len(c.Triggers) == 0 {
		c.Triggers = DefaultTriggers()
	}
	if c.MaxSeries == 0 {
		c.MaxSeries = DefaultMaxSeries
	}
	if c.MaxScopes == 0 {
		c.MaxScopes = DefaultMaxScopes
	}
	if c.MaxOpenIncidents == 0 {
		c.MaxOpenIncidents = DefaultMaxOpenIncidents
	}
	if c.MaxNotifications == 0 {
		c.MaxNotifications = DefaultMaxNotifications
	}
	ts := make([]Trigger, len(c.Triggers))
	for i, t := range c.Triggers {
		if t.Severity == "" {
			t.Severity = verdict.SeverityWarning
		}
		if t.Name == "" {
			t.Name = t.Signal
		}
		ts[i] = t
	}
	c.Triggers = ts
	return c
}

// Validate reports every problem with c (after defaults), joined.
func (c DetectConfig) Validate() error {
	c = c.WithDefaults()
	var errs []error
	if c.ShortWindow < 0 || c.LongWindow < 0 || c.Baseline < 0 || c.For < 0 {
		errs = append(errs, errors.New("windows, baseline and for must not be negative"))
	}
	if c.MaxSeries < 0 || c.MaxScopes < 0 || c.MaxOpenIncidents < 0 || c.MaxNotifications < 0 {
		errs = append(errs, errors.New("max_series, max_scopes, max_open_incidents and max_notifications must not be negative"))
	}
	if c.ShortWindow > c.LongWindow {
		errs = append(errs, fmt.Errorf("short_window %s is longer than long_window %s", c.ShortWindow, c.LongWindow))
	}
	for _, l := range c.GroupBy {
		if !model.LabelName(l).IsValidLegacy() {
			errs = append(errs, fmt.Errorf("group_by: invalid label name %q", l))
		}
	}
	if c.Selector != "" {
		if _, err := parser.NewParser(parser.Options{}).ParseMetricSelector("{" + c.Selector + "}"); err != nil {
			errs = append(errs, fmt.Errorf("selector %q: %w", c.Selector, err))
		}
	}
	seen := map[string]bool{}
	for i, t := range c.Triggers {
		where := fmt.Sprintf("trigger %d (%s)", i+1, t.Name)
		if seen[t.Name] {
			errs = append(errs, fmt.Errorf("%s: duplicate name", where))
		}
		seen[t.Name] = true
		switch {
		case t.Signal == "" && t.Expr == "":
			errs = append(errs, fmt.Errorf("%s: set signal or expr", where))
		case t.Signal != "" && t.Expr != "":
			errs = append(errs, fmt.Errorf("%s: signal and expr are exclusive", where))
		case t.Signal != "" && !builtin[t.Signal]:
			errs = append(errs, fmt.Errorf("%s: unknown signal %q (want ttft_p95, tpot_p95, success_rate or queue_growth)", where, t.Signal))
		}
		if t.Ratio == 0 && t.Above == nil && t.Below == nil {
			errs = append(errs, fmt.Errorf("%s: no condition: set ratio, above or below", where))
		}
		if t.Ratio < 0 || (t.Ratio > 0 && t.Ratio <= 1) {
			errs = append(errs, fmt.Errorf("%s: ratio %g must be greater than 1", where, t.Ratio))
		}
		if t.MeanRatio < 0 || (t.MeanRatio > 0 && (t.Ratio == 0 || !withMean[t.Signal])) {
			errs = append(errs, fmt.Errorf("%s: mean_ratio needs ratio and a histogram-quantile signal (ttft_p95, tpot_p95)", where))
		}
		if t.MinRequests < 0 {
			errs = append(errs, fmt.Errorf("%s: min_requests must not be negative", where))
		}
		if t.MinRequests > 0 && t.VolumeExpr == "" && (t.Expr != "" || !withVolume[t.Signal]) {
			errs = append(errs, fmt.Errorf("%s: min_requests needs volume_expr (signal %q has no built-in request count)", where, t.Signal))
		}
		if t.VolumeExpr != "" {
			if _, err := parser.NewParser(parser.Options{}).ParseExpr(c.fill(t.VolumeExpr, c.ShortWindow)); err != nil {
				errs = append(errs, fmt.Errorf("%s: volume_expr: %w", where, err))
			}
		}
		if t.For != nil && *t.For < 0 {
			errs = append(errs, fmt.Errorf("%s: for must not be negative", where))
		}
		switch t.Severity {
		case verdict.SeverityWarning, verdict.SeverityCritical:
		default:
			errs = append(errs, fmt.Errorf("%s: severity %q (want warning or critical)", where, t.Severity))
		}
		if t.Expr != "" {
			if _, err := parser.NewParser(parser.Options{}).ParseExpr(c.fill(t.Expr, c.ShortWindow)); err != nil {
				errs = append(errs, fmt.Errorf("%s: expr: %w", where, err))
			}
		}
	}
	return errors.Join(errs...)
}

// validateBuiltin checks that the engines give every built-in signal the
// triggers use, and that the PromQL they build parses.
func (c DetectConfig) validateBuiltin(tm templates) error {
	var errs []error
	for i, t := range c.Triggers {
		if t.Expr != "" {
			continue
		}
		where := fmt.Sprintf("trigger %d (%s)", i+1, t.Name)
		exprs := map[string]string{"": tm.expr[t.Signal]}
		if t.MinRequests > 0 && t.VolumeExpr == "" {
			exprs["request count "] = tm.volume[t.Signal]
		}
		if t.MeanRatio > 0 {
			exprs["mean "] = tm.mean[t.Signal]
		}
		for what, e := range exprs {
			if e == "" {
				errs = append(errs, fmt.Errorf("%s: no engine map gives the %sPromQL of signal %q", where, what, t.Signal))
			} else if _, err := parser.NewParser(parser.Options{}).ParseExpr(c.fill(e, c.ShortWindow)); err != nil {
				errs = append(errs, fmt.Errorf("%s: %sexpr: %w", where, what, err))
			}
		}
	}
	return errors.Join(errs...)
}

// expr is t's PromQL over window.
func (d *Detector) expr(t Trigger, window time.Duration) string {
	tmpl := t.Expr
	if tmpl == "" {
		tmpl = d.tm.expr[t.Signal]
	}
	return d.cfg.fill(tmpl, window)
}

// volumeTemplate is the request-count expression of t, "" when none.
func (d *Detector) volumeTemplate(t Trigger) string {
	if t.VolumeExpr != "" {
		return t.VolumeExpr
	}
	if t.Expr != "" {
		return ""
	}
	return d.tm.volume[t.Signal]
}

// fill expands the placeholders of a template.
func (c DetectConfig) fill(tmpl string, window time.Duration) string {
	sel := ""
	if c.Selector != "" {
		sel = c.Selector + ","
	}
	// A target is its pod and instance, and its namespace when scopes
	// have one: in a fleet, pod names repeat across namespaces.
	target := []string{"pod", "instance"}
	if slices.Contains(c.GroupBy, "namespace") {
		target = []string{"namespace", "pod", "instance"}
	}
	// The scope labels a target's series take from its engine series
	// (group_left): those the join does not already match on.
	var scopeOnly []string
	for _, l := range c.GroupBy {
		if !slices.Contains(target, l) {
			scopeOnly = append(scopeOnly, l)
		}
	}
	return strings.NewReplacer(
		"$sel", sel,
		"$by", strings.Join(c.GroupBy, ", "),
		"$target", strings.Join(target, ", "),
		"$scopeonly", strings.Join(scopeOnly, ", "),
		"$window", model.Duration(window).String(),
	).Replace(tmpl)
}

// TriggerState is where one trigger stands for one scope.
type TriggerState int

// Trigger states, as in Prometheus alerting rules.
const (
	TriggerInactive TriggerState = iota
	TriggerPending
	TriggerFiring
)

// String returns the state's name.
func (s TriggerState) String() string {
	switch s {
	case TriggerInactive:
		return "inactive"
	case TriggerPending:
		return "pending"
	case TriggerFiring:
		return "firing"
	}
	return fmt.Sprintf("trigger_state(%d)", int(s))
}

// MarshalText encodes the state by name.
func (s TriggerState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// TriggerResult is one trigger's evaluation for one scope.
type TriggerResult struct {
	Name  string       `json:"name"`
	State TriggerState `json:"state"`
	// Short, Long and Baseline are the signal values; nil means no data.
	Short    *float64 `json:"short"`
	Long     *float64 `json:"long"`
	Baseline *float64 `json:"baseline"`
	// Requests is the long window's request count, when MinRequests is set.
	Requests *float64 `json:"requests,omitempty"`
	// Since is when the condition started holding (pending or firing).
	Since time.Time `json:"since,omitzero"`
	// Reason says which condition holds, e.g. "ratio 3.10 >= 2".
	Reason   string           `json:"reason,omitempty"`
	Severity verdict.Severity `json:"severity"`
}

// Detection is the detector's output for one scope.
type Detection struct {
	// Key identifies the scope: its selector, labels sorted.
	Key      string           `json:"key"`
	Scope    verdict.Scope    `json:"scope"`
	Firing   bool             `json:"firing"`
	Severity verdict.Severity `json:"severity"`
	Triggers []TriggerResult  `json:"triggers"`
}

// FiringTriggers returns the names of the firing triggers.
func (d Detection) FiringTriggers() []string {
	var out []string
	for _, t := range d.Triggers {
		if t.State == TriggerFiring {
			out = append(out, t.Name)
		}
	}
	return out
}

// Holding returns the names of the triggers whose condition holds now
// (pending or firing): what keeps an open incident open, since the `for`
// hold guards the opening only.
func (d Detection) Holding() []string {
	var out []string
	for _, t := range d.Triggers {
		if t.State != TriggerInactive {
			out = append(out, t.Name)
		}
	}
	return out
}

// Detector evaluates triggers each interval. It keeps only the pending-since
// times that implement the `for` hold; time always comes in as an argument.
// A Detector is not safe for concurrent use.
type Detector struct {
	cfg DetectConfig
	// engines are every engine's part, in the engine list's order; tm
	// joins those of reads (every engine while reads is nil, see
	// ReadOnly).
	engines []Engine
	reads   []string
	tm      templates
	pending map[string]pendingSince // scope key + "\x00" + trigger name
	names   []string                // GroupBy, sorted
	// Rotation (MaxScopes): the evaluations so far, the partitions the
	// next one splits the scopes into, and the one running or last run.
	turn  uint64
	parts int
	cur   evaluation
}

// pendingSince is when a condition began holding, and its scope's hash
// (which evaluations of a rotation judge it).
type pendingSince struct {
	at   time.Time
	hash uint64
}

// CycleStats say what an evaluation's bounds (MaxSeries, MaxScopes) left
// out.
type CycleStats struct {
	// Series is the most series one query answer held.
	Series int `json:"series"`
	// Truncated is the series MaxSeries dropped, over all the answers.
	Truncated int `json:"truncated"`
	// Scopes is about how many scopes the answers held (the largest
	// answer, after MaxSeries, or those judged when more).
	Scopes int `json:"scopes"`
	// Detected is the scopes judged; Skipped = Scopes - Detected were left
	// for the next evaluations of the rotation.
	Detected int `json:"detected"`
	Skipped  int `json:"skipped"`
	// Parts is the evaluations one rotation takes (1: every scope every
	// evaluation).
	Parts int `json:"parts"`
}

// Bounded reports whether the evaluation left anything out.
func (s CycleStats) Bounded() bool { return s.Truncated > 0 || s.Skipped > 0 }

// evaluation is the rotation state of one evaluation.
type evaluation struct {
	parts, index int
	queried      bool
	largest      int               // the largest answer after MaxSeries
	hash         map[string]uint64 // judged scope key → hash
	skip         map[string]bool   // in this turn's part, left out by MaxScopes
	stats        CycleStats
	// answers are this evaluation's query answers by expression and time:
	// triggers share PromQL (ttft_p95's and tpot_p95's request counts are
	// both TTFT's _count), asked once (see queryExpr).
	answers map[answerKey]answer
}

// answerKey is one query of an evaluation: its expression and time.
type answerKey struct {
	expr string
	at   int64 // UnixNano
}

// answer is one query's values by scope key and the series MaxSeries
// dropped from it.
type answer struct {
	values    map[string]float64
	truncated int
}

// NewDetector validates cfg and returns a detector whose built-in signals
// read the engines' series (their maps' `detector:` sections, in the
// engine list's order).
func NewDetector(cfg DetectConfig, engines []Engine) (*Detector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("detect config: %w", err)
	}
	cfg = cfg.WithDefaults()
	tm := buildTemplates(engines)
	if err := cfg.validateBuiltin(tm); err != nil {
		return nil, fmt.Errorf("detect config: %w", err)
	}
	names := append([]string(nil), cfg.GroupBy...)
	sort.Strings(names)
	return &Detector{cfg: cfg, engines: engines, tm: tm, pending: map[string]pendingSince{}, names: names, parts: 1}, nil
}

// ReadOnly limits the built-in signals to the parts of the named engines
// (kept in the engine list's order; a name without a part is ignored);
// nil reads every engine again. Each engine's names in the `or` of every
// query cost CPU on every evaluation even when the store holds none of
// its series, so a caller that knows which engines the store holds (the
// daemon's engine check) reads only those. A trigger whose signal none of
// them gives (TTFT on TGI) reads nothing, as it would read no series
// through the whole `or`. The pending conditions are kept: the same
// series answer the narrower queries.
func (d *Detector) ReadOnly(names []string) {
	if names == nil {
		d.reads, d.tm = nil, buildTemplates(d.engines)
		return
	}
	var parts []Engine
	d.reads = []string{}
	for _, e := range d.engines {
		if slices.Contains(names, e.Name) {
			parts = append(parts, e)
			d.reads = append(d.reads, e.Name)
		}
	}
	d.tm = buildTemplates(parts)
}

// Reads returns the engines whose parts the built-in signals read, in
// the engine list's order; nil when every engine is read.
func (d *Detector) Reads() []string {
	if d.reads == nil {
		return nil
	}
	return slices.Clone(d.reads)
}

// Stats returns what the last evaluation's bounds left out.
func (d *Detector) Stats() CycleStats { return d.cur.stats }

// Covers reports whether the last evaluation judged the scope of key (a
// Detection's Key): with more scopes than MaxScopes, an evaluation judges
// one part of them, and a scope it left out is no news (its incident is
// neither clear nor gone).
func (d *Detector) Covers(key string) bool {
	if d.cur.skip[key] {
		return false
	}
	if d.cur.parts <= 1 {
		return true
	}
	s := d.scopeOf(key)
	return d.inTurn(d.hashOf(func(l string) string { return s.Labels[l] }))
}

// partsFor is the evaluations a rotation over n scopes takes: a quarter
// more than n / MaxScopes, so a part the hash makes larger than its share
// rarely passes MaxScopes.
func (d *Detector) partsFor(n int) int {
	k := d.cfg.MaxScopes
	if k <= 0 || n <= k {
		return 1
	}
	return (n + n/4 + k - 1) / k
}

// hashOf hashes a scope's group-by label values (FNV-1a), the same from a
// series (keyOf) and from a key (scopeOf).
func (d *Detector) hashOf(value func(name string) string) uint64 {
	h := uint64(14695981039346656037)
	add := func(s string) {
		for i := 0; i < len(s); i++ {
			h = (h ^ uint64(s[i])) * 1099511628211
		}
		h = (h ^ 0xff) * 1099511628211 // a separator no label byte string ends with
	}
	for _, l := range d.names {
		add(l)
		add(value(l))
	}
	return h
}

// inTurn reports whether a scope of hash h is in the running evaluation's part.
func (d *Detector) inTurn(h uint64) bool {
	return d.cur.parts <= 1 || int(h%uint64(d.cur.parts)) == d.cur.index
}

// Config returns the detector's effective configuration.
func (d *Detector) Config() DetectConfig { return d.cfg }

// Evaluate runs every trigger at time at and returns one Detection per scope
// that has data, sorted by key. A query error fails the evaluation; the
// pending state is left untouched then.
func (d *Detector) Evaluate(ctx context.Context, m query.Metrics, at time.Time) ([]Detection, error) {
	return d.EvaluateSince(ctx, m, at, time.Time{})
}

// EvaluateSince is Evaluate for a store whose history starts at since
// (zero: unknown, taken as long enough). With less history than the
// configured baseline, ratio conditions compare with the history there is
// (ChooseBaseline over the long window), from MinHistory (twice the long
// window when longer) on; with less they are off, and the absolute
// conditions (above, below) still fire.
func (d *Detector) EvaluateSince(ctx context.Context, m query.Metrics, at, since time.Time) ([]Detection, error) {
	d.cur = evaluation{parts: max(d.parts, 1), hash: map[string]uint64{}, skip: map[string]bool{}, answers: map[answerKey]answer{}}
	d.cur.index = int(d.turn % uint64(d.cur.parts))
	choice := ChooseBaseline(d.cfg.Baseline, d.cfg.LongWindow, since, at)
	w := evalWindows{at: at, offset: choice.Offset, baseAt: at.Add(-choice.Offset)}
	if choice.Learning && w.offset > 0 {
		w.learnAt = d.learnPoints(at, w.offset)
	}
	byScope := map[string]*Detection{}
	results := make([]map[string]triggerVals, len(d.cfg.Triggers))
	for i, t := range d.cfg.Triggers {
		r, err := d.triggerValues(ctx, m, t, w)
		if err != nil {
			return nil, err
		}
		results[i] = r
		for key := range r {
			if byScope[key] == nil {
				byScope[key] = &Detection{Key: key, Scope: d.scopeOf(key), Severity: verdict.SeverityNone}
			}
		}
	}
	d.capScopes(byScope)
	live := map[string]bool{}
	for i, t := range d.cfg.Triggers {
		for key, det := range byScope {
			d.judge(t, key, results[i][key], det, at, live)
		}
	}
	d.keepPending(live, at)
	out := make([]Detection, 0, len(byScope))
	for _, det := range byScope {
		out = append(out, *det)
	}
	c := &d.cur
	c.stats.Parts, c.stats.Detected = c.parts, len(byScope)
	c.stats.Scopes = max(c.largest, len(byScope)+len(c.skip))
	c.stats.Skipped = c.stats.Scopes - c.stats.Detected
	d.parts = d.partsFor(c.largest)
	d.turn++
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// evalWindows are the times one evaluation reads: now (at), the baseline
// window's end (baseAt, offset before at) and, while learning, the points
// of the learned baseline (learnAt; nil otherwise).
type evalWindows struct {
	at, baseAt time.Time
	offset     time.Duration
	learnAt    []time.Time
}

// learnPoints are the ends of the windows a learning baseline reads. While
// learning, one window of the little history there is would be a noisy
// reference (the engine's first minutes, a lull): the baseline is the
// highest of a few windows spread over the history (none of the last
// learnRecent less the window; with less history than that, the oldest
// window there is), which only ever makes a ratio harder to reach.
func (d *Detector) learnPoints(at time.Time, offset time.Duration) []time.Time {
	var learnAt []time.Time
	lo := max(d.cfg.LongWindow, learnRecent-d.cfg.LongWindow)
	n := 1
	if offset > lo {
		n = min(6, 1+int((offset-lo)/d.cfg.LongWindow))
	}
	for k := 0; k < n; k++ {
		off := offset
		if n > 1 {
			off = offset - time.Duration(k)*(offset-lo)/time.Duration(n-1)
		}
		learnAt = append(learnAt, at.Add(-off))
	}
	return learnAt
}

// triggerVals are one trigger's values for one scope.
type triggerVals struct {
	short, long, base *float64
	// Request counts of the windows (nil: not checked or no data).
	nShort, nLong, nBase *float64
	// Means of the windows, for MeanRatio (nil: not checked or no data).
	mShort, mLong, mBase *float64
}

// windowQuery is one window of a per-window query: its length, its end,
// where its value goes, and whether it is left out.
type windowQuery struct {
	window time.Duration
	at     time.Time
	set    func(r *triggerVals, v float64)
	skip   bool
}

// triggerValues evaluates t's windows (short, long, baseline), then its
// request counts and means where it has them, by scope key.
func (d *Detector) triggerValues(ctx context.Context, m query.Metrics, t Trigger, w evalWindows) (map[string]triggerVals, error) {
	if t.Expr == "" && d.tm.expr[t.Signal] == "" {
		return map[string]triggerVals{}, nil // none of the engines read gives the signal (ReadOnly)
	}
	short, err := d.query(ctx, m, t, d.cfg.ShortWindow, w.at)
	if err != nil {
		return nil, fmt.Errorf("trigger %s: %w", t.Name, err)
	}
	long, err := d.query(ctx, m, t, d.cfg.LongWindow, w.at)
	if err != nil {
		return nil, fmt.Errorf("trigger %s: %w", t.Name, err)
	}
	base := map[string]float64{}
	if t.Ratio > 0 && w.offset > 0 && w.learnAt == nil {
		b, err := d.query(ctx, m, t, d.cfg.LongWindow, w.baseAt)
		if err != nil {
			return nil, fmt.Errorf("trigger %s baseline: %w", t.Name, err)
		}
		base = b
	}
	res := map[string]triggerVals{}
	for key, v := range short {
		r := res[key]
		r.short = ptr(v)
		res[key] = r
	}
	for key, v := range long {
		r := res[key]
		r.long = ptr(v)
		res[key] = r
	}
	for key, v := range base {
		if r, ok := res[key]; ok {
			r.base = ptr(v)
			res[key] = r
		}
	}
	if t.MinRequests > 0 {
		if err := d.perWindow(ctx, m, res, d.volumeTemplate(t), []windowQuery{
			{d.cfg.ShortWindow, w.at, func(r *triggerVals, v float64) { r.nShort = ptr(v) }, false},
			{d.cfg.LongWindow, w.at, func(r *triggerVals, v float64) { r.nLong = ptr(v) }, false},
			{d.cfg.LongWindow, w.baseAt, func(r *triggerVals, v float64) { r.nBase = ptr(v) }, t.Ratio == 0 || w.offset == 0 || w.learnAt != nil},
		}); err != nil {
			return nil, fmt.Errorf("trigger %s request count: %w", t.Name, err)
		}
	}
	if t.MeanRatio > 0 {
		if err := d.perWindow(ctx, m, res, d.tm.mean[t.Signal], []windowQuery{
			{d.cfg.ShortWindow, w.at, func(r *triggerVals, v float64) { r.mShort = ptr(v) }, false},
			{d.cfg.LongWindow, w.at, func(r *triggerVals, v float64) { r.mLong = ptr(v) }, false},
			{d.cfg.LongWindow, w.baseAt, func(r *triggerVals, v float64) { r.mBase = ptr(v) }, w.offset == 0 || w.learnAt != nil},
		}); err != nil {
			return nil, fmt.Errorf("trigger %s mean: %w", t.Name, err)
		}
	}
	if t.Ratio > 0 && w.learnAt != nil {
		if err := d.learnedBaseline(ctx, m, t, w.learnAt, func(key string, v, n, mean *float64) {
			if r, ok := res[key]; ok {
				r.base, r.nBase, r.mBase = v, n, mean
				res[key] = r
			}
		}); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// perWindow evaluates the template tmpl over each window not skipped and
// sets its values on the scopes res already has.
func (d *Detector) perWindow(ctx context.Context, m query.Metrics, res map[string]triggerVals, tmpl string, ws []windowQuery) error {
	if tmpl == "" {
		return nil // none of the engines read gives it (ReadOnly): no data
	}
	for _, w := range ws {
		if w.skip {
			continue
		}
		n, err := d.queryExpr(ctx, m, d.cfg.fill(tmpl, w.window), w.at)
		if err != nil {
			return err
		}
		for key, v := range n {
			if r, ok := res[key]; ok {
				w.set(&r, v)
				res[key] = r
			}
		}
	}
	return nil
}

// judge decides trigger t for one scope from its values r: a condition
// that holds in both windows is pending (marked live), and firing once it
// has held for the trigger's hold; det gets the result.
func (d *Detector) judge(t Trigger, key string, r triggerVals, det *Detection, at time.Time, live map[string]bool) {
	hold := d.cfg.For
	if t.For != nil {
		hold = *t.For
	}
	tr := TriggerResult{Name: t.Name, Short: r.short, Long: r.long, Baseline: r.base, Requests: r.nLong, Severity: t.Severity}
	short, long, base := r.short, r.long, r.base
	if t.MinRequests > 0 {
		// A window with too few requests is no evidence either way.
		if !enough(r.nShort, t.MinRequests) {
			short = nil
		}
		if !enough(r.nLong, t.MinRequests) {
			long = nil
		}
		if !enough(r.nBase, t.MinRequests) {
			base = nil
		}
	}
	reason, okShort := t.holds(short, base, r.mShort, r.mBase)
	_, okLong := t.holds(long, base, r.mLong, r.mBase)
	pk := key + "\x00" + t.Name
	if okShort && okLong {
		since := at
		if p, ok := d.pending[pk]; ok {
			since = p.at
		}
		live[pk] = true
		tr.Since, tr.Reason, tr.State = since, reason, TriggerPending
		if at.Sub(since) >= hold {
			tr.State = TriggerFiring
			det.Firing = true
			if t.Severity.Rank() > det.Severity.Rank() {
				det.Severity = t.Severity
			}
		}
	}
	det.Triggers = append(det.Triggers, tr)
}

// keepPending keeps the pending-since times of the conditions that hold
// (live), from at for those that just began, and forgets the others of
// the scopes this evaluation judged (a scope a rotation left out keeps its
// own).
func (d *Detector) keepPending(live map[string]bool, at time.Time) {
	for pk, p := range d.pending {
		key, _, _ := strings.Cut(pk, "\x00")
		if !live[pk] && d.inTurn(p.hash) && !d.cur.skip[key] {
			delete(d.pending, pk)
		}
	}
	for pk := range live {
		if _, ok := d.pending[pk]; !ok {
			key, _, _ := strings.Cut(pk, "\x00")
			d.pending[pk] = pendingSince{at: at, hash: d.cur.hash[key]}
		}
	}
}

// capScopes keeps at most MaxScopes of this evaluation's scopes: a run
// of them in key order that starts further on each rotation, so the
// scopes a part holds past the bound are not always the same ones.
func (d *Detector) capScopes(byScope map[string]*Detection) {
	k := d.cfg.MaxScopes
	if k <= 0 || len(byScope) <= k {
		return
	}
	keys := make([]string, 0, len(byScope))
	for key := range byScope {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	start := int((d.turn / uint64(d.cur.parts)) * uint64(k) % uint64(len(keys)))
	for i := k; i < len(keys); i++ {
		key := keys[(start+i)%len(keys)]
		delete(byScope, key)
		d.cur.skip[key] = true
	}
}

// learnedBaseline evaluates t's baseline at each of points and sets, per
// scope, the highest value among the windows with enough requests (with
// its request count) and the highest mean.
func (d *Detector) learnedBaseline(ctx context.Context, m query.Metrics, t Trigger, points []time.Time, set func(key string, v, n, mean *float64)) error {
	best := map[string]*float64{}
	count := map[string]*float64{}
	highest := map[string]*float64{} // the highest mean
	vals, err := d.queryPoints(ctx, m, d.expr(t, d.cfg.LongWindow), points)
	if err != nil {
		return fmt.Errorf("trigger %s baseline: %w", t.Name, err)
	}
	vols := make([]map[string]float64, len(points))
	if t.MinRequests > 0 && d.volumeTemplate(t) != "" {
		if vols, err = d.queryPoints(ctx, m, d.cfg.fill(d.volumeTemplate(t), d.cfg.LongWindow), points); err != nil {
			return fmt.Errorf("trigger %s request count: %w", t.Name, err)
		}
	}
	means := make([]map[string]float64, len(points))
	if t.MeanRatio > 0 && d.tm.mean[t.Signal] != "" {
		if means, err = d.queryPoints(ctx, m, d.cfg.fill(d.tm.mean[t.Signal], d.cfg.LongWindow), points); err != nil {
			return fmt.Errorf("trigger %s mean: %w", t.Name, err)
		}
	}
	for i := range points {
		vals, vols, mv := vals[i], vols[i], means[i]
		for key, v := range vals {
			var n *float64
			if t.MinRequests > 0 {
				nv, ok := vols[key]
				if !ok || nv < t.MinRequests {
					continue
				}
				n = ptr(nv)
			}
			if b := best[key]; b == nil || v > *b {
				best[key], count[key] = ptr(v), n
			}
			if mean, ok := mv[key]; ok && (highest[key] == nil || mean > *highest[key]) {
				highest[key] = ptr(mean)
			}
		}
	}
	for key, v := range best {
		set(key, v, count[key], highest[key])
	}
	return nil
}

// queryPoints evaluates expr at each of points and returns the answers in
// their order. Evenly spaced points on whole milliseconds are asked as one
// range query: Prometheus evaluates a range query at start + k×step as an
// instant query at that time, and reads the series once instead of once
// per point (a learning baseline's six points cost one query, not six).
// A source without range queries, or that fails one, is asked point by
// point, as is an answer with more series than MaxSeries keeps (an
// instant answer's order decides which are kept).
func (d *Detector) queryPoints(ctx context.Context, m query.Metrics, expr string, points []time.Time) ([]map[string]float64, error) {
	out := make([]map[string]float64, len(points))
	var vecs []model.Vector
	for _, p := range points {
		if _, ok := d.cur.answers[answerKey{expr: expr, at: p.UnixNano()}]; !ok {
			vecs = d.rangeAnswers(ctx, m, expr, points)
			break
		}
	}
	for i, p := range points {
		k := answerKey{expr: expr, at: p.UnixNano()}
		if _, asked := d.cur.answers[k]; vecs == nil || asked {
			v, err := d.queryExpr(ctx, m, expr, p)
			if err != nil {
				return nil, err
			}
			out[i] = v
			continue
		}
		out[i] = d.takeAnswer(k, vecs[i])
	}
	return out, nil
}

// rangeAnswers asks expr at points as one range query and returns the
// instant answer at each point, or nil when the points are not an even
// grid of whole milliseconds (a range query's steps are milliseconds), the
// source cannot answer, the answer holds a sample at another time than the
// points (a query frontend that aligns a range query's start to its step),
// or an answer holds more than MaxSeries series.
func (d *Detector) rangeAnswers(ctx context.Context, m query.Metrics, expr string, points []time.Time) []model.Vector {
	if len(points) < 2 {
		return nil
	}
	start, step := points[0], points[1].Sub(points[0])
	if step <= 0 || step%time.Millisecond != 0 || start.Nanosecond()%int(time.Millisecond) != 0 {
		return nil
	}
	for i, p := range points {
		if !p.Equal(start.Add(time.Duration(i) * step)) {
			return nil
		}
	}
	mat, _, err := m.QueryRange(ctx, expr, start, points[len(points)-1], step)
	if err != nil {
		return nil
	}
	vecs := make([]model.Vector, len(points))
	startMs, stepMs := start.UnixMilli(), step.Milliseconds()
	for _, ss := range mat {
		for _, sp := range ss.Values {
			off := int64(sp.Timestamp) - startMs
			i := off / stepMs
			if off < 0 || off%stepMs != 0 || i >= int64(len(points)) {
				return nil // not a step of the query: trust no part of it
			}
			vecs[i] = append(vecs[i], &model.Sample{Metric: ss.Metric, Value: sp.Value, Timestamp: sp.Timestamp})
		}
	}
	for _, v := range vecs {
		if d.cfg.MaxSeries > 0 && len(v) > d.cfg.MaxSeries {
			return nil
		}
	}
	return vecs
}

// enough reports whether a window's request count reaches min.
func enough(n *float64, min float64) bool { return n != nil && *n >= min }

// holds reports whether one window's value meets a condition of t; mean
// and baseMean are the window's and the baseline's means, for MeanRatio.
func (t Trigger) holds(v, base, mean, baseMean *float64) (string, bool) {
	if v == nil {
		return "", false
	}
	if t.Below != nil && *v < *t.Below {
		return fmt.Sprintf("%.4g < %g", *v, *t.Below), true
	}
	if t.Above != nil && *v > *t.Above {
		return fmt.Sprintf("%.4g > %g", *v, *t.Above), true
	}
	if t.Ratio > 0 && base != nil && *base > 0 && *v >= t.Ratio**base && *v-*base >= t.MinIncrease {
		if t.MeanRatio > 0 {
			if mean == nil || baseMean == nil || *baseMean <= 0 || *mean < t.MeanRatio**baseMean {
				return "", false
			}
			return fmt.Sprintf("%.4g is %.2f× baseline %.4g (>= %g×), mean %.2f× (>= %g×)",
				*v, *v / *base, *base, t.Ratio, *mean / *baseMean, t.MeanRatio), true
		}
		return fmt.Sprintf("%.4g is %.2f× baseline %.4g (>= %g×)", *v, *v / *base, *base, t.Ratio), true
	}
	return "", false
}

// query evaluates t over window at time at and returns finite values by scope key.
func (d *Detector) query(ctx context.Context, m query.Metrics, t Trigger, window time.Duration, at time.Time) (map[string]float64, error) {
	return d.queryExpr(ctx, m, d.expr(t, window), at)
}

// queryExpr evaluates expr at time at and returns finite values by scope
// key. The same query asked again in one evaluation gets the same answer
// without asking m (its series are counted again, as a second answer's
// would be); callers only read the map.
func (d *Detector) queryExpr(ctx context.Context, m query.Metrics, expr string, at time.Time) (map[string]float64, error) {
	c := &d.cur
	k := answerKey{expr: expr, at: at.UnixNano()}
	if a, ok := c.answers[k]; ok {
		c.stats.Truncated += a.truncated
		return a.values, nil
	}
	vec, _, err := m.Query(ctx, expr, at)
	if err != nil {
		return nil, err
	}
	return d.takeAnswer(k, vec), nil
}

// takeAnswer turns the answer vec to the query k into finite values by
// scope key, applying MaxSeries and the evaluation's part, and keeps it
// for the rest of the evaluation.
func (d *Detector) takeAnswer(k answerKey, vec model.Vector) map[string]float64 {
	c := &d.cur
	truncated := 0
	c.stats.Series = max(c.stats.Series, len(vec))
	if k := d.cfg.MaxSeries; k > 0 && len(vec) > k {
		truncated = len(vec) - k
		c.stats.Truncated += truncated
		vec = vec[:k]
	}
	c.largest = max(c.largest, len(vec))
	if !c.queried {
		// The first answer fixes the evaluation's part: every query of
		// one evaluation must judge the same scopes.
		c.queried = true
		if n := d.partsFor(len(vec)); n > c.parts {
			c.parts, c.index = n, int(d.turn%uint64(n))
		}
	}
	out := make(map[string]float64, min(len(vec), max(d.cfg.MaxScopes, 1)))
	for _, s := range vec {
		v := float64(s.Value)
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		h := d.hashOf(func(l string) string { return string(s.Metric[model.LabelName(l)]) })
		if !d.inTurn(h) {
			continue
		}
		key := d.keyOf(s.Metric)
		out[key] = v
		if _, ok := c.hash[key]; !ok {
			c.hash[key] = h
		}
	}
	if c.answers != nil {
		c.answers[k] = answer{values: out, truncated: truncated}
	}
	return out
}

// keyOf builds the scope key (a PromQL selector) from the group-by labels.
func (d *Detector) keyOf(m model.Metric) string {
	parts := make([]string, 0, len(d.cfg.GroupBy)+1)
	if d.cfg.Selector != "" {
		parts = append(parts, d.cfg.Selector)
	}
	names := append([]string(nil), d.cfg.GroupBy...)
	sort.Strings(names)
	for _, l := range names {
		if v, ok := m[model.LabelName(l)]; ok && v != "" {
			parts = append(parts, fmt.Sprintf("%s=%q", l, string(v)))
		}
	}
	return strings.Join(parts, ",")
}

// scopeOf turns a scope key back into a Scope.
func (d *Detector) scopeOf(key string) verdict.Scope {
	s := verdict.Scope{Selector: key}
	ms, err := parser.NewParser(parser.Options{}).ParseMetricSelector("{" + key + "}")
	if err != nil || key == "" {
		return s
	}
	group := map[string]bool{}
	for _, l := range d.cfg.GroupBy {
		group[l] = true
	}
	for _, m := range ms {
		if group[m.Name] {
			if s.Labels == nil {
				s.Labels = map[string]string{}
			}
			s.Labels[m.Name] = m.Value
		}
	}
	return s
}
