// Package otlp receives OpenTelemetry traces over OTLP/HTTP (protobuf and
// JSON) and OTLP/gRPC and turns them into span.Span values for a Sink.
package otlp

import (
	"encoding/base64"
	"fmt"
	"math"
	"strconv"
	"strings"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/whyslow/whyslow/span"
)

// FieldError says which field of a request is malformed. A request holding
// one is rejected whole (HTTP 400, gRPC InvalidArgument).
type FieldError struct {
	// Path is the field in OTLP/JSON spelling, e.g.
	// resourceSpans[0].scopeSpans[1].spans[3].traceId.
	Path string
	Msg  string
}

// Error implements error.
func (e *FieldError) Error() string { return e.Path + ": " + e.Msg }

// Rejected counts spans dropped from an otherwise valid request (the OTLP
// partial success), with the first reason.
type Rejected struct {
	Spans   int64
	Message string
}

func (r *Rejected) add(path, why string) {
	if r.Spans == 0 {
		r.Message = path + ": " + why
	}
	r.Spans++
}

// Convert appends the spans of rss to dst as span.Span values. Spans with a
// wrong-length id make the whole request malformed (*FieldError); spans with
// zero ids or an end before their start are dropped and counted in Rejected.
// Spans of one resource share one Resource slice.
func Convert(dst []span.Span, rss []*tracepb.ResourceSpans) ([]span.Span, Rejected, error) {
	var rej Rejected
	for i, rs := range rss {
		if rs == nil {
			continue
		}
		var res span.Attrs
		if rs.Resource != nil && len(rs.Resource.Attributes) > 0 {
			res = appendAttrs(make(span.Attrs, 0, len(rs.Resource.Attributes)), rs.Resource.Attributes)
		}
		for j, ss := range rs.ScopeSpans {
			if ss == nil {
				continue
			}
			for k, sp := range ss.Spans {
				if sp == nil {
					continue
				}
				var s span.Span
				if err := copyID(s.TraceID[:], sp.TraceId, i, j, k, "traceId"); err != nil {
					return dst, rej, err
				}
				if err := copyID(s.SpanID[:], sp.SpanId, i, j, k, "spanId"); err != nil {
					return dst, rej, err
				}
				if err := copyID(s.ParentID[:], sp.ParentSpanId, i, j, k, "parentSpanId"); err != nil {
					return dst, rej, err
				}
				if why, field := rejectReason(&s, sp.StartTimeUnixNano, sp.EndTimeUnixNano); why != "" {
					rej.add(spanPath(i, j, k, field), why)
					continue
				}
				s.Name = sp.Name
				s.Kind = kindOf(int32(sp.Kind))
				s.Error = sp.Status != nil && sp.Status.Code == tracepb.Status_STATUS_CODE_ERROR
				s.StartUnixNano = int64(sp.StartTimeUnixNano)
				s.EndUnixNano = int64(sp.EndTimeUnixNano)
				if len(sp.Attributes) > 0 {
					s.Attrs = appendAttrs(make(span.Attrs, 0, len(sp.Attributes)), sp.Attributes)
				}
				s.Resource = res
				dst = append(dst, s)
			}
		}
	}
	return dst, rej, nil
}

// rejectReason says why a span with well-formed ids is dropped, and the
// field at fault; "" keeps it.
func rejectReason(s *span.Span, start, end uint64) (why, field string) {
	switch {
	case s.TraceID.IsZero():
		return "missing or all-zero trace id", "traceId"
	case s.SpanID.IsZero():
		return "missing or all-zero span id", "spanId"
	case start == 0 || start > math.MaxInt64 || end > math.MaxInt64:
		return "start time missing or out of range", "startTimeUnixNano"
	case end < start:
		return "end before start", "endTimeUnixNano"
	}
	return "", ""
}

// kindOf maps an OTLP span kind; values beyond the known ones are
// unspecified.
func kindOf(k int32) span.SpanKind {
	if k >= 0 && k <= int32(tracepb.Span_SPAN_KIND_CONSUMER) {
		return span.SpanKind(k)
	}
	return span.SpanKindUnspecified
}

// copyID copies an id; a missing id stays zero (and its span is rejected
// unless the id is optional), a wrong-length one is a *FieldError.
func copyID(dst, src []byte, i, j, k int, field string) error {
	if len(src) == 0 {
		return nil
	}
	if len(src) != len(dst) {
		return &FieldError{Path: spanPath(i, j, k, field), Msg: fmt.Sprintf("want %d bytes, got %d", len(dst), len(src))}
	}
	copy(dst, src)
	return nil
}

func spanPath(i, j, k int, field string) string {
	return "resourceSpans[" + strconv.Itoa(i) + "].scopeSpans[" + strconv.Itoa(j) + "].spans[" + strconv.Itoa(k) + "]." + field
}

func appendAttrs(dst span.Attrs, kvs []*commonpb.KeyValue) span.Attrs {
	for _, kv := range kvs {
		if kv == nil || kv.Key == "" {
			continue
		}
		dst = append(dst, attrOf(kv.Key, kv.Value))
	}
	return dst
}

func attrOf(key string, v *commonpb.AnyValue) span.Attr {
	if v == nil {
		return span.StringAttr(key, "")
	}
	switch x := v.Value.(type) {
	case *commonpb.AnyValue_StringValue:
		return span.StringAttr(key, x.StringValue)
	case *commonpb.AnyValue_IntValue:
		return span.IntAttr(key, x.IntValue)
	case *commonpb.AnyValue_DoubleValue:
		return span.FloatAttr(key, x.DoubleValue)
	case *commonpb.AnyValue_BoolValue:
		return span.BoolAttr(key, x.BoolValue)
	}
	var b strings.Builder
	writeAny(&b, v, 0)
	return span.StringAttr(key, b.String())
}

// writeAny renders arrays, maps and bytes as compact JSON-like text.
func writeAny(b *strings.Builder, v *commonpb.AnyValue, depth int) {
	if v == nil || depth > 8 {
		b.WriteString("null")
		return
	}
	switch x := v.Value.(type) {
	case *commonpb.AnyValue_StringValue:
		b.WriteString(strconv.Quote(x.StringValue))
	case *commonpb.AnyValue_IntValue:
		b.WriteString(strconv.FormatInt(x.IntValue, 10))
	case *commonpb.AnyValue_DoubleValue:
		b.WriteString(strconv.FormatFloat(x.DoubleValue, 'g', -1, 64))
	case *commonpb.AnyValue_BoolValue:
		b.WriteString(strconv.FormatBool(x.BoolValue))
	case *commonpb.AnyValue_BytesValue:
		b.WriteString(strconv.Quote(base64.StdEncoding.EncodeToString(x.BytesValue)))
	case *commonpb.AnyValue_ArrayValue:
		b.WriteByte('[')
		if x.ArrayValue != nil {
			for i, e := range x.ArrayValue.Values {
				if i > 0 {
					b.WriteByte(',')
				}
				writeAny(b, e, depth+1)
			}
		}
		b.WriteByte(']')
	case *commonpb.AnyValue_KvlistValue:
		b.WriteByte('{')
		if x.KvlistValue != nil {
			for i, kv := range x.KvlistValue.Values {
				if i > 0 {
					b.WriteByte(',')
				}
				b.WriteString(strconv.Quote(kv.GetKey()))
				b.WriteByte(':')
				writeAny(b, kv.GetValue(), depth+1)
			}
		}
		b.WriteByte('}')
	default:
		b.WriteString("null")
	}
}
