package spanstore_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/whyslow/whyslow/collectors/spanstore"
	"github.com/whyslow/whyslow/collectors/tracequery"
	"github.com/whyslow/whyslow/span"
)

var httpT0 = time.Unix(1700000000, 0)

func httpSpans() []span.Span {
	res := span.Attrs{span.StringAttr("service.name", "vllm"), span.StringAttr("k8s.pod.name", "vllm-0")}
	var out []span.Span
	for i := 0; i < 5; i++ {
		start := httpT0.Add(time.Duration(i) * time.Second)
		tid := span.TraceID{15: byte(i + 1)}
		out = append(out,
			span.Span{TraceID: tid, SpanID: span.SpanID{7: 1}, Name: "gateway.request", Kind: span.SpanKindServer,
				StartUnixNano: start.UnixNano(), EndUnixNano: start.Add(2 * time.Second).UnixNano(),
				Resource: span.Attrs{span.StringAttr("service.name", "epp")}},
			span.Span{TraceID: tid, SpanID: span.SpanID{7: 2}, ParentID: span.SpanID{7: 1}, Name: "llm_request", Kind: span.SpanKindServer,
				StartUnixNano: start.Add(10 * time.Millisecond).UnixNano(), EndUnixNano: start.Add(1900 * time.Millisecond).UnixNano(),
				Attrs: span.Attrs{span.StringAttr(span.AttrRequestID, "req-"+string(rune('a'+i))), span.FloatAttr(span.AttrE2E, 1.89),
					span.IntAttr(span.AttrPromptTokens, 100), span.BoolAttr("stream", true)},
				Resource: res, Error: i == 3},
		)
	}
	return out
}

// TestQueryHandlerWithTempoClient serves a store through the Tempo-compatible
// API and reads it back with whyslow's own Tempo client.
func TestQueryHandlerWithTempoClient(t *testing.T) {
	st, err := spanstore.New(spanstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st.Append(httpSpans())
	srv := httptest.NewServer(st.QueryHandler(func() time.Time { return httpT0.Add(time.Minute) }))
	defer srv.Close()
	tc := &tracequery.Tempo{BaseURL: srv.URL}
	ctx := context.Background()

	spans, err := tc.Trace(ctx, span.TraceID{15: 4})
	if err != nil {
		t.Fatal(err)
	}
	if len(spans) != 2 || spans[1].Name != "llm_request" || !spans[1].Error || spans[1].Attrs.String(span.AttrRequestID) != "req-d" ||
		spans[1].ParentID != (span.SpanID{7: 1}) || spans[1].Resource.String("k8s.pod.name") != "vllm-0" {
		t.Fatalf("trace = %+v", spans)
	}
	if a, _ := spans[1].Attrs.Get("stream"); a.Kind != span.AttrBool || !a.Bool() {
		t.Errorf("bool attribute = %+v", a)
	}
	if _, err := tc.Trace(ctx, span.TraceID{15: 99}); !strings.Contains(err.Error(), span.ErrTraceNotFound.Error()) {
		t.Errorf("unknown trace: %v", err)
	}

	between, err := tc.SpansBetween(ctx, httpT0.Add(time.Second), httpT0.Add(3*time.Second), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(between) != 4 {
		t.Errorf("spans between: %d, want 4", len(between))
	}
	byReq, err := tc.ByRequestID(ctx, "req-c")
	if err != nil {
		t.Fatal(err)
	}
	if len(byReq) != 1 || byReq[0].TraceID != (span.TraceID{15: 3}) {
		t.Errorf("by request id = %+v", byReq)
	}
}

func TestQueryHandlerErrors(t *testing.T) {
	st, _ := spanstore.New(spanstore.Options{})
	st.Append(httpSpans())
	h := st.QueryHandler(func() time.Time { return httpT0.Add(time.Minute) })
	cases := []struct {
		name, url string
		code      int
		body      string
	}{
		{"bad id", "/api/traces/xyz", http.StatusBadRequest, "trace id"},
		{"long id", "/api/traces/" + strings.Repeat("a", 33), http.StatusBadRequest, "32 hex"},
		{"unknown", "/api/traces/0123", http.StatusNotFound, "not found"},
		{"bad traceql", "/api/search?q=" + "%7B%20duration%20%3E%201s%20%7D", http.StatusBadRequest, "unsupported condition"},
		{"bad limit", "/api/search?limit=-1", http.StatusBadRequest, "limit"},
		{"bad start", "/api/search?start=yesterday", http.StatusBadRequest, "Unix seconds"},
		{"search all", "/api/search?start=1700000000&end=1700000010&limit=2", http.StatusOK, `"traceID":"00000000000000000000000000000002"`},
		{"search name", "/api/search?q=" + "%7B%20name%20%3D%20%22llm_request%22%20%26%26%20resource.k8s.pod.name%20%3D%20%22vllm-0%22%20%7D", http.StatusOK, `"rootServiceName":"epp"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, c.url, nil))
			if rec.Code != c.code || !strings.Contains(rec.Body.String(), c.body) {
				t.Errorf("%s: %d %q, want %d containing %q", c.url, rec.Code, rec.Body.String(), c.code, c.body)
			}
		})
	}
}

func TestParseTraceQL(t *testing.T) {
	cases := []struct {
		q    string
		want []spanstore.Cond
		err  bool
	}{
		{q: ""},
		{q: "{}"},
		{q: `{ name = "llm_request" }`, want: []spanstore.Cond{{Scope: "name", Value: "llm_request"}}},
		{q: `{ span.gen_ai.request.id = "a\"b" && .k8s.pod.name = "p" }`, want: []spanstore.Cond{
			{Scope: "span", Key: "gen_ai.request.id", Value: `a"b`}, {Key: "k8s.pod.name", Value: "p"}}},
		{q: `name = "x"`, err: true},
		{q: `{ duration > 1s }`, err: true},
	}
	for _, c := range cases {
		t.Run(c.q, func(t *testing.T) {
			got, err := spanstore.ParseTraceQL(c.q)
			if (err != nil) != c.err {
				t.Fatalf("err = %v", err)
			}
			if len(got) != len(c.want) {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
			for i := range got {
				if got[i] != c.want[i] {
					t.Errorf("cond %d = %+v, want %+v", i, got[i], c.want[i])
				}
			}
		})
	}
}

func FuzzParseTraceQL(f *testing.F) {
	for _, s := range []string{"", "{}", `{ name = "llm_request" }`, `{ span.gen_ai.request.id = "a\"b" && .k8s.pod.name = "p" }`, `{ resource.service.name = "vllm" }`, "{ duration > 1s }", `{ name = "x`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		conds, err := spanstore.ParseTraceQL(q)
		if err != nil {
			return
		}
		for _, c := range conds {
			switch c.Scope {
			case "name", "span", "resource", "":
			default:
				t.Fatalf("scope %q from %q", c.Scope, q)
			}
			if c.Scope != "name" && c.Key == "" {
				t.Fatalf("empty key from %q", q)
			}
		}
	})
}
