package otlp

import (
	"encoding/binary"
	"fmt"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

func strKV(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}

func intKV(k string, v int64) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v}}}
}

func floatKV(k string, v float64) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: v}}}
}

// testRequest builds a request shaped like vLLM's export: one resource per
// pod, llm_request spans with the V1 latency attributes.
func testRequest(resources, spansPer int) *coltracepb.ExportTraceServiceRequest {
	req := &coltracepb.ExportTraceServiceRequest{}
	n := 0
	for r := 0; r < resources; r++ {
		ss := &tracepb.ScopeSpans{Scope: &commonpb.InstrumentationScope{Name: "vllm.llm_engine"}}
		for i := 0; i < spansPer; i++ {
			n++
			tid := make([]byte, 16)
			binary.BigEndian.PutUint64(tid[:8], 0xabcdef)
			binary.BigEndian.PutUint64(tid[8:], uint64(n))
			sid := make([]byte, 8)
			binary.BigEndian.PutUint64(sid, uint64(n)<<8|1)
			pid := make([]byte, 8)
			binary.BigEndian.PutUint64(pid, uint64(n)<<8|2)
			start := uint64(1700000000_000000000 + int64(n)*1_000_000)
			ss.Spans = append(ss.Spans, &tracepb.Span{
				TraceId: tid, SpanId: sid, ParentSpanId: pid,
				Name: "llm_request", Kind: tracepb.Span_SPAN_KIND_SERVER,
				StartTimeUnixNano: start, EndTimeUnixNano: start + 1_500_000_000,
				Attributes: []*commonpb.KeyValue{
					strKV("gen_ai.request.id", fmt.Sprintf("chatcmpl-%08d", n)),
					strKV("gen_ai.response.model", "meta-llama/Llama-3.1-8B-Instruct"),
					intKV("gen_ai.request.max_tokens", 512),
					floatKV("gen_ai.request.temperature", 0.7),
					intKV("gen_ai.usage.prompt_tokens", 1000+int64(n%3000)),
					intKV("gen_ai.usage.completion_tokens", 200),
					floatKV("gen_ai.latency.time_in_queue", 0.05),
					floatKV("gen_ai.latency.time_to_first_token", 0.2),
					floatKV("gen_ai.latency.time_in_model_prefill", 0.15),
					floatKV("gen_ai.latency.time_in_model_decode", 1.3),
					floatKV("gen_ai.latency.time_in_model_inference", 1.45),
					floatKV("gen_ai.latency.e2e", 1.5),
				},
			})
		}
		req.ResourceSpans = append(req.ResourceSpans, &tracepb.ResourceSpans{
			Resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{
				strKV("service.name", "vllm"),
				strKV("k8s.pod.name", fmt.Sprintf("vllm-%d", r)),
				strKV("k8s.namespace.name", "inference"),
				strKV("telemetry.sdk.language", "python"),
			}},
			ScopeSpans: []*tracepb.ScopeSpans{ss},
		})
	}
	return req
}
