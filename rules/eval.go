package rules

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/interpreter"
)

// Scheduler is what is known of the engine's scheduler settings.
type Scheduler struct {
	// Known is true when the settings came from the incident (or a default was resolved).
	Known               bool
	ChunkedPrefill      bool
	MaxNumBatchedTokens int
	MaxNumSeqs          int
	// KVAdmission is how the scheduler admits requests against the KV cache:
	// "on_demand" (blocks as tokens arrive, preempting when the cache is full:
	// vLLM, SGLang) or "reserve" (blocks for prompt + max_tokens reserved up
	// front, never preempting: TensorRT-LLM's GUARANTEED_NO_EVICT).
	KVAdmission string
	// Source says where the settings came from: "incident", "engine" (its
	// configuration gauges), "default" or "unknown".
	Source string
	Note   string
}

// GPU is what is known of the accelerator.
type GPU struct {
	// Class is e.g. "H100", "A100-40GB"; empty when unknown.
	Class     string
	MemoryGiB float64
}

// Facts are the inputs of one walk: the signal values and the context.
type Facts struct {
	// Now and Base hold the signals that returned a value in each window.
	Now, Base map[string]float64
	Engine    string
	Scheduler Scheduler
	GPU       GPU
	// Targets is how many targets matched the scope (0 when unknown).
	Targets int
	// Attr is the latency attribution (attr.go keys); may be nil.
	Attr map[string]float64
	// Z is the change of each noise signal against the baseline's own
	// variability (the CEL variable z, cel.go); may be nil.
	Z map[string]float64
	// Breached says a user's SLO bound on the incident window was crossed:
	// the window is an anomaly whatever the verdict's anomaly expression
	// says, so its causes are ranked.
	Breached bool
	// Gaps names the declared signals the walk has no value for, worded for
	// people (evidence templates can say which series would have told).
	Gaps []string
}

// RuleResult is how one rule evaluated.
type RuleResult struct {
	Step    *Step
	Rule    *Rule
	Matched bool
	// Grade is the rule's strength in [0, 1] when it matched.
	Grade float64
	// Err is a runtime CEL error (e.g. a signal the rule reads is missing); the rule did not match.
	Err  error
	Text string
}

// StepResult is the outcome of one step.
type StepResult struct {
	Step    *Step
	Summary string
	Rules   []RuleResult
}

// Finding is one matched evidence rule for a cause.
type Finding struct {
	Step *Step
	Rule *Rule
	Text string
	// Grade is how clearly the evidence holds, in [0, 1]; Contribution is
	// what it added to the score (weight × grade).
	Grade, Contribution float64
}

// ScoredCause is a cause with the evidence that supports it.
type ScoredCause struct {
	Cause    *Cause
	Score    float64
	Findings []Finding
	// Against is the counter-evidence (matched rule_out rules whose grade was
	// not enough to rule the cause out); Contribution is the share of the
	// score each removed.
	Against []Finding
	// Confidence is the calibrated probability that the cause is right, in
	// [0, 1] (VerdictRules.Confidence); set on reported causes.
	Confidence float64
}

// RuledOutCause is a cause a rule excluded.
type RuledOutCause struct {
	Cause  *Cause
	Step   *Step
	Rule   *Rule
	Reason string
}

// RuledOutBelow is the share of a cause's score that must survive its
// counter-evidence: with less left (Π(1 − grade) of its rule_out rules), the
// cause is ruled out.
const RuledOutBelow = 0.1

// MinSupport is the smallest score a candidate needs to fill the ranking up
// to three causes when fewer reach the ruleset's min_score.
const MinSupport = 0.05

// Outcome is the result of a walk.
type Outcome struct {
	Insufficient bool
	Anomaly      bool
	Critical     bool
	Prefill      bool
	Decode       bool
	// Causes are ranked (highest score first) and reported only for an anomaly.
	Causes []ScoredCause
	// Candidates are every cause with evidence, ranked, whether or not it was reported.
	Candidates []ScoredCause
	RuledOut   []RuledOutCause
	Steps      []StepResult
	Scheduler  Scheduler
	// Ratio and Delta are the derived maps the rules saw.
	Ratio, Delta map[string]float64
	// Errors are runtime errors of verdict expressions.
	Errors []string
	// Data is what the evidence templates saw; Fix.Render fills computed
	// fixes from it.
	Data *EvidenceData
}

// Derive computes ratio (now/base) and delta (now-base) for signals present in
// both windows. A zero baseline gives ratio 1 when now is zero too, +Inf otherwise.
func Derive(now, base map[string]float64) (ratio, delta map[string]float64) {
	ratio = make(map[string]float64, len(now))
	delta = make(map[string]float64, len(now))
	for k, n := range now {
		b, ok := base[k]
		if !ok {
			continue
		}
		delta[k] = n - b
		switch {
		case b != 0:
			ratio[k] = n / b
		case n == 0:
			ratio[k] = 1
		default:
			ratio[k] = math.Inf(1)
		}
	}
	return ratio, delta
}

// ResolveScheduler returns the incident's scheduler settings, or the engine
// default for the GPU from the ruleset's scheduler_defaults.
func (r *Ruleset) ResolveScheduler(f Facts) Scheduler {
	vars := map[string]any{
		varNow: map[string]float64{}, varBase: map[string]float64{}, varRatio: map[string]float64{}, varDelta: map[string]float64{},
		varEngine: f.Engine, varScheduler: map[string]any{}, varGPU: gpuMap(f.GPU), varTargets: int64(f.Targets),
		varAttr: map[string]float64{}, varZ: map[string]float64{},
	}
	def := Scheduler{Source: "unknown"}
	for _, sd := range r.SchedulerDefaults {
		if ok, _ := evalBool(sd.prog, vars); ok {
			def = Scheduler{Known: true, ChunkedPrefill: sd.ChunkedPrefill, MaxNumBatchedTokens: sd.MaxNumBatchedTokens,
				MaxNumSeqs: sd.MaxNumSeqs, KVAdmission: sd.KVAdmission, Source: "default", Note: sd.Note}
			break
		}
	}
	if def.KVAdmission == "" {
		// The admission policy is the engine's even when the GPU is unknown.
		def.KVAdmission = "on_demand"
		for _, sd := range r.SchedulerDefaults {
			if sd.KVAdmission != "" {
				def.KVAdmission = sd.KVAdmission
				break
			}
		}
	}
	// The engine's own configuration gauges beat a default for the GPU
	// (TensorRT-LLM's max_num_tokens_runtime gauge, rulesets/trtllm.yaml).
	if b, ok := f.Now["engine_token_budget"]; ok && b >= 1 && !f.Scheduler.Known {
		def.MaxNumBatchedTokens, def.Source = int(b), "engine"
		def.Known = true
		def.Note = fmt.Sprintf("read from the engine's configuration gauges (%d tokens per step", int(b))
		if n, ok := f.Now["engine_max_seqs"]; ok && n >= 1 {
			def.MaxNumSeqs = int(n)
			def.Note += fmt.Sprintf(", %d requests", int(n))
		}
		def.Note += ")"
	}
	if f.Scheduler.Known {
		s := f.Scheduler
		if s.Source == "" {
			s.Source = "incident"
		}
		if s.KVAdmission == "" {
			s.KVAdmission = def.KVAdmission
		}
		return s
	}
	return def
}

func gpuMap(g GPU) map[string]any {
	return map[string]any{"class": g.Class, "memory_gib": g.MemoryGiB, "known": g.Class != ""}
}

func schedulerMap(s Scheduler) map[string]any {
	return map[string]any{
		"known":                  s.Known,
		"chunked_prefill":        s.ChunkedPrefill,
		"max_num_batched_tokens": float64(s.MaxNumBatchedTokens),
		"max_num_seqs":           float64(s.MaxNumSeqs),
		"kv_admission":           s.KVAdmission,
		"source":                 s.Source,
	}
}

// evalGrade evaluates a grade and clamps it to [0, 1]; NaN is 0.
func evalGrade(prog cel.Program, vars any) (float64, error) {
	out, _, err := prog.Eval(vars)
	if err != nil {
		return 0, err
	}
	var g float64
	switch x := out.(type) {
	case types.Double:
		g = float64(x)
	case types.Int:
		g = float64(x)
	case types.Bool:
		if x {
			g = 1
		}
	default:
		return 0, fmt.Errorf("grade is %s, not a number", out.Type())
	}
	if math.IsNaN(g) {
		return 0, nil
	}
	return math.Max(0, math.Min(1, g)), nil
}

// phaseActivation binds the phase variable (varPhase).
func phaseActivation(prefill, decode bool) interpreter.Activation {
	act, _ := interpreter.NewActivation(map[string]any{varPhase: map[string]bool{"prefill": prefill, "decode": decode}})
	return act
}

func evalBool(prog cel.Program, vars any) (bool, error) {
	if prog == nil {
		return false, nil
	}
	out, _, err := prog.Eval(vars)
	if err != nil {
		return false, err
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, fmt.Errorf("result is %s, not bool", out.Type())
	}
	return bool(b), nil
}

// Walk evaluates every step's rules on the facts, scores and ranks the causes
// and classifies the window. It is pure and safe for concurrent use.
func (r *Ruleset) Walk(f Facts) *Outcome {
	if f.Now == nil {
		f.Now = map[string]float64{}
	}
	if f.Base == nil {
		f.Base = map[string]float64{}
	}
	if f.Attr == nil {
		f.Attr = map[string]float64{}
	}
	if f.Z == nil {
		f.Z = map[string]float64{}
	}
	if f.Engine == "" {
		f.Engine = r.Engine
	}
	out := &Outcome{Scheduler: r.ResolveScheduler(f)}
	out.Ratio, out.Delta = Derive(f.Now, f.Base)
	sched, gpu := schedulerMap(out.Scheduler), gpuMap(f.GPU)
	activation := func(now, base, ratio, delta, z map[string]float64) (interpreter.Activation, error) {
		return interpreter.NewActivation(map[string]any{
			varNow: now, varBase: base, varRatio: ratio, varDelta: delta,
			varEngine: f.Engine, varScheduler: sched, varGPU: gpu, varTargets: int64(f.Targets), varAttr: f.Attr,
			varZ: z,
		})
	}
	act, err := activation(f.Now, f.Base, out.Ratio, out.Delta, f.Z)
	if err != nil {
		out.Errors = append(out.Errors, err.Error())
		out.Insufficient = true
		return out
	}
	data := &EvidenceData{Now: anyMap(f.Now), Base: anyMap(f.Base), Ratio: anyMap(out.Ratio), Delta: anyMap(out.Delta),
		Engine: f.Engine, Scheduler: sched, GPU: gpu, Targets: f.Targets, Attr: anyMap(f.Attr), Gaps: f.Gaps}
	out.Data = data

	verdict := func(name string, e Expr, act interpreter.Activation) bool {
		ok, err := evalBool(e.prog, act)
		if err != nil {
			out.Errors = append(out.Errors, fmt.Sprintf("verdict %s: %v", name, err))
		}
		return ok
	}
	v := r.Verdict
	// gate evaluates the phases and the anomaly expression over one view
	// of the latency statistics.
	gate := func(act interpreter.Activation) (prefill, decode, anomaly bool) {
		prefill, decode = verdict("prefill", v.Prefill, act), verdict("decode", v.Decode, act)
		anomaly = verdict("anomaly", v.Anomaly, interpreter.NewHierarchicalActivation(act, phaseActivation(prefill, decode)))
		return prefill, decode, anomaly
	}
	out.Insufficient = verdict("insufficient", v.Insufficient, act)
	out.Critical = verdict("critical", v.Critical, act)
	var anomaly bool
	out.Prefill, out.Decode, anomaly = gate(act)
	// The gate sees what users feel: the same expressions over the
	// frontend's statistics, when a router in front of the engine gives
	// enough of them (the same insufficient test as the engine's).
	if now, base, z, ok := r.frontendView(f); ok {
		ratio, delta := Derive(now, base)
		if fact, err := activation(now, base, ratio, delta, z); err == nil && !verdict("insufficient", v.Insufficient, fact) {
			if p, d, a := gate(fact); a {
				out.Prefill, out.Decode, anomaly = out.Prefill || p, out.Decode || d, true
			}
		}
	}
	out.Anomaly = !out.Insufficient && (anomaly || out.Critical || f.Breached)
	out.Critical = out.Critical && !out.Insufficient

	sc := newScorer(r)
	for _, st := range r.Steps {
		sr := StepResult{Step: st}
		for _, rule := range st.Rules {
			res := RuleResult{Step: st, Rule: rule}
			res.Matched, res.Grade, res.Err = evalRule(rule, act)
			if res.Matched {
				text, err := renderEvidence(rule.evidence, data)
				if err != nil {
					text = fmt.Sprintf("(evidence template failed: %v)", err)
				}
				res.Text = text
				sc.add(st, rule, res.Grade, text)
			}
			sr.Rules = append(sr.Rules, res)
		}
		if st.summary != nil {
			sr.Summary, _ = renderEvidence(st.summary, data)
		}
		out.Steps = append(out.Steps, sr)
	}
	sc.finish(out)
	return out
}

// frontendView returns the gate's statistics as the router in front of the
// engine reads them: each signal with a frontend reading (Signal.FrontendOf)
// replaced by it in now, base and z, and the other noise statistics and
// their _recent forms left out, so the gate judges the frontend only on what
// it measures. ok is false when no frontend reading is present.
func (r *Ruleset) frontendView(f Facts) (now, base, z map[string]float64, ok bool) {
	gateStat := map[string]bool{}
	for _, s := range r.Signals {
		if s.FrontendOf != "" {
			gateStat[s.FrontendOf] = true
			_, in := f.Now[s.Name]
			ok = ok || in
		}
		if s.Noise && s.FrontendOf == "" {
			gateStat[s.Name], gateStat[s.Name+"_recent"] = true, true
		}
	}
	if !ok {
		return nil, nil, nil, false
	}
	view := func(m map[string]float64) map[string]float64 {
		out := make(map[string]float64, len(m))
		for k, x := range m {
			if !gateStat[k] {
				out[k] = x
			}
		}
		for _, s := range r.Signals {
			if x, in := m[s.Name]; in && s.FrontendOf != "" {
				out[s.FrontendOf] = x
			}
		}
		return out
	}
	return view(f.Now), view(f.Base), view(f.Z), true
}

// evalRule evaluates a rule's gate and grade: matched when the gate holds
// and the grade is above zero.
func evalRule(rule *Rule, act any) (bool, float64, error) {
	if rule.prog != nil {
		ok, err := evalBool(rule.prog, act)
		if err != nil || !ok {
			return false, 0, err
		}
	}
	g := 1.0
	if rule.grade != nil {
		var err error
		if g, err = evalGrade(rule.grade, act); err != nil {
			return false, 0, err
		}
	}
	return g > 0, g, nil
}

// scorer accumulates evidence and counter-evidence per cause.
type scorer struct {
	rs     *Ruleset
	scores map[string]*ScoredCause
	// keep is Π(1 − grade) of each cause's rule_out rules; reasons the
	// counter-evidence in rule order.
	keep    map[string]float64
	against map[string][]Finding
}

func newScorer(rs *Ruleset) *scorer {
	return &scorer{rs: rs, scores: map[string]*ScoredCause{}, keep: map[string]float64{}, against: map[string][]Finding{}}
}

func (s *scorer) add(st *Step, rule *Rule, grade float64, text string) {
	if rule.Effect == EffectRuleOut {
		k, ok := s.keep[rule.Cause]
		if !ok {
			k = 1
		}
		s.keep[rule.Cause] = k * (1 - grade)
		s.against[rule.Cause] = append(s.against[rule.Cause], Finding{Step: st, Rule: rule, Text: text, Grade: grade})
		return
	}
	c := s.scores[rule.Cause]
	if c == nil {
		c = &ScoredCause{Cause: s.rs.causeIndex[rule.Cause]}
		s.scores[rule.Cause] = c
	}
	c.Score += rule.Weight * grade
	c.Findings = append(c.Findings, Finding{Step: st, Rule: rule, Text: text, Grade: grade, Contribution: rule.Weight * grade})
}

// finish applies the counter-evidence, ranks the candidates and reports the
// causes of an anomaly.
func (s *scorer) finish(out *Outcome) {
	out.Candidates, out.RuledOut = out.Candidates[:0], out.RuledOut[:0]
	for id, against := range s.against {
		if s.keep[id] <= RuledOutBelow {
			out.RuledOut = append(out.RuledOut, RuledOutCause{Cause: s.rs.causeIndex[id], Step: against[0].Step,
				Rule: against[0].Rule, Reason: reasons(against)})
		}
	}
	for id, c := range s.scores {
		k, ok := s.keep[id]
		if !ok {
			out.Candidates = append(out.Candidates, *c)
			continue
		}
		if k <= RuledOutBelow {
			continue
		}
		cc := *c
		for _, a := range s.against[id] {
			a.Contribution = a.Grade
			cc.Against = append(cc.Against, a)
		}
		cc.Score *= k
		out.Candidates = append(out.Candidates, cc)
	}
	s.rs.rank(out)
}

// reasons joins the texts of the rules that ruled a cause out.
func reasons(fs []Finding) string {
	texts := make([]string, 0, len(fs))
	for _, f := range fs {
		if f.Grade >= 1-RuledOutBelow || len(fs) == 1 {
			texts = append(texts, f.Text)
		}
	}
	if len(texts) == 0 {
		for _, f := range fs {
			texts = append(texts, f.Text)
		}
	}
	return strings.Join(texts, "; ")
}

// rank sorts the candidates and ruled-out causes and, for an anomaly,
// reports the causes: every candidate reaching min_score, filled up to
// three with any candidate that has support, or the fallback cause when
// nothing has any. Reported causes get their calibrated confidence.
func (r *Ruleset) rank(out *Outcome) {
	sort.Slice(out.Candidates, func(i, j int) bool {
		a, b := out.Candidates[i], out.Candidates[j]
		if a.Score != b.Score {
			return a.Score > b.Score
		}
		return a.Cause.order < b.Cause.order
	})
	sort.SliceStable(out.RuledOut, func(i, j int) bool { return out.RuledOut[i].Cause.order < out.RuledOut[j].Cause.order })
	// The fallback cause (unexplained) says the measured parts do not cover
	// the slowdown; it never outranks a cause that has evidence of its own.
	if fb := r.Verdict.Fallback; fb != "" {
		var first, fallback, rest []ScoredCause
		for _, c := range out.Candidates {
			switch {
			case c.Cause.ID == fb:
				fallback = append(fallback, c)
			case c.Score >= MinSupport:
				first = append(first, c)
			default:
				rest = append(rest, c)
			}
		}
		out.Candidates = append(append(append(out.Candidates[:0:0], first...), fallback...), rest...)
	}
	out.Causes = out.Causes[:0]
	if !out.Anomaly {
		return
	}
	for _, c := range out.Candidates {
		if c.Score >= r.Verdict.MinScore || (len(out.Causes) < 3 && c.Score >= MinSupport) {
			out.Causes = append(out.Causes, c)
		}
	}
	if len(out.Causes) == 0 && r.Verdict.Fallback != "" {
		if c := r.causeIndex[r.Verdict.Fallback]; c != nil {
			out.Causes = append(out.Causes, ScoredCause{Cause: c, Score: MinSupport,
				Findings: []Finding{{Step: &Step{Name: "verdict"}, Rule: &Rule{Name: "fallback", Cause: c.ID},
					Text: "no rule found evidence for any cause in the catalogue", Grade: 1, Contribution: MinSupport}}})
		}
	}
	total := 0.0
	for _, c := range out.Candidates {
		total += c.Score
	}
	for i := range out.Causes {
		out.Causes[i].Confidence = r.Verdict.Confidence.of(out.Causes[i].Score, total)
	}
}

// of maps a score to a calibrated confidence: σ(a·ln s + b·ln(s/Σ) + c),
// both terms on a log scale so that a lone candidate (share 1) is as
// confident as its own evidence and no more. Without a calibration the
// score's share of all candidates' scores is used.
func (c Calibration) of(score, total float64) float64 {
	if total <= 0 || score <= 0 {
		return 0
	}
	share := math.Min(1, score/total)
	if !c.Defined {
		return share
	}
	z := c.LogScore*math.Log(score) + c.Share*math.Log(share) + c.Offset
	return 1 / (1 + math.Exp(-z))
}

// EvalRule evaluates one rule on the facts (pure); used by tests and tools.
func (r *Ruleset) EvalRule(rule *Rule, f Facts) (bool, error) {
	ratio, delta := Derive(f.Now, f.Base)
	attr := f.Attr
	if attr == nil {
		attr = map[string]float64{}
	}
	z := f.Z
	if z == nil {
		z = map[string]float64{}
	}
	ok, _, err := evalRule(rule, map[string]any{
		varNow: f.Now, varBase: f.Base, varRatio: ratio, varDelta: delta, varEngine: f.Engine,
		varScheduler: schedulerMap(r.ResolveScheduler(f)), varGPU: gpuMap(f.GPU), varTargets: int64(f.Targets),
		varAttr: attr, varZ: z,
	})
	return ok, err
}
