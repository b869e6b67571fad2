// Package sdkexport sends a simtrace.Batch through an OpenTelemetry SDK span
// exporter (otlptracehttp, otlptracegrpc, tracetest's in-memory one), as vLLM
// and the EPP would. It lives apart from simtrace so that the whyslow binary,
// which uses simtrace only to write bundles, does not link the SDK.
package sdkexport

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/whyslow/whyslow/testbed/simtrace"
)

// Export sends the batch's spans, resources in first-seen order, through exp
// in one ExportSpans call.
func Export(ctx context.Context, b *simtrace.Batch, exp sdktrace.SpanExporter) error {
	var stubs tracetest.SpanStubs
	for _, rs := range b.Request().ResourceSpans {
		var kvs []attribute.KeyValue
		for _, a := range rs.Resource.Attributes {
			kvs = append(kvs, attribute.String(a.Key, a.Value.GetStringValue()))
		}
		res := resource.NewSchemaless(kvs...)
		scope := instrumentation.Scope{Name: rs.ScopeSpans[0].Scope.GetName()}
		for _, sp := range rs.ScopeSpans[0].Spans {
			stubs = append(stubs, stubOf(sp, res, scope))
		}
	}
	if err := exp.ExportSpans(ctx, stubs.Snapshots()); err != nil {
		return fmt.Errorf("export spans: %w", err)
	}
	return nil
}

// stubOf is sp as the SDK's span record, for exporters that take those.
func stubOf(sp *tracepb.Span, res *resource.Resource, scope instrumentation.Scope) tracetest.SpanStub {
	var tid trace.TraceID
	var sid, pid trace.SpanID
	copy(tid[:], sp.TraceId)
	copy(sid[:], sp.SpanId)
	copy(pid[:], sp.ParentSpanId)
	st := tracetest.SpanStub{
		Name:                 sp.Name,
		SpanContext:          trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}),
		Parent:               trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: pid, TraceFlags: trace.FlagsSampled, Remote: true}),
		SpanKind:             trace.SpanKind(sp.Kind),
		StartTime:            time.Unix(0, int64(sp.StartTimeUnixNano)),
		EndTime:              time.Unix(0, int64(sp.EndTimeUnixNano)),
		Resource:             res,
		InstrumentationScope: scope,
	}
	if sp.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR {
		st.Status = sdktrace.Status{Code: codes.Error, Description: sp.Status.Message}
	}
	for _, a := range sp.Attributes {
		switch v := a.Value.Value.(type) {
		case *commonpb.AnyValue_StringValue:
			st.Attributes = append(st.Attributes, attribute.String(a.Key, v.StringValue))
		case *commonpb.AnyValue_IntValue:
			st.Attributes = append(st.Attributes, attribute.Int64(a.Key, v.IntValue))
		case *commonpb.AnyValue_DoubleValue:
			st.Attributes = append(st.Attributes, attribute.Float64(a.Key, v.DoubleValue))
		}
	}
	return st
}
