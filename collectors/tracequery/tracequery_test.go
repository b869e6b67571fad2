package tracequery

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/whyslow/whyslow/span"
)

var t0 = time.Unix(1700000000, 0)

const traceHex = "5b8efff798038103d269b633813fc60c"

// tempoTraceV1 is shaped like Tempo 2.x /api/traces/{id}: "batches", base64
// ids (gogo jsonpb), string nanos, enum names.
const tempoTraceV1 = `{"batches":[{"resource":{"attributes":[
  {"key":"service.name","value":{"stringValue":"vllm"}},
  {"key":"k8s.pod.name","value":{"stringValue":"vllm-1"}}]},
 "scopeSpans":[{"scope":{"name":"vllm.llm_engine"},"spans":[
  {"traceId":"W47/95gDgQPSabYzgT/GDA==","spanId":"7uGbfsPBsXQ=","parentSpanId":"7uGbfsPBsXM=","name":"llm_request",
   "kind":"SPAN_KIND_SERVER","startTimeUnixNano":"1700000000500000000","endTimeUnixNano":"1700000002500000000",
   "attributes":[{"key":"gen_ai.request.id","value":{"stringValue":"chatcmpl-1"}},
                 {"key":"gen_ai.latency.e2e","value":{"doubleValue":2}},
                 {"key":"gen_ai.usage.prompt_tokens","value":{"intValue":"900"}}],
   "status":{}}]}]},
 {"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"gateway-api-inference-extension/epp"}}]},
  "scopeSpans":[{"scope":{"name":"gateway-api-inference-extension/epp/extproc"},"spans":[
  {"traceId":"W47/95gDgQPSabYzgT/GDA==","spanId":"7uGbfsPBsXM=","name":"gateway.request","kind":"SPAN_KIND_SERVER",
   "startTimeUnixNano":"1700000000000000000","endTimeUnixNano":"1700000003000000000","status":{}}]}]}]}`

// tempoTraceV2 is shaped like /api/v2/traces/{id}: {"trace":{"resourceSpans"}} with hex ids.
const tempoTraceV2 = `{"trace":{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"vllm"}}]},
 "scopeSpans":[{"spans":[{"traceId":"` + traceHex + `","spanId":"eee19b7ec3c1b174","name":"llm_request","kind":2,
 "startTimeUnixNano":"1700000000500000000","endTimeUnixNano":"1700000002500000000",
 "attributes":[{"key":"gen_ai.request.id","value":{"stringValue":"chatcmpl-1"}}]}]}]}]},"status":"complete"}`

// tempoSearchBody is shaped like /api/search: trace ids may lose leading zeros.
const tempoSearchBody = `{"traces":[{"traceID":"` + traceHex + `","rootServiceName":"gateway-api-inference-extension/epp",
 "rootTraceName":"gateway.request","startTimeUnixNano":"1700000000000000000","durationMs":3000,
 "spanSet":{"spans":[{"spanID":"eee19b7ec3c1b174","startTimeUnixNano":"1700000000500000000","durationNanos":"2000000000"}],"matched":1}}],
 "metrics":{"inspectedBytes":"1024","completedJobs":1,"totalJobs":1}}`

func TestTempo(t *testing.T) {
	for _, shape := range []struct{ name, trace string }{{"v1 batches base64", tempoTraceV1}, {"v2 resourceSpans hex", tempoTraceV2}} {
		t.Run(shape.name, func(t *testing.T) {
			var queries []string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch {
				case r.URL.Path == "/api/traces/"+traceHex:
					w.Write([]byte(shape.trace))
				case r.URL.Path == "/api/search":
					queries = append(queries, r.URL.Query().Get("q")+"|"+r.URL.Query().Get("start"))
					w.Write([]byte(tempoSearchBody))
				default:
					http.NotFound(w, r)
				}
			}))
			defer srv.Close()
			ctx := context.Background()
			tp := &Tempo{BaseURL: srv.URL}
			id, _ := span.ParseTraceID(traceHex)
			spans, err := tp.Trace(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			var eng *span.Span
			for i := range spans {
				if spans[i].Name == "llm_request" {
					eng = &spans[i]
				}
			}
			if eng == nil || eng.TraceID != id || eng.SpanID.String() != "eee19b7ec3c1b174" || eng.Kind != span.SpanKindServer {
				t.Fatalf("spans = %+v", spans)
			}
			if !eng.Start().Equal(t0.Add(500 * time.Millisecond)) {
				t.Errorf("start = %v", eng.Start())
			}
			got, err := tp.SpansBetween(ctx, t0, t0.Add(time.Minute), 0)
			if err != nil || len(got) != len(spans) {
				t.Errorf("SpansBetween = %d spans, %v", len(got), err)
			}
			if got, err := tp.ByRequestID(ctx, "chatcmpl-1"); err != nil || len(got) != 1 {
				t.Errorf("ByRequestID = %d spans, %v", len(got), err)
			}
			if len(queries) != 2 || queries[0] != `{ name = "llm_request" }|1700000000` || !strings.Contains(queries[1], `span.gen_ai.request.id = "chatcmpl-1"`) {
				t.Errorf("queries = %q", queries)
			}
			if _, err := tp.Trace(ctx, span.TraceID{1}); !errors.Is(err, span.ErrTraceNotFound) {
				t.Errorf("missing trace: %v", err)
			}
		})
	}
	if ids, err := ParseTempoSearch([]byte(`{"traces":[{"traceID":"7a1d2dd4deaf177e0acf55b3c49032"}]}`)); err != nil || ids[0].String() != "007a1d2dd4deaf177e0acf55b3c49032" {
		t.Errorf("trimmed id: %v %v", ids, err)
	}
}

// jaegerBody is shaped like Jaeger query's /api/traces/{id}.
const jaegerBody = `{"data":[{"traceID":"` + traceHex + `","spans":[
 {"traceID":"` + traceHex + `","spanID":"eee19b7ec3c1b174","operationName":"llm_request",
  "references":[{"refType":"CHILD_OF","traceID":"` + traceHex + `","spanID":"eee19b7ec3c1b173"}],
  "startTime":1700000000500000,"duration":2000000,
  "tags":[{"key":"gen_ai.request.id","type":"string","value":"chatcmpl-1"},
          {"key":"gen_ai.usage.prompt_tokens","type":"int64","value":900},
          {"key":"gen_ai.latency.e2e","type":"float64","value":2.0},
          {"key":"span.kind","type":"string","value":"server"},
          {"key":"otel.status_code","type":"string","value":"ERROR"},
          {"key":"internal.span.format","type":"string","value":"otlp"}],
  "logs":[],"processID":"p1","warnings":null},
 {"traceID":"` + traceHex + `","spanID":"eee19b7ec3c1b173","operationName":"gateway.request","references":[],
  "startTime":1700000000000000,"duration":3000000,"tags":[{"key":"span.kind","type":"string","value":"server"}],
  "logs":[],"processID":"p2","warnings":null}],
 "processes":{"p1":{"serviceName":"vllm","tags":[{"key":"k8s.pod.name","type":"string","value":"vllm-1"},{"key":"vllm.process_id","type":"int64","value":42}]},
              "p2":{"serviceName":"gateway-api-inference-extension/epp","tags":[]}},
 "warnings":null}],"total":0,"limit":0,"offset":0,"errors":null}`

func TestJaeger(t *testing.T) {
	var searches []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/traces/" + traceHex:
			w.Write([]byte(jaegerBody))
		case "/api/traces":
			searches = append(searches, r.URL.RawQuery)
			w.Write([]byte(jaegerBody))
		default:
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"data":null,"total":0,"limit":0,"offset":0,"errors":[{"code":404,"msg":"trace not found"}]}`))
		}
	}))
	defer srv.Close()
	ctx := context.Background()
	id, _ := span.ParseTraceID(traceHex)
	j := &Jaeger{BaseURL: srv.URL}
	spans, err := j.Trace(ctx, id)
	if err != nil || len(spans) != 2 {
		t.Fatalf("Trace = %d, %v", len(spans), err)
	}
	gw, eng := spans[0], spans[1]
	if gw.Name != "gateway.request" || eng.ParentID != gw.SpanID || eng.Kind != span.SpanKindServer || !eng.Error {
		t.Errorf("spans = %+v", spans)
	}
	if v, _ := eng.Attrs.Number("gen_ai.usage.prompt_tokens"); v != 900 || eng.Resource.String("k8s.pod.name") != "vllm-1" || eng.Service() != "vllm" {
		t.Errorf("attrs %v resource %v", eng.Attrs, eng.Resource)
	}
	if eng.Duration() != 2*time.Second || !eng.Start().Equal(t0.Add(500*time.Millisecond)) {
		t.Errorf("times %v %v", eng.Start(), eng.Duration())
	}
	// What triage's request model reads (the gateway's 0.5 s before the
	// engine, the request id, the parent link); the model itself is
	// triage's to test: collectors do not import it.
	if !gw.Start().Equal(t0) || eng.StartUnixNano-gw.StartUnixNano != int64(500*time.Millisecond) ||
		eng.Attrs.String(span.AttrRequestID) != "chatcmpl-1" || eng.Name != span.SpanLLMRequest {
		t.Errorf("request spans: gateway %v, engine %v %q", gw.Start(), eng.Start(), eng.Attrs.String(span.AttrRequestID))
	}
	if _, err := j.SpansBetween(ctx, t0, t0.Add(time.Minute), 0); !errors.Is(err, span.ErrUnsupported) {
		t.Errorf("search without service: %v", err)
	}
	j.Service = "vllm"
	if got, err := j.ByRequestID(ctx, "chatcmpl-1"); err != nil || len(got) != 1 {
		t.Errorf("ByRequestID = %d, %v", len(got), err)
	}
	if got, err := j.SpansBetween(ctx, t0, t0.Add(time.Minute), 0); err != nil || len(got) != 2 {
		t.Errorf("SpansBetween = %d, %v", len(got), err)
	}
	if len(searches) != 2 || !strings.Contains(searches[0], "tags=") || !strings.Contains(searches[1], "start=1700000000000000") {
		t.Errorf("searches = %q", searches)
	}
	if _, err := j.Trace(ctx, span.TraceID{1}); !errors.Is(err, span.ErrTraceNotFound) {
		t.Errorf("missing: %v", err)
	}
}

func TestReadJSONL(t *testing.T) {
	line := `{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"vllm"}}]},"scopeSpans":[{"spans":[` +
		`{"traceId":"` + traceHex + `","spanId":"eee19b7ec3c1b174","name":"llm_request","kind":2,"startTimeUnixNano":"1700000000500000000","endTimeUnixNano":"1700000002500000000",` +
		`"attributes":[{"key":"gen_ai.request.id","value":{"stringValue":"chatcmpl-1"}}]},` +
		`{"traceId":"` + traceHex + `","spanId":"0000000000000000","name":"bad","startTimeUnixNano":"1","endTimeUnixNano":"2"}]}]}]}`
	t.Run("valid", func(t *testing.T) {
		f, err := ReadJSONL(strings.NewReader(line+"\n\n"+line), "traces.jsonl")
		if err != nil {
			t.Fatal(err)
		}
		if f.Spans != 2 || f.Rejected != 2 || !strings.HasPrefix(f.Reason, "traces.jsonl:1: ") {
			t.Errorf("spans %d rejected %d reason %q", f.Spans, f.Rejected, f.Reason)
		}
		got, err := f.ByRequestID(context.Background(), "chatcmpl-1")
		if err != nil || len(got) != 2 || got[0].TraceID.String() != traceHex {
			t.Errorf("ByRequestID = %v, %v", got, err)
		}
	})
	bad := []struct{ name, body, want string }{
		{"syntax", line + "\n" + `{"resourceSpans":[}`, "traces.jsonl:2:19: invalid JSON"},
		{"short id", strings.Replace(line, traceHex, traceHex[:30], 1), "traces.jsonl:1: resourceSpans[0].scopeSpans[0].spans[0].traceId"},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			_, err := ReadJSONL(strings.NewReader(c.body), "traces.jsonl")
			if err == nil || !strings.HasPrefix(err.Error(), c.want) {
				t.Errorf("err = %v, want prefix %q", err, c.want)
			}
		})
	}
}
