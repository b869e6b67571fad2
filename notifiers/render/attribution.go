package render

import (
	"fmt"
	"math"
	"strings"

	"github.com/whyslow/whyslow/verdict"
)

// componentNames are the attribution components in words.
var componentNames = map[string]string{
	verdict.CompQueue: "queue", verdict.CompPrefill: "prefill", verdict.CompOutside: "outside the engine",
	verdict.CompBatch: "decode batch", verdict.CompContext: "context per request", verdict.CompRecompute: "recompute",
	verdict.CompClock: "clocks",
}

// AttributionLines renders the verdict's attribution, one line per latency
// that rose: "TTFT +2.80s (×12.0): queue +2.61s (93%), prefill +190ms (7%)",
// with the unexplained remainder and the parts that could not be measured.
// Parts under 3% of the change are left out of the line (they are in the
// JSON).
func AttributionLines(v *verdict.Verdict) []string {
	var out []string
	for _, s := range attributionSplits(v) {
		out = append(out, splitLine(s.name, s.split))
	}
	return out
}

// namedSplit is one latency of the attribution with its display name.
type namedSplit struct {
	name  string
	split *verdict.LatencySplit
}

// attributionSplits are the verdict's attributed latencies that rose, in
// display order.
func attributionSplits(v *verdict.Verdict) []namedSplit {
	a := v.Attribution
	if a == nil {
		return nil
	}
	var out []namedSplit
	for _, s := range []namedSplit{{"TTFT", a.TTFT}, {"Inter-token latency", a.ITL}} {
		if s.split != nil {
			out = append(out, s)
		}
	}
	return out
}

func signedSeconds(f float64) string {
	if f < 0 {
		return "−" + FormatSeconds(-f)
	}
	return "+" + FormatSeconds(f)
}

// partShares are the shares the renderings show for a split's parts, and
// whether the parts over-explain the change. The verdict's shares are of
// the change; when the parts add up to more than it (the unexplained
// remainder is negative) they would sum past 100% beside an "unexplained
// −25%": then each part's share is of the parts' sum, so they add up to
// 100%, and the excess is said in seconds instead.
func partShares(s *verdict.LatencySplit) (shares []float64, over bool) {
	sum := 0.0
	for _, p := range s.Parts {
		sum += p.Seconds
	}
	over = s.Unexplained < 0 && sum > 0 && math.Abs(s.UnexplainedShare) >= 0.03
	for _, p := range s.Parts {
		if over {
			shares = append(shares, p.Seconds/sum)
		} else {
			shares = append(shares, p.Share)
		}
	}
	return shares, over
}

// overText says by how much the parts over-explain a change: "the parts add
// up to 24.4 ms, 4.93 ms more than the rise (shares are of their sum)".
func overText(s *verdict.LatencySplit) string {
	return fmt.Sprintf("the parts add up to %s, %s more than the rise (shares are of their sum)",
		FormatSeconds(s.Delta-s.Unexplained), FormatSeconds(-s.Unexplained))
}

func splitLine(name string, s *verdict.LatencySplit) string {
	head := fmt.Sprintf("%s %s (%s → %s)", name, signedSeconds(s.Delta), FormatSeconds(s.Baseline), FormatSeconds(s.Now))
	shares, over := partShares(s)
	var parts []string
	for i, p := range s.Parts {
		if math.Abs(shares[i]) < 0.03 {
			continue
		}
		label := componentNames[p.Component]
		if label == "" {
			label = p.Component
		}
		part := fmt.Sprintf("%s %s (%.0f%%)", label, signedSeconds(p.Seconds), 100*shares[i])
		if p.Driver != "" && p.Component != verdict.CompQueue && p.Component != verdict.CompPrefill && p.Component != verdict.CompOutside {
			part += " [" + p.Driver + "]"
		}
		parts = append(parts, part)
	}
	switch {
	case math.Abs(s.UnexplainedShare) >= 0.03 && s.Unexplained > 0:
		parts = append(parts, fmt.Sprintf("unexplained %s (%.0f%%)", signedSeconds(s.Unexplained), 100*s.UnexplainedShare))
	case over:
		parts = append(parts, overText(s))
	}
	line := head + ": " + strings.Join(parts, ", ")
	if len(parts) == 0 {
		line = head
	}
	if len(s.Missing) > 0 {
		line += "; not measured: " + strings.Join(s.Missing, ", ")
	}
	return line
}

// ChainText renders a cause's chain: "arrivals ×1.3 → KV cache peak 99% →
// queue time 4m45s → TTFT ×3000"; empty without links.
func ChainText(c verdict.Cause) string {
	texts := make([]string, 0, len(c.Chain))
	for _, l := range c.Chain {
		if l.Text != "" {
			texts = append(texts, l.Text)
		}
	}
	return strings.Join(texts, " → ")
}

// PossibleBelow is the top cause's confidence under which a verdict names
// its causes as possible rather than likely: below it, the calibration says
// the top cause is wrong more often than two times in five.
const PossibleBelow = 0.6

// CausesHeading is the heading of the ranked causes in every rendering:
// "possible causes" when even the top one is below PossibleBelow.
func CausesHeading(v *verdict.Verdict) string {
	if len(v.Causes) > 0 && v.Causes[0].Confidence < PossibleBelow {
		return fmt.Sprintf("Possible causes (none reaches %.0f%% confidence), most likely first", 100*PossibleBelow)
	}
	return "Causes, most likely first"
}

// ConfidenceText renders a cause's confidence as a percentage.
func ConfidenceText(c verdict.Cause) string {
	return fmt.Sprintf("%.0f%%", 100*c.Confidence)
}
