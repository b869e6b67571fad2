// Package rules parses, validates and evaluates whyslow rulesets: named PromQL
// signals, the ordered steps of the triage walk whose rules are CEL conditions
// over those signals, and the catalogue of causes with their remediation.
//
// The package does no I/O beyond reading the files LoadFiles is given: triage
// evaluates the signals and hands the numbers to Walk, which is pure.
package rules

import (
	"strings"
	"text/template"

	"cel.dev/cel-go/cel"
)

// File is one ruleset document: its name (used in error positions) and its bytes.
type File struct {
	Name string
	Data []byte
}

// Ruleset is a parsed, fully validated ruleset for one engine. It is safe for
// concurrent use: every CEL program and template is prepared once by Parse.
type Ruleset struct {
	// Engine is the engine the signals speak for: the map's `engine:`.
	Engine string
	// Order is the map's place in the engine list (`order:`, lowest first;
	// 0 sorts after the ordered ones, by name).
	Order int
	// Files are the names of the documents the ruleset was built from.
	Files []string
	// Map is the engine's signal map (the document with `engine:`): its
	// other sections (detector, chart) are read from it by their readers.
	Map File
	// Detect is a PromQL template whose non-empty result says this engine's
	// series exist (used when the engine is "auto").
	Detect *Signal
	// Signals are the signals this ruleset evaluates: every declared signal
	// the engine's signal map gives an expression, in declaration order.
	Signals []*Signal
	// Unmapped are the declared signals the engine's map leaves out: the
	// engine does not export them. They are data gaps, never evidence.
	Unmapped []*Signal
	// Steps are the walk, in order.
	Steps []*Step
	// Causes is the catalogue, in file order.
	Causes []*Cause
	// SchedulerDefaults give the engine's scheduler settings when the incident
	// does not state them; the first entry whose condition holds wins.
	SchedulerDefaults []*SchedulerDefault
	// Verdict holds the expressions that decide status, severity and phase.
	Verdict VerdictRules
	// UnknownChainLinks lists, as "file:line:col: ...", the chain links
	// whose signal is not declared (they are left out of verdicts).
	UnknownChainLinks []string

	// Shapes are the engine's shipped forms (shape.go), each read as its
	// own ruleset; empty for an engine with one form.
	Shapes []*Ruleset

	// Series are the engine's own series the triage reads beside its
	// signals (the map's `series:` section).
	Series EngineSeries
	// GPUJoin is the map's `gpu_join:`: the series, one per target, that
	// {{.GPUJoin}} restricts GPU counters to the scope's targets with.
	GPUJoin string
	// Known are the Series of every engine loaded beside this one (the
	// shipped maps and a user's), in the engine list's order: the joins
	// that find a target whatever engine serves it. The loader
	// (rulesets) sets them.
	Known []EngineSeries

	shape       *Shape
	signalIndex map[string]*Signal // mapped (evaluated) signals
	declared    map[string]*Signal // every declared signal, mapped or not
	causeIndex  map[string]*Cause
}

// EngineSeries are a map's `series:` section: gauges and counters the
// triage reads by name, beside the signals. A family may carry label
// matchers, `name{matchers}`.
type EngineSeries struct {
	Engine string `yaml:"-"`
	// Names is a regular expression matching the engine's metric names.
	Names string `yaml:"names"`
	// Running are the running-requests gauges, one series per target:
	// they restrict GPU counters to the scope's targets.
	Running []string `yaml:"running"`
	// Targets are further series, one per target, for shapes without a
	// running gauge.
	Targets []string `yaml:"targets"`
	// Waiting and KVUsage are the waiting-queue and KV-cache usage gauges.
	Waiting []string `yaml:"waiting"`
	KVUsage []string `yaml:"kv_usage"`
}

// Signal returns the named signal if this ruleset evaluates it, or nil.
func (r *Ruleset) Signal(name string) *Signal { return r.signalIndex[name] }

// Declared returns the named signal if the rulebook declares it, whether or
// not the engine maps it, or nil.
func (r *Ruleset) Declared(name string) *Signal { return r.declared[name] }

// Cause returns the cause with the given id, or nil.
func (r *Ruleset) Cause(id string) *Cause { return r.causeIndex[id] }

// Signal is a named PromQL template evaluated at the incident and baseline
// windows. The rulebook declares it (name, title, unit); an engine's signal
// map gives its expression over that engine's metric names.
type Signal struct {
	Name  string
	Title string
	// Unit is how renderers show the value: seconds, fraction (0–1, shown as
	// %), percent (0–100), ratio (×), bytes, bytes_per_second, or a plain unit
	// printed after the number: count, requests, tokens, req/s, tokens/s,
	// preemptions/s, MHz, °C, W. Empty means a bare number.
	Unit string
	// Expr is the template source; see Render.
	Expr string
	// Targets asks triage to also evaluate the signal per target (grouped by the
	// target labels through the `by` template function) to find the worst ones.
	Targets bool
	// Optional marks a signal whose series only some deployments expose (e.g.
	// HTTP status counters of the API server): its absence is not a data gap
	// worth reporting except when explaining.
	Optional bool
	// ZeroIsGap marks a gauge some engines expose but never set: when it reads
	// exactly zero in both windows it is treated as missing (a data gap), so
	// a stuck gauge cannot rule anything out.
	ZeroIsGap bool
	// Noise asks triage to also evaluate the signal over sub-windows of the
	// baseline window, to measure how much the statistic varies on its own
	// (the CEL variable z; a latency percentile or mean the anomaly gate
	// reads).
	Noise bool
	// Group gathers signals of one source (e.g. "gpu" for the GPU counters)
	// so that their gaps are reported as one line.
	Group string
	// FrontendOf names the signal this one reads from the router in front of
	// the engine (NVIDIA Dynamo's frontend): the same statistic as clients
	// feel it. The anomaly gate is also evaluated with these in place of the
	// signals they stand for (Walk).
	FrontendOf string
	// Pos is where the expression is (the engine's map); DeclPos where the
	// signal is declared.
	Pos     Pos
	DeclPos Pos
	// Engine is the engine whose map gave the expression; empty for a
	// signal declared with its expression in one place.
	Engine string

	tmpl    *template.Template
	shape   *Shape // the shape whose names the expression is cut to, if any
	gpuJoin string // the map's gpu_join, for {{.GPUJoin}}
}

// Step is one step of the walk.
type Step struct {
	Name  string
	Title string
	// Summary is an optional template rendering the step's outcome with the numbers.
	Summary string
	Rules   []*Rule
	Pos     Pos

	summary *template.Template
}

// Effect says what a matching rule does.
type Effect int

// Rule effects.
const (
	// EffectEvidence adds the rule's weight to its cause's score.
	EffectEvidence Effect = iota
	// EffectRuleOut removes the cause from the verdict, with the rendered evidence as reason.
	EffectRuleOut
)

// String returns "evidence" or "rule_out".
func (e Effect) String() string {
	if e == EffectRuleOut {
		return "rule_out"
	}
	return "evidence"
}

// Rule is one piece of evidence in a step: a gate (`when`, CEL bool) and a
// grade (`grade`, CEL number in [0, 1]: how clearly the evidence holds),
// either or both. A matched evidence rule adds weight × grade to its cause;
// a matched rule_out rule multiplies the cause's score by 1 − grade and
// removes the cause when little is left (see RuledOutBelow).
type Rule struct {
	// Name identifies the rule inside its step; defaults to "rule N".
	Name  string
	Cause string
	// When is the CEL gate; it must evaluate to bool. Empty means always.
	When string
	// Grade is the CEL strength of the evidence, clamped to [0, 1]; empty
	// means 1 whenever When holds.
	Grade  string
	Weight float64
	Effect Effect
	// Signal optionally names the signal whose now/baseline the evidence quotes.
	Signal string
	// Evidence is a text/template rendering the numbers behind the rule.
	Evidence string
	// SafeDefaults declares, per signal (or attribution key), why the rule's
	// `x.?name.orValue(d)` default cannot stand in for evidence; `rules
	// check` refuses an undeclared default that can tip the rule (CheckDefaults).
	SafeDefaults map[string]string
	// StandsOn names what a rule_out rests on: signals that must be present
	// for it to match (defaults to Signal), or "scheduler" (the scheduler
	// settings must be known).
	StandsOn []string
	Pos      Pos

	gradePos Pos
	safePos  Pos
	prog     cel.Program
	grade    cel.Program
	evidence *template.Template
}

// Cause is one entry of the catalogue.
type Cause struct {
	// ID is stable: it is part of the JSON contract.
	ID          string
	Title       string
	Description string
	// Fixes is the remediation, in order; EngineFixes replaces it for the
	// engines it names (flags and policies differ per engine).
	Fixes       []Fix
	EngineFixes map[string][]Fix
	// Chain is how the cause reaches the symptom, as signals to quote in
	// order (e.g. arrivals → KV cache → preemptions → queue → TTFT).
	Chain []ChainLink
	Pos   Pos

	order int
}

// FixesFor returns the cause's remediation for the engine.
func (c *Cause) FixesFor(engine string) []Fix {
	if f, ok := c.EngineFixes[engine]; ok {
		return f
	}
	return c.Fixes
}

// Fix is one remediation line. Knob and Direction, when set, say which
// setting the fix turns and which way ("up" or "down"), so that two fixes of
// one verdict that turn the same knob opposite ways are caught.
type Fix struct {
	Text      string
	Knob      string
	Direction string
	// Computed, when set, is an evidence template (EvidenceFuncs, with
	// pow2up) that says the fix with the triage's numbers: "raise
	// --max-num-batched-tokens from 8192 to 32768 (p90 prompt 20000)". Text
	// stands in when a number it reads is missing.
	Computed string
	computed *template.Template
}

// Render is the fix for a triage's data: Computed filled with its numbers,
// or Text when there is no template or a number it reads is missing (a
// gap is never a guessed setting).
func (f Fix) Render(d *EvidenceData) string {
	if f.computed == nil || d == nil {
		return f.Text
	}
	s, err := renderEvidence(f.computed, d)
	if err != nil || s == "" || strings.Contains(s, "n/a") || strings.Contains(s, "<no value>") {
		return f.Text
	}
	return s
}

// ChainLink is one step of a cause's chain: a signal, how to show it
// ("ratio": its change against the baseline; "value": its value now), and
// the smallest movement that makes the link worth quoting.
type ChainLink struct {
	Signal string
	Label  string
	Show   string
	// Min is, for "ratio", the smallest factor and, for "value", the
	// smallest value that shows the link took part.
	Min float64
	// Falls marks a ratio link that takes part by falling (a hit rate, a
	// clock): it is quoted when now/baseline ≤ 1/Min. Otherwise a ratio
	// link is quoted when it rose by Min.
	Falls bool
}

// SchedulerDefault is an engine default for the scheduler, chosen by a CEL
// condition over `gpu` and `engine`.
type SchedulerDefault struct {
	When                string
	ChunkedPrefill      bool
	MaxNumBatchedTokens int
	MaxNumSeqs          int
	// KVAdmission is "on_demand" or "reserve" (see Scheduler.KVAdmission).
	KVAdmission string
	Note        string
	Pos         Pos

	prog cel.Program
}

// VerdictRules are the ruleset's CEL expressions that classify the window.
type VerdictRules struct {
	// Insufficient holds when there is not enough data to judge.
	Insufficient Expr
	// Anomaly holds when the incident window is degraded against the baseline.
	Anomaly Expr
	// Critical holds when the anomaly is critical (e.g. success rate < 98%).
	Critical Expr
	// Prefill and Decode classify the phase.
	Prefill Expr
	Decode  Expr
	// MinScore is the smallest score a cause needs to be reported (default 1).
	MinScore float64
	// Headline lists the signals shown as the verdict's headline, in order.
	Headline []string
	// Confidence maps a cause's score to a calibrated probability of being
	// right: σ(LogScore·ln(score) + Share·ln(score/Σscores) + Offset).
	Confidence Calibration
	// Fallback is the cause ranked when an anomaly holds and no rule gave
	// any cause support (e.g. "unexplained"); empty means none.
	Fallback string
	// SamplesSignal names a signal counting raw samples in the window; when it is
	// below 2 a missing rate() signal is reported as "too few samples".
	SamplesSignal string
}

// Calibration holds the coefficients of the confidence model (see
// VerdictRules.Confidence); fitted on the accuracy harness.
type Calibration struct {
	LogScore, Share, Offset float64
	Defined                 bool
}

// Expr is a compiled CEL condition with its source and position.
type Expr struct {
	Source string
	Pos    Pos

	prog cel.Program
}

// Defined reports whether the expression was given.
func (e Expr) Defined() bool { return e.prog != nil }
