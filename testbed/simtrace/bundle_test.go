package simtrace

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/whyslow/whyslow/collectors/tracequery"
	"github.com/whyslow/whyslow/requests"
	"github.com/whyslow/whyslow/span"
	"github.com/whyslow/whyslow/testbed/sim"
)

// TestFrontendDelayInTraces checks where a slow API server shows: inside
// the llm_request span (vLLM's TTFT counts from the API server's arrival),
// as TTFT − queue − prefill, which the breakdown puts before the engine
// (api_server); the gateway span's duration carries it too.
func TestFrontendDelayInTraces(t *testing.T) {
	a := t0
	r := sim.RequestRecord{ID: "slow-frontend", Pod: "vllm-0", Model: "llama",
		Arrival: a, Queued: a.Add(2 * time.Second), Scheduled: a.Add(2100 * time.Millisecond),
		FirstToken: a.Add(2300 * time.Millisecond), Finished: a.Add(3300 * time.Millisecond),
		PromptTokens: 500, OutputTokens: 50, FinishedReason: "stop"}
	b := New(Options{Seed: 3, Gateway: true})
	b.Add(r)
	spans, err := b.Spans()
	if err != nil {
		t.Fatal(err)
	}
	var engine, gateway *span.Span
	for i := range spans {
		switch spans[i].Name {
		case span.SpanLLMRequest:
			engine = &spans[i]
		case span.SpanGatewayRequest:
			gateway = &spans[i]
		}
	}
	if engine == nil || gateway == nil {
		t.Fatalf("spans %+v", spans)
	}
	if ttft, _ := engine.Attrs.Number(span.AttrTTFT); !near(ttft, 2.3) || engine.Start() != a {
		t.Errorf("llm_request TTFT %v from %v, want 2.3 s from the API server's arrival", ttft, engine.Start())
	}
	if gateway.Duration() < 3300*time.Millisecond {
		t.Errorf("gateway span %v does not cover the request", gateway.Duration())
	}
	reqs := requests.BuildRequests(spans)
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	got := reqs[0]
	if !near(got.BeforeEngineParts["api_server"], 2.0) || got.Parts[requests.PartBeforeEngine] < 2.0 ||
		!near(got.Parts[requests.PartQueue], 0.1) || !near(got.EngineE2E, 1.3) || !got.EngineStart.Equal(a.Add(2*time.Second)) {
		t.Errorf("breakdown = %+v", got)
	}
}

func TestSample(t *testing.T) {
	var recs []sim.RequestRecord
	for i := 0; i < 100; i++ {
		recs = append(recs, record(i)) // arrivals every 100 ms, 1.305 s long
	}
	w1 := Window{t0.Add(2 * time.Second), t0.Add(4 * time.Second)}
	w2 := Window{t0.Add(8 * time.Second), t0.Add(9 * time.Second)}
	all := Sample(recs, []Window{w1, w2}, 0)
	// In flight during w1: arrivals from 0.7 s to 3.9 s (33); during w2:
	// 6.7 s to 8.9 s (23).
	if len(all) != 33+23 {
		t.Errorf("kept %d, want 56", len(all))
	}
	few := Sample(recs, []Window{w1, w2}, 5)
	again := Sample(recs, []Window{w1, w2}, 5)
	if len(few) != 10 || fmt.Sprint(few) != fmt.Sprint(again) {
		t.Errorf("sample of 5 per window: %d records, stable %v", len(few), fmt.Sprint(few) == fmt.Sprint(again))
	}
	for i := 1; i < len(few); i++ {
		if few[i].Arrival.Before(few[i-1].Arrival) {
			t.Fatal("sample not sorted by arrival")
		}
	}
}

func TestWriteBundleFile(t *testing.T) {
	dir := t.TempDir()
	b := New(Options{Seed: 1, Gateway: true})
	for i := 0; i < 20; i++ {
		b.Add(record(i))
	}
	for _, gz := range []bool{false, true} {
		path, err := b.WriteBundleFile(dir, gz)
		if err != nil {
			t.Fatal(err)
		}
		found, err := tracequery.BundleTraces(dir)
		if err != nil || found != path {
			t.Fatalf("BundleTraces = %q, %v; want %q", found, err, path)
		}
		f, err := tracequery.OpenJSONL(path)
		if err != nil {
			t.Fatal(err)
		}
		spans, _ := f.SpansBetween(context.Background(), t0.Add(-time.Minute), t0.Add(time.Minute), 0)
		if f.Spans != 80 || len(requests.BuildRequests(spans)) != 20 {
			t.Errorf("gz=%v: %d spans, %d requests", gz, f.Spans, len(requests.BuildRequests(spans)))
		}
	}
	if _, err := os.Stat(filepath.Join(dir, TracesFile)); !os.IsNotExist(err) {
		t.Errorf("plain traces.jsonl left next to the gzip: %v", err)
	}
}
