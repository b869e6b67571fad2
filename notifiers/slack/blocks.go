package slack

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/slack-go/slack"

	"github.com/whyslow/whyslow/internal/format"
	"github.com/whyslow/whyslow/notifiers/render"
	"github.com/whyslow/whyslow/verdict"
)

// Slack's Block Kit limits that the renderer keeps to.
const (
	maxHeaderChars  = 150
	maxSectionChars = 3000
	maxFieldChars   = 2000
	maxFields       = 10
	maxBlocks       = 50
	maxTextChars    = 3000
	maxRuledOut     = 10
	maxContextItems = 10
)

// Message is a rendered Slack message: Block Kit blocks and the plain-text
// fallback Slack shows in notifications and to clients without blocks.
type Message struct {
	Text   string
	Blocks []slack.Block
}

// MessageKind says which message of an incident is being rendered.
type MessageKind int

// Message kinds.
const (
	// KindParent is the incident's living parent message (bot mode).
	KindParent MessageKind = iota
	// KindReply is a thread reply to the parent (bot mode).
	KindReply
	// KindStandalone is a self-contained message: webhook mode and the
	// slash command's answer.
	KindStandalone
)

// String returns the kind's name.
func (k MessageKind) String() string {
	switch k {
	case KindParent:
		return "parent"
	case KindReply:
		return "reply"
	case KindStandalone:
		return "standalone"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// RenderOptions describe the message to render besides the verdict.
type RenderOptions struct {
	// Kind is the message being rendered.
	Kind MessageKind
	// Transition is the incident transition this message reports (empty
	// for the slash command's answer).
	Transition string
	// Resolved renders the parent as RESOLVED.
	Resolved bool
	// Change is a one-line mrkdwn summary of what changed (thread replies
	// and webhook messages), e.g. "Top cause changed: …".
	Change string
	// IncidentID is shown in the footer.
	IncidentID string
	// VerdictURL links to the verdict in whyslow's API.
	VerdictURL string
	// MaxCauses caps the causes rendered (default 5).
	MaxCauses int
	// Updates is the number of updates posted into the thread so far,
	// shown on the parent.
	Updates int
}

// Blocks renders a verdict as a Slack message. It never fails: missing data
// is shown as missing, and every Block Kit size limit is respected.
func Blocks(v *verdict.Verdict, o RenderOptions) Message {
	if o.MaxCauses <= 0 {
		o.MaxCauses = DefaultMaxCauses
	}
	var bs []slack.Block
	if o.Kind != KindReply {
		bs = append(bs, slack.NewHeaderBlock(plain(truncate(headerText(v, o.Resolved), maxHeaderChars))))
	}
	if o.Change != "" {
		bs = append(bs, section(o.Change))
	}
	if v == nil {
		bs = append(bs, section("_no verdict_"))
		return Message{Text: fallbackText(nil, o), Blocks: bs}
	}
	bs = append(bs, section(answerText(v)), section(summaryText(v)))
	if f := headlineFields(v); len(f) > 0 {
		bs = append(bs, slack.NewSectionBlock(nil, f, nil))
	}
	bs = append(bs, slack.NewDividerBlock())
	bs = append(bs, causeBlocks(v, o.MaxCauses)...)
	if s := predictionsText(v); s != "" {
		bs = append(bs, section(s))
	}
	if s := ruledOutText(v); s != "" {
		bs = append(bs, section(s))
	}
	if els := notesElements(v); len(els) > 0 {
		bs = append(bs, slack.NewContextBlock("", els...))
	}
	bs = append(bs, slack.NewContextBlock("", mrkdwn(footerText(v, o))))
	if len(bs) > maxBlocks {
		bs = append(bs[:maxBlocks-1], bs[len(bs)-1])
	}
	return Message{Text: fallbackText(v, o), Blocks: bs}
}

func plain(s string) *slack.TextBlockObject {
	return slack.NewTextBlockObject(slack.PlainTextType, s, true, false)
}

func mrkdwn(s string) *slack.TextBlockObject {
	return slack.NewTextBlockObject(slack.MarkdownType, s, false, false)
}

func section(text string) *slack.SectionBlock {
	return slack.NewSectionBlock(mrkdwn(truncate(text, maxSectionChars)), nil, nil)
}

// esc escapes the three characters Slack's mrkdwn reserves.
var escaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

func esc(s string) string { return escaper.Replace(s) }

// code renders s in a code span (backticks would end it).
func code(s string) string {
	return "`" + esc(strings.NewReplacer("`", "'", "\n", " ").Replace(s)) + "`"
}

// truncate cuts s to at most n runes, ending in "…" when cut.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

func severityEmoji(v *verdict.Verdict, resolved bool) string {
	switch {
	case resolved:
		return ":white_check_mark:"
	case v == nil:
		return ":grey_question:"
	case v.Status == verdict.StatusHealthy:
		return ":large_green_circle:"
	case v.Status == verdict.StatusInsufficientData:
		return ":grey_question:"
	case v.Severity == verdict.SeverityCritical:
		return ":red_circle:"
	}
	return ":large_orange_circle:"
}

func phaseShort(p verdict.Phase) string {
	switch p {
	case verdict.PhasePrefill:
		return "prefill slower (TTFT)"
	case verdict.PhaseDecode:
		return "decode slower (TPOT)"
	case verdict.PhaseBoth:
		return "prefill and decode slower"
	}
	return ""
}

// ScopeShort is a compact scope for headers: the scope labels as k=v sorted
// by name, or the selector when there are no labels.
func ScopeShort(s verdict.Scope) string {
	if len(s.Labels) == 0 {
		if s.Selector == "" {
			return "all targets"
		}
		return strings.ReplaceAll(s.Selector, `"`, "")
	}
	ks := make([]string, 0, len(s.Labels))
	for k := range s.Labels {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	parts := make([]string, len(ks))
	for i, k := range ks {
		parts[i] = k + "=" + s.Labels[k]
	}
	return strings.Join(parts, ", ")
}

// headerText is "<emoji> SEVERITY · phase · scope" (plain text).
func headerText(v *verdict.Verdict, resolved bool) string {
	parts := []string{severityEmoji(v, resolved)}
	if v == nil {
		return parts[0] + " whyslow"
	}
	var status string
	switch {
	case resolved:
		status = "RESOLVED"
		if v.Status == verdict.StatusAnomaly && v.Severity != verdict.SeverityNone {
			status += " · was " + string(v.Severity)
		}
	case v.Status == verdict.StatusAnomaly:
		status = strings.ToUpper(string(v.Severity))
		if v.Severity == "" || v.Severity == verdict.SeverityNone {
			status = "ANOMALY"
		}
	case v.Status == verdict.StatusHealthy:
		status = "HEALTHY"
	case v.Status == verdict.StatusInsufficientData:
		status = "INSUFFICIENT DATA"
	default:
		status = strings.ToUpper(string(v.Status))
	}
	s := parts[0] + " " + status
	if p := phaseShort(v.Phase); p != "" && v.Status == verdict.StatusAnomaly {
		s += " · " + p
	}
	return s + " · " + ScopeShort(v.Scope)
}

// answerText is the answer the message opens with (render.AnswerOf): the
// one-line verdict, why it could not decide, the top cause with its
// confidence, its chain and its first fix.
func answerText(v *verdict.Verdict) string {
	a := render.AnswerOf(v)
	var b strings.Builder
	b.WriteString("*" + esc(render.Summary(v)) + "*")
	if a.Reason != "" {
		b.WriteString("\n*Reason:* " + esc(a.Reason))
	}
	if a.Lead != "" {
		b.WriteString("\n*" + a.Lead + ":* " + esc(a.Title) + "  " + code(a.ID) + " · confidence " + a.Confidence)
		if a.Chain != "" {
			b.WriteString("\n_" + esc(a.Chain) + "_")
		}
		switch {
		case a.Fix != "":
			b.WriteString("\n:wrench: *Fix:* " + esc(a.Fix))
			if m := a.MoreText(); m != "" {
				b.WriteString(" _(" + m + ")_")
			}
		case a.NoFixWhy != "":
			b.WriteString("\n_" + esc(a.NoFixWhy) + "_")
		}
	}
	return b.String()
}

// summaryText is scope, engine and windows.
func summaryText(v *verdict.Verdict) string {
	var b strings.Builder
	sel := v.Scope.Selector
	if sel == "" {
		sel = "all targets"
	}
	b.WriteString("*Scope:* " + code(sel))
	if v.Engine != "" {
		b.WriteString("   *Engine:* " + esc(render.EngineLine(v)))
	}
	b.WriteString("\n*Incident:* " + windowText(v.Incident))
	b.WriteString("   *Baseline:* " + windowText(v.Baseline))
	if off := v.Incident.End.Sub(v.Baseline.End); !v.Baseline.End.IsZero() && v.Baseline.Label == "" && off > 0 {
		b.WriteString(" (" + durationText(off) + " earlier)")
	}
	return b.String()
}

func windowText(w verdict.Window) string {
	if w.Label != "" {
		return w.Label
	}
	if w.Start.IsZero() && w.End.IsZero() {
		return "n/a"
	}
	s, e := w.Start.UTC(), w.End.UTC()
	if s.Format("2006-01-02") == e.Format("2006-01-02") {
		return s.Format("2006-01-02 15:04") + "–" + e.Format("15:04") + " UTC"
	}
	return s.Format("2006-01-02 15:04") + " – " + e.Format("2006-01-02 15:04") + " UTC"
}

// durationText prints a duration as every rendering does
// (internal/format.Duration): 42m, 1h, 1h30m, 2d3h.
func durationText(d time.Duration) string { return format.Duration(d.Round(time.Second)) }

// isSplit reports whether a headline signal belongs to the TTFT/TPOT split.
func isSplit(name string) bool {
	s := strings.ToLower(name)
	return strings.Contains(s, "ttft") || strings.Contains(s, "tpot") || strings.HasPrefix(s, "itl") ||
		strings.Contains(s, "_itl") || strings.Contains(s, "first_token") ||
		strings.Contains(s, "inter_token") || strings.Contains(s, "per_output_token")
}

// headlineFields renders the headline comparisons as section fields, the
// TTFT/TPOT split first: "*TTFT p95*\n*2.41 s* vs 310 ms  ×7.77".
func headlineFields(v *verdict.Verdict) []*slack.TextBlockObject {
	var split, rest []verdict.Comparison
	for _, c := range v.Headline {
		if isSplit(c.Signal) {
			split = append(split, c)
		} else {
			rest = append(rest, c)
		}
	}
	var fs []*slack.TextBlockObject
	for _, c := range append(split, rest...) {
		if len(fs) == maxFields {
			break
		}
		title := c.Title
		if title == "" {
			title = c.Signal
		}
		s := "*" + esc(title) + "*\n" + comparisonText(c.Now, c.Baseline, c.Ratio, c.Unit)
		fs = append(fs, mrkdwn(truncate(s, maxFieldChars)))
	}
	return fs
}

// comparisonText is "*now* vs baseline  ×ratio" with n/a for missing values.
func comparisonText(now, base, ratio *float64, unit string) string {
	s := "*" + optValue(now, unit) + "*"
	if base != nil {
		s += " vs " + optValue(base, unit)
	}
	if ratio == nil && now != nil && base != nil && *base != 0 {
		r := *now / *base
		ratio = &r
	}
	if ratio != nil && !math.IsNaN(*ratio) && !math.IsInf(*ratio, 0) {
		s += "  " + render.FormatRatio(*ratio)
	}
	return s
}

func optValue(v *float64, unit string) string {
	if v == nil {
		return "n/a"
	}
	return esc(render.FormatValue(*v, unit))
}

// unitOf is the unit of a signal: the headline's when the verdict has it,
// else guessed from the name.
func unitOf(v *verdict.Verdict, signal string) string {
	for _, c := range v.Headline {
		if c.Signal == signal && c.Unit != "" {
			return c.Unit
		}
	}
	return render.GuessUnit(signal)
}

// causeBlocks renders the ranked causes, one section each.
func causeBlocks(v *verdict.Verdict, maxCauses int) []slack.Block {
	if len(v.Causes) == 0 {
		switch v.Status {
		case verdict.StatusAnomaly:
			return []slack.Block{section(":mag: No cause could be ranked; the data gaps say which series would have told.")}
		case verdict.StatusHealthy:
			return []slack.Block{section(":white_check_mark: No anomaly against the baseline.")}
		case verdict.StatusInsufficientData:
			return []slack.Block{section(":grey_question: Not enough data to decide; see the data gaps below.")}
		}
		return nil
	}
	var bs []slack.Block
	if lines := render.AttributionLines(v); len(lines) > 0 {
		var b strings.Builder
		b.WriteString("*Where the time went*")
		for _, l := range lines {
			b.WriteString("\n• " + esc(l))
		}
		bs = append(bs, section(b.String()))
	}
	if v.Causes[0].Confidence < render.PossibleBelow {
		bs = append(bs, section("*"+esc(render.CausesHeading(v))+"*"))
	}
	for i, c := range v.Causes {
		if i == maxCauses {
			bs = append(bs, slack.NewContextBlock("", mrkdwn(fmt.Sprintf("…and %d more causes in the verdict.", len(v.Causes)-maxCauses))))
			break
		}
		rank := c.Rank
		if rank == 0 {
			rank = i + 1
		}
		title := c.Title
		if title == "" {
			title = c.ID
		}
		var b strings.Builder
		fmt.Fprintf(&b, "*%d. %s*  %s · confidence %.0f%% · score %s", rank, esc(title), code(c.ID), 100*c.Confidence,
			render.FormatValue(c.Score, ""))
		if ch := render.ChainText(c); ch != "" {
			b.WriteString("\n_" + esc(ch) + "_")
		}
		for _, e := range c.Evidence {
			b.WriteString("\n• " + evidenceText(v, e))
		}
		if !render.ShowFixes(c) && len(c.Remediation) > 0 {
			b.WriteString("\n_" + esc(render.FixesHiddenText(c)) + "_")
			bs = append(bs, section(b.String()))
			continue
		}
		for j, r := range c.Remediation {
			if j == 0 {
				b.WriteString("\n:wrench: *Fix:* " + esc(r))
			} else {
				b.WriteString("\n*Also:* " + esc(r))
			}
		}
		bs = append(bs, section(b.String()))
	}
	return bs
}

// maxPredictedFixes caps the fixes the message shows with their
// predictions (the best first); the rest are in the verdict.
const maxPredictedFixes = 3

// predictionsText is the compact fixes section of `why --predict`: the
// best predicted fixes, one line each, a poor fit said in the heading;
// empty without predictions.
func predictionsText(v *verdict.Verdict) string {
	pr := render.PredictionsOf(v)
	if pr == nil {
		return ""
	}
	var b strings.Builder
	b.WriteString(":crystal_ball: *" + render.PredictedHeading + "*")
	if v.Predicted.PoorFit {
		b.WriteString(" _(poor fit: relative changes scaled to the observed values)_")
	}
	if len(pr.Fixes) == 0 {
		// nothing predicted: why (the missing series, each declined fix)
		for _, n := range append(pr.Notes, pr.Declined...) {
			b.WriteString("\n_" + esc(n) + "_")
		}
		return b.String()
	}
	if pr.NoneHelps != "" {
		// the order below is the replay's noise: say so before it
		b.WriteString("\n_" + esc(pr.NoneHelps) + "_")
	}
	for i, l := range pr.Fixes {
		if i == maxPredictedFixes {
			fmt.Fprintf(&b, "\n_…and %d more fixes in the verdict._", len(pr.Fixes)-maxPredictedFixes)
			break
		}
		b.WriteString("\n• " + esc(strings.TrimSuffix(l, "; poor fit")))
	}
	return b.String()
}

// evidenceText is the evidence sentence with its numbers in brackets.
func evidenceText(v *verdict.Verdict, e verdict.Evidence) string {
	s := e.Text
	if s == "" {
		s = e.Rule
	}
	s = esc(s)
	if e.Signal != "" && e.Now != nil {
		u := e.Unit
		if u == "" {
			u = unitOf(v, e.Signal)
		}
		s += " _(" + esc(e.Signal) + " " + optValue(e.Now, u)
		if e.Baseline != nil {
			s += ", baseline " + optValue(e.Baseline, u)
			if *e.Baseline != 0 {
				s += ", " + render.FormatRatio(*e.Now / *e.Baseline)
			}
		}
		s += ")_"
	}
	return s
}

func ruledOutText(v *verdict.Verdict) string {
	if len(v.RuledOut) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("*Ruled out*")
	for i, r := range v.RuledOut {
		if i == maxRuledOut {
			fmt.Fprintf(&b, "\n…and %d more", len(v.RuledOut)-maxRuledOut)
			break
		}
		title := r.Title
		if title == "" {
			title = r.ID
		}
		b.WriteString("\n• " + esc(title))
		if r.Reason != "" {
			b.WriteString(" — " + esc(r.Reason))
		}
	}
	return b.String()
}

// notesElements are the data gaps and warnings, as context elements.
func notesElements(v *verdict.Verdict) []slack.MixedElement {
	var els []slack.MixedElement
	add := func(s string) {
		if len(els) < maxContextItems-1 {
			els = append(els, mrkdwn(truncate(s, maxTextChars)))
		}
	}
	if v.Cohort != nil {
		add(":busts_in_silhouette: " + esc(v.Cohort.Message))
	}
	for _, g := range v.DataGaps {
		s := ":warning: Data gap: " + code(g.Signal)
		if g.Window != "" {
			s += " (" + esc(g.Window) + ")"
		}
		add(s + ": " + esc(g.Reason))
	}
	for _, w := range v.Warnings {
		add(":warning: " + esc(w))
	}
	return els
}

func footerText(v *verdict.Verdict, o RenderOptions) string {
	var parts []string
	if o.VerdictURL != "" {
		parts = append(parts, "<"+esc(o.VerdictURL)+"|Verdict page>")
	}
	if o.IncidentID != "" {
		parts = append(parts, "incident "+code(o.IncidentID))
	}
	if o.Kind == KindParent && o.Updates > 0 {
		parts = append(parts, fmt.Sprintf("%d update(s) in thread", o.Updates))
	}
	if !v.At.IsZero() {
		parts = append(parts, "triaged "+v.At.UTC().Format("2006-01-02 15:04:05 UTC"))
	}
	parts = append(parts, "whyslow")
	return strings.Join(parts, " · ")
}

// fallbackText is the plain-text notification: header words and the
// verdict's one-line summary.
func fallbackText(v *verdict.Verdict, o RenderOptions) string {
	var prefix string
	switch {
	case o.Resolved:
		prefix = "[RESOLVED] "
	case o.Transition == "update":
		prefix = "[UPDATE] "
	case o.Transition == "repeat":
		prefix = "[STILL OPEN] "
	}
	if v == nil {
		return prefix + "whyslow: no verdict"
	}
	s := prefix + ScopeShort(v.Scope) + ": " + render.Summary(v)
	if len(v.Causes) > 0 {
		lead := ". Top cause: "
		if v.Causes[0].Confidence < render.PossibleBelow {
			lead = ". Possible cause: "
		}
		s += lead + titleOr(v.Causes[0].Title, v.Causes[0].ID)
	}
	return esc(truncate(s, maxTextChars))
}

func titleOr(title, id string) string {
	if title != "" {
		return title
	}
	return id
}
