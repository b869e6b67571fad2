// Package triage walks the fixed diagnosis over PromQL signals and builds a Verdict.
package triage

import "time"

// SchemaVersion is the version of the Verdict JSON contract. Bump it on any
// incompatible change; renderers and API clients key on it.
const SchemaVersion = 1

// Status says what a triage concluded about the incident window.
type Status string

// Verdict statuses.
const (
	StatusAnomaly          Status = "anomaly"
	StatusHealthy          Status = "healthy"
	StatusInsufficientData Status = "insufficient_data"
)

// Phase says which part of a request got slower.
type Phase string

// Phases.
const (
	PhasePrefill Phase = "prefill"
	PhaseDecode  Phase = "decode"
	PhaseBoth    Phase = "both"
	PhaseNone    Phase = "none"
)

// Severity grades an anomaly; healthy verdicts have SeverityNone.
type Severity string

// Severities.
const (
	SeverityNone     Severity = "none"
	SeverityWarning  Severity = "warning"
	SeverityCritical Severity = "critical"
)

// Verdict is the result of one triage: the JSON contract shared by the CLI,
// the HTTP API and every notifier.
type Verdict struct {
	SchemaVersion int      `json:"schema_version"`
	Status        Status   `json:"status"`
	Severity      Severity `json:"severity"`
	Phase         Phase    `json:"phase"`
	Engine        string   `json:"engine"`
	// GPU is the GPU class the triage assumed (for the engine's scheduler
	// defaults) and where it came from; nil when unknown.
	GPU      *GPUClass `json:"gpu,omitempty"`
	Scope    Scope     `json:"scope"`
	At       time.Time `json:"at"`
	Incident Window    `json:"incident_window"`
	Baseline Window    `json:"baseline_window"`
	// Headline holds the TTFT/TPOT split and the other top-line numbers.
	Headline []Comparison `json:"headline"`
	Causes   []Cause      `json:"causes"`
	RuledOut []RuledOut   `json:"ruled_out"`
	Steps    []Step       `json:"steps"`
	// Targets lists the worst targets (pods/instances) when several match the scope.
	Targets  []Target  `json:"targets,omitempty"`
	DataGaps []DataGap `json:"data_gaps"`
	// Warnings are passed through from the metrics source (e.g. Prometheus query warnings).
	Warnings []string `json:"warnings,omitempty"`
	// Requests are the slowest individual requests with their breakdown (from traces).
	Requests []Request `json:"requests,omitempty"`
	// Signals holds every evaluated signal value; filled only when explaining.
	Signals []SignalValue `json:"signals,omitempty"`
}

// GPUClass is the GPU class a triage assumed and where it came from.
type GPUClass struct {
	// Class is the normalised class, e.g. "H100", "A100-40GB", "H200".
	Class string `json:"class"`
	// Source is "given" (by the caller: --gpu or the bundle's
	// incident.yaml) or "metrics" (inferred from the GPU counters' model
	// label).
	Source string `json:"source"`
	// Detail says more about the source, e.g. which label and value the
	// class was read from.
	Detail string `json:"detail,omitempty"`
}

// GPU class sources.
const (
	GPUSourceGiven   = "given"
	GPUSourceMetrics = "metrics"
)

// Scope names what was triaged.
type Scope struct {
	// Selector is the PromQL label matchers, without braces (e.g. `model_name="llama"`).
	Selector string            `json:"selector"`
	Labels   map[string]string `json:"labels,omitempty"`
}

// Window is a closed time interval.
type Window struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
}

// Comparison is one signal now against its baseline. Nil means no data.
type Comparison struct {
	Signal   string   `json:"signal"`
	Title    string   `json:"title,omitempty"`
	Unit     string   `json:"unit,omitempty"`
	Now      *float64 `json:"now"`
	Baseline *float64 `json:"baseline"`
	// Ratio is Now/Baseline when both are present and the baseline is not zero.
	Ratio *float64 `json:"ratio,omitempty"`
}

// Cause is one ranked root cause.
type Cause struct {
	ID          string     `json:"id"`
	Rank        int        `json:"rank"`
	Score       float64    `json:"score"`
	Title       string     `json:"title"`
	Evidence    []Evidence `json:"evidence"`
	Remediation []string   `json:"remediation"`
}

// Evidence is one rule's contribution to a cause.
type Evidence struct {
	Step     string   `json:"step"`
	Rule     string   `json:"rule"`
	Signal   string   `json:"signal,omitempty"`
	Now      *float64 `json:"now,omitempty"`
	Baseline *float64 `json:"baseline,omitempty"`
	// Unit is the unit of Now and Baseline (the signal's unit in the
	// ruleset, see Comparison.Unit); empty when unknown.
	Unit   string  `json:"unit,omitempty"`
	Weight float64 `json:"weight"`
	Text   string  `json:"text"`
}

// RuledOut is a cause a rule excluded, with the reason.
type RuledOut struct {
	ID     string `json:"id"`
	Title  string `json:"title"`
	Reason string `json:"reason"`
}

// Step is the outcome of one step of the walk.
type Step struct {
	Name    string        `json:"name"`
	Title   string        `json:"title,omitempty"`
	Outcome string        `json:"outcome"`
	Rules   []RuleOutcome `json:"rules,omitempty"`
}

// RuleOutcome records how one rule evaluated (for --explain).
type RuleOutcome struct {
	Name    string `json:"name"`
	Cause   string `json:"cause,omitempty"`
	Matched bool   `json:"matched"`
	Effect  string `json:"effect,omitempty"` // "evidence", "rule_out", or ""
	Error   string `json:"error,omitempty"`
}

// Target is one scraped target ranked by how bad it looks.
type Target struct {
	Labels map[string]string `json:"labels"`
	Signal string            `json:"signal"`
	Value  float64           `json:"value"`
	// Unit is the unit of Value (the signal's unit); empty when unknown.
	Unit string `json:"unit,omitempty"`
}

// DataGap is something triage wanted and could not get.
type DataGap struct {
	Signal string `json:"signal"`
	Window string `json:"window,omitempty"` // "incident" or "baseline"
	Reason string `json:"reason"`
}

// SignalValue is one evaluated signal (for --explain).
type SignalValue struct {
	Name     string   `json:"name"`
	Expr     string   `json:"expr"`
	Now      *float64 `json:"now"`
	Baseline *float64 `json:"baseline"`
	// Unit is the unit of Now and Baseline (the signal's unit); empty when
	// unknown.
	Unit string `json:"unit,omitempty"`
}

// Request is one slow request's time breakdown, from traces.
type Request struct {
	TraceID   string             `json:"trace_id"`
	RequestID string             `json:"request_id,omitempty"`
	Pod       string             `json:"pod,omitempty"`
	Start     time.Time          `json:"start"`
	E2E       float64            `json:"e2e_seconds"`
	TTFT      float64            `json:"ttft_seconds,omitempty"`
	Dominant  string             `json:"dominant"`
	Parts     map[string]float64 `json:"parts_seconds"`
	Tokens    map[string]int     `json:"tokens,omitempty"`
	Scores    map[string]float64 `json:"router_scores,omitempty"`
	Context   map[string]float64 `json:"pod_context,omitempty"`
}
