package render

import (
	"bytes"
	"strings"
	"testing"

	"github.com/whyslow/whyslow/notifiers/notifytest"
	"github.com/whyslow/whyslow/verdict"
)

func TestPredictionsRendered(t *testing.T) {
	v := notifytest.Predicted()
	want := []string{
		"replicas×2: TTFT p95 2m30s → 11 s (−93%, seeds 10 s–12 s), inter-token 292 ms → 205 ms (−30%); poor fit",
		"max_num_batched_tokens=4096: TTFT p95 2m30s → 45 s (−70%), inter-token 292 ms → 400 ms (+37%); trades inter-token latency for TTFT; poor fit",
		"clocks restored: not predicted: no GPU clock series",
		"POOR FIT",
	}
	var text bytes.Buffer
	if err := Text(&text, v, Options{Width: 1000}); err != nil {
		t.Fatal(err)
	}
	var md bytes.Buffer
	if err := Markdown(&md, v, Options{}); err != nil {
		t.Fatal(err)
	}
	for _, w := range want {
		if !strings.Contains(text.String(), w) {
			t.Errorf("text lacks %q:\n%s", w, text.String())
		}
		if !strings.Contains(md.String(), mdEscape(w)) {
			t.Errorf("markdown lacks %q:\n%s", mdEscape(w), md.String())
		}
	}
	// the fixes in the verdict's order
	if strings.Index(text.String(), "replicas×2:") > strings.Index(text.String(), "max_num_batched_tokens=4096:") {
		t.Errorf("order changed:\n%s", text.String())
	}
}

func TestPredictionsMissing(t *testing.T) {
	v := notifytest.Anomaly()
	v.Predicted = &verdict.Predicted{Missing: "no prediction: missing series arrival_rate"}
	var text bytes.Buffer
	if err := Text(&text, v, Options{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), PredictedHeading+"\n  no prediction: missing series arrival_rate\n") {
		t.Errorf("missing not said:\n%s", text.String())
	}
}

// Without predictions the renderings are as before: nothing about them.
func TestPredictionsAbsent(t *testing.T) {
	for _, f := range []Format{FormatText, FormatMarkdown} {
		var b bytes.Buffer
		if err := Render(&b, notifytest.Anomaly(), f, Options{Explain: true}); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(b.String(), PredictedHeading) {
			t.Errorf("%v: predictions shown without any:\n%s", f, b.String())
		}
	}
}

// A verdict whose fixes are all within the replay's noise says so in text
// and Markdown, and in Slack before the fixes.
func TestPredictionsNoneHelps(t *testing.T) {
	v := notifytest.Predicted()
	v.Predicted.NoneHelps = "no catalogued fix is predicted to help: none lowers the model's TTFT p95 (2.5 s) or inter-token p95 (292 ms) by more than 10% beyond the replay seeds' range"
	var text, md bytes.Buffer
	if err := Text(&text, v, Options{Width: 1000}); err != nil {
		t.Fatal(err)
	}
	if err := Markdown(&md, v, Options{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), v.Predicted.NoneHelps) {
		t.Errorf("text lacks the none-helps note:\n%s", text.String())
	}
	if !strings.Contains(md.String(), mdEscape(v.Predicted.NoneHelps)) {
		t.Errorf("markdown lacks the none-helps note:\n%s", md.String())
	}
	if pr := PredictionsOf(v); pr.NoneHelps != v.Predicted.NoneHelps {
		t.Errorf("PredictionsOf.NoneHelps = %q", pr.NoneHelps)
	}
}
