package rules

// ExtraEvidence is evidence for a cause found outside the ruleset's CEL
// rules, e.g. by triage's correlation of traced requests. It is scored like
// a matched evidence rule.
type ExtraEvidence struct {
	// Cause is the cause id; it must be in the ruleset's catalogue.
	Cause string
	// Rule names the finding (e.g. traces.time_outside_engine).
	Rule   string
	Weight float64
	Text   string
	// RuleOut excludes the cause instead of adding to its score, as a
	// matched rule_out rule does (Text is the reason).
	RuleOut bool
}

// MergeEvidence adds extra evidence, found by a step outside the ruleset, to
// a walk's outcome: each finding adds its weight to its cause's score or,
// with RuleOut, excludes the cause; the step is appended to out.Steps (with
// summary as its summary), and causes are re-ranked exactly as Walk ranks
// them. Causes the walk ruled out stay ruled out; evidence for a cause the
// catalogue does not know is dropped and reported in out.Errors. It is pure.
func (r *Ruleset) MergeEvidence(out *Outcome, step, title, summary string, extra []ExtraEvidence) {
	st := &Step{Name: step, Title: title, Summary: summary}
	sr := StepResult{Step: st, Summary: summary}
	ruledOut := map[string]bool{}
	for _, ro := range out.RuledOut {
		ruledOut[ro.Cause.ID] = true
	}
	idx := map[string]int{}
	for i, c := range out.Candidates {
		idx[c.Cause.ID] = i
	}
	for _, e := range extra {
		c := r.causeIndex[e.Cause]
		if c == nil {
			out.Errors = append(out.Errors, "step "+step+": unknown cause "+e.Cause)
			continue
		}
		rule := &Rule{Name: e.Rule, Cause: e.Cause, Weight: e.Weight, Effect: EffectEvidence}
		if e.RuleOut {
			rule.Effect, rule.Weight = EffectRuleOut, 0
		}
		st.Rules = append(st.Rules, rule)
		sr.Rules = append(sr.Rules, RuleResult{Step: st, Rule: rule, Matched: true, Text: e.Text})
		if ruledOut[e.Cause] {
			continue
		}
		if e.RuleOut {
			ruledOut[e.Cause] = true
			out.RuledOut = append(out.RuledOut, RuledOutCause{Cause: c, Step: st, Rule: rule, Reason: e.Text})
			continue
		}
		i, ok := idx[e.Cause]
		if !ok {
			out.Candidates = append(out.Candidates, ScoredCause{Cause: c})
			i = len(out.Candidates) - 1
			idx[e.Cause] = i
		}
		sc := &out.Candidates[i]
		sc.Score += e.Weight
		sc.Findings = append(sc.Findings, Finding{Step: st, Rule: rule, Text: e.Text, Grade: 1, Contribution: e.Weight})
	}
	out.Steps = append(out.Steps, sr)
	kept := out.Candidates[:0]
	for _, c := range out.Candidates {
		if !ruledOut[c.Cause.ID] {
			kept = append(kept, c)
		}
	}
	out.Candidates = kept
	r.rank(out)
}
