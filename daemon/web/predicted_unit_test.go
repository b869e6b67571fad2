package web

import (
	"strings"
	"testing"

	"github.com/whyslow/whyslow/notifiers/notifytest"
	"github.com/whyslow/whyslow/verdict"
)

// TestPredictionsSection: a verdict with predictions (why --html
// --predict) gets the section: the bars on one scale per metric (the
// largest value across the rows fills the bar), poor fit on each row, and
// the none-helps sentence; without predictions there is no section.
func TestPredictionsSection(t *testing.T) {
	v := notifytest.Anomaly()
	if html := renderPage(t, VerdictPage{Site: Site{Now: t0}, Verdict: Verdict(v, nil, "")}); strings.Contains(html, "predicted-h") {
		t.Error("a verdict without predictions has a predictions section")
	}
	none := "no catalogued fix is predicted to help: none lowers the model's TTFT p95 (2 s) or inter-token p95 (50 ms) by more than 10% beyond the replay seeds' range"
	v.Predicted = &verdict.Predicted{PoorFit: true, NoneHelps: none,
		Incident: &verdict.PredictedValues{TTFTP95: 2, ITLP95: 0.05},
		Fixes: []verdict.FixPrediction{
			{Fix: "kv×1.5", TTFTP95: verdict.PredictedRange{Median: 1.95, Low: 1.9, High: 2}, ITLP95: verdict.PredictedRange{Median: 0.1, Low: 0.1, High: 0.1}},
		}}
	p := Predictions(v.Predicted)
	if len(p.Fixes) != 1 || len(p.Fixes[0].Bars) != 2 {
		t.Fatalf("view %+v", p)
	}
	ttft, itl := p.Fixes[0].Bars[0], p.Fixes[0].Bars[1]
	// TTFT: the model of the incident (2 s) is the largest value; the
	// inter-token p95 doubles, so the fix's bar is the full one.
	if ttft.BeforeW != "200.0" || ttft.AfterW != "195.0" || ttft.Change != "same" || itl.AfterW != "200.0" || itl.BeforeW != "100.0" || itl.Change != "worse" {
		t.Errorf("bars %+v %+v", ttft, itl)
	}
	html := renderPage(t, VerdictPage{Site: Site{Now: t0}, Verdict: Verdict(v, nil, "")})
	for _, want := range []string{`<h3 id="predicted-h">Predicted effect of the fixes</h3>`, `<p class="hint none-helps">` + strings.ReplaceAll(none, "'", "&#39;"),
		"POOR FIT: ", "<td>poor fit</td>", `aria-label="TTFT p95: 2 s → 1.95 s (−3%, seeds 1.9 s–2 s)"`} {
		if !strings.Contains(html, want) {
			t.Errorf("page lacks %q:\n%s", want, around(html, "predicted-h"))
		}
	}
	v.Predicted = &verdict.Predicted{Missing: "no prediction: the triage had too little data"}
	if html := renderPage(t, VerdictPage{Site: Site{Now: t0}, Verdict: Verdict(v, nil, "")}); !strings.Contains(html, `<p class="hint no-prediction">no prediction: the triage had too little data</p>`) {
		t.Errorf("missing prediction not said:\n%s", around(html, "predicted-h"))
	}
}
