package otlp

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/whyslow/whyslow/span"
)

// recorder is a Sink that keeps everything.
type recorder struct {
	mu    sync.Mutex
	spans []span.Span
}

func (r *recorder) Append(spans []span.Span) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, sp := range spans {
		sp.Attrs = slices.Clone(sp.Attrs)
		for i := range sp.Attrs {
			sp.Attrs[i].Str = strings.Clone(sp.Attrs[i].Str)
		}
		r.spans = append(r.spans, sp)
	}
}

func (r *recorder) all() []span.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]span.Span(nil), r.spans...)
}

func startReceiver(t *testing.T, opts Options) (*Receiver, *recorder) {
	t.Helper()
	rec := &recorder{}
	if opts.Sink == nil {
		opts.Sink = rec
	}
	opts.HTTPAddr, opts.GRPCAddr = "127.0.0.1:0", "127.0.0.1:0"
	r, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	return r, rec
}

var t0 = time.Unix(1700000000, 0)

func TestSDKExportersRoundTrip(t *testing.T) {
	r, rec := startReceiver(t, Options{})
	ctx := context.Background()
	exporters := []struct {
		name string
		new  func() (sdktrace.SpanExporter, error)
	}{
		{"http-protobuf", func() (sdktrace.SpanExporter, error) {
			return otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(r.HTTPAddr()), otlptracehttp.WithInsecure())
		}},
		{"http-protobuf-gzip", func() (sdktrace.SpanExporter, error) {
			return otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(r.HTTPAddr()), otlptracehttp.WithInsecure(),
				otlptracehttp.WithCompression(otlptracehttp.GzipCompression))
		}},
		{"http-json", func() (sdktrace.SpanExporter, error) {
			return otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(r.HTTPAddr()), otlptracehttp.WithInsecure(),
				otlptracehttp.WithEncoding(otlptracehttp.EncodingJSON))
		}},
		{"grpc-gzip", func() (sdktrace.SpanExporter, error) {
			return otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(r.GRPCAddr()), otlptracegrpc.WithInsecure(),
				otlptracegrpc.WithCompressor("gzip"))
		}},
	}
	for i, ex := range exporters {
		t.Run(ex.name, func(t *testing.T) {
			exp, err := ex.new()
			if err != nil {
				t.Fatal(err)
			}
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithResource(resource.NewSchemaless(
				attribute.String("service.name", "vllm"), attribute.String("k8s.pod.name", "vllm-0"))))
			tr := tp.Tracer("test")
			start := t0.Add(time.Duration(i) * time.Minute)
			reqID := "chatcmpl-" + ex.name
			pctx, parent := tr.Start(ctx, "client", trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindClient))
			_, llmSpan := tr.Start(pctx, "llm_request", trace.WithTimestamp(start.Add(10*time.Millisecond)),
				trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
					attribute.String("gen_ai.request.id", reqID),
					attribute.Int("gen_ai.usage.prompt_tokens", 2048),
					attribute.Float64("gen_ai.latency.time_in_queue", 0.25),
					attribute.Bool("stream", true)))
			llmSpan.End(trace.WithTimestamp(start.Add(1500 * time.Millisecond)))
			parent.End(trace.WithTimestamp(start.Add(1600 * time.Millisecond)))
			if err := tp.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			var got *span.Span
			for _, s := range rec.all() {
				if s.Attrs.String("gen_ai.request.id") == reqID {
					got = &s
				}
			}
			if got == nil {
				t.Fatalf("llm_request span %s not received", reqID)
			}
			sc := llmSpan.SpanContext()
			if got.TraceID != span.TraceID(sc.TraceID()) || got.SpanID != span.SpanID(sc.SpanID()) {
				t.Errorf("ids = %s/%s, want %s/%s", got.TraceID, got.SpanID, sc.TraceID(), sc.SpanID())
			}
			if got.ParentID != span.SpanID(parent.SpanContext().SpanID()) {
				t.Errorf("parent = %s, want %s", got.ParentID, parent.SpanContext().SpanID())
			}
			if !got.Start().Equal(start.Add(10*time.Millisecond)) || !got.End().Equal(start.Add(1500*time.Millisecond)) {
				t.Errorf("times = %v..%v", got.Start(), got.End())
			}
			if got.Name != "llm_request" || got.Kind != span.SpanKindServer {
				t.Errorf("name/kind = %q/%v", got.Name, got.Kind)
			}
			if v, ok := got.Attrs.Get("gen_ai.usage.prompt_tokens"); !ok || v.Kind != span.AttrInt || v.Int() != 2048 {
				t.Errorf("prompt_tokens = %+v", v)
			}
			if v, _ := got.Attrs.Number("gen_ai.latency.time_in_queue"); v != 0.25 {
				t.Errorf("time_in_queue = %v", v)
			}
			if v, ok := got.Attrs.Get("stream"); !ok || !v.Bool() {
				t.Errorf("stream = %+v", v)
			}
			if got.Service() != "vllm" || got.Resource.String("k8s.pod.name") != "vllm-0" {
				t.Errorf("resource = %+v", got.Resource)
			}
		})
	}
}

const jsonTraceID = "5b8efff798038103d269b633813fc60c"

func jsonBody(traceID, spanID, parentID string) string {
	return `{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"vllm"}}]},
	"futureField":{"x":1},
	"scopeSpans":[{"scope":{"name":"vllm"},"spans":[{"traceId":"` + traceID + `","spanId":"` + spanID + `","parentSpanId":"` + parentID + `",
	"name":"llm_request","kind":2,"startTimeUnixNano":"1700000000000000000","endTimeUnixNano":1700000001500000000,
	"unknownSpanField":[1,2],
	"attributes":[{"key":"gen_ai.usage.prompt_tokens","value":{"intValue":"512"}},
	              {"key":"gen_ai.latency.e2e","value":{"doubleValue":1.5}},
	              {"key":"tags","value":{"arrayValue":{"values":[{"stringValue":"a"},{"intValue":2}]}}}],
	"status":{"code":"STATUS_CODE_ERROR"}}]}]}]}`
}

func post(t testing.TB, h http.Handler, ctype, enc string, body []byte) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, TracesPath, bytes.NewReader(body))
	req.Header.Set("Content-Type", ctype)
	if enc != "" {
		req.Header.Set("Content-Encoding", enc)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

func gz(b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

func newTestReceiver(t *testing.T, opts Options) (*Receiver, *recorder, *prometheus.Registry) {
	t.Helper()
	rec := &recorder{}
	reg := prometheus.NewRegistry()
	opts.Sink, opts.Registerer = rec, reg
	r, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return r, rec, reg
}

func TestJSONHexIDs(t *testing.T) {
	r, rec, _ := newTestReceiver(t, Options{})
	w := post(t, r.Handler(), "application/json; charset=utf-8", "", []byte(jsonBody(jsonTraceID, "eee19b7ec3c1b174", "eee19b7ec3c1b173")))
	if w.Code != http.StatusOK {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("response content type %q", ct)
	}
	spans := rec.all()
	if len(spans) != 1 {
		t.Fatalf("got %d spans", len(spans))
	}
	s := spans[0]
	wantTrace, _ := hex.DecodeString(jsonTraceID)
	if !bytes.Equal(s.TraceID[:], wantTrace) || s.SpanID.String() != "eee19b7ec3c1b174" || s.ParentID.String() != "eee19b7ec3c1b173" {
		t.Errorf("ids = %s %s %s", s.TraceID, s.SpanID, s.ParentID)
	}
	if v, _ := s.Attrs.Number("gen_ai.usage.prompt_tokens"); v != 512 {
		t.Errorf("prompt tokens %v", v)
	}
	if s.Attrs.String("tags") != `["a",2]` {
		t.Errorf("array attr = %q", s.Attrs.String("tags"))
	}
	if !s.Error || s.Kind != span.SpanKindServer || s.Duration() != 1500*time.Millisecond {
		t.Errorf("span = %+v", s)
	}
}

func TestHTTPErrors(t *testing.T) {
	const traceField = "resourceSpans[0].scopeSpans[0].spans[0].traceId"
	cases := []struct {
		name     string
		ctype    string
		enc      string
		body     []byte
		code     int
		wantMsg  string
		maxBytes int64
	}{
		{"short trace id", "application/json", "", []byte(jsonBody(jsonTraceID[:30], "eee19b7ec3c1b174", "")), 400, traceField, 0},
		{"long span id", "application/json", "", []byte(jsonBody(jsonTraceID, "eee19b7ec3c1b17400", "")), 400, "spans[0].spanId", 0},
		{"base64 trace id", "application/json", "", []byte(jsonBody("W47/95gDgQPSabYzgT/GDA==", "eee19b7ec3c1b174", "")), 400, traceField, 0},
		{"non-hex parent", "application/json", "", []byte(jsonBody(jsonTraceID, "eee19b7ec3c1b174", "zzz19b7ec3c1b174")), 400, "parentSpanId", 0},
		{"bad json", "application/json", "", []byte(`{"resourceSpans":[`), 400, "invalid JSON", 0},
		{"bad protobuf", "application/x-protobuf", "", []byte{0x0a, 0xff, 0xff}, 400, "invalid protobuf", 0},
		{"wrong-length protobuf id", "application/x-protobuf", "", protoWithIDs([]byte{1, 2, 3}, []byte{1, 2, 3, 4, 5, 6, 7, 8}), 400, traceField, 0},
		{"bad gzip", "application/x-protobuf", "gzip", []byte("not gzip"), 400, "gzip", 0},
		{"too large", "application/json", "", []byte(jsonBody(jsonTraceID, "eee19b7ec3c1b174", "")), 413, "over", 100},
		{"gzip bomb", "application/json", "gzip", gz(bytes.Repeat([]byte(" "), 10000)), 413, "over", 1000},
		{"content type", "text/plain", "", []byte("x"), 415, "content type", 0},
		{"content encoding", "application/json", "br", []byte("x"), 415, "content encoding", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, _, _ := newTestReceiver(t, Options{MaxRequestBytes: c.maxBytes})
			w := post(t, r.Handler(), c.ctype, c.enc, c.body)
			if w.Code != c.code {
				t.Fatalf("status %d, want %d: %s", w.Code, c.code, w.Body)
			}
			if !strings.Contains(w.Body.String(), c.wantMsg) {
				t.Errorf("body %q does not mention %q", w.Body, c.wantMsg)
			}
			if w.Header().Get("Retry-After") != "" {
				t.Errorf("Retry-After set on a non-retryable error")
			}
			if c.ctype == "application/x-protobuf" {
				var st statuspb.Status
				if err := proto.Unmarshal(w.Body.Bytes(), &st); err != nil || !strings.Contains(st.Message, c.wantMsg) {
					t.Errorf("protobuf status %v, %v", &st, err)
				}
			}
		})
	}
}

func protoWithIDs(traceID, spanID []byte) []byte {
	req := testRequest(1, 1)
	sp := req.ResourceSpans[0].ScopeSpans[0].Spans[0]
	sp.TraceId, sp.SpanId = traceID, spanID
	b, _ := proto.Marshal(req)
	return b
}

func TestGzipAndPartialSuccess(t *testing.T) {
	for _, ctype := range []string{"application/x-protobuf", "application/json"} {
		t.Run(ctype, func(t *testing.T) {
			r, rec, reg := newTestReceiver(t, Options{})
			req := testRequest(1, 4)
			spans := req.ResourceSpans[0].ScopeSpans[0].Spans
			spans[1].SpanId = make([]byte, 8) // zero span id
			spans[2].TraceId = nil            // missing trace id
			spans[3].EndTimeUnixNano = 1      // end before start
			var body []byte
			if ctype == "application/json" {
				body, _ = EncodeJSON(req)
			} else {
				body, _ = proto.Marshal(req)
			}
			w := post(t, r.Handler(), ctype, "gzip", gz(body))
			if w.Code != http.StatusOK {
				t.Fatalf("status %d: %s", w.Code, w.Body)
			}
			if w.Header().Get("Content-Type") != ctype {
				t.Errorf("response content type %q", w.Header().Get("Content-Type"))
			}
			var resp coltracepb.ExportTraceServiceResponse
			var err error
			if ctype == "application/json" {
				err = protojson.Unmarshal(w.Body.Bytes(), &resp)
			} else {
				err = proto.Unmarshal(w.Body.Bytes(), &resp)
			}
			if err != nil {
				t.Fatal(err)
			}
			ps := resp.GetPartialSuccess()
			if ps.GetRejectedSpans() != 3 || !strings.Contains(ps.GetErrorMessage(), "spans[1].spanId") {
				t.Errorf("partial success = %v", ps)
			}
			if n := len(rec.all()); n != 1 {
				t.Errorf("stored %d spans, want 1", n)
			}
			if v := testutil.ToFloat64(r.rejected.WithLabelValues("invalid_span")); v != 3 {
				t.Errorf("rejected metric = %v", v)
			}
			if n, _ := testutil.GatherAndCount(reg, "whyslow_otlp_spans_received_total"); n != 2 {
				t.Errorf("received series = %d", n)
			}
		})
	}
}

func TestOverloadIsRetryable(t *testing.T) {
	r, _, _ := newTestReceiver(t, Options{MaxInFlight: 1})
	r.acquire() // hold the only slot
	body, _ := proto.Marshal(testRequest(1, 1))
	w := post(t, r.Handler(), "application/x-protobuf", "", body)
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Fatalf("status %d, Retry-After %q", w.Code, w.Header().Get("Retry-After"))
	}
	r.release()
	if w := post(t, r.Handler(), "application/x-protobuf", "", body); w.Code != http.StatusOK {
		t.Fatalf("after release: status %d", w.Code)
	}
	req := httptest.NewRequest(http.MethodGet, TracesPath, nil)
	rw := httptest.NewRecorder()
	r.Handler().ServeHTTP(rw, req)
	if rw.Code != http.StatusMethodNotAllowed || rw.Header().Get("Allow") != "POST" {
		t.Errorf("GET: status %d", rw.Code)
	}
}

func TestJSONRoundTrip(t *testing.T) {
	req := testRequest(2, 3)
	b, err := EncodeJSON(req)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(`"traceId":"`+hex.EncodeToString(req.ResourceSpans[0].ScopeSpans[0].Spans[0].TraceId)+`"`)) {
		t.Fatalf("trace id not hex in %s", b[:200])
	}
	got, err := DecodeJSON(b, IDHex)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, req) {
		t.Errorf("round trip differs:\n got %v\nwant %v", got, req)
	}
}

func TestDecodeJSONLenientIDs(t *testing.T) {
	// Tempo's protojson output: base64 ids under "batches".
	body := `{"batches":[{"resource":{},"instrumentationLibrarySpans":[{"spans":[
	  {"traceId":"W47/95gDgQPSabYzgT/GDA==","spanId":"7uGbfsPBsXQ=","name":"x","startTimeUnixNano":"1","endTimeUnixNano":"2","kind":"SPAN_KIND_CLIENT"}]}]}]}`
	req, err := DecodeJSON([]byte(body), IDHexOrBase64)
	if err != nil {
		t.Fatal(err)
	}
	sp := req.ResourceSpans[0].ScopeSpans[0].Spans[0]
	if hex.EncodeToString(sp.TraceId) != jsonTraceID || hex.EncodeToString(sp.SpanId) != "eee19b7ec3c1b174" {
		t.Errorf("ids = %x %x", sp.TraceId, sp.SpanId)
	}
	if sp.Kind != 3 {
		t.Errorf("kind = %v", sp.Kind)
	}
	if _, err := DecodeJSON([]byte(body), IDHex); err == nil {
		t.Error("strict decoding accepted base64 ids")
	}
}
