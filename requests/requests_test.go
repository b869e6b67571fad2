package requests

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/whyslow/whyslow/span"
	"github.com/whyslow/whyslow/verdict"
)

var rqT0 = time.Unix(1700000000, 0)

type spanSpec struct {
	name          string
	id, parent    byte
	start, end    time.Duration // from rqT0
	attrs         span.Attrs
	pod           string
	trace         byte
	kind          span.SpanKind
	errorStatus   bool
	resourceAttrs span.Attrs
}

func mkSpan(s spanSpec) span.Span {
	sp := span.Span{
		TraceID:       span.TraceID{15: s.trace},
		SpanID:        span.SpanID{7: s.id},
		Name:          s.name,
		Kind:          s.kind,
		StartUnixNano: rqT0.Add(s.start).UnixNano(),
		EndUnixNano:   rqT0.Add(s.end).UnixNano(),
		Attrs:         s.attrs,
		Error:         s.errorStatus,
	}
	if s.parent != 0 {
		sp.ParentID = span.SpanID{7: s.parent}
	}
	if s.pod != "" {
		sp.Resource = span.Attrs{span.StringAttr("service.name", "vllm"), span.StringAttr("k8s.pod.name", s.pod)}
	}
	return sp
}

// v1Engine returns vLLM V1 llm_request attributes.
func v1Engine(reqID string, prompt int, queue, prefill, decode, e2e float64) span.Attrs {
	return span.Attrs{
		span.StringAttr(span.AttrRequestID, reqID),
		span.IntAttr(span.AttrPromptTokens, int64(prompt)),
		span.IntAttr(span.AttrCompletionTokens, 100),
		span.FloatAttr(span.AttrTimeInQueue, queue),
		span.FloatAttr(span.AttrTimeInPrefill, prefill),
		span.FloatAttr(span.AttrTimeInDecode, decode),
		span.FloatAttr(span.AttrTTFT, queue+prefill),
		span.FloatAttr(span.AttrE2E, e2e),
	}
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func near(a, b float64) bool { return math.Abs(a-b) < 1e-6 }

func TestBuildRequests(t *testing.T) {
	cases := []struct {
		name      string
		spans     []spanSpec
		wantParts map[RequestPart]float64
		wantSub   map[string]float64
		dominant  RequestPart
		e2e, ttft float64
		pod       string
		scores    map[string]float64
		source    string
	}{
		{
			name: "engine only V1",
			spans: []spanSpec{{name: "llm_request", id: 1, start: 0, end: ms(2000), pod: "vllm-0",
				attrs: v1Engine("r1", 500, 0.5, 0.3, 1.1, 2.0)}},
			wantParts: map[RequestPart]float64{PartBeforeEngine: 0, PartQueue: 0.5, PartPrefill: 0.3, PartDecode: 1.1, PartEngineOther: 0.1, PartAfterEngine: 0},
			dominant:  PartDecode, e2e: 2.0, ttft: 0.8, pod: "vllm-0", source: "v1",
		},
		{
			name: "V0 attributes derive prefill and decode",
			spans: []spanSpec{{name: "llm_request", id: 1, start: 0, end: ms(3000), pod: "vllm-0",
				attrs: span.Attrs{span.FloatAttr(span.AttrTimeInQueue, 1.5), span.FloatAttr(span.AttrTTFT, 2.0), span.FloatAttr(span.AttrE2E, 3.0), span.FloatAttr("gen_ai.latency.time_in_scheduler", 0.01)}}},
			wantParts: map[RequestPart]float64{PartQueue: 1.5, PartPrefill: 0.5, PartDecode: 1.0},
			dominant:  PartQueue, e2e: 3.0, ttft: 2.0, pod: "vllm-0", source: "v0",
		},
		{
			name: "client and llm-d gateway around the engine",
			spans: []spanSpec{
				{name: "POST /v1/chat/completions", id: 1, start: 0, end: ms(5000), kind: span.SpanKindClient},
				{name: "gateway.request", id: 2, parent: 1, start: ms(100), end: ms(4900), kind: span.SpanKindServer},
				{name: "gateway.request_orchestration", id: 3, parent: 2, start: ms(1100), end: ms(1400)},
				{name: "llm_d.epp.scorer.prefix_cache", id: 4, parent: 3, start: ms(1150), end: ms(1250),
					attrs: span.Attrs{span.FloatAttr("llm_d.scorer.score.max", 0.9), span.IntAttr("llm_d.scorer.candidate_endpoints", 4), span.StringAttr("llm_d.scorer.result", "ok")}},
				{name: "llm_request", id: 5, parent: 2, start: ms(1500), end: ms(3500), pod: "vllm-2",
					attrs: v1Engine("r2", 800, 0.2, 0.3, 1.5, 2.0)},
			},
			wantParts: map[RequestPart]float64{PartBeforeEngine: 1.5, PartQueue: 0.2, PartPrefill: 0.3, PartDecode: 1.5, PartAfterEngine: 1.5},
			wantSub:   map[string]float64{"client": 0.1, "admission": 1.0, "scoring": 0.1, "routing": 0.2, "proxy": 0.1},
			dominant:  PartBeforeEngine, e2e: 5.0, ttft: 2.0, pod: "vllm-2", source: "v1",
			scores: map[string]float64{"prefix_cache.score_max": 0.9, "prefix_cache.candidate_endpoints": 4},
		},
		{
			name: "P/D disaggregation folds the prefill leg",
			spans: []spanSpec{
				{name: "gateway.request", id: 1, start: 0, end: ms(3000)},
				{name: "llm_d.pd_proxy.prefill", id: 2, parent: 1, start: ms(100), end: ms(1100)},
				{name: "llm_request", id: 3, parent: 2, start: ms(100), end: ms(1100), pod: "prefill-0",
					attrs: span.Attrs{span.StringAttr(span.AttrRequestID, "p"), span.IntAttr(span.AttrPromptTokens, 9000), span.IntAttr(span.AttrCompletionTokens, 1),
						span.FloatAttr(span.AttrTimeInQueue, 0.2), span.FloatAttr(span.AttrTimeInPrefill, 0.8), span.FloatAttr(span.AttrTimeInDecode, 0), span.FloatAttr(span.AttrTTFT, 1.0), span.FloatAttr(span.AttrE2E, 1.0)}},
				{name: "llm_d.pd_proxy.decode", id: 4, parent: 1, start: ms(1200), end: ms(3000)},
				{name: "llm_request", id: 5, parent: 4, start: ms(1200), end: ms(3000), pod: "decode-0",
					attrs: v1Engine("d", 9000, 0.1, 0.1, 1.6, 1.8)},
			},
			wantParts: map[RequestPart]float64{PartBeforeEngine: 0.1, PartQueue: 0.3, PartPrefill: 0.9, PartDecode: 1.6, PartEngineOther: 0.1},
			dominant:  PartDecode, e2e: 3.0, ttft: 0.1 + 1.1 + 0.2, pod: "decode-0", source: "v1",
		},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var spans []span.Span
			for _, s := range c.spans {
				s.trace = byte(i + 1)
				spans = append(spans, mkSpan(s))
			}
			// Order must not matter.
			spans[0], spans[len(spans)-1] = spans[len(spans)-1], spans[0]
			got := BuildRequests(spans)
			if len(got) != 1 {
				t.Fatalf("got %d requests, want 1", len(got))
			}
			r := got[0]
			for p, want := range c.wantParts {
				if !near(r.Parts[p], want) {
					t.Errorf("part %s = %v, want %v", p, r.Parts[p], want)
				}
			}
			for k, want := range c.wantSub {
				if !near(r.BeforeEngineParts[k], want) {
					t.Errorf("before_engine.%s = %v, want %v (all %v)", k, r.BeforeEngineParts[k], want, r.BeforeEngineParts)
				}
			}
			if r.Dominant != c.dominant || !near(r.E2E, c.e2e) || !near(r.TTFT, c.ttft) || r.Pod != c.pod || r.Source != c.source {
				t.Errorf("dominant %s e2e %v ttft %v pod %s source %s", r.Dominant, r.E2E, r.TTFT, r.Pod, r.Source)
			}
			for k, want := range c.scores {
				if r.Scores[k] != want {
					t.Errorf("score %s = %v, want %v (all %v)", k, r.Scores[k], want, r.Scores)
				}
			}
			sum := 0.0
			for _, p := range requestParts {
				sum += r.Parts[p]
			}
			if !near(sum, r.E2E) {
				t.Errorf("parts add up to %v, e2e %v", sum, r.E2E)
			}
			req := r.Request()
			if req.TraceID != r.TraceID.String() || req.Dominant != string(c.dominant) || len(req.Parts) < 5 {
				t.Errorf("Request() = %+v", req)
			}
		})
	}
}

// fleet builds n requests spread over pods, 100 ms apart, each 1 s long
// with a 0.1 s TTFT, and lets mod change any of them.
func fleet(n int, pods []string, mod func(i int, s *spanSpec)) []span.Span {
	var out []span.Span
	for i := 0; i < n; i++ {
		s := spanSpec{name: "llm_request", id: 1, trace: byte(i + 1), start: ms(100 * i), end: ms(100*i + 1000),
			pod: pods[i%len(pods)], attrs: v1Engine("r", 500, 0.02, 0.08, 0.9, 1.0)}
		if mod != nil {
			mod(i, &s)
		}
		out = append(out, mkSpan(s))
	}
	return out
}

func TestSlowest(t *testing.T) {
	spans := fleet(20, []string{"a", "b"}, func(i int, s *spanSpec) {
		switch i {
		case 5:
			s.attrs = v1Engine("slow-e2e", 500, 0.02, 0.08, 4.9, 5.0)
		case 7:
			s.attrs = v1Engine("slow-ttft", 500, 1.0, 0.5, 0.1, 1.6)
		}
	})
	reqs := BuildRequests(spans)
	w := verdict.Window{Start: rqT0, End: rqT0.Add(time.Minute)}
	if got := Slowest(reqs, w.Start, w.End, 1, SlowByE2E); got[0].RequestID != "slow-e2e" {
		t.Errorf("slowest e2e = %s", got[0].RequestID)
	}
	if got := Slowest(reqs, w.Start, w.End, 1, SlowByTTFT); got[0].RequestID != "slow-ttft" {
		t.Errorf("slowest ttft = %s", got[0].RequestID)
	}
	both := SlowestRequests(reqs, w.Start, w.End, 1)
	if len(both) != 2 || both[0].RequestID != "slow-e2e" || both[1].RequestID != "slow-ttft" {
		t.Errorf("SlowestRequests = %v", both)
	}
	if p, share := DominantPart(both); p != PartDecode || share < 0.5 {
		t.Errorf("dominant = %s %.2f", p, share)
	}
	if got := Slowest(reqs, rqT0.Add(time.Hour), rqT0.Add(2*time.Hour), 5, SlowByE2E); len(got) != 0 {
		t.Errorf("outside window: %d", len(got))
	}
}

func TestCorrelateRequests(t *testing.T) {
	w := verdict.Window{Start: rqT0, End: rqT0.Add(time.Minute)}
	pods := []string{"vllm-0", "vllm-1", "vllm-2", "vllm-3"}
	cases := []struct {
		name      string
		spans     []span.Span
		in        CorrelationInput
		wantCause []string
		wantNote  string
	}{
		{
			name:  "healthy fleet",
			spans: fleet(40, pods, nil),
		},
		{
			name: "long prefill stalls others on its pod",
			spans: fleet(40, pods, func(i int, s *spanSpec) {
				switch {
				case i == 8: // vllm-0, starts at 0.8 s, prefill 0.82..2.82 s
					s.attrs = v1Engine("long", 30000, 0.02, 2.0, 0.5, 2.52)
					s.end = ms(800 + 2520)
				case i%4 == 0 && i > 8 && i <= 24: // vllm-0 requests starting 1.2..2.4 s
					s.attrs = v1Engine("victim", 300, 0.02, 1.5, 0.5, 2.02)
					s.end = s.start + ms(2020)
				}
			}),
			// The stalled requests sit on one pod, but most of its requests
			// were fine: no imbalance.
			wantCause: []string{"prefill_contention"},
		},
		{
			name: "gateway delay outside the engine",
			spans: func() []span.Span {
				var out []span.Span
				for i := 0; i < 12; i++ {
					base := ms(500 * i)
					tr := byte(i + 1)
					out = append(out,
						mkSpan(spanSpec{name: "gateway.request", id: 1, trace: tr, start: base, end: base + ms(4000)}),
						mkSpan(spanSpec{name: "llm_request", id: 2, parent: 1, trace: tr, start: base + ms(2500), end: base + ms(3500),
							pod: pods[i%4], attrs: v1Engine("r", 500, 0.02, 0.08, 0.9, 1.0)}))
				}
				return out
			}(),
			in:        CorrelationInput{ServerTTFT: rqPtr(0.1), ServerQuantile: 0.95},
			wantCause: []string{"outside_engine"},
			wantNote:  "time before the engine",
		},
		{
			name: "slow requests on one pod",
			spans: fleet(40, pods, func(i int, s *spanSpec) {
				if s.pod == "vllm-3" {
					s.attrs = v1Engine("hot", 500, 2.0, 0.08, 0.9, 3.0)
					s.end = s.start + ms(3000)
				}
			}),
			in: CorrelationInput{PodSamples: []PodSample{
				{Pod: "vllm-3", At: rqT0, Values: map[string]float64{"num_requests_waiting": 30, "kv_cache_usage": 0.95}},
				{Pod: "vllm-1", At: rqT0, Values: map[string]float64{"num_requests_waiting": 1, "kv_cache_usage": 0.4}},
			}},
			wantCause: []string{"load_imbalance"},
		},
		{
			name:     "server TTFT disagrees with spans",
			spans:    fleet(40, pods, nil),
			in:       CorrelationInput{ServerTTFT: rqPtr(0.5), ServerQuantile: 0.5},
			wantNote: "disagrees",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := c.in
			in.Requests = BuildRequests(c.spans)
			in.Window = w
			got := CorrelateRequests(in)
			var causes []string
			for id, ev := range got.Evidence {
				causes = append(causes, id)
				for _, e := range ev {
					if e.Step != "correlate" || e.Weight <= 0 || e.Weight > 1 || e.Text == "" {
						t.Errorf("bad evidence %+v", e)
					}
					t.Logf("%s: %s", id, e.Text)
				}
			}
			slices.Sort(causes)
			if strings.Join(causes, ",") != strings.Join(c.wantCause, ",") {
				t.Errorf("causes = %v, want %v", causes, c.wantCause)
			}
			if c.wantNote != "" && !strings.Contains(strings.Join(got.Notes, "\n"), c.wantNote) {
				t.Errorf("notes %q lack %q", got.Notes, c.wantNote)
			}
			if ev := got.Evidence["load_imbalance"]; len(ev) > 0 && len(got.Evidence["prefill_contention"]) > 0 &&
				ev[0].Weight >= got.Evidence["prefill_contention"][0].Weight {
				t.Errorf("imbalance caused by a long prefill outweighs the prefill evidence")
			}
			if len(got.Requests) == 0 {
				t.Fatal("no slow requests")
			}
			if c.name == "slow requests on one pod" && got.Requests[0].Context["num_requests_waiting"] != 30 {
				t.Errorf("pod context = %v", got.Requests[0].Context)
			}
		})
	}
}

// failingMetrics fails every query.
type failingMetrics struct{}

func (failingMetrics) Query(context.Context, string, time.Time) (model.Vector, []string, error) {
	return nil, nil, errors.New("not used")
}

func (failingMetrics) QueryRange(context.Context, string, time.Time, time.Time, time.Duration) (model.Matrix, []string, error) {
	return nil, nil, errors.New("not used")
}

func TestPodContextErrors(t *testing.T) {
	m := failingMetrics{}
	_, _, err := PodContext(context.Background(), m, PodContextQuery{Start: rqT0, End: rqT0.Add(time.Minute)})
	if err == nil || !strings.Contains(err.Error(), "pod context") {
		t.Errorf("err = %v", err)
	}
}
