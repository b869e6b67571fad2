// Package verdict holds the data a triage returns: the Verdict and its parts
// (scope, windows, causes, evidence, attribution, cohort, requests). Data
// only: the diagnosis that fills it lives in package diagnose.
package verdict

import "time"

// SchemaVersion is the version of the Verdict JSON contract. Bump it on any
// incompatible change; renderers and API clients key on it.
const SchemaVersion = 2

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

// Rank orders severities: none 0, warning 1, critical 2.
func (s Severity) Rank() int {
	switch s {
	case SeverityWarning:
		return 1
	case SeverityCritical:
		return 2
	}
	return 0
}

// EngineShape names the shipped form of an engine's metrics a triage read.
type EngineShape struct {
	Name  string `json:"name"`
	Title string `json:"title"`
}

// Verdict is the result of one triage: the JSON contract shared by the CLI,
// the HTTP API and every notifier.
type Verdict struct {
	SchemaVersion int      `json:"schema_version"`
	Status        Status   `json:"status"`
	Severity      Severity `json:"severity"`
	Phase         Phase    `json:"phase"`
	Engine        string   `json:"engine"`
	// EngineShape is the form of the engine's metrics that was found (a
	// release's names, a re-export); nil for an engine with one form.
	EngineShape *EngineShape `json:"engine_shape,omitempty"`
	// GPU is the GPU class the triage assumed (for the engine's scheduler
	// defaults) and where it came from; nil when unknown.
	GPU *GPUClass `json:"gpu,omitempty"`
	// SLOBreaches are the user's SLO bounds the incident window crossed
	// (Options.SLOs); any makes the verdict an anomaly on its own.
	SLOBreaches []SLOBreach `json:"slo_breaches,omitempty"`
	Scope       Scope       `json:"scope"`
	At          time.Time   `json:"at"`
	Incident    Window      `json:"incident_window"`
	Baseline    Window      `json:"baseline_window"`
	// Headline holds the TTFT/TPOT split and the other top-line numbers.
	Headline []Comparison `json:"headline"`
	// Attribution splits the change of TTFT and inter-token latency into
	// parts in seconds, with the unexplained remainder (diagnose/attribution.go);
	// nil when neither latency rose.
	Attribution *Attribution `json:"attribution,omitempty"`
	Causes      []Cause      `json:"causes"`
	// Considered are the causes with evidence that stayed below the
	// ruleset's evidence bar (min_score), with their scores; they are not
	// ranked. Empty unless the verdict is an anomaly.
	Considered []Considered `json:"considered,omitempty"`
	RuledOut   []RuledOut   `json:"ruled_out"`
	Steps      []Step       `json:"steps"`
	// Targets lists the worst targets (pods/instances) when several match the scope.
	Targets  []Target  `json:"targets,omitempty"`
	DataGaps []DataGap `json:"data_gaps"`
	// InsufficientReason says why the status is insufficient_data and what
	// to do (diagnose/insufficient.go); nil for any other status.
	InsufficientReason *InsufficientReason `json:"insufficient_reason,omitempty"`
	// Learning is set while a daemon learns its baseline (less history
	// than the baseline it wants); renderings say it first.
	Learning *Learning `json:"learning,omitempty"`
	// DegradedBaseline is set when the baseline window already shows the
	// incident's signature; renderings say it first.
	DegradedBaseline *DegradedBaseline `json:"degraded_baseline,omitempty"`
	// Warnings are passed through from the metrics source (e.g. Prometheus query warnings).
	Warnings []string `json:"warnings,omitempty"`
	// Cohort says the scope slowed together with others that share a
	// label (a fleet daemon's cross-scope view); nil otherwise.
	Cohort *Cohort `json:"cohort,omitempty"`
	// PoolContext is the endpoint picker's averages over the InferencePool
	// the scope serves in: context for the reader (is the whole pool
	// saturated or only this replica?), not evidence the walk reads; nil
	// when no pool series were read.
	PoolContext *PoolContext `json:"pool_context,omitempty"`
	// Requests are the slowest individual requests with their breakdown (from traces).
	Requests []Request `json:"requests,omitempty"`
	// Signals holds every evaluated signal value; filled only when explaining.
	Signals []SignalValue `json:"signals,omitempty"`
	// Predicted is what the usual fixes are predicted to do (`why
	// --predict`, the model of `whyslow whatif`); nil otherwise.
	Predicted *Predicted `json:"predicted,omitempty"`
}

// Predicted is the what-if model's predictions for one incident.
type Predicted struct {
	// Fit is the step-time fit in words; Calibration how the replay of the
	// incident's own inputs compares with the observed p95s; PoorFit says
	// that is outside 0.8–1.25.
	Fit         string `json:"fit,omitempty"`
	Calibration string `json:"calibration,omitempty"`
	PoorFit     bool   `json:"poor_fit"`
	// Incident is the model's own incident, what the fixes' changes are
	// relative to.
	Incident *PredictedValues `json:"model_incident,omitempty"`
	// Fixes are ordered by predicted TTFT p95, lowest first.
	Fixes    []FixPrediction `json:"fixes"`
	Declined []DeclinedFix   `json:"declined,omitempty"`
	// NoneHelps says no fix is predicted to lower the TTFT or inter-token
	// p95 by more than 10% beyond the replay seeds' range ("no catalogued
	// fix is predicted to help: …"): the order of Fixes is then noise.
	NoneHelps string `json:"none_helps,omitempty"`
	// Missing says why nothing was predicted ("no prediction: missing
	// series …"); Fixes is then empty.
	Missing string `json:"missing,omitempty"`
}

// PredictedUnchanged is the relative change of a predicted p95 within
// which it counts as unchanged (NoneHelps, a fix's Trade, the page's
// better/worse bars).
const PredictedUnchanged = 0.10

// PredictedValues are TTFT and inter-token p95 (seconds) and output
// throughput (tokens/s).
type PredictedValues struct {
	TTFTP95    float64 `json:"ttft_p95_seconds"`
	ITLP95     float64 `json:"inter_token_p95_seconds"`
	Throughput float64 `json:"throughput_tokens_per_second"`
}

// FixPrediction is one fix's predicted effect, each value the median over
// the replay seeds with their range.
type FixPrediction struct {
	Fix        string         `json:"fix"`
	TTFTP95    PredictedRange `json:"ttft_p95_seconds"`
	ITLP95     PredictedRange `json:"inter_token_p95_seconds"`
	Throughput PredictedRange `json:"throughput_tokens_per_second"`
	// Trade says the fix lowers one p95 and raises the other (each by
	// more than 10%).
	Trade string `json:"trade,omitempty"`
}

// PredictedRange is a prediction's median and range.
type PredictedRange struct {
	Median float64 `json:"median"`
	Low    float64 `json:"low"`
	High   float64 `json:"high"`
}

// DeclinedFix is a fix the model could not predict, with the reason.
type DeclinedFix struct {
	Fix    string `json:"fix"`
	Reason string `json:"reason"`
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
	// Label says what the window is when it is not a stretch of clock time
	// the data covers: `--scrape` compares its sample with the engine's
	// lifetime ("the engine's lifetime of 6h12m").
	Label string `json:"label,omitempty"`
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
	// Noise is how far the change stands outside the baseline's own
	// variability: ln(now/baseline) over its standard deviation across
	// sub-windows of the baseline window (a z-score); absent when the
	// baseline had too few requests to measure it.
	Noise *float64 `json:"noise,omitempty"`
	// NowBucket and BaselineBucket are the histogram buckets a quantile's
	// values were interpolated in, when the bucket is coarse (wider than
	// half its lower bound): the value is an estimate inside it.
	NowBucket      *Bucket `json:"now_bucket,omitempty"`
	BaselineBucket *Bucket `json:"baseline_bucket,omitempty"`
	// Source names where the values were read when not the engine's own
	// series: "dynamo_frontend" for NVIDIA Dynamo's frontend, the client's
	// view (docs/engines.md §9.4); "endpoint_picker" for the pool context's
	// rows; empty for the engine.
	Source string `json:"source,omitempty"`
}

// PoolContext is one InferencePool's averages as the endpoint picker
// reports them (docs/engines.md §9.5).
type PoolContext struct {
	// Pool is the InferencePool's name (the series' `name` label).
	Pool string `json:"pool"`
	// Namespace is the pool series' namespace label, when they carry one.
	Namespace string `json:"namespace,omitempty"`
	// Rows are the pool's average queue size, average KV cache usage and
	// ready pods, now and in the baseline, each with Source
	// "endpoint_picker"; a row without a value in either window is left out.
	Rows []Comparison `json:"rows"`
}

// Bucket is one histogram bucket, (Lower, Upper], in the signal's unit.
type Bucket struct {
	Lower float64 `json:"lower"`
	Upper float64 `json:"upper"`
}

// Cause is one ranked root cause.
type Cause struct {
	ID    string  `json:"id"`
	Rank  int     `json:"rank"`
	Score float64 `json:"score"`
	// Confidence is the calibrated probability that this cause is right,
	// in [0, 1].
	Confidence float64 `json:"confidence"`
	Title      string  `json:"title"`
	// Chain is how the cause reaches the symptom: the links that moved, in
	// order (e.g. arrivals ×1.3 → KV cache peak 99% → queue time 4m45s →
	// TTFT ×3000).
	Chain    []ChainLink `json:"chain,omitempty"`
	Evidence []Evidence  `json:"evidence"`
	// Against is counter-evidence that weakened the cause without ruling it out.
	Against     []Evidence `json:"against,omitempty"`
	Remediation []string   `json:"remediation"`
	// Omitted lists remediation left out because it would turn a setting
	// the opposite way to a higher-ranked cause's fix.
	Omitted []string `json:"remediation_omitted,omitempty"`
}

// ChainLink is one step of a cause's chain, with its numbers.
type ChainLink struct {
	Signal   string   `json:"signal"`
	Label    string   `json:"label"`
	Now      *float64 `json:"now,omitempty"`
	Baseline *float64 `json:"baseline,omitempty"`
	Unit     string   `json:"unit,omitempty"`
	// Text is the link rendered, e.g. "arrivals ×1.3" or "KV cache peak 99%".
	Text string `json:"text"`
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
	// Grade is how clearly the evidence holds, in [0, 1]; the rule added
	// Weight × Grade to the cause's score.
	Grade float64 `json:"grade"`
	Text  string  `json:"text"`
}

// Considered is a cause with some evidence that stayed below the evidence bar.
type Considered struct {
	ID    string  `json:"id"`
	Title string  `json:"title"`
	Score float64 `json:"score"`
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
	// Grade is the matched rule's strength in [0, 1].
	Grade *float64 `json:"grade,omitempty"`
	Error string   `json:"error,omitempty"`
}

// Target is one scraped target ranked by how bad it looks.
type Target struct {
	Labels map[string]string `json:"labels"`
	Signal string            `json:"signal"`
	Value  float64           `json:"value"`
	// Unit is the unit of Value (the signal's unit); empty when unknown.
	Unit string `json:"unit,omitempty"`
}

// DataGap is something triage wanted and could not get. A gap is never
// evidence: the rules that need the signal stay silent.
type DataGap struct {
	Signal string `json:"signal"`
	Window string `json:"window,omitempty"` // "incident" or "baseline"
	Reason string `json:"reason"`
	// Signals lists the signals a collapsed gap stands for (e.g. the GPU
	// series dcgm-exporter does not export by default).
	Signals []string `json:"signals,omitempty"`
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
	// Noise is the change against the baseline's own variability, as in
	// Comparison.Noise; set for noise signals and their _recent forms.
	Noise *float64 `json:"noise,omitempty"`
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
