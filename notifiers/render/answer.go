package render

import (
	"fmt"

	"github.com/whyslow/whyslow/verdict"
)

// Answer is the block every rendering opens with, so that on-call reads the
// answer on the first screen: the status sentence (and, when the verdict
// could not decide, why), the top cause with its confidence, its chain in
// one line and its first fix. The evidence, the table and the charts come
// after it.
type Answer struct {
	// Status is the status sentence; Reason the insufficient-data reason
	// ("" otherwise).
	Status, Reason string
	// Lead is "Likely cause" or "Possible cause" (below PossibleBelow);
	// empty without a cause.
	Lead string
	// Title, ID and Confidence are the top cause's.
	Title, ID, Confidence string
	// Chain is the top cause's chain in one line.
	Chain string
	// Fix is the top cause's first fix; MoreFixes counts the others.
	// Fix is empty when the cause's confidence is under FixesFrom.
	Fix       string
	MoreFixes int
	// NoFixWhy says why a cause without a shown fix has none.
	NoFixWhy string
	// NoCause says an anomaly could rank no cause.
	NoCause bool
}

// FixesFrom is the confidence from which a cause's fixes are shown: below
// it the calibration gives the cause about no chance, and a list of
// changes to make would read as advice to act on it.
const FixesFrom = 0.05

// ShowFixes reports whether c is confident enough for its fixes to be
// shown (FixesFrom).
func ShowFixes(c verdict.Cause) bool { return c.Confidence >= FixesFrom }

// FixesHiddenText says why a cause's fixes are left out: "N fixes not
// shown: confidence under 5%".
func FixesHiddenText(c verdict.Cause) string {
	fixes := "fixes"
	if len(c.Remediation) == 1 {
		fixes = "fix"
	}
	return fmt.Sprintf("%d %s not shown: confidence under %.0f%% (they are in the JSON)", len(c.Remediation), fixes, 100*FixesFrom)
}

// AnswerOf is the answer block of v.
func AnswerOf(v *verdict.Verdict) Answer {
	a := Answer{Status: statusSentence(v), Reason: insufficientText(v)}
	if len(v.Causes) == 0 {
		a.NoCause = v.Status == verdict.StatusAnomaly
		return a
	}
	c := v.Causes[0]
	a.Lead = "Likely cause"
	if c.Confidence < PossibleBelow {
		a.Lead = "Possible cause"
	}
	a.Title, a.ID, a.Confidence = titleOr(c.Title, c.ID), c.ID, ConfidenceText(c)
	a.Chain = ChainText(c)
	switch {
	case len(c.Remediation) == 0:
	case ShowFixes(c):
		a.Fix, a.MoreFixes = c.Remediation[0], len(c.Remediation)-1
	default:
		a.NoFixWhy = FixesHiddenText(c)
	}
	return a
}

// CauseLine is the answer's cause in one line: "Likely cause: Title
// [id], confidence 99%"; empty without a cause.
func (a Answer) CauseLine() string {
	if a.Lead == "" {
		return ""
	}
	return a.Lead + ": " + a.Title + " [" + a.ID + "], confidence " + a.Confidence
}

// MoreText is "3 more fixes and the evidence below" (or "" without a fix).
func (a Answer) MoreText() string {
	switch {
	case a.Fix == "":
		return ""
	case a.MoreFixes == 1:
		return "1 more fix and the evidence below"
	case a.MoreFixes > 1:
		return fmt.Sprintf("%d more fixes and the evidence below", a.MoreFixes)
	}
	return "the evidence below"
}
