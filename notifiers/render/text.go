package render

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/whyslow/whyslow/verdict"
)

// ANSI colour codes used when Options.Color is set.
const (
	ansiReset  = "\x1b[0m"
	ansiBold   = "\x1b[1m"
	ansiDim    = "\x1b[2m"
	ansiRed    = "\x1b[31m"
	ansiGreen  = "\x1b[32m"
	ansiYellow = "\x1b[33m"
	ansiCyan   = "\x1b[36m"
)

// textWriter accumulates wrapped, optionally coloured lines.
type textWriter struct {
	w     *bufio.Writer
	width int
	color bool
}

func (t *textWriter) paint(code, s string) string {
	if !t.color || code == "" {
		return s
	}
	return code + s + ansiReset
}

// line writes one line, wrapped at the width with continuation lines indented
// by hang spaces more than the first; a line that fits is written unchanged.
// code colours every produced line.
func (t *textWriter) line(indent, hang int, code, s string) {
	s = Escape(s)
	lines := []string{s}
	if utf8.RuneCountInString(s) > t.width-indent {
		// Keep the line's own leading spaces (a right-aligned rank).
		lead := len(s) - len(strings.TrimLeft(s, " "))
		lines = wrap(s[lead:], t.width-indent-lead, hang)
		lines[0] = s[:lead] + lines[0]
	}
	for _, l := range lines {
		t.w.WriteString(strings.Repeat(" ", indent))
		t.w.WriteString(t.paint(code, l))
		t.w.WriteByte('\n')
	}
}

func (t *textWriter) blank() { t.w.WriteByte('\n') }

// fieldWidth is the column where the header's values start ("scope:    ").
const fieldWidth = 10

// field writes a header line "label:    value", continuation lines aligned
// under the value.
func (t *textWriter) field(code, label, value string) {
	value = Escape(value)
	pad := max(1, fieldWidth-utf8.RuneCountInString(label))
	first := label + strings.Repeat(" ", pad)
	if utf8.RuneCountInString(first+value) <= t.width {
		t.line(0, 0, code, first+value)
		return
	}
	for i, l := range wrap(value, t.width-fieldWidth, 0) {
		if i > 0 {
			first = strings.Repeat(" ", fieldWidth)
		}
		t.w.WriteString(t.paint(code, first+l))
		t.w.WriteByte('\n')
	}
}

// wrap splits s into lines of at most width runes, breaking at spaces;
// continuation lines start with hang spaces. Words longer than a line are cut.
func wrap(s string, width, hang int) []string {
	if width < 20 {
		width = 20
	}
	if hang > width/2 {
		hang = width / 2
	}
	var lines []string
	var cur strings.Builder
	curLen, empty := 0, true
	flush := func() {
		lines = append(lines, cur.String())
		cur.Reset()
		cur.WriteString(strings.Repeat(" ", hang))
		curLen, empty = hang, true
	}
	for _, word := range glueUnits(strings.Fields(s)) {
		r := []rune(word)
		for len(r) > width-hang {
			if !empty {
				flush()
			}
			n := min(width-curLen, len(r))
			cur.WriteString(string(r[:n]))
			r = r[n:]
			flush()
		}
		if len(r) == 0 {
			continue
		}
		need := len(r)
		if !empty {
			need++
		}
		if curLen+need > width && !empty {
			flush()
			need = len(r)
		}
		if !empty {
			cur.WriteByte(' ')
		}
		cur.WriteString(string(r))
		curLen += need
		empty = false
	}
	if !empty || len(lines) == 0 {
		lines = append(lines, cur.String())
	}
	return lines
}

// unitWords are tokens that must stay on the line of the number before them.
var unitWords = map[string]bool{
	"µs": true, "ms": true, "s": true, "%": true, "B": true, "KiB": true, "MiB": true, "GiB": true,
	"TiB": true, "KiB/s": true, "MiB/s": true, "GiB/s": true, "TiB/s": true, "B/s": true,
	"MHz": true, "°C": true, "W": true,
}

// glueUnits joins a unit word to the number before it so that wrapping never
// separates "40" from "ms" or "4.65" from "req/s". Joined words keep their
// space.
func glueUnits(words []string) []string {
	out := words[:0:0]
	for _, w := range words {
		base := strings.TrimRight(w, ",;:.)]")
		if len(out) > 0 && (unitWords[base] || strings.HasSuffix(base, "/s") && endsInDigit(out[len(out)-1])) {
			out[len(out)-1] += " " + w
			continue
		}
		out = append(out, w)
	}
	return out
}

func endsInDigit(s string) bool {
	return s != "" && s[len(s)-1] >= '0' && s[len(s)-1] <= '9'
}

// Text writes v for a terminal: the headline, causes in rank order with their
// evidence and fix, ruled-out causes, data gaps and, with Explain, every step,
// rule outcome and signal value. Lines fit Options.Width (default 100).
func Text(w io.Writer, v *verdict.Verdict, opts Options) error {
	if v == nil {
		return errors.New("render text: nil verdict")
	}
	width := opts.Width
	if width <= 0 {
		width = DefaultWidth
	}
	bw := bufio.NewWriter(w)
	t := &textWriter{w: bw, width: width, color: opts.Color}
	u := unitsOf(v)

	// Headline.
	statusCode := ansiGreen
	switch {
	case v.Status == verdict.StatusAnomaly && v.Severity == verdict.SeverityCritical:
		statusCode = ansiRed
	case v.Status == verdict.StatusAnomaly:
		statusCode = ansiYellow
	case v.Status == verdict.StatusInsufficientData:
		statusCode = ansiYellow
	}
	// The answer first: status (and why it could not decide), the top
	// cause, its chain and first fix; the evidence follows.
	a := AnswerOf(v)
	t.line(0, 2, ansiBold+statusCode, a.Status)
	if a.Reason != "" {
		t.field(ansiYellow, "reason:", a.Reason)
	}
	if s := a.CauseLine(); s != "" {
		t.line(0, 4, ansiBold+ansiCyan, s)
		if a.Chain != "" {
			t.line(2, 2, "", "chain: "+a.Chain)
		}
		switch {
		case a.Fix != "":
			t.line(2, 5, ansiGreen, "fix: "+a.Fix)
			if m := a.MoreText(); m != "" {
				t.line(7, 0, ansiDim, "("+m+")")
			}
		case a.NoFixWhy != "":
			t.line(2, 2, ansiDim, a.NoFixWhy)
		}
	} else if a.NoCause {
		t.line(0, 2, ansiYellow, "No cause could be ranked: see the data gaps for the series that would have told.")
	}
	if s := PoolContextLine(v); s != "" {
		t.line(0, 2, "", s)
	}
	if s := splitSummary(v, " · "); s != "" {
		t.blank()
		t.line(0, 2, ansiBold, s)
	}
	t.field("", "scope:", ScopeText(v.Scope))
	if s := engineLine(v); s != "" {
		t.line(0, 10, "", s)
	}
	if s := gpuFmt(v.GPU); s != "" {
		t.field("", "gpu:", s)
	}
	if len(v.Scope.Labels) > 0 {
		t.field(ansiDim, "labels:", labelsFmt(v.Scope.Labels))
	}
	if v.Cohort != nil {
		t.field(ansiYellow, "fleet:", v.Cohort.Message)
	}
	t.line(0, 10, "", "incident: "+windowFmt(v.Incident))
	t.line(0, 10, "", "baseline: "+windowFmt(v.Baseline))
	if len(v.Headline) > 0 {
		t.blank()
		rows := make([][]string, 0, len(v.Headline)+1)
		rows = append(rows, []string{"signal", "now", "baseline", "change"})
		for _, c := range v.Headline {
			rows = append(rows, comparisonRow(c))
		}
		for i, l := range table(rows, []bool{false, true, true, true}) {
			code := ""
			if i == 0 {
				code = ansiDim
			}
			t.line(2, 4, code, l)
		}
		if notes := bucketNotes(v.Headline); len(notes) > 0 {
			t.line(2, 4, ansiDim, "≈ estimated inside a coarse histogram bucket:")
			for _, n := range notes {
				t.line(4, 4, ansiDim, n)
			}
		}
	}

	if lines := AttributionLines(v); len(lines) > 0 {
		t.blank()
		t.line(0, 0, ansiBold, "Where the time went")
		for _, l := range lines {
			t.line(2, 4, "", "- "+l)
		}
	}

	if len(v.Causes) > 0 {
		t.blank()
		t.line(0, 0, ansiBold, CausesHeading(v))
		for i, c := range v.Causes {
			rank := c.Rank
			if rank == 0 {
				rank = i + 1
			}
			t.line(0, 4, ansiBold+ansiCyan, fmt.Sprintf("%2d. %s [%s] confidence %s, score %s", rank, c.Title, c.ID,
				ConfidenceText(c), num(c.Score)))
			if ch := ChainText(c); ch != "" {
				t.line(4, 2, "", "chain: "+ch)
			}
			for _, e := range c.Evidence {
				t.line(4, 2, "", "- "+evidenceLine(e, u))
			}
			for _, e := range c.Against {
				t.line(4, 2, ansiDim, "- against: "+e.Text)
			}
			if !ShowFixes(c) && len(c.Remediation) > 0 {
				t.line(4, 2, ansiDim, FixesHiddenText(c))
			} else {
				for j, r := range c.Remediation {
					if j == 0 {
						t.line(4, 5, ansiGreen, "fix: "+r)
					} else {
						t.line(9, 0, ansiGreen, r)
					}
				}
			}
			for _, r := range c.Omitted {
				if ShowFixes(c) {
					t.line(4, 2, ansiDim, "- not advised here: "+r)
				}
			}
		}
	}

	if pr := PredictionsOf(v); pr != nil {
		t.blank()
		t.line(0, 0, ansiBold, PredictedHeading)
		for _, n := range pr.Notes {
			t.line(2, 2, ansiDim, n)
		}
		for _, l := range pr.Fixes {
			t.line(2, 4, ansiGreen, "- "+l)
		}
		for _, l := range pr.Declined {
			t.line(2, 4, ansiDim, "- "+l)
		}
	}

	if len(v.Considered) > 0 {
		t.blank()
		t.line(0, 0, ansiBold, "Also considered (below the evidence bar)")
		for _, c := range v.Considered {
			t.line(2, 4, ansiDim, "- "+consideredLine(c))
		}
	}

	if len(v.RuledOut) > 0 {
		t.blank()
		t.line(0, 0, ansiBold, "Ruled out")
		for _, r := range v.RuledOut {
			t.line(2, 4, ansiDim, "- "+titleOr(r.Title, r.ID)+" ["+r.ID+"]: "+r.Reason)
		}
	}

	if len(v.Targets) > 0 {
		t.blank()
		t.line(0, 0, ansiBold, "Worst targets")
		for _, tg := range v.Targets {
			t.line(2, 4, "", "- "+labelsFmt(tg.Labels)+": "+tg.Signal+" = "+FormatValue(tg.Value, u.of(tg.Unit, tg.Signal)))
		}
	}

	if len(v.Requests) > 0 {
		t.blank()
		t.line(0, 0, ansiBold, "Slowest requests (from traces)")
		for _, r := range shownRequests(v) {
			t.line(2, 4, "", "- "+requestHead(r))
			if s := requestParts(r); s != "" {
				t.line(6, 2, "", s)
			}
			if s := requestContext(r); s != "" {
				t.line(6, 2, ansiDim, s)
			}
		}
		if s := moreRequests(v); s != "" {
			t.line(2, 4, ansiDim, s)
		}
	}

	if len(v.DataGaps) > 0 {
		t.blank()
		t.line(0, 0, ansiBold+ansiYellow, "Data gaps")
		for _, g := range v.DataGaps {
			t.line(2, 4, "", "- "+gapLine(g))
		}
	}

	if len(v.Warnings) > 0 {
		t.blank()
		t.line(0, 0, ansiBold+ansiYellow, "Warnings")
		for _, s := range v.Warnings {
			t.line(2, 4, "", "- "+s)
		}
	}

	if opts.Explain {
		if len(v.Steps) > 0 {
			t.blank()
			t.line(0, 0, ansiBold, "Steps")
			for i, s := range v.Steps {
				t.line(2, 6, "", fmt.Sprintf("%d. %s: %s", i+1, titleOr(s.Title, s.Name), s.Outcome))
				for _, r := range s.Rules {
					t.line(6, 4, ruleCode(r), ruleLine(r))
				}
			}
		}
		if len(v.Signals) > 0 {
			t.blank()
			t.line(0, 0, ansiBold, "Signals")
			for _, s := range v.Signals {
				un := u.of(s.Unit, s.Name)
				t.line(2, 4, "", fmt.Sprintf("- %s: now %s, baseline %s%s", s.Name,
					optValue(s.Now, un), optValue(s.Baseline, un), ratioSuffix(s.Now, s.Baseline)))
				if s.Expr != "" {
					t.line(6, 2, ansiDim, s.Expr)
				}
			}
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("render text: %w", err)
	}
	return nil
}

// Summary is the verdict in one line: status, severity, phase and the
// TTFT/TPOT split, e.g. "ANOMALY (critical): prefill is slower (TTFT) — TTFT
// p95 2.41 s vs 310 ms ×7.77, TPOT p95 42 ms vs 40 ms ×1.05". Notifiers use it
// for log lines and plain-text fallbacks; it is not wrapped.
func Summary(v *verdict.Verdict) string {
	s := statusSentence(v)
	if split := splitSummary(v, ", "); split != "" {
		s += " — " + split
	}
	return s
}

// statusSentence is status, severity and phase, after the daemon's
// learning or degraded-baseline state when there is one: that state
// qualifies everything after it.
func statusSentence(v *verdict.Verdict) string {
	var b strings.Builder
	if v.Learning != nil && v.Learning.Message != "" {
		b.WriteString(v.Learning.Message + " — ")
	}
	if v.DegradedBaseline != nil && v.DegradedBaseline.Message != "" {
		b.WriteString(v.DegradedBaseline.Message + " — ")
	}
	switch v.Status {
	case verdict.StatusAnomaly:
		b.WriteString("ANOMALY")
		if v.Severity != "" && v.Severity != verdict.SeverityNone {
			b.WriteString(" (" + string(v.Severity) + ")")
		}
		if v.Phase != "" && v.Phase != verdict.PhaseNone {
			b.WriteString(": " + phaseWords(v.Phase))
		}
		for i, br := range v.SLOBreaches {
			if i == 0 {
				b.WriteString("; SLO breached: ")
			} else {
				b.WriteString(", ")
			}
			b.WriteString(fmt.Sprintf("%s %s (bound %s)", br.Signal, FormatValue(br.Value, br.Unit), br.Text))
		}
	case verdict.StatusHealthy:
		b.WriteString("HEALTHY: no anomaly against the baseline")
	case verdict.StatusInsufficientData:
		b.WriteString("INSUFFICIENT DATA: triage could not decide")
	default:
		b.WriteString(strings.ToUpper(string(v.Status)))
	}
	return b.String()
}

func phaseWords(p verdict.Phase) string {
	switch p {
	case verdict.PhasePrefill:
		return "prefill is slower (TTFT)"
	case verdict.PhaseDecode:
		return "decode is slower (TPOT)"
	case verdict.PhaseBoth:
		return "prefill and decode are slower"
	}
	return string(p) + " phase"
}

// splitSummary renders the TTFT and TPOT headline rows compactly:
// "TTFT p95 2.41 s vs 310 ms ×7.8, TPOT p95 42 ms vs 40 ms ×1.05 (mean
// ×1.8)". A quantile's mean row (ttft_mean after ttft_p95) joins its
// quantile's part; a value estimated inside a coarse bucket reads "≈".
func splitSummary(v *verdict.Verdict, sep string) string {
	var parts []string
	quantiles := map[string]int{} // "ttft" → index in parts
	for _, c := range v.Headline {
		if !isSplitSignal(c.Signal) {
			continue
		}
		if stem, ok := strings.CutSuffix(c.Signal, "_mean"); ok {
			if i, ok := quantiles[stem]; ok {
				if c.Ratio != nil {
					parts[i] += " (mean " + FormatRatio(*c.Ratio) + ")"
				} else if c.Now != nil {
					parts[i] += " (mean " + optValue(c.Now, c.Unit) + ")"
				}
				continue
			}
		}
		s := comparisonTitle(c) + " " + approx(c.Now, c.NowBucket, c.Unit)
		if c.Baseline != nil {
			s += " vs " + approx(c.Baseline, c.BaselineBucket, c.Unit)
		}
		if c.Ratio != nil {
			s += " " + FormatRatio(*c.Ratio)
		}
		if stem, ok := strings.CutSuffix(c.Signal, "_p95"); ok {
			quantiles[stem] = len(parts)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, sep)
}

// approx is a value, marked "≈" when it was estimated inside a coarse bucket.
func approx(v *float64, b *verdict.Bucket, unit string) string {
	if v != nil && b != nil {
		return "≈" + optValue(v, unit)
	}
	return optValue(v, unit)
}

// bucketNotes says, for each headline row with a value estimated inside a
// coarse bucket, which bucket: "TTFT p95: now ≈2m34s (bucket 1m20s–2m40s),
// baseline ≈136 ms (bucket 100–250 ms)".
func bucketNotes(rows []verdict.Comparison) []string {
	var out []string
	for _, c := range rows {
		var parts []string
		if c.NowBucket != nil {
			parts = append(parts, "now "+bucketValue(c.Now, c.NowBucket, c.Unit))
		}
		if c.BaselineBucket != nil {
			parts = append(parts, "baseline "+bucketValue(c.Baseline, c.BaselineBucket, c.Unit))
		}
		if len(parts) > 0 {
			out = append(out, comparisonTitle(c)+": "+strings.Join(parts, ", "))
		}
	}
	return out
}

// bucketValue is a headline value, with the coarse bucket it was estimated
// in: "≈238 ms (bucket 100–250 ms)".
func bucketValue(v *float64, b *verdict.Bucket, unit string) string {
	if v == nil || b == nil {
		return optValue(v, unit)
	}
	return "≈" + optValue(v, unit) + " (bucket " + bucketRange(*b, unit) + ")"
}

// bucketRange is "100–250 ms": the unit once when both bounds share it.
func bucketRange(b verdict.Bucket, unit string) string {
	lo, hi := FormatValue(b.Lower, unit), FormatValue(b.Upper, unit)
	if i := strings.LastIndexByte(hi, ' '); i > 0 && strings.HasSuffix(lo, hi[i:]) {
		lo = strings.TrimSuffix(lo, hi[i:])
	}
	return lo + "–" + hi
}

// insufficientText is the reason an insufficient-data verdict gives, or "".
func insufficientText(v *verdict.Verdict) string {
	if v.Status != verdict.StatusInsufficientData || v.InsufficientReason == nil {
		return ""
	}
	return v.InsufficientReason.Message
}

// consideredLine is one cause below the evidence bar: "Title [id] score 0.42".
func consideredLine(c verdict.Considered) string {
	return titleOr(c.Title, c.ID) + " [" + c.ID + "] score " + num(c.Score)
}

// isSplitSignal reports whether a headline signal is part of the TTFT/TPOT
// split (TTFT, TPOT or inter-token latency).
func isSplitSignal(name string) bool {
	s := strings.ToLower(name)
	return strings.Contains(s, "ttft") || strings.Contains(s, "tpot") || strings.HasPrefix(s, "itl") ||
		strings.Contains(s, "_itl") || strings.Contains(s, "time_to_first_token") ||
		strings.Contains(s, "inter_token") || strings.Contains(s, "time_per_output_token")
}

// engineLine is "engine: vllm  at: 2023-11-14 22:13:20 UTC" (either part may
// be missing).
func engineLine(v *verdict.Verdict) string {
	var parts []string
	if v.Engine != "" {
		parts = append(parts, "engine:   "+EngineLine(v))
	}
	if !v.At.IsZero() {
		at := "at: "
		if len(parts) == 0 {
			at = "at:       "
		}
		parts = append(parts, at+timeFmt(v.At))
	}
	return strings.Join(parts, "   ")
}

func comparisonRow(c verdict.Comparison) []string {
	change := ""
	if c.Ratio != nil {
		change = FormatRatio(*c.Ratio)
	}
	return []string{comparisonTitle(c), approx(c.Now, c.NowBucket, c.Unit), approx(c.Baseline, c.BaselineBucket, c.Unit), change}
}

// table aligns rows into columns separated by two spaces; right marks
// right-aligned columns.
func table(rows [][]string, right []bool) []string {
	var widths []int
	for _, r := range rows {
		for i, c := range r {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			if n := utf8.RuneCountInString(c); n > widths[i] {
				widths[i] = n
			}
		}
	}
	out := make([]string, 0, len(rows))
	for _, r := range rows {
		var b strings.Builder
		for i, c := range r {
			if i > 0 {
				b.WriteString("  ")
			}
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c))
			if i < len(right) && right[i] {
				b.WriteString(pad + c)
			} else {
				b.WriteString(c + pad)
			}
		}
		out = append(out, strings.TrimRight(b.String(), " "))
	}
	return out
}

// evidenceLine is the evidence text followed by its numbers.
func evidenceLine(e verdict.Evidence, u units) string {
	s := e.Text
	if s == "" {
		s = e.Rule
	}
	if nums := evidenceNumbers(e, u); nums != "" {
		s += " (" + nums + ")"
	}
	return s
}

func evidenceNumbers(e verdict.Evidence, u units) string {
	var parts []string
	un := u.of(e.Unit, e.Signal)
	if e.Signal != "" && (e.Now != nil || e.Baseline != nil) {
		p := e.Signal + ": now " + optValue(e.Now, un)
		if e.Baseline != nil {
			p += ", baseline " + optValue(e.Baseline, un) + ratioSuffix(e.Now, e.Baseline)
		}
		parts = append(parts, p)
	}
	parts = append(parts, weightText(e))
	return strings.Join(parts, "; ")
}

// weightText is what the evidence added: "weight 4" for a rule that held
// fully (or was given no grade), "weight 4 × grade 0.62" otherwise.
func weightText(e verdict.Evidence) string {
	if e.Grade > 0 && e.Grade < 0.995 {
		return "weight " + num(e.Weight) + " × grade " + num(e.Grade)
	}
	return "weight " + num(e.Weight)
}

// ratioSuffix is " ×r" when both values exist and the baseline is not zero.
func ratioSuffix(now, base *float64) string {
	if now == nil || base == nil || *base == 0 {
		return ""
	}
	return " " + FormatRatio(*now / *base)
}

func gapLine(g verdict.DataGap) string {
	s := g.Signal
	if g.Window != "" {
		s += " (" + g.Window + " window)"
	}
	return s + ": " + g.Reason
}

func ruleLine(r verdict.RuleOutcome) string {
	mark := "no match"
	if r.Matched {
		mark = "matched"
	}
	s := r.Name + ": " + mark
	if r.Effect != "" {
		s += ", " + strings.ReplaceAll(r.Effect, "_", " ")
	}
	if r.Cause != "" {
		s += " → " + r.Cause
	}
	if r.Error != "" {
		s += "; error: " + r.Error
	}
	return s
}

func ruleCode(r verdict.RuleOutcome) string {
	switch {
	case r.Error != "":
		return ansiRed
	case r.Matched:
		return ""
	}
	return ansiDim
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func labelsFmt(m map[string]string) string {
	keys := sortedKeys(m)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, " ")
}

func titleOr(title, id string) string {
	if title != "" {
		return title
	}
	return id
}
