package daemon

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/whyslow/whyslow/verdict"
)

// samplePredicted is a prediction with two fixes, one that trades, and a
// declined one.
func samplePredicted() *verdict.Predicted {
	return &verdict.Predicted{Calibration: "TTFT p95 ×0.97, inter-token p95 ×1.02",
		Incident: &verdict.PredictedValues{TTFTP95: 4, ITLP95: 0.05, Throughput: 900},
		Fixes: []verdict.FixPrediction{
			{Fix: "replicas×2", TTFTP95: verdict.PredictedRange{Median: 0.8, Low: 0.7, High: 0.9},
				ITLP95: verdict.PredictedRange{Median: 0.045, Low: 0.044, High: 0.046}},
			{Fix: "max_num_batched_tokens=16384", TTFTP95: verdict.PredictedRange{Median: 2, Low: 1.9, High: 2.2},
				ITLP95: verdict.PredictedRange{Median: 0.07, Low: 0.068, High: 0.072},
				Trade:  "trades inter-token latency for TTFT: TTFT p95 -50%, inter-token p95 +40%"},
		},
		Declined: []verdict.DeclinedFix{{Fix: "clocks restored", Reason: "no prediction: missing series gpu_clock (needed by clocks restored)"}},
	}
}

// waitPredicted polls GET /api/v1/predicted for id until it answers 200
// with state ready, and returns the answer.
func waitPredicted(t *testing.T, h *harness, id string) PredictedAnswer {
	t.Helper()
	for i := 0; i < 2000; i++ {
		resp, body := pageReq(t, h, "GET", "/api/v1/predicted?incident="+url.QueryEscape(id), nil)
		var a PredictedAnswer
		if err := json.Unmarshal([]byte(body), &a); err != nil {
			t.Fatalf("GET /api/v1/predicted: %d %s: %v", resp.StatusCode, body, err)
		}
		if resp.StatusCode == http.StatusOK && a.State == "ready" {
			return a
		}
		if resp.StatusCode != http.StatusAccepted && resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /api/v1/predicted: %d %s", resp.StatusCode, body)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("the prediction never finished")
	return PredictedAnswer{}
}

// TestPagePredictions: the incident page renders at once without
// predictions and says they are being computed (the cycle computed
// none); once done, it shows a row per fix with its before/after bars,
// the trade and the declined fix, and the API has them (/api/v1/predicted
// and the verdict's "predicted"). One computation per verdict: views of
// the same verdict do not start another.
func TestPagePredictions(t *testing.T) {
	release := make(chan struct{})
	var calls atomic.Int32
	h := newHarnessWith(t, testConfig(), func(o *Options) {
		o.Predict = func(ctx context.Context, v *verdict.Verdict) (*verdict.Predicted, error) {
			calls.Add(1)
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return samplePredicted(), nil
		}
	})
	h.ticks(t, 15*12)
	h.eng.setSlow(true)
	h.tri.cause = "kv_cache_pressure"
	h.ticks(t, 6)
	in := h.d.Incidents()[0]
	page := "/incidents/" + url.PathEscape(in.ID)

	resp, body := pageReq(t, h, "GET", page, nil)
	if resp.StatusCode != 200 || !strings.Contains(body, "Predicted effect of the fixes") || !strings.Contains(body, "Computing the predictions") {
		t.Fatalf("first view: %d\n%s", resp.StatusCode, around(body, "Predicted"))
	}
	if strings.Contains(body, `class="whatif"`) {
		t.Error("first view has prediction rows before any was computed")
	}
	close(release)
	a := waitPredicted(t, h, in.ID)
	if a.Predicted == nil || len(a.Predicted.Fixes) != 2 || !a.VerdictAt.Equal(in.Verdict.At) {
		t.Fatalf("API answer %+v", a)
	}

	_, body = pageReq(t, h, "GET", page, nil)
	for _, want := range []string{`<table class="whatif">`, "<code>replicas×2</code>", "4 s → 800 ms (−80%", `class="wb-after wb-better"`,
		`class="wb-after wb-worse"`, "trades inter-token latency for TTFT", "clocks restored: not predicted: no prediction: missing series gpu_clock",
		"calibration: TTFT p95 ×0.97"} {
		if !strings.Contains(body, want) {
			t.Errorf("page after the prediction lacks %q:\n%s", want, around(body, "Predicted effect"))
		}
	}
	if strings.Contains(body, "Computing the predictions") {
		t.Error("page still says computing")
	}
	_, vbody := pageReq(t, h, "GET", "/api/v1/verdict?scope="+url.QueryEscape(in.Scope.Selector), nil)
	var v verdict.Verdict
	if err := json.Unmarshal([]byte(vbody), &v); err != nil || v.Predicted == nil || v.Predicted.Fixes[0].Fix != "replicas×2" {
		t.Errorf("verdict API without the prediction (%v):\n%s", err, vbody)
	}
	pageReq(t, h, "GET", page, nil)
	if calls.Load() != 1 {
		t.Errorf("%d computations for one verdict, want 1", calls.Load())
	}

	// A newer verdict within predictEvery keeps the old prediction, said
	// to be an earlier verdict's; after it, a new one is computed.
	h.ticks(t, 1)
	_, body = pageReq(t, h, "GET", page, nil)
	if !strings.Contains(body, "For the verdict triaged at") || !strings.Contains(body, "<code>replicas×2</code>") || calls.Load() != 1 {
		t.Errorf("newer verdict within %s: %d computations, page:\n%s", predictEvery, calls.Load(), around(body, "Predicted effect"))
	}
	h.now = h.now.Add(predictEvery)
	h.ticks(t, 1)
	pageReq(t, h, "GET", page, nil)
	waitPredicted(t, h, in.ID)
	if calls.Load() != 2 {
		t.Errorf("%d computations after %s, want 2", calls.Load(), predictEvery)
	}
}

// TestPagePredictionsMissingSeries: with the real model over a source
// that lacks the series a fit needs, the page says "no prediction:
// missing series …" and names them.
func TestPagePredictionsMissingSeries(t *testing.T) {
	h := newHarness(t, testConfig())
	h.tri.engine = "vllm"
	h.ticks(t, 15*12)
	h.eng.setSlow(true)
	h.tri.cause = "kv_cache_pressure"
	h.ticks(t, 6)
	in := h.d.Incidents()[0]
	a := waitPredicted(t, h, in.ID)
	if a.Predicted == nil || !strings.HasPrefix(a.Predicted.Missing, "no prediction: missing series ") {
		t.Fatalf("prediction %+v, want a missing series", a.Predicted)
	}
	_, body := pageReq(t, h, "GET", "/incidents/"+url.PathEscape(in.ID), nil)
	if !strings.Contains(body, `<p class="hint no-prediction">`+a.Predicted.Missing) || !strings.Contains(body, "arrival_rate") {
		t.Errorf("page lacks %q:\n%s", a.Predicted.Missing, around(body, "Predicted effect"))
	}
}
