package render

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/whyslow/whyslow/verdict"
)

// Markdown writes v as GitHub-flavoured Markdown for webhooks and tickets:
// the same content as Text (headline table, ranked causes with evidence and
// fix, ruled-out causes, data gaps, and with Explain the steps and signals).
func Markdown(w io.Writer, v *verdict.Verdict, opts Options) (err error) {
	if v == nil {
		return errors.New("render markdown: nil verdict")
	}
	// Rendered whole, then escaped (EscapeLines): a label's control
	// characters never reach the terminal or the log a sink writes to.
	var out strings.Builder
	b := bufio.NewWriter(&out)
	defer func() {
		if err == nil {
			_, err = io.WriteString(w, EscapeLines(out.String()))
		}
	}()
	u := unitsOf(v)
	p := func(format string, a ...any) { fmt.Fprintf(b, format, a...) }

	// The answer first (AnswerOf), then the evidence.
	a := AnswerOf(v)
	p("### %s\n\n", mdEscape(a.Status))
	if a.Reason != "" {
		p("**Reason:** %s\n\n", mdEscape(a.Reason))
	}
	if a.Lead != "" {
		p("**%s: %s** (`%s`, confidence %s)\n", a.Lead, mdEscape(a.Title), mdCode(a.ID), a.Confidence)
		if a.Chain != "" {
			p("- *Chain:* %s\n", mdEscape(a.Chain))
		}
		switch {
		case a.Fix != "":
			p("- **Fix:** %s", mdEscape(a.Fix))
			if m := a.MoreText(); m != "" {
				p(" *(%s)*", m)
			}
			p("\n")
		case a.NoFixWhy != "":
			p("- *%s*\n", mdEscape(a.NoFixWhy))
		}
		p("\n")
	} else if a.NoCause {
		p("No cause could be ranked: see the data gaps for the series that would have told.\n\n")
	}
	if s := PoolContextLine(v); s != "" {
		p("%s\n\n", mdEscape(s))
	}
	if split := splitSummary(v, " · "); split != "" {
		p("**%s**\n\n", mdEscape(split))
	}
	p("- **Scope:** `%s`\n", mdCode(ScopeText(v.Scope)))
	if len(v.Scope.Labels) > 0 {
		p("- **Labels:** %s\n", mdEscape(labelsFmt(v.Scope.Labels)))
	}
	if v.Engine != "" {
		p("- **Engine:** %s\n", mdEscape(EngineLine(v)))
	}
	if v.Cohort != nil {
		p("- **Fleet:** %s\n", mdEscape(v.Cohort.Message))
	}
	if s := gpuFmt(v.GPU); s != "" {
		p("- **GPU:** %s\n", mdEscape(s))
	}
	if !v.At.IsZero() {
		p("- **At:** %s\n", timeFmt(v.At))
	}
	p("- **Incident window:** %s\n", windowFmt(v.Incident))
	p("- **Baseline window:** %s\n", windowFmt(v.Baseline))

	if len(v.Headline) > 0 {
		p("\n| Signal | Now | Baseline | Change |\n|---|---:|---:|---:|\n")
		for _, c := range v.Headline {
			r := comparisonRow(c)
			p("| %s | %s | %s | %s |\n", mdCell(r[0]), mdCell(r[1]), mdCell(r[2]), mdCell(r[3]))
		}
		if notes := bucketNotes(v.Headline); len(notes) > 0 {
			p("\n≈ estimated inside a coarse histogram bucket:\n\n")
			for _, n := range notes {
				p("- %s\n", mdEscape(n))
			}
		}
	}

	if lines := AttributionLines(v); len(lines) > 0 {
		p("\n#### Where the time went\n\n")
		for _, l := range lines {
			p("- %s\n", mdEscape(l))
		}
	}

	if len(v.Causes) > 0 {
		p("\n#### %s\n\n", CausesHeading(v))
		for i, c := range v.Causes {
			rank := c.Rank
			if rank == 0 {
				rank = i + 1
			}
			p("%d. **%s** (`%s`, confidence %s, score %s)\n", rank, mdEscape(c.Title), mdCode(c.ID), ConfidenceText(c), num(c.Score))
			if ch := ChainText(c); ch != "" {
				p("   - *Chain:* %s\n", mdEscape(ch))
			}
			for _, e := range c.Evidence {
				p("   - %s\n", mdEvidence(e, u))
			}
			for _, e := range c.Against {
				p("   - *Against:* %s\n", mdEscape(e.Text))
			}
			if !ShowFixes(c) && len(c.Remediation) > 0 {
				p("   - *%s*\n", mdEscape(FixesHiddenText(c)))
				continue
			}
			for j, r := range c.Remediation {
				if j == 0 {
					p("   - **Fix:** %s\n", mdEscape(r))
				} else {
					p("   - **Also:** %s\n", mdEscape(r))
				}
			}
		}
	}

	if pr := PredictionsOf(v); pr != nil {
		p("\n#### %s\n\n", PredictedHeading)
		for _, n := range pr.Notes {
			p("*%s*\n\n", mdEscape(n))
		}
		for _, l := range pr.Fixes {
			p("- %s\n", mdEscape(l))
		}
		for _, l := range pr.Declined {
			p("- *%s*\n", mdEscape(l))
		}
	}

	if len(v.Considered) > 0 {
		p("\n#### Also considered (below the evidence bar)\n\n")
		for _, c := range v.Considered {
			p("- %s (`%s`): score %s\n", mdEscape(titleOr(c.Title, c.ID)), mdCode(c.ID), num(c.Score))
		}
	}

	if len(v.RuledOut) > 0 {
		p("\n#### Ruled out\n\n")
		for _, r := range v.RuledOut {
			p("- %s (`%s`): %s\n", mdEscape(titleOr(r.Title, r.ID)), mdCode(r.ID), mdEscape(r.Reason))
		}
	}
	if len(v.Targets) > 0 {
		p("\n#### Worst targets\n\n")
		for _, tg := range v.Targets {
			p("- `%s`: %s = %s\n", mdCode(labelsFmt(tg.Labels)), mdEscape(tg.Signal), FormatValue(tg.Value, u.of(tg.Unit, tg.Signal)))
		}
	}
	if len(v.Requests) > 0 {
		p("\n#### Slowest requests (from traces)\n\n")
		for _, r := range shownRequests(v) {
			p("- %s\n", mdEscape(requestHead(r)))
			if s := requestParts(r); s != "" {
				p("  - %s\n", mdEscape(s))
			}
			if s := requestContext(r); s != "" {
				p("  - %s\n", mdEscape(s))
			}
		}
		if s := moreRequests(v); s != "" {
			p("\n%s\n", mdEscape(s))
		}
	}
	if len(v.DataGaps) > 0 {
		p("\n#### Data gaps\n\n")
		for _, g := range v.DataGaps {
			p("- %s\n", mdEscape(gapLine(g)))
		}
	}
	if len(v.Warnings) > 0 {
		p("\n#### Warnings\n\n")
		for _, s := range v.Warnings {
			p("- %s\n", mdEscape(s))
		}
	}
	if opts.Explain {
		if len(v.Steps) > 0 {
			p("\n#### Steps\n\n")
			for i, s := range v.Steps {
				p("%d. **%s**: %s\n", i+1, mdEscape(titleOr(s.Title, s.Name)), mdEscape(s.Outcome))
				for _, r := range s.Rules {
					p("   - %s\n", mdEscape(ruleLine(r)))
				}
			}
		}
		if len(v.Signals) > 0 {
			p("\n#### Signals\n\n| Signal | Now | Baseline | Change | Expression |\n|---|---:|---:|---:|---|\n")
			for _, s := range v.Signals {
				un := u.of(s.Unit, s.Name)
				p("| %s | %s | %s | %s | `%s` |\n", mdCell(s.Name), mdCell(optValue(s.Now, un)),
					mdCell(optValue(s.Baseline, un)), mdCell(strings.TrimSpace(ratioSuffix(s.Now, s.Baseline))),
					mdCode(strings.ReplaceAll(s.Expr, "|", "\\|")))
			}
		}
	}
	if err := b.Flush(); err != nil {
		return fmt.Errorf("render markdown: %w", err)
	}
	return nil
}

// mdEvidence is the evidence text with its numbers, the signal in code.
func mdEvidence(e verdict.Evidence, u units) string {
	s := mdEscape(titleOr(e.Text, e.Rule))
	un := u.of(e.Unit, e.Signal)
	var parts []string
	if e.Signal != "" && (e.Now != nil || e.Baseline != nil) {
		n := "`" + mdCode(e.Signal) + "` now " + optValue(e.Now, un)
		if e.Baseline != nil {
			n += ", baseline " + optValue(e.Baseline, un) + ratioSuffix(e.Now, e.Baseline)
		}
		parts = append(parts, n)
	}
	parts = append(parts, weightText(e))
	return s + " (" + strings.Join(parts, "; ") + ")"
}

// mdEscaper escapes the characters that would change Markdown structure in
// running text.
var mdEscaper = strings.NewReplacer(
	"\\", "\\\\", "*", "\\*", "_", "\\_", "`", "\\`", "[", "\\[", "]", "\\]",
	"<", "&lt;", ">", "&gt;", "|", "\\|", "#", "\\#", "\n", " ",
)

func mdEscape(s string) string { return mdEscaper.Replace(s) }

// mdCell escapes text for a table cell.
func mdCell(s string) string { return mdEscape(s) }

// mdCode makes s safe inside a single-backtick code span.
func mdCode(s string) string {
	return strings.NewReplacer("`", "'", "\n", " ").Replace(s)
}
