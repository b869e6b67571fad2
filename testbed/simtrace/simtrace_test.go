package simtrace

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/whyslow/whyslow/collectors/tracequery"
	"github.com/whyslow/whyslow/requests"
	"github.com/whyslow/whyslow/testbed/sim"
	"github.com/whyslow/whyslow/verdict"
)

var t0 = time.Unix(1700000000, 0)

func record(i int) sim.RequestRecord {
	a := t0.Add(time.Duration(i) * 100 * time.Millisecond)
	return sim.RequestRecord{
		ID: fmt.Sprintf("cmpl-%d", i), Pod: fmt.Sprintf("vllm-%d", i%2), Model: "llama",
		Arrival: a, Queued: a.Add(5 * time.Millisecond), Scheduled: a.Add(105 * time.Millisecond),
		FirstToken: a.Add(305 * time.Millisecond), Finished: a.Add(1305 * time.Millisecond),
		PromptTokens: 1000, OutputTokens: 100, FinishedReason: "stop",
	}
}

func TestJSONLRoundTrip(t *testing.T) {
	cases := []struct {
		name     string
		opts     Options
		before   float64
		dominant requests.RequestPart
	}{
		// The API server holds each request 5 ms before the engine queue.
		{"engine only", Options{Seed: 1}, 0.005, requests.PartDecode},
		{"slow gateway", Options{Seed: 1, Gateway: true, GatewayTime: func(sim.RequestRecord) GatewayTiming {
			return GatewayTiming{Admission: 1500 * time.Millisecond, Scoring: 10 * time.Millisecond, Routing: 5 * time.Millisecond, Proxy: 5 * time.Millisecond, After: time.Millisecond}
		}}, 1.525, requests.PartBeforeEngine},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := New(c.opts)
			for i := 0; i < 10; i++ {
				b.Add(record(i))
			}
			var buf bytes.Buffer
			if err := b.WriteJSONL(&buf, 4); err != nil {
				t.Fatal(err)
			}
			f, err := tracequery.ReadJSONL(&buf, "traces.jsonl")
			if err != nil {
				t.Fatal(err)
			}
			spans, _ := f.SpansBetween(context.Background(), t0.Add(-time.Minute), t0.Add(time.Minute), 0)
			reqs := requests.BuildRequests(spans)
			if len(reqs) != 10 {
				t.Fatalf("%d requests", len(reqs))
			}
			r := reqs[0]
			if r.Source != "v1" || r.Pod != "vllm-0" || r.Dominant != c.dominant || !near(r.Parts[requests.PartBeforeEngine], c.before) ||
				!near(r.Parts[requests.PartQueue], 0.1) || !near(r.Parts[requests.PartPrefill], 0.2) || !near(r.Parts[requests.PartDecode], 1.0) {
				t.Errorf("request = %+v", r)
			}
			if c.opts.Gateway {
				corr := requests.CorrelateRequests(requests.CorrelationInput{Requests: reqs, Window: verdict.Window{Start: t0.Add(-time.Minute), End: t0.Add(time.Minute)}})
				if len(corr.Evidence["outside_engine"]) == 0 {
					t.Errorf("no outside_engine evidence: %+v", corr)
				}
			}
		})
	}
}

func near(a, b float64) bool { return a-b < 1e-6 && b-a < 1e-6 }
