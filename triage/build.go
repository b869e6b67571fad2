package triage

import (
	"fmt"
	"strings"

	"github.com/whyslow/whyslow/rules"
)

// buildVerdict fills the verdict from the walk's outcome.
func buildVerdict(v *Verdict, rs *rules.Ruleset, out *rules.Outcome, opts *Options, qs []*query, gpu gpuInference) {
	now, base := map[string]float64{}, map[string]float64{}
	for _, q := range qs {
		if q.err != nil {
			continue
		}
		if f, ok := scalar(q.result); ok {
			switch q.window {
			case "incident":
				now[q.signal.Name] = f
			case "baseline":
				base[q.signal.Name] = f
			}
		}
	}
	switch {
	case out.Insufficient:
		v.Status = StatusInsufficientData
	case out.Anomaly:
		v.Status = StatusAnomaly
		v.Severity = SeverityWarning
		if out.Critical {
			v.Severity = SeverityCritical
		}
		switch {
		case out.Prefill && out.Decode:
			v.Phase = PhaseBoth
		case out.Prefill:
			v.Phase = PhasePrefill
		case out.Decode:
			v.Phase = PhaseDecode
		}
	default:
		v.Status = StatusHealthy
	}

	for _, name := range rs.Verdict.Headline {
		s := rs.Signal(name)
		c := Comparison{Signal: name, Title: s.Title, Unit: s.Unit, Now: valuePtr(now, name), Baseline: valuePtr(base, name)}
		if c.Now != nil && c.Baseline != nil && *c.Baseline != 0 {
			r := *c.Now / *c.Baseline
			c.Ratio = &r
		}
		v.Headline = append(v.Headline, c)
	}

	for i, sc := range out.Causes {
		c := Cause{ID: sc.Cause.ID, Rank: i + 1, Score: sc.Score, Title: sc.Cause.Title,
			Remediation: append([]string{}, sc.Cause.Remediation...), Evidence: []Evidence{}}
		for _, f := range sc.Findings {
			e := Evidence{Step: f.Step.Name, Rule: f.Rule.Name, Signal: f.Rule.Signal, Weight: f.Rule.Weight, Text: f.Text}
			if f.Rule.Signal != "" {
				e.Now, e.Baseline = valuePtr(now, f.Rule.Signal), valuePtr(base, f.Rule.Signal)
				if s := rs.Signal(f.Rule.Signal); s != nil {
					e.Unit = s.Unit
				}
			}
			c.Evidence = append(c.Evidence, e)
		}
		v.Causes = append(v.Causes, c)
	}
	for _, ro := range out.RuledOut {
		v.RuledOut = append(v.RuledOut, RuledOut{ID: ro.Cause.ID, Title: ro.Cause.Title, Reason: ro.Reason})
	}

	for _, sr := range out.Steps {
		st := Step{Name: sr.Step.Name, Title: sr.Step.Title, Outcome: stepOutcome(sr, out)}
		if opts.Explain {
			for _, rr := range sr.Rules {
				ro := RuleOutcome{Name: rr.Rule.Name, Cause: rr.Rule.Cause, Matched: rr.Matched}
				if rr.Matched {
					ro.Effect = rr.Rule.Effect.String()
				}
				if rr.Err != nil {
					ro.Error = rr.Err.Error()
				}
				st.Rules = append(st.Rules, ro)
			}
		}
		v.Steps = append(v.Steps, st)
	}

	v.DataGaps = append(v.DataGaps, dataGaps(rs, now, base, v.DataGaps, opts.Explain)...)
	for _, e := range out.Errors {
		v.Warnings = appendWarnings(v.Warnings, "ruleset: "+e)
	}
	if out.Scheduler.Source == "unknown" {
		v.DataGaps = append(v.DataGaps, DataGap{Signal: "scheduler", Reason: gpuGapReason(gpu)})
	}
}

// stepOutcome renders the step's summary and what its rules concluded.
func stepOutcome(sr rules.StepResult, out *rules.Outcome) string {
	var parts []string
	if sr.Summary != "" {
		parts = append(parts, sr.Summary)
	}
	var ev, ro []string
	seen := map[string]bool{}
	for _, rr := range sr.Rules {
		if !rr.Matched || seen[rr.Rule.Cause+rr.Rule.Effect.String()] {
			continue
		}
		seen[rr.Rule.Cause+rr.Rule.Effect.String()] = true
		if rr.Rule.Effect == rules.EffectRuleOut {
			ro = append(ro, rr.Rule.Cause)
		} else {
			ev = append(ev, rr.Rule.Cause)
		}
	}
	if len(ev) > 0 {
		parts = append(parts, "evidence for "+strings.Join(ev, ", "))
	}
	if len(ro) > 0 {
		parts = append(parts, "ruled out "+strings.Join(ro, ", "))
	}
	if len(ev) == 0 && len(ro) == 0 {
		parts = append(parts, "no finding")
	}
	return strings.Join(parts, "; ")
}

// dataGaps lists signals missing in a window, skipping those already reported
// as failed queries. A missing signal in a window with fewer than two samples
// is reported as too few samples for rate(). Optional signals (series only
// some deployments expose) are listed only when explaining.
func dataGaps(rs *rules.Ruleset, now, base map[string]float64, have []DataGap, explain bool) []DataGap {
	reported := map[string]bool{}
	for _, g := range have {
		reported[g.Signal+"/"+g.Window] = true
	}
	reason := func(m map[string]float64) string {
		if ss := rs.Verdict.SamplesSignal; ss != "" {
			n, ok := m[ss]
			if !ok {
				return "no series matched"
			}
			if n < 2 {
				return fmt.Sprintf("too few samples for rate() (%.0f in the window)", n)
			}
		}
		return "no series matched"
	}
	var gaps []DataGap
	for _, s := range rs.Signals {
		if s.Optional && !explain {
			continue
		}
		for _, w := range []struct {
			name string
			m    map[string]float64
		}{{"incident", now}, {"baseline", base}} {
			if _, ok := w.m[s.Name]; ok || reported[s.Name+"/"+w.name] {
				continue
			}
			r := reason(w.m)
			if s.Optional {
				r += " (optional signal)"
			}
			gaps = append(gaps, DataGap{Signal: s.Name, Window: w.name, Reason: r})
		}
	}
	return gaps
}
