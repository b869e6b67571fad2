package otlp

import (
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/whyslow/whyslow/span"
)

// decodeBothWays decodes body with proto.Unmarshal and Convert (the path
// the Decoder replaces) and with the Decoder, and fails unless they agree:
// the same spans, partial success and *FieldError, or both refuse the body.
func decodeBothWays(t *testing.T, d *Decoder, body []byte) {
	t.Helper()
	var req coltracepb.ExportTraceServiceRequest
	protoErr := proto.Unmarshal(body, &req)
	got, gotRej, gotErr := d.Decode(nil, body)
	if protoErr != nil {
		if gotErr == nil {
			t.Fatalf("proto.Unmarshal: %v; Decoder accepted the body (%d spans)", protoErr, len(got))
		}
		var fe *FieldError
		if errors.As(gotErr, &fe) {
			t.Fatalf("proto.Unmarshal: %v; Decoder: field error %v", protoErr, gotErr)
		}
		return
	}
	if gotErr != nil {
		var fe *FieldError
		if !errors.As(gotErr, &fe) {
			t.Fatalf("proto.Unmarshal accepted the body; Decoder: %v", gotErr)
		}
	}
	want, wantRej, wantErr := Convert(nil, req.ResourceSpans)
	if !reflect.DeepEqual(gotErr, wantErr) {
		t.Fatalf("error: Decoder %v, Convert %v", gotErr, wantErr)
	}
	if wantErr != nil {
		if d.Seen() != countSpans(&req) {
			t.Fatalf("Seen() = %d, want %d", d.Seen(), countSpans(&req))
		}
		return
	}
	if gotRej != wantRej {
		t.Fatalf("rejected: Decoder %+v, Convert %+v", gotRej, wantRej)
	}
	if len(got) != len(want) {
		t.Fatalf("Decoder %d spans, Convert %d", len(got), len(want))
	}
	for i := range want {
		if !sameSpan(got[i], want[i]) {
			t.Fatalf("span %d:\nDecoder %+v\nConvert %+v", i, got[i], want[i])
		}
	}
}

// sameSpan compares spans field by field; floats by their bits (NaN).
func sameSpan(a, b span.Span) bool {
	a.Attrs, b.Attrs = floatBits(a.Attrs), floatBits(b.Attrs)
	a.Resource, b.Resource = floatBits(a.Resource), floatBits(b.Resource)
	return reflect.DeepEqual(a, b)
}

// floatBits replaces float attributes by ints of their bits, so that NaN
// equals NaN.
func floatBits(as span.Attrs) span.Attrs {
	if as == nil {
		return nil
	}
	out := make(span.Attrs, len(as))
	for i, a := range as {
		if a.Kind == span.AttrFloat {
			a = span.IntAttr(a.Key+"#float", int64(math.Float64bits(a.Float())))
		}
		out[i] = a
	}
	return out
}

// randomRequest builds an export request exercising what Convert handles:
// missing, zero and wrong-length ids, bad times, every value kind, empty
// keys, unknown kinds and status codes, events and links.
func randomRequest(rng *rand.Rand) *coltracepb.ExportTraceServiceRequest {
	req := &coltracepb.ExportTraceServiceRequest{}
	for range rng.IntN(3) + 1 {
		rs := &tracepb.ResourceSpans{SchemaUrl: pick(rng, "", "https://opentelemetry.io/schemas/1.4.0")}
		if rng.IntN(4) > 0 {
			rs.Resource = &resourcepb.Resource{Attributes: randomKVs(rng, rng.IntN(5), 0)}
		}
		for range rng.IntN(3) {
			ss := &tracepb.ScopeSpans{}
			if rng.IntN(2) == 0 {
				ss.Scope = &commonpb.InstrumentationScope{Name: "vllm.llm_engine", Version: "1", Attributes: randomKVs(rng, rng.IntN(2), 0)}
			}
			for range rng.IntN(4) {
				ss.Spans = append(ss.Spans, randomSpan(rng))
			}
			rs.ScopeSpans = append(rs.ScopeSpans, ss)
		}
		req.ResourceSpans = append(req.ResourceSpans, rs)
	}
	return req
}

func randomSpan(rng *rand.Rand) *tracepb.Span {
	start := uint64(1700000000_000000000 + rng.Int64N(1e12))
	sp := &tracepb.Span{
		TraceId: randomID(rng, 16), SpanId: randomID(rng, 8), ParentSpanId: randomID(rng, 8),
		Name:              pick(rng, "llm_request", "gateway.request", "", "héllo"),
		Kind:              tracepb.Span_SpanKind(rng.IntN(8) - 1),
		StartTimeUnixNano: start, EndTimeUnixNano: start + uint64(rng.Int64N(2e9)),
		Attributes: randomKVs(rng, rng.IntN(14), 0),
		TraceState: pick(rng, "", "k=v"),
		Flags:      uint32(rng.IntN(512)),
	}
	switch rng.IntN(12) {
	case 0:
		sp.StartTimeUnixNano = 0
	case 1:
		sp.EndTimeUnixNano = start - 1
	case 2:
		sp.EndTimeUnixNano = math.MaxUint64
	}
	if rng.IntN(2) == 0 {
		sp.Status = &tracepb.Status{Code: tracepb.Status_StatusCode(rng.IntN(4)), Message: pick(rng, "", "boom")}
	}
	if rng.IntN(4) == 0 {
		sp.Events = []*tracepb.Span_Event{{TimeUnixNano: start, Name: "first_token", Attributes: randomKVs(rng, 2, 0)}}
	}
	if rng.IntN(6) == 0 {
		sp.Links = []*tracepb.Span_Link{{TraceId: randomID(rng, 16), SpanId: randomID(rng, 8), TraceState: "a=b"}}
	}
	return sp
}

// randomID is mostly a valid id, sometimes missing, zero or wrong-length.
func randomID(rng *rand.Rand, n int) []byte {
	switch rng.IntN(30) {
	case 0:
		return nil
	case 1:
		return make([]byte, n)
	case 2:
		n = rng.IntN(2*n) + 1
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.IntN(256))
	}
	return b
}

var kvKeys = []string{"gen_ai.request.id", "gen_ai.latency.e2e", "gen_ai.usage.prompt_tokens", "service.name", "k8s.pod.name", "", "x"}

func randomKVs(rng *rand.Rand, n, depth int) []*commonpb.KeyValue {
	kvs := make([]*commonpb.KeyValue, 0, n)
	for range n {
		kv := &commonpb.KeyValue{Key: kvKeys[rng.IntN(len(kvKeys))]}
		if rng.IntN(12) > 0 {
			kv.Value = randomAny(rng, depth)
		}
		kvs = append(kvs, kv)
	}
	return kvs
}

func randomAny(rng *rand.Rand, depth int) *commonpb.AnyValue {
	v := &commonpb.AnyValue{}
	kinds := 6
	if depth < 3 {
		kinds = 9
	}
	switch rng.IntN(kinds) {
	case 0:
		v.Value = &commonpb.AnyValue_StringValue{StringValue: pick(rng, "", "chatcmpl-1", "meta-llama/Llama-3.1-8B-Instruct", "ü")}
	case 1:
		v.Value = &commonpb.AnyValue_IntValue{IntValue: rng.Int64() - math.MaxInt64/2}
	case 2:
		v.Value = &commonpb.AnyValue_DoubleValue{DoubleValue: rng.NormFloat64()}
	case 3:
		v.Value = &commonpb.AnyValue_BoolValue{BoolValue: rng.IntN(2) == 0}
	case 4:
		v.Value = &commonpb.AnyValue_BytesValue{BytesValue: []byte{1, 2, byte(rng.IntN(256))}}
	case 5:
		// no value: Convert renders "null"
	case 6:
		arr := &commonpb.ArrayValue{}
		for range rng.IntN(3) {
			arr.Values = append(arr.Values, randomAny(rng, depth+1))
		}
		v.Value = &commonpb.AnyValue_ArrayValue{ArrayValue: arr}
	case 7:
		v.Value = &commonpb.AnyValue_KvlistValue{KvlistValue: &commonpb.KeyValueList{Values: randomKVs(rng, rng.IntN(3), depth+1)}}
	case 8:
		v.Value = &commonpb.AnyValue_StringValueStrindex{StringValueStrindex: int32(rng.IntN(9))}
	}
	return v
}

func pick(rng *rand.Rand, s ...string) string { return s[rng.IntN(len(s))] }

// mutate changes body as a broken or hostile exporter might: flipped
// bytes, a cut, a duplicated field (which merges), an unknown field.
func mutate(rng *rand.Rand, body []byte) []byte {
	b := append([]byte(nil), body...)
	switch rng.IntN(6) {
	case 0:
		for range rng.IntN(4) + 1 {
			if len(b) > 0 {
				b[rng.IntN(len(b))] = byte(rng.IntN(256))
			}
		}
	case 1:
		if len(b) > 0 {
			b = b[:rng.IntN(len(b))]
		}
	case 2:
		b = append(b, b...) // every resourceSpans twice
	case 3:
		b = protowire.AppendTag(b, protowire.Number(rng.IntN(40)+2), protowire.VarintType)
		b = protowire.AppendVarint(b, rng.Uint64())
	case 4:
		if len(b) > 0 {
			i := rng.IntN(len(b))
			b = append(b[:i:i], append([]byte{byte(rng.IntN(256))}, b[i:]...)...)
		}
	}
	return b
}

// TestDecoderMatchesProto decodes random export requests, intact and
// mutated, both ways and compares what each would store.
func TestDecoderMatchesProto(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var d Decoder
	n := 3000
	if testing.Short() {
		n = 500
	}
	for range n {
		body, err := proto.Marshal(randomRequest(rng))
		if err != nil {
			t.Fatal(err)
		}
		decodeBothWays(t, &d, body)
		decodeBothWays(t, &d, mutate(rng, body))
	}
}

// TestDecoderMergesRepeatedFields: fields that occur twice in a message
// keep the last value, and messages merge, as proto.Unmarshal has it.
func TestDecoderMergesRepeatedFields(t *testing.T) {
	sp := testRequest(1, 1).ResourceSpans[0].ScopeSpans[0].Spans[0]
	a, _ := proto.Marshal(sp)
	later := &tracepb.Span{Name: "renamed", Status: &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR},
		Attributes: []*commonpb.KeyValue{strKV("late", "x")}}
	b, _ := proto.Marshal(later)
	merged := append(a, b...)
	// One KeyValue whose value occurs twice: a string, then an int.
	kv := protowire.AppendTag(nil, fKeyValueKey, protowire.BytesType)
	kv = protowire.AppendString(kv, "twice")
	for _, v := range []*commonpb.AnyValue{{Value: &commonpb.AnyValue_StringValue{StringValue: "s"}}, {Value: &commonpb.AnyValue_IntValue{IntValue: 7}}} {
		vb, _ := proto.Marshal(v)
		kv = protowire.AppendTag(kv, fKeyValueValue, protowire.BytesType)
		kv = protowire.AppendBytes(kv, vb)
	}
	merged = protowire.AppendTag(merged, fSpanAttributes, protowire.BytesType)
	merged = protowire.AppendBytes(merged, kv)
	ss := protowire.AppendTag(nil, fScopeSpansSpans, protowire.BytesType)
	ss = protowire.AppendBytes(ss, merged)
	// The resource after the scope spans, and in two parts.
	rs := protowire.AppendTag(nil, fResourceSpansScopeSpans, protowire.BytesType)
	rs = protowire.AppendBytes(rs, ss)
	for _, kv := range []*commonpb.KeyValue{strKV("service.name", "vllm"), strKV("k8s.pod.name", "p")} {
		res, _ := proto.Marshal(&resourcepb.Resource{Attributes: []*commonpb.KeyValue{kv}})
		rs = protowire.AppendTag(rs, fResourceSpansResource, protowire.BytesType)
		rs = protowire.AppendBytes(rs, res)
	}
	body := protowire.AppendTag(nil, fRequestResourceSpans, protowire.BytesType)
	body = protowire.AppendBytes(body, rs)

	var d Decoder
	decodeBothWays(t, &d, body)
	spans, _, err := d.Decode(nil, body)
	if err != nil || len(spans) != 1 {
		t.Fatalf("Decode: %d spans, %v", len(spans), err)
	}
	s := spans[0]
	if s.Name != "renamed" || !s.Error || s.Attrs.String("late") != "x" || s.Attrs.String("twice") != "7" || s.Service() != "vllm" || s.Resource.String("k8s.pod.name") != "p" {
		t.Errorf("merged span: %+v", s)
	}
}

// FuzzDecodeProtobuf checks the Decoder against proto.Unmarshal and
// Convert on arbitrary bodies.
func FuzzDecodeProtobuf(f *testing.F) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 8 {
		b, _ := proto.Marshal(randomRequest(rng))
		f.Add(b)
	}
	b, _ := proto.Marshal(testRequest(2, 3))
	f.Add(b)
	f.Add(protoWithIDs([]byte{1}, []byte{2}))
	var d Decoder
	f.Fuzz(func(t *testing.T, body []byte) {
		decodeBothWays(t, &d, body)
	})
}

// BenchmarkDecodeProtobuf compares, on one goroutine, the Decoder with
// proto.Unmarshal plus Convert on vLLM-shaped 512-span bodies.
func BenchmarkDecodeProtobuf(b *testing.B) {
	body, _ := proto.Marshal(testRequest(4, 128))
	b.Run("decoder", func(b *testing.B) {
		var d Decoder
		var buf []span.Span
		b.ReportAllocs()
		for b.Loop() {
			var err error
			if buf, _, err = d.Decode(buf[:0], body); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(512*b.N)/b.Elapsed().Seconds(), "spans/s")
	})
	b.Run("proto+convert", func(b *testing.B) {
		var buf []span.Span
		b.ReportAllocs()
		for b.Loop() {
			var req coltracepb.ExportTraceServiceRequest
			if err := proto.Unmarshal(body, &req); err != nil {
				b.Fatal(err)
			}
			buf, _, _ = Convert(buf[:0], req.ResourceSpans)
		}
		b.ReportMetric(float64(512*b.N)/b.Elapsed().Seconds(), "spans/s")
	})
}
