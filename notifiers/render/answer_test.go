package render

import (
	"bytes"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/whyslow/whyslow/notifiers/notifytest"
	"github.com/whyslow/whyslow/verdict"
)

// TestAnswerFirst: text and Markdown open with the status, then the top
// cause with its confidence, its chain and its first fix, before the
// headline table; an insufficient verdict's reason follows its status
// line at once.
func TestAnswerFirst(t *testing.T) {
	v := notifytest.Anomaly()
	top := v.Causes[0]
	for _, f := range []Format{FormatText, FormatMarkdown} {
		var b bytes.Buffer
		if err := Render(&b, v, f, Options{}); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		lines := strings.Split(out, "\n")
		if !strings.Contains(lines[0], "ANOMALY") {
			t.Errorf("%s: first line %q, want the status", f, lines[0])
		}
		cause := strings.Index(out, top.Title)
		fix := strings.Index(out, top.Remediation[0])
		table := strings.Index(out, "signal")
		if f == FormatMarkdown {
			fix = strings.Index(out, mdEscape(top.Remediation[0]))
			table = strings.Index(out, "| Signal")
		}
		if cause < 0 || fix < 0 || table < 0 || !(cause < fix && fix < table) {
			t.Errorf("%s: cause at %d, fix at %d, table at %d: want the answer before the table\n%s", f, cause, fix, table, out)
		}
		if !strings.Contains(out[:table], "confidence "+ConfidenceText(top)) || !strings.Contains(out[:table], strings.Fields(ChainText(top))[0]) {
			t.Errorf("%s: the answer lacks the confidence or the chain\n%s", f, out[:table])
		}
	}

	in := insufficientReasonVerdict()
	var b bytes.Buffer
	if err := Text(&b, in, Options{}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(b.String(), "\n")
	if !strings.HasPrefix(lines[0], "INSUFFICIENT DATA") || !strings.HasPrefix(lines[1], "reason:") {
		t.Errorf("insufficient: want status then reason, got\n%s", b.String())
	}
}

// TestLowConfidenceFixesHidden: a cause under FixesFrom confidence (0%
// in issue 25's verdict) is listed without its fixes in every rendering:
// a line says how many were left out.
func TestLowConfidenceFixesHidden(t *testing.T) {
	v := notifytest.Anomaly()
	low := &v.Causes[len(v.Causes)-1]
	low.Confidence = 0.001
	low.Remediation = []string{"Do the first risky thing.", "Do the second risky thing."}
	low.Omitted = []string{"Do a third thing."}
	for _, f := range []Format{FormatText, FormatMarkdown} {
		var b bytes.Buffer
		if err := Render(&b, v, f, Options{}); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		if strings.Contains(out, "risky thing") || strings.Contains(out, "third thing") {
			t.Errorf("%s: a fix of a 0%% cause is shown\n%s", f, out)
		}
		if !strings.Contains(out, "2 fixes not shown: confidence under 5%") {
			t.Errorf("%s: no line says the fixes were left out\n%s", f, out)
		}
	}
	view := ViewOf(v)
	cv := view.Causes[len(view.Causes)-1]
	if len(cv.Fixes) > 0 || len(cv.Omitted) > 0 || cv.FixesHidden == "" {
		t.Errorf("page view of the 0%% cause: fixes %q, omitted %q, hidden %q", cv.Fixes, cv.Omitted, cv.FixesHidden)
	}
	// The top cause keeps its fixes.
	if len(view.Causes[0].Fixes) == 0 || view.Answer.Fix == "" {
		t.Error("the top cause lost its fixes")
	}
}

// TestSharesOverExplained: when the parts of a latency's change add up to
// more than the change (issue 25: shares summing to 125% beside
// "unexplained −25%"), the shares shown are of the parts' sum, add up to
// 100%, and no negative unexplained share is shown anywhere.
func TestSharesOverExplained(t *testing.T) {
	v := notifytest.Anomaly()
	v.Attribution = &verdict.Attribution{ITL: &verdict.LatencySplit{
		Baseline: 0.0102, Now: 0.0297, Delta: 0.0195, Unexplained: -0.00493, UnexplainedShare: -0.253,
		Parts: []verdict.Part{
			{Component: verdict.CompBatch, Seconds: 0.0128, Share: 0.657},
			{Component: verdict.CompContext, Seconds: 0.00199, Share: 0.102},
			{Component: verdict.CompPrefill, Seconds: 0.00138, Share: 0.071},
			{Component: verdict.CompRecompute, Seconds: 0.00823, Share: 0.422},
		}}}
	line := AttributionLines(v)[0]
	sum := 0
	for _, m := range shareRe(line) {
		sum += m
	}
	if sum < 99 || sum > 101 || strings.Contains(line, "unexplained") {
		t.Errorf("shares sum to %d%%: %s", sum, line)
	}
	if !strings.Contains(line, "4.93 ms more than the rise") {
		t.Errorf("the excess is not said: %s", line)
	}
	sv := ViewOf(v).Attribution[0]
	total := 0.0
	for _, p := range sv.Parts {
		total += p.Share
	}
	if math.Abs(total-1) > 1e-9 || sv.UnexplainedShareText != "" || sv.Over == "" {
		t.Errorf("page: shares sum to %g, unexplained %q, over %q", total, sv.UnexplainedShareText, sv.Over)
	}
}

// shareRe returns the "(NN%)" shares of a line.
func shareRe(s string) []int {
	var out []int
	for _, f := range strings.Split(s, "(")[1:] {
		n, ok := strings.CutSuffix(strings.SplitN(f, ")", 2)[0], "%")
		if !ok {
			continue
		}
		if i, err := strconv.Atoi(n); err == nil {
			out = append(out, i)
		}
	}
	return out
}
