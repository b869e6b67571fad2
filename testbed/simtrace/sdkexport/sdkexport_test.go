package sdkexport

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/whyslow/whyslow/testbed/sim"
	"github.com/whyslow/whyslow/testbed/simtrace"
)

func TestExportThroughSDK(t *testing.T) {
	b := simtrace.New(simtrace.Options{Seed: 2, Gateway: true})
	a := time.Unix(1700000000, 0)
	b.Add(sim.RequestRecord{
		ID: "cmpl-1", Pod: "vllm-1", Model: "llama",
		Arrival: a, Queued: a.Add(5 * time.Millisecond), Scheduled: a.Add(105 * time.Millisecond),
		FirstToken: a.Add(305 * time.Millisecond), Finished: a.Add(1305 * time.Millisecond),
		PromptTokens: 1000, OutputTokens: 100, FinishedReason: "stop",
	})
	exp := tracetest.NewInMemoryExporter()
	if err := Export(context.Background(), b, exp); err != nil {
		t.Fatal(err)
	}
	got := exp.GetSpans()
	if len(got) != 4 {
		t.Fatalf("%d spans", len(got))
	}
	var names []string
	for _, s := range got {
		names = append(names, s.Name)
		if s.Name == "llm_request" && (!s.Parent.IsValid() || s.Parent.TraceID() != s.SpanContext.TraceID()) {
			t.Errorf("llm_request has no W3C parent: %+v", s.Parent)
		}
	}
	if strings.Join(names, ",") != "gateway.request,gateway.request_orchestration,llm_d.epp.scorer.prefix_cache,llm_request" {
		t.Errorf("names = %v", names)
	}
}
