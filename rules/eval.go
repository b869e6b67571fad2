package rules

import (
	"fmt"
	"math"
	"sort"

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
	// Source says where the settings came from: "incident", "default" or "unknown".
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
}

// RuleResult is how one rule evaluated.
type RuleResult struct {
	Step    *Step
	Rule    *Rule
	Matched bool
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
}

// ScoredCause is a cause with the evidence that supports it.
type ScoredCause struct {
	Cause    *Cause
	Score    float64
	Findings []Finding
}

// RuledOutCause is a cause a rule excluded.
type RuledOutCause struct {
	Cause  *Cause
	Step   *Step
	Rule   *Rule
	Reason string
}

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
	if f.Scheduler.Known {
		s := f.Scheduler
		if s.Source == "" {
			s.Source = "incident"
		}
		return s
	}
	vars := map[string]any{
		varNow: map[string]float64{}, varBase: map[string]float64{}, varRatio: map[string]float64{}, varDelta: map[string]float64{},
		varEngine: f.Engine, varScheduler: map[string]any{}, varGPU: gpuMap(f.GPU), varTargets: int64(f.Targets),
	}
	for _, sd := range r.SchedulerDefaults {
		if ok, _ := evalBool(sd.prog, vars); ok {
			return Scheduler{Known: true, ChunkedPrefill: sd.ChunkedPrefill, MaxNumBatchedTokens: sd.MaxNumBatchedTokens,
				MaxNumSeqs: sd.MaxNumSeqs, Source: "default", Note: sd.Note}
		}
	}
	return Scheduler{Source: "unknown"}
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
		"source":                 s.Source,
	}
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
	if f.Engine == "" {
		f.Engine = r.Engine
	}
	out := &Outcome{Scheduler: r.ResolveScheduler(f)}
	out.Ratio, out.Delta = Derive(f.Now, f.Base)
	sched, gpu := schedulerMap(out.Scheduler), gpuMap(f.GPU)
	act, err := interpreter.NewActivation(map[string]any{
		varNow: f.Now, varBase: f.Base, varRatio: out.Ratio, varDelta: out.Delta,
		varEngine: f.Engine, varScheduler: sched, varGPU: gpu, varTargets: int64(f.Targets),
	})
	if err != nil {
		out.Errors = append(out.Errors, err.Error())
		out.Insufficient = true
		return out
	}
	data := &EvidenceData{Now: f.Now, Base: f.Base, Ratio: out.Ratio, Delta: out.Delta, Engine: f.Engine,
		Scheduler: sched, GPU: gpu, Targets: f.Targets}

	verdict := func(name string, e Expr) bool {
		ok, err := evalBool(e.prog, act)
		if err != nil {
			out.Errors = append(out.Errors, fmt.Sprintf("verdict %s: %v", name, err))
		}
		return ok
	}
	v := r.Verdict
	out.Insufficient = verdict("insufficient", v.Insufficient)
	out.Critical = verdict("critical", v.Critical)
	out.Anomaly = !out.Insufficient && (verdict("anomaly", v.Anomaly) || out.Critical)
	out.Critical = out.Critical && !out.Insufficient
	out.Prefill = verdict("prefill", v.Prefill)
	out.Decode = verdict("decode", v.Decode)

	scores := map[string]*ScoredCause{}
	ruledOut := map[string]bool{}
	for _, st := range r.Steps {
		sr := StepResult{Step: st}
		for _, rule := range st.Rules {
			res := RuleResult{Step: st, Rule: rule}
			res.Matched, res.Err = evalBool(rule.prog, act)
			if res.Matched {
				text, err := renderEvidence(rule.evidence, data)
				if err != nil {
					text = fmt.Sprintf("(evidence template failed: %v)", err)
				}
				res.Text = text
				c := r.causeIndex[rule.Cause]
				switch rule.Effect {
				case EffectRuleOut:
					if !ruledOut[rule.Cause] {
						ruledOut[rule.Cause] = true
						out.RuledOut = append(out.RuledOut, RuledOutCause{Cause: c, Step: st, Rule: rule, Reason: text})
					}
				default:
					sc := scores[rule.Cause]
					if sc == nil {
						sc = &ScoredCause{Cause: c}
						scores[rule.Cause] = sc
					}
					sc.Score += rule.Weight
					sc.Findings = append(sc.Findings, Finding{Step: st, Rule: rule, Text: text})
				}
			}
			sr.Rules = append(sr.Rules, res)
		}
		if st.summary != nil {
			sr.Summary, _ = renderEvidence(st.summary, data)
		}
		out.Steps = append(out.Steps, sr)
	}
	for id, sc := range scores {
		if ruledOut[id] {
			continue
		}
		out.Candidates = append(out.Candidates, *sc)
	}
	sort.Slice(out.Candidates, func(i, j int) bool {
		a, b := out.Candidates[i], out.Candidates[j]
		if a.Score != b.Score {
			return a.Score > b.Score
		}
		return a.Cause.order < b.Cause.order
	})
	if out.Anomaly {
		for _, c := range out.Candidates {
			if c.Score >= v.MinScore {
				out.Causes = append(out.Causes, c)
			}
		}
	}
	sort.SliceStable(out.RuledOut, func(i, j int) bool { return out.RuledOut[i].Cause.order < out.RuledOut[j].Cause.order })
	return out
}

// EvalRule evaluates one rule on the facts (pure); used by tests and tools.
func (r *Ruleset) EvalRule(rule *Rule, f Facts) (bool, error) {
	ratio, delta := Derive(f.Now, f.Base)
	return evalBool(rule.prog, map[string]any{
		varNow: f.Now, varBase: f.Base, varRatio: ratio, varDelta: delta, varEngine: f.Engine,
		varScheduler: schedulerMap(r.ResolveScheduler(f)), varGPU: gpuMap(f.GPU), varTargets: int64(f.Targets),
	})
}
