package requests

import (
	"slices"
	"testing"

	"github.com/whyslow/whyslow/span"
)

// TestRequestScope keeps the traced requests of the scope: by the model the
// spans name (the engine span's gen_ai.response.model, else a
// gen_ai.request.model, the gateway's included), the pod and the namespace;
// a request whose spans do not say is kept only when the scope does not
// constrain that label.
func TestRequestScope(t *testing.T) {
	engine := func(trace byte, pod string, extra ...span.Attr) span.Span {
		s := mkSpan(spanSpec{name: span.SpanLLMRequest, id: 2, trace: trace, start: ms(10), end: ms(1010), pod: pod,
			attrs: append(v1Engine("r", 100, 0.1, 0.2, 0.7, 1), extra...)})
		if pod != "" {
			s.Resource = append(s.Resource, span.StringAttr(span.AttrNamespace, "prod"))
		}
		return s
	}
	gateway := func(trace byte, model string) span.Span {
		return mkSpan(spanSpec{name: span.SpanGatewayRequest, id: 1, trace: trace, start: 0, end: ms(1020),
			attrs: span.Attrs{span.StringAttr(span.AttrRequestModel, model)}})
	}
	spans := []span.Span{
		engine(1, "vllm-8b-0", span.StringAttr(span.AttrResponseModel, "llama-8b")),
		engine(2, "vllm-70b-0", span.StringAttr(span.AttrResponseModel, "llama-70b"), span.StringAttr(span.AttrRequestModel, "llama-8b")),
		gateway(3, "llama-70b"),
		engine(3, "vllm-70b-1"),
		engine(4, "vllm-8b-1", span.StringAttr(span.AttrRequestModel, "llama-8b")),
		engine(5, ""), // says nothing: no model, no pod, no namespace
	}
	spans[3].ParentID = spans[2].SpanID
	reqs := BuildRequests(spans)
	if len(reqs) != 5 {
		t.Fatalf("%d requests, want 5", len(reqs))
	}
	cases := []struct {
		selector string
		want     []byte // traces kept
	}{
		{``, []byte{1, 2, 3, 4, 5}},
		{`model_name="llama-8b"`, []byte{1, 4}},
		{`model_name="llama-70b"`, []byte{2, 3}},
		{`model_name=~"llama-.*"`, []byte{1, 2, 3, 4}},
		{`model_name!="llama-70b"`, []byte{1, 4, 5}},
		{`model_name=~"llama-70b|"`, []byte{2, 3, 5}},
		{`model="llama-8b"`, []byte{1, 4}},
		{`pod="vllm-70b-1"`, []byte{3}},
		{`pod=~"vllm-70b-.*", model_name="llama-70b"`, []byte{2, 3}},
		{`namespace="prod"`, []byte{1, 2, 3, 4}},
		{`job="vllm", instance="10.0.0.1:8000"`, []byte{1, 2, 3, 4, 5}}, // no mapping: no filter
		{`kubernetes_pod_name="vllm-8b-0"`, []byte{1}},                  // the scope's target label
	}
	for _, c := range cases {
		t.Run(c.selector, func(t *testing.T) {
			sc, err := NewScopeFilter(c.selector, []string{"kubernetes_pod_name", "instance"})
			if err != nil {
				t.Fatal(err)
			}
			var got []byte
			for _, r := range sc.Keep(reqs) {
				got = append(got, r.TraceID[15])
			}
			slices.Sort(got)
			if !slices.Equal(got, c.want) {
				t.Errorf("kept traces %v, want %v", got, c.want)
			}
		})
	}
	if _, err := NewScopeFilter(`model_name=`, nil); err == nil {
		t.Error("a bad selector parsed")
	}
}
