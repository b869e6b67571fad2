package diagnose

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/whyslow/whyslow/rules"
	"github.com/whyslow/whyslow/verdict"
)

// buildVerdict fills the verdict from the walk's outcome. now and base are
// the signal values the walk saw; coverage (in (0, 1]) scales the
// confidences when the baseline window is only partly covered by data.
// buckets holds the bucket bounds of the headline's quantile signals.
func buildVerdict(v *verdict.Verdict, rs *rules.Ruleset, out *rules.Outcome, opts *Options, now, base map[string]float64,
	gpu gpuInference, coverage float64, buckets map[string][]float64) {
	switch {
	case out.Insufficient:
		v.Status = verdict.StatusInsufficientData
	case out.Anomaly:
		v.Status = verdict.StatusAnomaly
		v.Severity = verdict.SeverityWarning
		if out.Critical {
			v.Severity = verdict.SeverityCritical
		}
		switch {
		case out.Prefill && out.Decode:
			v.Phase = verdict.PhaseBoth
		case out.Prefill:
			v.Phase = verdict.PhasePrefill
		case out.Decode:
			v.Phase = verdict.PhaseDecode
		}
	default:
		v.Status = verdict.StatusHealthy
	}
	if v.Status != verdict.StatusAnomaly {
		// The attribution explains a slowdown; without one it is noise.
		v.Attribution = nil
	}

	for _, name := range headlineSignals(rs) {
		s := rs.Declared(name)
		c := verdict.Comparison{Signal: name, Title: s.Title, Unit: s.Unit, Now: valuePtr(now, name), Baseline: valuePtr(base, name)}
		if c.Now != nil && c.Baseline != nil && *c.Baseline != 0 {
			r := *c.Now / *c.Baseline
			c.Ratio = &r
		}
		if les := buckets[name]; len(les) > 0 {
			c.NowBucket, c.BaselineBucket = coarseBucket(les, c.Now), coarseBucket(les, c.Baseline)
		}
		v.Headline = append(v.Headline, c)
	}

	evidence := func(f rules.Finding) verdict.Evidence {
		e := verdict.Evidence{Step: f.Step.Name, Rule: f.Rule.Name, Signal: f.Rule.Signal, Weight: f.Rule.Weight,
			Grade: round3(f.Grade), Text: f.Text}
		if f.Rule.Signal != "" {
			e.Now, e.Baseline = valuePtr(now, f.Rule.Signal), valuePtr(base, f.Rule.Signal)
			if s := rs.Declared(f.Rule.Signal); s != nil {
				e.Unit = s.Unit
			}
		}
		return e
	}
	var taken []rules.Fix
	for i, sc := range out.Causes {
		c := verdict.Cause{ID: sc.Cause.ID, Rank: i + 1, Score: round3(sc.Score), Confidence: round3(sc.Confidence * coverage),
			Title: sc.Cause.Title, Evidence: []verdict.Evidence{}, Remediation: []string{},
			Chain: chainOf(rs, sc.Cause, now, base)}
		for _, f := range sc.Findings {
			c.Evidence = append(c.Evidence, evidence(f))
		}
		sort.SliceStable(c.Evidence, func(a, b int) bool {
			return c.Evidence[a].Weight*c.Evidence[a].Grade > c.Evidence[b].Weight*c.Evidence[b].Grade
		})
		for _, f := range sc.Against {
			c.Against = append(c.Against, evidence(f))
		}
		for _, fix := range sc.Cause.FixesFor(rs.Engine) {
			text := fix.Render(out.Data)
			if other, ok := conflicting(fix, taken); ok {
				c.Omitted = append(c.Omitted, fmt.Sprintf("%s (left out: it turns %s %s, against the fix for a higher-ranked cause: %s)",
					text, fix.Knob, fix.Direction, other.Render(out.Data)))
				continue
			}
			c.Remediation = append(c.Remediation, text)
			if fix.Knob != "" {
				taken = append(taken, fix)
			}
		}
		v.Causes = append(v.Causes, c)
	}
	if v.Status == verdict.StatusAnomaly {
		reported := map[string]bool{}
		for _, c := range out.Causes {
			reported[c.Cause.ID] = true
		}
		for _, c := range out.Candidates {
			if !reported[c.Cause.ID] && c.Score > 0 {
				v.Considered = append(v.Considered, verdict.Considered{ID: c.Cause.ID, Title: c.Cause.Title, Score: round3(c.Score)})
			}
		}
	}
	for _, ro := range out.RuledOut {
		v.RuledOut = append(v.RuledOut, verdict.RuledOut{ID: ro.Cause.ID, Title: ro.Cause.Title, Reason: ro.Reason})
	}

	for _, sr := range out.Steps {
		st := verdict.Step{Name: sr.Step.Name, Title: sr.Step.Title, Outcome: stepOutcome(sr)}
		if opts.Explain {
			for _, rr := range sr.Rules {
				ro := verdict.RuleOutcome{Name: rr.Rule.Name, Cause: rr.Rule.Cause, Matched: rr.Matched}
				if rr.Matched {
					ro.Effect = rr.Rule.Effect.String()
					g := round3(rr.Grade)
					ro.Grade = &g
				}
				if rr.Err != nil {
					ro.Error = rr.Err.Error()
				}
				st.Rules = append(st.Rules, ro)
			}
		}
		v.Steps = append(v.Steps, st)
	}

	v.DataGaps = collapseGaps(rs, append(v.DataGaps, dataGaps(rs, now, base, v.DataGaps, opts.Explain)...))
	v.DataGaps = append(v.DataGaps, evidenceGaps(rs, v, now)...)
	for _, e := range out.Errors {
		v.Warnings = appendWarnings(v.Warnings, "ruleset: "+e)
	}
	if out.Scheduler.Source == "unknown" {
		v.DataGaps = append(v.DataGaps, verdict.DataGap{Signal: "scheduler", Reason: gpuGapReason(gpu)})
	}
}

// headlineMeans pairs a headline quantile with its mean, which the
// evidence quotes: the mean is shown on the next row.
var headlineMeans = map[string]string{"ttft_p95": "ttft_mean", "tpot_p95": "tpot_mean"}

// headlineSignals is the ruleset's headline with each quantile's mean
// (headlineMeans) after it, when the ruleset declares it.
func headlineSignals(rs *rules.Ruleset) []string {
	listed := map[string]bool{}
	for _, n := range rs.Verdict.Headline {
		listed[n] = true
	}
	var out []string
	for _, n := range rs.Verdict.Headline {
		out = append(out, n)
		if m, ok := headlineMeans[n]; ok && !listed[m] && rs.Declared(m) != nil {
			out = append(out, m)
			listed[m] = true
		}
	}
	return out
}

// coarseBucket returns the bucket (of the sorted finite upper bounds les)
// a quantile value was interpolated in, when it is wider than half its
// lower bound; nil for a fine bucket, a value beyond the last bound, or no
// value.
func coarseBucket(les []float64, v *float64) *verdict.Bucket {
	if v == nil {
		return nil
	}
	lo := 0.0
	for _, hi := range les {
		if *v <= hi {
			if *v <= lo || hi-lo <= 0.5*lo {
				return nil
			}
			return &verdict.Bucket{Lower: lo, Upper: hi}
		}
		lo = hi
	}
	return nil
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

// conflicting finds a fix already given that turns the same knob the other way.
func conflicting(f rules.Fix, taken []rules.Fix) (rules.Fix, bool) {
	if f.Knob == "" {
		return rules.Fix{}, false
	}
	for _, t := range taken {
		if t.Knob == f.Knob && t.Direction != f.Direction {
			return t, true
		}
	}
	return rules.Fix{}, false
}

// chainOf renders the links of a cause's chain that moved: a ratio link
// that rose (or, marked falls, fell) by at least Min, a value link at or
// above Min.
func chainOf(rs *rules.Ruleset, c *rules.Cause, now, base map[string]float64) []verdict.ChainLink {
	var out []verdict.ChainLink
	for _, l := range c.Chain {
		n, ok := now[l.Signal]
		s := rs.Declared(l.Signal)
		if !ok || s == nil {
			continue
		}
		unit := s.Unit
		link := verdict.ChainLink{Signal: l.Signal, Label: l.Label, Now: valuePtr(now, l.Signal), Baseline: valuePtr(base, l.Signal), Unit: unit}
		switch l.Show {
		case "value":
			if n < l.Min {
				continue
			}
			link.Text = l.Label + " " + formatUnit(n, unit)
		default:
			b, ok := base[l.Signal]
			if !ok || b <= 0 || n <= 0 {
				continue
			}
			r := n / b
			if moved := r; l.Falls && r > 0 {
				if 1/moved < math.Max(l.Min, 1.0001) {
					continue
				}
			} else if moved < math.Max(l.Min, 1.0001) {
				continue
			}
			link.Text = l.Label + " " + rules.FormatMultiple(r)
			if unit == "seconds" {
				link.Text += " (" + rules.FormatSeconds(b) + " → " + rules.FormatSeconds(n) + ")"
			}
		}
		out = append(out, link)
	}
	return out
}

// formatUnit renders a value in its signal's unit, as evidence does.
func formatUnit(f float64, unit string) string {
	switch unit {
	case "seconds":
		return rules.FormatSeconds(f)
	case "fraction":
		return rules.FormatPercent(f)
	case "ratio":
		return rules.FormatMultiple(f)
	case "", "count":
		return rules.FormatNumber(f)
	}
	return rules.FormatNumber(f) + " " + unit
}

// stepOutcome renders the step's summary and what its rules concluded.
func stepOutcome(sr rules.StepResult) string {
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
		parts = append(parts, "against "+strings.Join(ro, ", "))
	}
	if len(ev) == 0 && len(ro) == 0 {
		parts = append(parts, "no finding")
	}
	return strings.Join(parts, "; ")
}

// dataGaps lists signals missing in a window, skipping those already reported
// as failed queries: signals the engine's map does not provide (the engine
// does not export them), and mapped signals that returned no data. A missing
// signal in a window with fewer than two samples is reported as too few
// samples for rate(). Optional signals (series only some deployments expose)
// are listed only when explaining.
func dataGaps(rs *rules.Ruleset, now, base map[string]float64, have []verdict.DataGap, explain bool) []verdict.DataGap {
	reported := map[string]bool{}
	for _, g := range have {
		reported[g.Signal+"/"+g.Window] = true
		reported[g.Signal+"/"] = reported[g.Signal+"/"] || g.Window == ""
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
	var gaps []verdict.DataGap
	var unmapped []string
	for _, s := range rs.Unmapped {
		if (s.Optional && !explain) || reported[s.Name+"/"] {
			continue
		}
		unmapped = append(unmapped, s.Name)
	}
	if len(unmapped) > 0 {
		who := rs.Engine
		if sh := rs.Shape(); sh != nil && sh.Title != "" {
			who += " (" + sh.Title + ")"
		}
		gaps = append(gaps, verdict.DataGap{Signal: "not_exported", Signals: unmapped,
			Reason: fmt.Sprintf("%s does not export %s (its signal map has no series for them): the rules that read them stay silent",
				who, strings.Join(unmapped, ", "))})
	}
	for _, s := range rs.Signals {
		if (s.Optional && !explain) || reported[s.Name+"/"] {
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
			gaps = append(gaps, verdict.DataGap{Signal: s.Name, Window: w.name, Reason: r})
		}
	}
	return gaps
}

// evidenceGaps are the gaps that leave a cause undecidable rather than
// one series missing: no series counts failed requests (so request_errors
// can be neither seen nor ruled out), and a TTFT rise whose parts the engine
// does not export (the split is not measured, which is no unexplained
// slowdown).
func evidenceGaps(rs *rules.Ruleset, v *verdict.Verdict, now map[string]float64) []verdict.DataGap {
	var gaps []verdict.DataGap
	failures := []string{}
	for _, s := range []string{"http_error_ratio", "error_finish_rate"} {
		if rs.Declared(s) != nil {
			failures = append(failures, s)
		}
	}
	counted := false
	for _, s := range failures {
		if _, ok := now[s]; ok {
			counted = true
		}
	}
	if len(failures) > 0 && !counted && v.Status != verdict.StatusInsufficientData {
		gaps = append(gaps, verdict.DataGap{Signal: "request_failures", Signals: failures,
			Reason: "no series counts failed requests (the API server's HTTP status counter, or an engine error finish reason): " +
				"request_errors can be neither seen nor ruled out"})
	}
	if a := v.Attribution; a != nil && a.TTFT != nil && a.TTFT.Unmeasured {
		gaps = append(gaps, verdict.DataGap{Signal: "ttft_split", Signals: []string{sigQueueMean, sigPrefillMean},
			Reason: "queue and prefill histograms not exported: the TTFT split is not measured"})
	}
	return gaps
}

// collapseGaps folds the gaps of one group of signals (the GPU counters)
// into one line per window, and a signal missing from both windows for the
// same reason into one gap.
func collapseGaps(rs *rules.Ruleset, gaps []verdict.DataGap) []verdict.DataGap {
	type groupKey struct{ group, window, reason string }
	groups := map[groupKey]*verdict.DataGap{}
	folded := make([]*verdict.DataGap, 0, len(gaps))
	for _, g := range gaps {
		s := rs.Declared(g.Signal)
		if s == nil || s.Group == "" {
			folded = append(folded, &g)
			continue
		}
		k := groupKey{s.Group, g.Window, g.Reason}
		if d, ok := groups[k]; ok {
			d.Signals = append(d.Signals, g.Signal)
			continue
		}
		d := &verdict.DataGap{Signal: s.Group, Window: g.Window, Reason: g.Reason, Signals: []string{g.Signal}}
		groups[k] = d
		folded = append(folded, d)
	}
	for _, d := range groups {
		if len(d.Signals) > 1 {
			d.Reason = fmt.Sprintf("%s (%d series: %s)", d.Reason, len(d.Signals), strings.Join(d.Signals, ", "))
		}
	}
	// Merge windows: the same signal (or group) missing from both windows
	// for the same reason is one gap.
	type gapKey struct{ signal, reason string }
	seen := map[gapKey]int{}
	out := make([]verdict.DataGap, 0, len(folded))
	for _, g := range folded {
		k := gapKey{g.Signal, g.Reason}
		if i, ok := seen[k]; ok && g.Window != "" && out[i].Window != g.Window {
			out[i].Window = ""
			continue
		}
		seen[k] = len(out)
		out = append(out, *g)
	}
	return out
}

// zeroGauges drops gauges declared zero_is_gap that read exactly zero in
// both windows: an engine that exposes the gauge but never sets it. Such a
// gauge is a data gap, and nothing reads it as evidence.
func zeroGauges(rs *rules.Ruleset, now, base map[string]float64) []verdict.DataGap {
	var gaps []verdict.DataGap
	for _, s := range rs.Signals {
		if !s.ZeroIsGap {
			continue
		}
		n, okN := now[s.Name]
		b, okB := base[s.Name]
		if okN && n == 0 && (!okB || b == 0) {
			delete(now, s.Name)
			delete(base, s.Name)
			gaps = append(gaps, verdict.DataGap{Signal: s.Name, Reason: "reads 0 in both windows: the engine exposes it but does not set it"})
		}
	}
	return gaps
}

// baselineCoverage compares the scrapes of the baseline window with the
// incident window's. A baseline the data only partly covers is a data gap
// and weakens the ranking (the returned factor scales confidences); it
// never drives it.
func baselineCoverage(rs *rules.Ruleset, now, base map[string]float64) (float64, *verdict.DataGap) {
	ss := rs.Verdict.SamplesSignal
	n, okN := now[ss]
	b, okB := base[ss]
	if ss == "" || !okN || n < 2 {
		return 1, nil
	}
	if !okB {
		return 0.5, &verdict.DataGap{Signal: ss, Window: "baseline", Reason: "the baseline window has no data"}
	}
	c := b / n
	if c >= 0.8 {
		return 1, nil
	}
	return math.Max(0.3, c), &verdict.DataGap{Signal: ss, Window: "baseline",
		Reason: fmt.Sprintf("the baseline window is only %.0f%% covered by data (%.0f scrapes against %.0f in the incident window); confidence lowered", 100*c, b, n)}
}

// missingWords names, for evidence texts, the declared signals without a
// value in the incident window that the attribution reads.
func missingWords(rs *rules.Ruleset, now, base map[string]float64) []string {
	var out []string
	for _, name := range []string{sigQueueMean, sigPrefillMean, sigKVUsageAvg, sigRunning, sigPrefillTPS, sigPreemptRate, sigSMClock, "prefix_hit_rate", "prompt_len_p90"} {
		_, n := now[name]
		_, b := base[name]
		if n && b {
			continue
		}
		if s := rs.Declared(name); s != nil {
			out = append(out, strings.ToLower(s.Title[:1])+s.Title[1:])
		}
	}
	if len(out) == 0 {
		out = []string{"none missing: the change is outside what these series measure"}
	}
	return out
}

// dropBaselineRates removes the baseline values that depend on how long the
// engine ran (per-second rates, request counts), for a baseline whose
// length is unknown, and returns the one gap that says so.
func dropBaselineRates(rs *rules.Ruleset, base map[string]float64) *verdict.DataGap {
	var dropped []string
	for _, s := range rs.Signals {
		if _, ok := base[s.Name]; !ok || !(strings.HasSuffix(s.Unit, "/s") || s.Unit == "bytes_per_second" || s.Unit == "requests") {
			continue
		}
		delete(base, s.Name)
		dropped = append(dropped, s.Name)
	}
	if len(dropped) == 0 {
		return nil
	}
	return &verdict.DataGap{Signal: "baseline_rates", Signals: dropped, Window: "baseline",
		Reason: "the engine exports no start time (process_start_time_seconds or *_created), so its lifetime is unknown: " +
			"baseline rates and counts (" + strings.Join(dropped, ", ") + ") are left out; means, quantiles and ratios of its counters are exact"}
}
