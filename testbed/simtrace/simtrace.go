// Package simtrace turns the engine model's request records into the spans a
// real deployment would emit: vLLM V1 llm_request spans, and llm-d gateway
// spans when a router is modelled. The spans can be written as a bundle's
// traces.jsonl; package sdkexport sends them live through the OpenTelemetry
// SDK exporters (kept apart so that whyslow, which imports this package for
// "whyslow sim", does not link the SDK).
package simtrace

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"
	"slices"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/whyslow/whyslow/collectors/otlp"
	"github.com/whyslow/whyslow/testbed/sim"
)

// GatewayTiming is the gateway's share of one request.
type GatewayTiming struct {
	// Admission is flow control before scheduling; Scoring and Routing are
	// the EPP's scheduling; Proxy is the hop to the pod; After is the
	// response path back through the gateway.
	Admission, Scoring, Routing, Proxy, After time.Duration
	// PrefixScore is the prefix-cache scorer's best score (0–1).
	PrefixScore float64
}

// Options shapes the spans.
type Options struct {
	// Seed makes trace and span ids deterministic.
	Seed int64
	// Gateway emits gateway.request, gateway.request_orchestration and
	// llm_d.epp.scorer.prefix_cache spans around each engine span.
	Gateway bool
	// GatewayTime gives each request's gateway timing; nil means a healthy
	// gateway (2ms admission, 1ms scoring, 1ms routing, 1ms proxy, 1ms back).
	GatewayTime func(sim.RequestRecord) GatewayTiming
}

func healthyGateway(sim.RequestRecord) GatewayTiming {
	ms := time.Millisecond
	return GatewayTiming{Admission: 2 * ms, Scoring: ms, Routing: ms, Proxy: ms, After: ms, PrefixScore: 0.5}
}

// ids derives deterministic ids from the seed and the request id.
func ids(seed int64, reqID string) (trace [16]byte, spans [5][8]byte) {
	h := fnv.New128a()
	fmt.Fprintf(h, "%d/%s", seed, reqID)
	copy(trace[:], h.Sum(nil))
	for i := range spans {
		h := fnv.New64a()
		fmt.Fprintf(h, "%d/%s/%d", seed, reqID, i)
		binary.BigEndian.PutUint64(spans[i][:], h.Sum64()|1)
	}
	return
}

func kvS(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}

func kvI(k string, v int) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: int64(v)}}}
}

func kvF(k string, v float64) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: v}}}
}

func ns(t time.Time) uint64 { return uint64(t.UnixNano()) }

// Batch is spans grouped by the resource (pod or gateway) that emits them.
type Batch struct {
	opts  Options
	bySvc map[string]*tracepb.ResourceSpans
	order []string
}

// New returns an empty batch.
func New(opts Options) *Batch {
	if opts.GatewayTime == nil {
		opts.GatewayTime = healthyGateway
	}
	return &Batch{opts: opts, bySvc: map[string]*tracepb.ResourceSpans{}}
}

func (b *Batch) scope(key string, res []*commonpb.KeyValue, scope string) *tracepb.ScopeSpans {
	rs, ok := b.bySvc[key]
	if !ok {
		rs = &tracepb.ResourceSpans{Resource: &resourcepb.Resource{Attributes: res},
			ScopeSpans: []*tracepb.ScopeSpans{{Scope: &commonpb.InstrumentationScope{Name: scope}}}}
		b.bySvc[key] = rs
		b.order = append(b.order, key)
	}
	return rs.ScopeSpans[0]
}

// Add turns one record into spans. Records that never reached the engine
// queue produce nothing.
func (b *Batch) Add(r sim.RequestRecord) {
	if r.Arrival.IsZero() || r.Finished.IsZero() {
		return
	}
	tid, sid := ids(b.opts.Seed, r.ID)
	// sid[0] is the caller's span (a remote W3C parent, not exported).
	parent := sid[0][:]
	engStart := r.Arrival
	var gw GatewayTiming
	if b.opts.Gateway {
		gw = b.opts.GatewayTime(r)
		before := gw.Admission + gw.Scoring + gw.Routing + gw.Proxy
		gStart := engStart.Add(-before)
		gEnd := r.Finished.Add(gw.After)
		oStart := gStart.Add(gw.Admission)
		oEnd := oStart.Add(gw.Scoring + gw.Routing)
		ss := b.scope("gateway", []*commonpb.KeyValue{kvS("service.name", "gateway-api-inference-extension/epp")}, "gateway-api-inference-extension/epp/extproc")
		ss.Spans = append(ss.Spans,
			&tracepb.Span{TraceId: tid[:], SpanId: sid[1][:], ParentSpanId: parent, Name: "gateway.request",
				Kind: tracepb.Span_SPAN_KIND_SERVER, StartTimeUnixNano: ns(gStart), EndTimeUnixNano: ns(gEnd),
				Attributes: []*commonpb.KeyValue{kvS("gen_ai.request.id", r.ID), kvS("gen_ai.request.model", r.Model)}},
			&tracepb.Span{TraceId: tid[:], SpanId: sid[2][:], ParentSpanId: sid[1][:], Name: "gateway.request_orchestration",
				Kind: tracepb.Span_SPAN_KIND_SERVER, StartTimeUnixNano: ns(oStart), EndTimeUnixNano: ns(oEnd),
				Attributes: []*commonpb.KeyValue{kvS("target_model", r.Model)}},
			&tracepb.Span{TraceId: tid[:], SpanId: sid[3][:], ParentSpanId: sid[2][:], Name: "llm_d.epp.scorer.prefix_cache",
				Kind: tracepb.Span_SPAN_KIND_INTERNAL, StartTimeUnixNano: ns(oStart), EndTimeUnixNano: ns(oStart.Add(gw.Scoring)),
				Attributes: []*commonpb.KeyValue{kvF("llm_d.scorer.score.max", gw.PrefixScore), kvS("llm_d.scorer.result", r.Pod)}},
		)
		parent = sid[1][:]
	}
	sec := func(a, z time.Time) float64 {
		if a.IsZero() || z.IsZero() || z.Before(a) {
			return 0
		}
		return z.Sub(a).Seconds()
	}
	attrs := []*commonpb.KeyValue{
		kvS("gen_ai.request.id", r.ID),
		kvI("gen_ai.usage.prompt_tokens", r.PromptTokens),
		kvI("gen_ai.usage.completion_tokens", r.OutputTokens),
		kvF("gen_ai.latency.time_in_queue", sec(r.Queued, r.Scheduled)),
		kvF("gen_ai.latency.e2e", sec(r.Arrival, r.Finished)),
	}
	if r.MaxTokens > 0 {
		attrs = append(attrs, kvI("gen_ai.request.max_tokens", r.MaxTokens))
	}
	if !r.FirstToken.IsZero() {
		attrs = append(attrs,
			kvF("gen_ai.latency.time_to_first_token", sec(r.Arrival, r.FirstToken)),
			kvF("gen_ai.latency.time_in_model_prefill", sec(r.Scheduled, r.FirstToken)),
			kvF("gen_ai.latency.time_in_model_decode", sec(r.FirstToken, r.Finished)),
			kvF("gen_ai.latency.time_in_model_inference", sec(r.Scheduled, r.Finished)))
	}
	sp := &tracepb.Span{TraceId: tid[:], SpanId: sid[4][:], ParentSpanId: parent, Name: "llm_request",
		Kind: tracepb.Span_SPAN_KIND_SERVER, StartTimeUnixNano: ns(engStart), EndTimeUnixNano: ns(r.Finished), Attributes: attrs}
	if r.FinishedReason == "abort" {
		sp.Status = &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR, Message: "aborted"}
	}
	ss := b.scope("pod/"+r.Pod, []*commonpb.KeyValue{kvS("service.name", "vllm"), kvS("k8s.pod.name", r.Pod)}, "vllm.llm_engine")
	ss.Spans = append(ss.Spans, sp)
}

// Request returns the spans as one export request, resources in first-seen
// order.
func (b *Batch) Request() *coltracepb.ExportTraceServiceRequest {
	req := &coltracepb.ExportTraceServiceRequest{}
	for _, k := range b.order {
		req.ResourceSpans = append(req.ResourceSpans, b.bySvc[k])
	}
	return req
}

// WriteJSONL writes the spans as traces.jsonl: one OTLP/JSON export request
// per line (hex ids), at most perLine spans each (0: 512).
func (b *Batch) WriteJSONL(w io.Writer, perLine int) error {
	if perLine <= 0 {
		perLine = 512
	}
	bw := bufio.NewWriter(w)
	for _, k := range b.order {
		rs := b.bySvc[k]
		spans := rs.ScopeSpans[0].Spans
		for i := 0; i < len(spans); i += perLine {
			chunk := &tracepb.ResourceSpans{Resource: rs.Resource, ScopeSpans: []*tracepb.ScopeSpans{{
				Scope: rs.ScopeSpans[0].Scope, Spans: spans[i:min(i+perLine, len(spans))]}}}
			line, err := otlp.EncodeJSON(&coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{chunk}})
			if err != nil {
				return fmt.Errorf("encode traces: %w", err)
			}
			bw.Write(line)
			bw.WriteByte('\n')
		}
	}
	return bw.Flush()
}

// Records collects records from sim.Options.OnRequest (safe to call from the
// model's goroutine only; the model calls it sequentially).
type Records struct{ List []sim.RequestRecord }

// Add appends one record; use it as sim.Options.OnRequest.
func (r *Records) Add(rec sim.RequestRecord) { r.List = append(r.List, rec) }

// Sorted returns the records by arrival.
func (r *Records) Sorted() []sim.RequestRecord {
	out := slices.Clone(r.List)
	slices.SortStableFunc(out, func(a, b sim.RequestRecord) int { return a.Arrival.Compare(b.Arrival) })
	return out
}
