// Package rules parses, validates and evaluates whyslow rulesets: named PromQL
// signals, the ordered steps of the triage walk whose rules are CEL conditions
// over those signals, and the catalogue of causes with their remediation.
//
// The package does no I/O beyond reading the files LoadFiles is given: triage
// evaluates the signals and hands the numbers to Walk, which is pure.
package rules

import (
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
	// Engine is the engine the signals speak for (vllm, sglang, trtllm).
	Engine string
	// Files are the names of the documents the ruleset was built from.
	Files []string
	// Detect is a PromQL template whose non-empty result says this engine's
	// series exist (used when the engine is "auto").
	Detect *Signal
	// Signals are the named PromQL templates, in file order.
	Signals []*Signal
	// Steps are the walk, in order.
	Steps []*Step
	// Causes is the catalogue, in file order.
	Causes []*Cause
	// SchedulerDefaults give the engine's scheduler settings when the incident
	// does not state them; the first entry whose condition holds wins.
	SchedulerDefaults []*SchedulerDefault
	// Verdict holds the expressions that decide status, severity and phase.
	Verdict VerdictRules

	signalIndex map[string]*Signal
	causeIndex  map[string]*Cause
}

// Signal returns the named signal, or nil.
func (r *Ruleset) Signal(name string) *Signal { return r.signalIndex[name] }

// Cause returns the cause with the given id, or nil.
func (r *Ruleset) Cause(id string) *Cause { return r.causeIndex[id] }

// Signal is a named PromQL template evaluated at the incident and baseline windows.
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
	Pos      Pos

	tmpl *template.Template
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

// Rule is one condition in a step.
type Rule struct {
	// Name identifies the rule inside its step; defaults to "rule N".
	Name  string
	Cause string
	// When is the CEL condition; it must evaluate to bool.
	When   string
	Weight float64
	Effect Effect
	// Signal optionally names the signal whose now/baseline the evidence quotes.
	Signal string
	// Evidence is a text/template rendering the numbers behind the rule.
	Evidence string
	Pos      Pos

	prog     cel.Program
	evidence *template.Template
}

// Cause is one entry of the catalogue.
type Cause struct {
	// ID is stable: it is part of the JSON contract.
	ID          string
	Title       string
	Description string
	Remediation []string
	Pos         Pos

	order int
}

// SchedulerDefault is an engine default for the scheduler, chosen by a CEL
// condition over `gpu` and `engine`.
type SchedulerDefault struct {
	When                string
	ChunkedPrefill      bool
	MaxNumBatchedTokens int
	MaxNumSeqs          int
	Note                string
	Pos                 Pos

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
	// SamplesSignal names a signal counting raw samples in the window; when it is
	// below 2 a missing rate() signal is reported as "too few samples".
	SamplesSignal string
}

// Expr is a compiled CEL condition with its source and position.
type Expr struct {
	Source string
	Pos    Pos

	prog cel.Program
}

// Defined reports whether the expression was given.
func (e Expr) Defined() bool { return e.prog != nil }
