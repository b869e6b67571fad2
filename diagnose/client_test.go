package diagnose

import (
	"strings"
	"testing"

	"github.com/whyslow/whyslow/rulesets"
	"github.com/whyslow/whyslow/verdict"
)

// TestApplyClientView: the frontend's values replace the rows it has
// (with the frontend's noise; buckets cleared: they were the worker's), the
// outside row follows them, the client_view gap goes, other rows and gaps stay.
func TestApplyClientView(t *testing.T) {
	rs, err := rulesets.Default("vllm")
	if err != nil {
		t.Fatal(err)
	}
	f := func(x float64) *float64 { return &x }
	v := &verdict.Verdict{
		Headline: []verdict.Comparison{
			{Signal: "ttft_p95", Title: "TTFT p95", Now: f(1), Baseline: f(0.5), Noise: f(4), NowBucket: &verdict.Bucket{Lower: 0.5, Upper: 1}},
			{Signal: "ttft_mean", Title: "TTFT mean", Now: f(0.6), Baseline: f(0.3)},
			{Signal: "tpot_p95", Title: "Inter-token latency p95", Now: f(0.03), Baseline: f(0.03)},
			{Signal: "queue_mean", Title: "Queue time mean", Now: f(0.2), Baseline: f(0.1)},
		},
		DataGaps: []verdict.DataGap{{Signal: "client_view"}, {Signal: "not_exported"}},
	}
	now := map[string]float64{"client_ttft_p95": 1.5, "client_ttft_mean": 0.9, "ttft_mean": 0.6}
	base := map[string]float64{"client_ttft_p95": 0.8, "client_ttft_mean": 0.5, "ttft_mean": 0.3}
	applyClientView(v, rs, now, base, map[string]float64{"client_ttft_p95": 5, "ttft_p95": 4})
	var sigs []string
	for _, c := range v.Headline {
		sigs = append(sigs, c.Signal)
	}
	if want := "ttft_p95 ttft_mean ttft_outside_engine tpot_p95 queue_mean"; strings.Join(sigs, " ") != want {
		t.Fatalf("rows %v, want %s", sigs, want)
	}
	p95, out, tpot := v.Headline[0], v.Headline[2], v.Headline[3]
	if *p95.Now != 1.5 || *p95.Ratio != 1.5/0.8 || p95.Noise == nil || *p95.Noise != 5 || p95.NowBucket != nil || p95.Source != SourceDynamoFrontend ||
		p95.Title != "TTFT p95, as the Dynamo frontend sees it" {
		t.Errorf("ttft_p95 %+v", p95)
	}
	if d := *out.Now - 0.3; d > 1e-9 || d < -1e-9 || *out.Baseline-0.2 > 1e-9 || *out.Baseline-0.2 < -1e-9 {
		t.Errorf("outside the engine %v / %v, want 0.3 / 0.2", *out.Now, *out.Baseline)
	}
	if tpot.Source != "" || *tpot.Now != 0.03 {
		t.Errorf("tpot_p95 without a frontend value changed: %+v", tpot)
	}
	if len(v.DataGaps) != 1 || v.DataGaps[0].Signal != "not_exported" {
		t.Errorf("gaps %+v, want not_exported only", v.DataGaps)
	}
}
