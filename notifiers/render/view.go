package render

import (
	"fmt"
	"math"
	"strings"

	"github.com/whyslow/whyslow/verdict"
)

// View is a verdict laid out for a page: every value formatted as Text and
// Markdown format it, in the order they present it, so that an HTML
// template only places strings. Shares are kept as numbers too, for bars.
type View struct {
	// Answer is the block the page opens with (AnswerOf).
	Answer Answer
	// Status is the status sentence ("ANOMALY (critical): prefill is
	// slower (TTFT)"); StatusClass is the verdict's status, Severity and
	// Phase its fields.
	Status      string
	StatusClass string
	Severity    string
	Phase       string
	// Split is the TTFT/TPOT headline in one line; Reason the reason of an
	// insufficient-data verdict.
	Split  string
	Reason string

	Scope    string
	Labels   string
	Engine   string
	GPU      string
	At       string
	Incident string
	Baseline string

	Headline    []HeadlineRow
	BucketNotes []string
	Attribution []SplitView
	Causes      []CauseView
	// CausesHeading heads the causes (render.CausesHeading).
	CausesHeading string
	// NoCause says an anomaly could rank no cause.
	NoCause    bool
	Considered []ConsideredView
	RuledOut   []RuledOutView
	Targets    []TargetView
	Requests   []RequestView
	// MoreRequests says how many slow requests are not listed.
	MoreRequests string
	Gaps         []string
	// Fleet says which other scopes slowed with this one; Notes are the
	// warnings.
	Fleet   string
	Notes   []string
	Steps   []StepView
	Signals []SignalRow
}

// HeadlineRow is one headline comparison.
type HeadlineRow struct {
	Signal, Now, Baseline, Change string
}

// SplitView is one latency's attribution.
type SplitView struct {
	// Name is "TTFT" or "Inter-token latency"; Line is the attribution
	// line Text prints.
	Name, Line           string
	Delta, Before, After string
	Parts                []PartView
	// Unexplained is the remainder no part covers, and its share.
	Unexplained          string
	UnexplainedShare     float64
	UnexplainedShareText string
	// Missing names the parts that could not be measured, and why.
	Missing []string
	// Over says the parts add up to more than the change, and by how
	// much; the parts' shares are then of their sum and there is no
	// unexplained row.
	Over string
}

// PartView is one part of a latency's change.
type PartView struct {
	Name, Seconds, Driver string
	// Share is the part's share of the change (may be negative or above 1).
	Share     float64
	ShareText string
}

// CauseView is one ranked cause.
type CauseView struct {
	Rank       int
	ID, Title  string
	Confidence string
	// ConfidenceValue is the confidence in [0, 1].
	ConfidenceValue float64
	Score           string
	Chain           []string
	Evidence        []EvidenceView
	Against         []string
	Fixes           []string
	// FixesHidden says why Fixes is empty though the cause has fixes
	// (ShowFixes).
	FixesHidden string
	Omitted     []string
}

// EvidenceView is one piece of evidence: its text and its numbers.
type EvidenceView struct {
	Text, Numbers string
}

// ConsideredView is a cause below the evidence bar.
type ConsideredView struct {
	ID, Title, Score string
}

// RuledOutView is a cause a rule excluded.
type RuledOutView struct {
	ID, Title, Reason string
}

// TargetView is one of the worst targets.
type TargetView struct {
	Labels, Signal, Value string
}

// RequestView is one slow request: its head line, its parts in time order
// (for a breakdown bar) and the pod's state.
type RequestView struct {
	Head, PartsText, Context string
	E2E                      float64
	Parts                    []RequestPartView
}

// RequestPartView is one part of a request, with its share of the request's
// end-to-end time.
type RequestPartView struct {
	Name, Text string
	Seconds    float64
	Share      float64
}

// StepView is one step of the walk with its rule outcomes.
type StepView struct {
	Title, Outcome string
	Rules          []string
}

// SignalRow is one explained signal.
type SignalRow struct {
	Name, Now, Baseline, Change, Expr string
}

// ViewOf lays out v for a page.
func ViewOf(v *verdict.Verdict) View {
	u := unitsOf(v)
	out := View{
		Answer:        AnswerOf(v),
		Status:        statusSentence(v),
		StatusClass:   string(v.Status),
		Severity:      string(v.Severity),
		Phase:         string(v.Phase),
		Split:         splitSummary(v, " · "),
		Reason:        insufficientText(v),
		Scope:         ScopeText(v.Scope),
		Engine:        EngineLine(v),
		GPU:           gpuFmt(v.GPU),
		Incident:      windowFmt(v.Incident),
		Baseline:      windowFmt(v.Baseline),
		BucketNotes:   bucketNotes(v.Headline),
		NoCause:       len(v.Causes) == 0 && v.Status == verdict.StatusAnomaly,
		CausesHeading: CausesHeading(v),
	}
	if len(v.Scope.Labels) > 0 {
		out.Labels = labelsFmt(v.Scope.Labels)
	}
	if !v.At.IsZero() {
		out.At = timeFmt(v.At)
	}
	for _, c := range v.Headline {
		r := comparisonRow(c)
		out.Headline = append(out.Headline, HeadlineRow{Signal: r[0], Now: r[1], Baseline: r[2], Change: r[3]})
	}
	out.Attribution = attributionView(v)
	for i, c := range v.Causes {
		cv := CauseView{Rank: c.Rank, ID: c.ID, Title: titleOr(c.Title, c.ID), Confidence: ConfidenceText(c),
			ConfidenceValue: c.Confidence, Score: num(c.Score), Fixes: c.Remediation, Omitted: c.Omitted}
		if cv.Rank == 0 {
			cv.Rank = i + 1
		}
		if !ShowFixes(c) && len(c.Remediation) > 0 {
			cv.Fixes, cv.Omitted, cv.FixesHidden = nil, nil, FixesHiddenText(c)
		}
		for _, l := range c.Chain {
			if l.Text != "" {
				cv.Chain = append(cv.Chain, l.Text)
			}
		}
		for _, e := range c.Evidence {
			cv.Evidence = append(cv.Evidence, EvidenceView{Text: titleOr(e.Text, e.Rule), Numbers: evidenceNumbers(e, u)})
		}
		for _, e := range c.Against {
			cv.Against = append(cv.Against, e.Text)
		}
		out.Causes = append(out.Causes, cv)
	}
	for _, c := range v.Considered {
		out.Considered = append(out.Considered, ConsideredView{ID: c.ID, Title: titleOr(c.Title, c.ID), Score: num(c.Score)})
	}
	for _, r := range v.RuledOut {
		out.RuledOut = append(out.RuledOut, RuledOutView{ID: r.ID, Title: titleOr(r.Title, r.ID), Reason: r.Reason})
	}
	for _, tg := range v.Targets {
		out.Targets = append(out.Targets, TargetView{Labels: labelsFmt(tg.Labels), Signal: tg.Signal,
			Value: FormatValue(tg.Value, u.of(tg.Unit, tg.Signal))})
	}
	for _, r := range shownRequests(v) {
		out.Requests = append(out.Requests, requestView(r))
	}
	out.MoreRequests = moreRequests(v)
	for _, g := range v.DataGaps {
		out.Gaps = append(out.Gaps, gapLine(g))
	}
	if v.Cohort != nil {
		out.Fleet = v.Cohort.Message
	}
	out.Notes = v.Warnings
	for _, s := range v.Steps {
		sv := StepView{Title: titleOr(s.Title, s.Name), Outcome: s.Outcome}
		for _, r := range s.Rules {
			sv.Rules = append(sv.Rules, ruleLine(r))
		}
		out.Steps = append(out.Steps, sv)
	}
	for _, s := range v.Signals {
		un := u.of(s.Unit, s.Name)
		out.Signals = append(out.Signals, SignalRow{Name: s.Name, Now: optValue(s.Now, un), Baseline: optValue(s.Baseline, un),
			Change: strings.TrimSpace(ratioSuffix(s.Now, s.Baseline)), Expr: s.Expr})
	}
	return out
}

// attributionView is the verdict's attribution, one SplitView per latency
// that rose, with every part (the lines leave out those under 3%).
func attributionView(v *verdict.Verdict) []SplitView {
	var out []SplitView
	for _, s := range attributionSplits(v) {
		sp := s.split
		sv := SplitView{Name: s.name, Line: splitLine(s.name, sp), Delta: signedSeconds(sp.Delta),
			Before: FormatSeconds(sp.Baseline), After: FormatSeconds(sp.Now), Missing: sp.Missing,
			Unexplained: signedSeconds(sp.Unexplained), UnexplainedShare: sp.UnexplainedShare,
			UnexplainedShareText: shareText(sp.UnexplainedShare)}
		shares, over := partShares(sp)
		if over {
			sv.Over, sv.Unexplained, sv.UnexplainedShare, sv.UnexplainedShareText = overText(sp), "", 0, ""
		}
		for i, p := range sp.Parts {
			name := componentNames[p.Component]
			if name == "" {
				name = p.Component
			}
			sv.Parts = append(sv.Parts, PartView{Name: name, Seconds: signedSeconds(p.Seconds), Driver: p.Driver,
				Share: shares[i], ShareText: shareText(shares[i])})
		}
		out = append(out, sv)
	}
	return out
}

func shareText(f float64) string {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return ""
	}
	return fmt.Sprintf("%.0f%%", 100*f)
}

// requestView lays out one slow request.
func requestView(r verdict.Request) RequestView {
	rv := RequestView{Head: requestHead(r), PartsText: requestParts(r), Context: requestContext(r), E2E: r.E2E}
	for _, p := range RequestParts(r) {
		share := 0.0
		if r.E2E > 0 {
			share = p.Seconds / r.E2E
		}
		rv.Parts = append(rv.Parts, RequestPartView{Name: p.Name, Text: p.Name + " " + FormatSeconds(p.Seconds), Seconds: p.Seconds, Share: share})
	}
	return rv
}
