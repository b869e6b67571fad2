// Package requests builds the request model from spans (where each traced
// request spent its time) and correlates the slowest requests with their
// pods' metrics, as evidence for the diagnosis.
package requests

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/whyslow/whyslow/span"
	"github.com/whyslow/whyslow/verdict"
)

// Span-name prefixes of llm-d's endpoint picker (docs/engines.md §6); the
// span and attribute names themselves live in package span (names.go).
const (
	scorerSpanPrefix = "llm_d.epp.scorer."
	eppSpanPrefix    = "llm_d.epp."
)

// RequestPart names one slice of a request's time.
type RequestPart string

// Request parts. They add up to the request's e2e.
const (
	PartBeforeEngine RequestPart = "before_engine"
	PartQueue        RequestPart = "queue"
	PartPrefill      RequestPart = "prefill"
	PartDecode       RequestPart = "decode"
	PartAfterEngine  RequestPart = "after_engine"
	// PartEngineOther is engine time outside queue, prefill and decode
	// (input processing, a P/D hand-off, detokenising the tail).
	PartEngineOther RequestPart = "engine_other"
)

// String returns the part name.
func (p RequestPart) String() string { return string(p) }

// requestParts lists the parts in time order.
var requestParts = []RequestPart{PartBeforeEngine, PartQueue, PartPrefill, PartDecode, PartEngineOther, PartAfterEngine}

// RequestBreakdown is where one request's time went, from its spans. All
// durations are seconds.
type RequestBreakdown struct {
	TraceID   span.TraceID
	RequestID string
	// Pod is the engine pod that decoded the request; PrefillPod the pod that
	// ran its prefill under prefill/decode disaggregation.
	Pod        string
	PrefillPod string
	// Model is the model that served the request: the engine span's
	// gen_ai.response.model, else a gen_ai.request.model of the engine span or
	// of the spans it runs under (the gateway's); "" when no span says.
	Model string
	// Namespace is the engine span's k8s.namespace.name, "" when absent.
	Namespace string
	// Start is when the outermost span (client, gateway or engine) began;
	// EngineStart when the engine core queued the request (after its API
	// server, see BeforeEngineParts["api_server"]).
	Start       time.Time
	EngineStart time.Time
	// E2E is as seen by the outermost span; EngineE2E by the engine core
	// (queue to last token).
	E2E       float64
	EngineE2E float64
	// TTFT is as seen by the outermost span (upstream time plus the
	// engine's); EngineTTFT is the engine's gen_ai.latency.time_to_first_token
	// (from its API server's arrival, like the engine's TTFT histogram).
	// Zero when unknown.
	TTFT       float64
	EngineTTFT float64
	// Parts holds the six RequestPart durations.
	Parts map[RequestPart]float64
	// BeforeEngineParts splits before_engine where spans allow: client
	// (before the gateway), admission (gateway until scheduling), scoring,
	// routing, proxy (the rest of the way to the engine), api_server (the
	// engine's own API server: tokenisation, HTTP, IPC, from a V1 span's
	// TTFT − queue − prefill).
	BeforeEngineParts map[string]float64
	PromptTokens      int
	CompletionTokens  int
	// Scores are the router's scorer values, e.g. prefix_cache.score_max.
	Scores map[string]float64
	// Dominant is the largest part.
	Dominant RequestPart
	// Source says where the engine numbers came from: "v1" attributes, "v0"
	// attributes (prefill and decode derived from TTFT), or "span" (times
	// only).
	Source string
	Error  bool
}

// Outside returns the time spent outside the engine (before + after).
func (b *RequestBreakdown) Outside() float64 {
	return b.Parts[PartBeforeEngine] + b.Parts[PartAfterEngine]
}

// prefillWindow returns when the engine ran this request's prefill.
func (b *RequestBreakdown) prefillWindow() (time.Time, time.Time) {
	s := b.EngineStart.Add(rqDur(b.Parts[PartQueue]))
	return s, s.Add(rqDur(b.Parts[PartPrefill]))
}

func rqDur(sec float64) time.Duration { return time.Duration(sec * float64(time.Second)) }

func rqSec(ns int64) float64 { return float64(ns) / 1e9 }

// Request returns the verdict form of the breakdown.
func (b *RequestBreakdown) Request() verdict.Request {
	r := verdict.Request{
		TraceID:   b.TraceID.String(),
		RequestID: b.RequestID,
		Pod:       b.Pod,
		Start:     b.Start.UTC(),
		E2E:       rqRound(b.E2E),
		TTFT:      rqRound(b.TTFT),
		Dominant:  string(b.Dominant),
		Parts:     map[string]float64{},
	}
	for _, p := range requestParts {
		if v := b.Parts[p]; v > 0 || p != PartEngineOther {
			r.Parts[string(p)] = rqRound(v)
		}
	}
	for k, v := range b.BeforeEngineParts {
		if v > 0 {
			r.Parts[string(PartBeforeEngine)+"."+k] = rqRound(v)
		}
	}
	if b.PromptTokens > 0 || b.CompletionTokens > 0 {
		r.Tokens = map[string]int{"prompt": b.PromptTokens, "completion": b.CompletionTokens}
	}
	if len(b.Scores) > 0 {
		r.Scores = b.Scores
	}
	return r
}

// rqRound keeps microsecond precision, enough for latencies and stable JSON.
func rqRound(v float64) float64 { return math.Round(v*1e6) / 1e6 }

// isEngineSpan reports whether s is a vLLM request span.
func isEngineSpan(s *span.Span) bool {
	if s.Name == span.SpanLLMRequest {
		return true
	}
	_, ok := s.Attrs.Get(span.AttrE2E)
	return ok
}

// BuildRequests turns spans into one breakdown per engine request span
// (vLLM llm_request), using the gateway, llm-d and client spans of the same
// trace for the time before and after the engine. Under prefill/decode
// disaggregation the prefill pod's span is folded into the decode request.
// Spans may come in any order and from many traces; the result is sorted by
// Start.
func BuildRequests(spans []span.Span) []RequestBreakdown {
	byTrace := map[span.TraceID][]*span.Span{}
	var order []span.TraceID
	for i := range spans {
		id := spans[i].TraceID
		if _, ok := byTrace[id]; !ok {
			order = append(order, id)
		}
		byTrace[id] = append(byTrace[id], &spans[i])
	}
	var out []RequestBreakdown
	for _, id := range order {
		out = append(out, buildTrace(byTrace[id])...)
	}
	slices.SortStableFunc(out, func(a, b RequestBreakdown) int { return a.Start.Compare(b.Start) })
	return out
}

func buildTrace(spans []*span.Span) []RequestBreakdown {
	byID := make(map[span.SpanID]*span.Span, len(spans))
	var engines []*span.Span
	pdTrace := false
	for _, s := range spans {
		byID[s.SpanID] = s
		if isEngineSpan(s) {
			engines = append(engines, s)
		}
		if s.Name == span.SpanPDProxyPrefill || s.Name == span.SpanPDProxyDecode {
			pdTrace = true
		}
	}
	if len(engines) == 0 {
		return nil
	}
	slices.SortFunc(engines, func(a, b *span.Span) int { return int(rqSign(a.StartUnixNano - b.StartUnixNano)) })
	// Under P/D the prefill pod's llm_request (max_tokens 1, or under the
	// sidecar's prefill span) precedes the decode pod's one.
	prefillOf := map[*span.Span]*span.Span{}
	if pdTrace && len(engines) >= 2 {
		var kept []*span.Span
		for i := 0; i < len(engines); i++ {
			e := engines[i]
			if i+1 < len(engines) && isPrefillLeg(e, byID) {
				prefillOf[engines[i+1]] = e
				continue
			}
			kept = append(kept, e)
		}
		engines = kept
	}
	out := make([]RequestBreakdown, 0, len(engines))
	for _, e := range engines {
		out = append(out, buildRequest(e, prefillOf[e], spans, byID))
	}
	return out
}

func rqSign(x int64) int64 {
	switch {
	case x < 0:
		return -1
	case x > 0:
		return 1
	}
	return 0
}

func isPrefillLeg(e *span.Span, byID map[span.SpanID]*span.Span) bool {
	for p, n := byID[e.ParentID], 0; p != nil && n < 64; p, n = byID[p.ParentID], n+1 {
		if p.Name == span.SpanPDProxyPrefill {
			return true
		}
		if p.Name == span.SpanPDProxyDecode {
			return false
		}
	}
	ct, ok := e.Attrs.Number(span.AttrCompletionTokens)
	return ok && ct <= 1
}

// engineNumbers reads one engine span's latency attributes.
type engineNumbers struct {
	e2e, ttft, queue, prefill, decode float64
	source                            string
}

// frontend is the time the engine's API server held the request before the
// engine core queued it: vLLM measures TTFT from the API server's arrival,
// so TTFT − queue − prefill is tokenisation, HTTP and IPC (docs/engines.md §2.9).
// Only V1 spans carry the three numbers; below a millisecond it is noise.
func (n engineNumbers) frontend() float64 {
	if n.source != "v1" || n.ttft <= 0 {
		return 0
	}
	f := n.ttft - n.queue - n.prefill
	if f < 1e-3 || f > n.e2e {
		return 0
	}
	return f
}

func readEngine(e *span.Span) engineNumbers {
	var n engineNumbers
	n.source = "v1"
	e2e, ok := e.Attrs.Number(span.AttrE2E)
	if !ok {
		e2e = e.Duration().Seconds()
		n.source = "span"
	}
	n.e2e = e2e
	n.ttft, _ = e.Attrs.Number(span.AttrTTFT)
	n.queue, _ = e.Attrs.Number(span.AttrTimeInQueue)
	var okP, okD bool
	n.prefill, okP = e.Attrs.Number(span.AttrTimeInPrefill)
	n.decode, okD = e.Attrs.Number(span.AttrTimeInDecode)
	if !okP || !okD {
		if n.source == "v1" {
			n.source = "v0"
		}
		if n.ttft > 0 {
			n.prefill = max(0, n.ttft-n.queue)
			n.decode = max(0, n.e2e-n.ttft)
		} else {
			n.prefill, n.decode = 0, max(0, n.e2e-n.queue)
		}
	}
	return n
}

func podOf(s *span.Span) string {
	for _, k := range []string{"k8s.pod.name", "service.instance.id", "host.name"} {
		if a, ok := s.Attr(k); ok && a.Text() != "" {
			return a.Text()
		}
	}
	return ""
}

// modelOf returns the model of an engine span: its own
// gen_ai.response.model or gen_ai.request.model, the prefill leg's, or the
// gen_ai.request.model of the nearest span above it (or of the gateway).
func modelOf(e, prefillLeg, gateway *span.Span, byID map[span.SpanID]*span.Span) string {
	for _, s := range []*span.Span{e, prefillLeg} {
		if s == nil {
			continue
		}
		for _, k := range []string{span.AttrResponseModel, span.AttrRequestModel} {
			if a, ok := s.Attr(k); ok && a.Text() != "" {
				return a.Text()
			}
		}
	}
	for p, n := byID[e.ParentID], 0; p != nil && n < 64; p, n = byID[p.ParentID], n+1 {
		if a, ok := p.Attr(span.AttrRequestModel); ok && a.Text() != "" {
			return a.Text()
		}
	}
	if gateway != nil {
		if a, ok := gateway.Attr(span.AttrRequestModel); ok {
			return a.Text()
		}
	}
	return ""
}

func buildRequest(e, prefillLeg *span.Span, spans []*span.Span, byID map[span.SpanID]*span.Span) RequestBreakdown {
	en := readEngine(e)
	b := RequestBreakdown{
		TraceID:           e.TraceID,
		RequestID:         e.Attrs.String(span.AttrRequestID),
		Pod:               podOf(e),
		Source:            en.source,
		Error:             e.Error,
		Parts:             map[RequestPart]float64{},
		BeforeEngineParts: map[string]float64{},
	}
	if v, ok := e.Attrs.Number(span.AttrPromptTokens); ok {
		b.PromptTokens = int(v)
	}
	if v, ok := e.Attrs.Number(span.AttrCompletionTokens); ok {
		b.CompletionTokens = int(v)
	}
	// The span starts at the API server's arrival; the engine core queued
	// the request frontend seconds later (tokenisation, HTTP, IPC).
	engStart := e.StartUnixNano
	engEnd := e.StartUnixNano + int64(en.e2e*1e9)
	queue, prefill, decode := en.queue, en.prefill, en.decode
	engineTTFT := en.ttft
	frontend := en.frontend()
	if prefillLeg != nil {
		pn := readEngine(prefillLeg)
		b.PrefillPod = podOf(prefillLeg)
		if prefillLeg.StartUnixNano < engStart {
			frontend = pn.frontend()
		}
		engStart = min(engStart, prefillLeg.StartUnixNano)
		queue += pn.queue
		// The prefill pod computes the prompt; the decode pod's "prefill" is
		// loading the transferred KV blocks and the first step.
		prefill += max(0, pn.e2e-pn.queue-pn.frontend())
		if en.ttft > 0 {
			engineTTFT = rqSec(e.StartUnixNano-engStart) + en.ttft
		}
		if b.PromptTokens == 0 {
			if v, ok := prefillLeg.Attrs.Number(span.AttrPromptTokens); ok {
				b.PromptTokens = int(v)
			}
		}
	}
	coreStart := engStart + int64(math.Round(frontend*1e9))
	b.EngineStart = time.Unix(0, coreStart)
	b.EngineE2E = rqSec(engEnd - coreStart)
	b.EngineTTFT = engineTTFT
	b.Parts[PartQueue] = queue
	b.Parts[PartPrefill] = prefill
	b.Parts[PartDecode] = decode
	b.Parts[PartEngineOther] = max(0, b.EngineE2E-queue-prefill-decode)

	// The outermost span: the root of the engine span's ancestry, or a root
	// span of the trace that was running when the engine started.
	outer := e
	var gateway *span.Span
	for p, n := byID[e.ParentID], 0; p != nil && n < 64; p, n = byID[p.ParentID], n+1 {
		outer = p
		if p.Name == span.SpanGatewayRequest && gateway == nil {
			gateway = p
		}
	}
	if outer == e {
		for _, s := range spans {
			if s.ParentID.IsZero() && !isEngineSpan(s) && s.StartUnixNano <= engStart && s.EndUnixNano >= engStart {
				outer = s
				break
			}
		}
	}
	if gateway == nil {
		gateway = rqEnclosing(spans, span.SpanGatewayRequest, engStart)
	}
	b.Model = modelOf(e, prefillLeg, gateway, byID)
	if a, ok := e.Attr(span.AttrNamespace); ok {
		b.Namespace = a.Text()
	}
	if outer == e && gateway != nil {
		outer = gateway
	}
	outerStart := min(outer.StartUnixNano, engStart)
	upstream := rqSec(engStart - outerStart)
	after := 0.0
	if outer != e {
		after = max(0, rqSec(outer.EndUnixNano-engEnd))
	}
	b.Start = time.Unix(0, outerStart)
	b.Parts[PartBeforeEngine] = upstream + frontend
	b.Parts[PartAfterEngine] = after
	b.E2E = upstream + rqSec(engEnd-engStart) + after
	if engineTTFT > 0 {
		b.TTFT = upstream + engineTTFT
	}
	b.splitBeforeEngine(outer, gateway, spans, outerStart, engStart, frontend)
	b.Dominant = PartBeforeEngine
	for _, p := range requestParts {
		if b.Parts[p] > b.Parts[b.Dominant] {
			b.Dominant = p
		}
	}
	return b
}

// rqEnclosing returns the first span with the name running at t.
func rqEnclosing(spans []*span.Span, name string, t int64) *span.Span {
	for _, s := range spans {
		if s.Name == name && s.StartUnixNano <= t && s.EndUnixNano >= t {
			return s
		}
	}
	return nil
}

// splitBeforeEngine splits before_engine using gateway and llm-d spans that
// ran between the outer start and the engine's arrival, and collects router
// scores. frontend is the engine API server's own share (api_server).
func (b *RequestBreakdown) splitBeforeEngine(outer, gateway *span.Span, spans []*span.Span, from, to int64, frontend float64) {
	upstream := b.Parts[PartBeforeEngine] - frontend
	if upstream <= 0 && gateway == nil && frontend <= 0 {
		return
	}
	var orch *span.Span
	var scoring, picking float64
	for _, s := range spans {
		if s.StartUnixNano < from || s.StartUnixNano > to {
			continue
		}
		switch {
		case s.Name == span.SpanGatewayOrchestration:
			if orch == nil {
				orch = s
			}
		case strings.HasPrefix(s.Name, scorerSpanPrefix):
			scoring += s.Duration().Seconds()
			b.addScores(strings.TrimPrefix(s.Name, scorerSpanPrefix), s.Attrs)
		case strings.HasPrefix(s.Name, eppSpanPrefix):
			picking += s.Duration().Seconds()
		}
		if s.Name == span.SpanGatewayRequest || s.Name == span.SpanGatewayOrchestration {
			for _, a := range s.Attrs {
				if strings.Contains(a.Key, "score") {
					if v, ok := a.Number(); ok {
						b.setScore(a.Key, v)
					}
				}
			}
		}
	}
	parts := b.BeforeEngineParts
	if gateway != nil && outer != gateway {
		parts["client"] = max(0, rqSec(gateway.StartUnixNano-from))
	}
	if orch != nil {
		if gateway != nil {
			parts["admission"] = max(0, rqSec(orch.StartUnixNano-gateway.StartUnixNano))
		}
		scoring = min(scoring, orch.Duration().Seconds())
		parts["routing"] = max(0, orch.Duration().Seconds()-scoring)
	} else {
		parts["routing"] = picking
	}
	parts["scoring"] = scoring
	known := 0.0
	for _, v := range parts {
		known += v
	}
	if known > upstream && known > 0 {
		// Overlapping spans: scale down so that the parts add up.
		for k, v := range parts {
			parts[k] = max(0, v*upstream/known)
		}
		known = max(0, upstream)
	}
	parts["proxy"] = upstream - known
	parts["api_server"] = frontend
	for k, v := range parts {
		if v <= 0 {
			delete(parts, k)
		}
	}
}

func (b *RequestBreakdown) addScores(scorer string, attrs span.Attrs) {
	for _, a := range attrs {
		name, ok := strings.CutPrefix(a.Key, "llm_d.scorer.")
		if !ok {
			continue
		}
		if v, ok := a.Number(); ok {
			b.setScore(scorer+"."+strings.ReplaceAll(name, ".", "_"), v)
		}
	}
}

func (b *RequestBreakdown) setScore(k string, v float64) {
	if b.Scores == nil {
		b.Scores = map[string]float64{}
	}
	b.Scores[k] = v
}

// SlowBy orders requests for SlowestRequests.
type SlowBy int

// Orders.
const (
	SlowByE2E SlowBy = iota
	SlowByTTFT
)

// String returns the order name.
func (s SlowBy) String() string {
	if s == SlowByTTFT {
		return "ttft"
	}
	return "e2e"
}

func (s SlowBy) value(b *RequestBreakdown) float64 {
	if s == SlowByTTFT {
		return b.TTFT
	}
	return b.E2E
}

// Slowest returns the n requests that started in [start, end) with the
// largest e2e or TTFT, slowest first.
func Slowest(reqs []RequestBreakdown, start, end time.Time, n int, by SlowBy) []RequestBreakdown {
	var in []RequestBreakdown
	for _, r := range reqs {
		if !r.Start.Before(start) && r.Start.Before(end) && (by != SlowByTTFT || r.TTFT > 0) {
			in = append(in, r)
		}
	}
	slices.SortStableFunc(in, func(a, b RequestBreakdown) int {
		va, vb := by.value(&a), by.value(&b)
		switch {
		case va > vb:
			return -1
		case va < vb:
			return 1
		}
		return 0
	})
	if len(in) > n {
		in = in[:n]
	}
	return in
}

// SlowestRequests returns the union of the n slowest by e2e and the n
// slowest by TTFT in [start, end), slowest e2e first.
func SlowestRequests(reqs []RequestBreakdown, start, end time.Time, n int) []RequestBreakdown {
	out := Slowest(reqs, start, end, n, SlowByE2E)
	seen := map[string]bool{}
	for _, r := range out {
		seen[rqKey(&r)] = true
	}
	for _, r := range Slowest(reqs, start, end, n, SlowByTTFT) {
		if !seen[rqKey(&r)] {
			out = append(out, r)
		}
	}
	slices.SortStableFunc(out, func(a, b RequestBreakdown) int {
		switch {
		case a.E2E > b.E2E:
			return -1
		case a.E2E < b.E2E:
			return 1
		}
		return 0
	})
	return out
}

func rqKey(r *RequestBreakdown) string {
	return r.TraceID.String() + "/" + r.RequestID + "/" + r.EngineStart.String()
}

// DominantPart sums the parts over reqs and returns the largest with its
// share of the total.
func DominantPart(reqs []RequestBreakdown) (RequestPart, float64) {
	sums := map[RequestPart]float64{}
	total := 0.0
	for _, r := range reqs {
		for _, p := range requestParts {
			sums[p] += r.Parts[p]
			total += r.Parts[p]
		}
	}
	best := PartBeforeEngine
	for _, p := range requestParts {
		if sums[p] > sums[best] {
			best = p
		}
	}
	if total == 0 {
		return best, 0
	}
	return best, sums[best] / total
}

// Summary says in one line which part dominates the slow requests.
func Summary(slow []RequestBreakdown) string {
	if len(slow) == 0 {
		return "no traced requests"
	}
	p, share := DominantPart(slow)
	return fmt.Sprintf("%s dominates the %d slowest requests (%.0f%% of their time)", p, len(slow), 100*share)
}

// PodSample is the metric context of one pod at one time, as values the
// caller read from PromQL (e.g. "kv_cache_usage", "num_requests_waiting",
// "num_requests_running", GPU counters by series name).
type PodSample struct {
	Pod    string
	At     time.Time
	Values map[string]float64
}

// CorrelationInput is what step 4 (correlate) works on. Everything is a value:
// the function does no I/O.
type CorrelationInput struct {
	// Requests are all traced requests of the incident window.
	Requests []RequestBreakdown
	// Baseline are the traced requests of the baseline window (may be
	// empty): time outside the engine is judged against them.
	Baseline []RequestBreakdown
	// Slow are the requests to explain; nil means SlowestRequests(Requests,
	// Window, 10).
	Slow   []RequestBreakdown
	Window verdict.Window
	// PodSamples give each pod's metrics over the window; each slow request
	// is joined to the latest sample of its pod at or before its start
	// (within SampleTolerance, default 1m).
	PodSamples      []PodSample
	SampleTolerance time.Duration
	// LongPrompt is the prompt length (tokens) above which a prefill can
	// stall others; 0 means max(2048, 4× the median prompt). Passing the
	// scheduler's max_num_batched_tokens is a good choice.
	LongPrompt int
	// ServerTTFT is the engine's own TTFT for the window at ServerQuantile
	// (e.g. 0.95 from the engine's TTFT histogram); nil when unknown.
	ServerTTFT     *float64
	ServerQuantile float64
}

// Correlation is the outcome of step 4.
type Correlation struct {
	// Evidence by cause id (prefill_contention, outside_engine,
	// load_imbalance), for the walk to merge.
	Evidence map[string][]verdict.Evidence
	// RuledOut holds causes the requests exclude, with the reason (e.g.
	// outside_engine when the traced time outside the engine is small).
	RuledOut map[string]string
	// Requests are the slow requests in verdict form, with pod context.
	Requests []verdict.Request
	// Notes explain disagreements between server-side and span TTFT, and
	// what dominated the slow requests.
	Notes []string
}

// Correlation step and rule names; CorrelateStep is the walk step whose
// evidence the requests add.
const (
	CorrelateStep = "correlate"
	causePrefill  = "prefill_contention"
	causeOutside  = "outside_engine"
	causeImbal    = "load_imbalance"
)

// CorrelateRequests joins slow requests to their pods' metrics and looks
// for request-level evidence of prefill contention, time outside the engine
// and load imbalance. It is pure: time and data come in as arguments.
func CorrelateRequests(in CorrelationInput) Correlation {
	c := Correlation{Evidence: map[string][]verdict.Evidence{}, RuledOut: map[string]string{}}
	slow := in.Slow
	if slow == nil {
		slow = SlowestRequests(in.Requests, in.Window.Start, in.Window.End, 10)
	}
	if len(slow) == 0 {
		return c
	}
	tol := in.SampleTolerance
	if tol <= 0 {
		tol = time.Minute
	}
	for i := range slow {
		r := slow[i].Request()
		if s := rqSampleAt(in.PodSamples, slow[i].Pod, slow[i].EngineStart, tol); s != nil {
			r.Context = s.Values
		}
		c.Requests = append(c.Requests, r)
	}
	c.Notes = append(c.Notes, Summary(slow))
	all := in.Requests
	if len(all) == 0 {
		all = slow
	}
	contended := c.prefillContention(all, in.Baseline, in.LongPrompt)
	c.outsideEngine(all, slow, in.Baseline)
	c.loadImbalance(all, slow, in.PodSamples, in.Window, tol, contended)
	c.reconcileTTFT(all, in.ServerTTFT, in.ServerQuantile)
	return c
}

func (c *Correlation) add(cause, rule string, now, base *float64, weight float64, text string) {
	c.Evidence[cause] = append(c.Evidence[cause], verdict.Evidence{
		Step: CorrelateStep, Rule: rule, Now: now, Baseline: base,
		Weight: math.Round(weight*100) / 100, Text: text,
	})
}

func rqPtr(v float64) *float64 { v = rqRound(v); return &v }

// rqSampleAt returns the latest sample of pod at or before t, within tol.
func rqSampleAt(samples []PodSample, pod string, t time.Time, tol time.Duration) *PodSample {
	var best *PodSample
	for i := range samples {
		s := &samples[i]
		if s.Pod != pod || s.At.After(t) || t.Sub(s.At) > tol {
			continue
		}
		if best == nil || s.At.After(best.At) {
			best = s
		}
	}
	return best
}

// rqQuantile returns the q-quantile of vs (nearest rank); vs is sorted.
func rqQuantile(vs []float64, q float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	slices.Sort(vs)
	i := int(math.Ceil(q*float64(len(vs)))) - 1
	return vs[min(max(i, 0), len(vs)-1)]
}

// coreTTFT is the engine core's part of the time to first token: queue
// and prefill.
func coreTTFT(r *RequestBreakdown) float64 { return r.Parts[PartQueue] + r.Parts[PartPrefill] }

// contention is what one window's requests say about long prefills.
type contention struct {
	long                 []*RequestBreakdown // long prompts, longest first
	hit, other           []float64           // core TTFT of requests that overlapped a long prefill on their pod, and of the rest
	pods                 map[string]bool     // pods with a long prefill that others waited on
	medHit, medOther     float64
	threshold, nRequests int
}

// findContention splits the requests that waited for their first token
// while a long prompt was prefilling on their pod from the others.
func findContention(all []RequestBreakdown, longPrompt int) contention {
	var prompts []float64
	for i := range all {
		prompts = append(prompts, float64(all[i].PromptTokens))
	}
	ct := contention{pods: map[string]bool{}, nRequests: len(all)}
	ct.threshold = max(longPrompt, 2048, int(4*rqQuantile(prompts, 0.5)))
	type win struct{ s, e time.Time }
	byPod := map[string][]win{}
	for i := range all {
		r := &all[i]
		if r.PromptTokens >= ct.threshold && r.Parts[PartPrefill] > 0 {
			ct.long = append(ct.long, r)
			s, e := r.prefillWindow()
			byPod[r.Pod] = append(byPod[r.Pod], win{s, e})
		}
	}
	slices.SortFunc(ct.long, func(a, b *RequestBreakdown) int { return b.PromptTokens - a.PromptTokens })
	for i := range all {
		v := &all[i]
		if v.PromptTokens >= ct.threshold || v.EngineTTFT <= 0 {
			continue
		}
		s, e := v.EngineStart, v.EngineStart.Add(rqDur(coreTTFT(v)))
		hit := false
		for _, w := range byPod[v.Pod] {
			if s.Before(w.e) && e.After(w.s) {
				hit = true
				break
			}
		}
		if hit {
			ct.hit = append(ct.hit, coreTTFT(v))
			ct.pods[v.Pod] = true
		} else {
			ct.other = append(ct.other, coreTTFT(v))
		}
	}
	ct.medHit, ct.medOther = rqQuantile(ct.hit, 0.5), rqQuantile(ct.other, 0.5)
	return ct
}

// stalls reports whether the requests that overlapped a long prefill waited
// clearly longer for their first token than the others.
func (ct *contention) stalls() bool {
	return len(ct.hit) >= 3 && len(ct.other) >= 3 && ct.medHit >= 2*ct.medOther && ct.medHit-ct.medOther >= 0.05
}

// prefillContention finds long prompts whose prefill held up the first
// token of other requests on the same pod: those requests' queue + prefill
// is compared with that of the requests that did not overlap a long
// prefill. It returns the pods where it found contention.
func (c *Correlation) prefillContention(all, base []RequestBreakdown, longPrompt int) map[string]bool {
	ct := findContention(all, longPrompt)
	if !ct.stalls() {
		return map[string]bool{}
	}
	// How much of the window's TTFT (or of its growth over the baseline)
	// the stalls and the long prompts' own prefills explain.
	stalled := 0.0
	for _, h := range ct.hit {
		stalled += h - ct.medOther
	}
	for _, l := range ct.long {
		stalled += max(0, coreTTFT(l)-ct.medOther)
	}
	stalled /= float64(max(1, len(all)))
	growth, of := rqMeanTTFT(all), "mean TTFT"
	if b := rqMeanTTFT(base); len(base) >= 3 {
		growth, of = growth-b, "mean TTFT increase over the baseline"
	}
	frac := 1.0
	if growth > 0 {
		frac = stalled / growth
	}
	weight := min(1, max(0.15, frac))
	text := fmt.Sprintf("%d requests that waited for their first token while a prompt of ≥%d tokens was prefilling on their pod spent a median %.3fs in queue + prefill, against %.3fs for the other %d: with the long prompts' own prefills that is %.3fs per request, %.0f%% of the %s",
		len(ct.hit), ct.threshold, ct.medHit, ct.medOther, len(ct.other), stalled, 100*min(frac, 1), of)
	if l := ct.long[0]; l != nil {
		ps, _ := l.prefillWindow()
		where := ""
		if l.Pod != "" {
			where = " on " + l.Pod
		}
		text += fmt.Sprintf("; the longest, request %s (%d prompt tokens), prefilled for %.2fs%s from %s",
			rqName(l), l.PromptTokens, l.Parts[PartPrefill], where, ps.UTC().Format(time.RFC3339))
	}
	c.add(causePrefill, "traces.long_prefill_stalls_first_tokens", rqPtr(ct.medHit), rqPtr(ct.medOther), weight, text)
	return ct.pods
}

func rqName(r *RequestBreakdown) string {
	if r.RequestID != "" {
		return r.RequestID
	}
	return r.TraceID.String()
}

// outsideEngine reports time spent before or after the engine core (client,
// gateway, network, the engine's own API server): when it grew against the
// baseline's requests, and when it dominates the slowest requests.
func (c *Correlation) outsideEngine(all, slow, base []RequestBreakdown) {
	outside := func(rs []RequestBreakdown) (outs, ttfts []float64) {
		for i := range rs {
			if rs[i].EngineE2E > 0 {
				outs = append(outs, rs[i].Outside())
				if rs[i].TTFT > 0 {
					ttfts = append(ttfts, rs[i].TTFT)
				}
			}
		}
		return outs, ttfts
	}
	outs, ttfts := outside(all)
	if len(outs) < 3 {
		return
	}
	med, medTTFT := rqQuantile(outs, 0.5), rqQuantile(ttfts, 0.5)
	where := rqOutsideWhere(all)
	bouts, _ := outside(base)
	bmed := rqQuantile(bouts, 0.5)
	// V1 engine spans measure the API server's time; with them, a small
	// time outside the engine core excludes the cause.
	v1 := 0
	for i := range all {
		if all[i].Source == "v1" {
			v1++
		}
	}
	if v1 >= 20 && medTTFT > 0 && med < 0.1*medTTFT && (len(bouts) < 3 || med-bmed < 0.05) {
		c.RuledOut[causeOutside] = fmt.Sprintf("%d traced requests spent a median %.3fs outside the engine core (baseline %.3fs) of a median TTFT of %.3fs: the time is inside the engine",
			len(outs), med, bmed, medTTFT)
		return
	}
	if len(bouts) >= 3 {
		if med >= 0.1 && med >= 3*bmed+0.02 {
			weight := 0.6
			if medTTFT > 0 && med >= 0.5*medTTFT {
				weight = 1
			}
			c.add(causeOutside, "traces.time_outside_engine_grew", rqPtr(med), rqPtr(bmed), weight,
				fmt.Sprintf("the median request spent %.3fs outside the engine core (baseline %.3fs)%s; its TTFT median is %.3fs",
					med, bmed, where, medTTFT))
		}
	}

	var ratios []float64
	dominated := 0
	var out, engine float64
	for i := range slow {
		r := &slow[i]
		if r.EngineE2E <= 0 {
			continue
		}
		// Outside time dominates the request, or its time to first token.
		ratio := r.Outside() / r.EngineE2E
		if core := coreTTFT(r); r.Parts[PartBeforeEngine] > 0 && core > 0 {
			ratio = max(ratio, r.Parts[PartBeforeEngine]/core/2)
		}
		ratios = append(ratios, ratio)
		if ratio >= 1 {
			dominated++
		}
		out += r.Outside()
		engine += r.EngineE2E
	}
	if len(ratios) == 0 {
		return
	}
	medRatio := rqQuantile(ratios, 0.5)
	frac := float64(dominated) / float64(len(ratios))
	if frac < 0.5 || medRatio < 1 || out/float64(len(ratios)) < 0.05 {
		return
	}
	n := float64(len(ratios))
	c.add(causeOutside, "traces.time_outside_engine", rqPtr(out/n), rqPtr(engine/n),
		max(0.3, frac*min(1, medRatio/2)),
		fmt.Sprintf("%d of the %d slowest requests spent more time outside the engine core than in it (or than twice its queue + prefill): on average %.2fs outside vs %.2fs in the engine%s",
			dominated, len(ratios), out/n, engine/n, where))
}

// rqMeanTTFT is the mean TTFT of the requests as their clients saw it
// (the engine's when no outer span is known).
func rqMeanTTFT(rs []RequestBreakdown) float64 {
	sum, n := 0.0, 0
	for i := range rs {
		t := rs[i].TTFT
		if t <= 0 {
			t = rs[i].EngineTTFT
		}
		if t > 0 {
			sum += t
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// rqOutsideWhere names the largest share of the time outside the engine.
func rqOutsideWhere(rs []RequestBreakdown) string {
	sums := map[string]float64{}
	total := 0.0
	for i := range rs {
		for k, v := range rs[i].BeforeEngineParts {
			sums[k] += v
			total += v
		}
		if a := rs[i].Parts[PartAfterEngine]; a > 0 {
			sums["after_engine"] += a
			total += a
		}
	}
	best := ""
	for _, k := range sortedKeys(sums) {
		if best == "" || sums[k] > sums[best] {
			best = k
		}
	}
	if best == "" || total <= 0 {
		return ""
	}
	names := map[string]string{"api_server": "the engine's API server (tokeniser, HTTP, IPC)", "client": "the client before the gateway",
		"admission": "gateway admission", "scoring": "the router's scorers", "routing": "routing", "proxy": "the proxy hop to the pod",
		"after_engine": "the response path after the engine"}
	name := names[best]
	if name == "" {
		name = best
	}
	return fmt.Sprintf(", %.0f%% of it in %s", 100*sums[best]/total, name)
}

// loadImbalance reports one pod whose requests wait clearly longer for
// their first token than the other pods' requests, stronger when that pod
// also gets more than its share of the traffic. When a long prefill on that
// pod explains it, the evidence is weaker: the imbalance is a symptom.
func (c *Correlation) loadImbalance(all, slow []RequestBreakdown, samples []PodSample, w verdict.Window, tol time.Duration, contended map[string]bool) {
	ttfts := map[string][]float64{}
	total := 0
	for i := range all {
		if all[i].Pod != "" && all[i].EngineTTFT > 0 {
			ttfts[all[i].Pod] = append(ttfts[all[i].Pod], all[i].EngineTTFT)
			total++
		}
	}
	if len(ttfts) < 2 || total < 10 {
		return
	}
	worst, worstMed := "", 0.0
	for _, p := range sortedKeys(ttfts) {
		if len(ttfts[p]) < 3 {
			continue
		}
		if m := rqQuantile(ttfts[p], 0.5); worst == "" || m > worstMed {
			worst, worstMed = p, m
		}
	}
	if worst == "" {
		return
	}
	var others []float64
	for p, vs := range ttfts {
		if p != worst {
			others = append(others, vs...)
		}
	}
	if len(others) < 3 {
		return
	}
	otherMed := rqQuantile(others, 0.5)
	if worstMed < 2*otherMed || worstMed-otherMed < 0.05 {
		return
	}
	share := float64(len(ttfts[worst])) / float64(total)
	fair := 1 / float64(len(ttfts))
	text := fmt.Sprintf("requests on %s waited a median %.3fs for their first token against %.3fs on the other %d pods; it served %.0f%% of the traced requests (an even share is %.0f%%)",
		worst, worstMed, otherMed, len(ttfts)-1, 100*share, 100*fair)
	// Traced shares undercount a stalled pod (spans end with their
	// requests), so the pod's load from its metrics counts too.
	weight := 0.4
	if share >= 1.25*fair {
		weight = min(1, 0.6+(share-fair)/fair/2)
	}
	if mine, others, ok := rqPodLoad(samples, worst, w, tol); ok && mine >= 2*others+1 {
		weight = 1
		text += fmt.Sprintf("; it held %.1f requests (running + waiting) on average against %.1f per other pod", mine, others)
	}
	nSlow, onWorst := 0, 0
	for i := range slow {
		if slow[i].Pod != "" {
			nSlow++
			if slow[i].Pod == worst {
				onWorst++
			}
		}
	}
	if nSlow > 0 {
		text += fmt.Sprintf("; %d of the %d slowest requests ran there", onWorst, nSlow)
	}
	if ctx := rqPodContrast(samples, worst, w, tol); ctx != "" {
		text += "; " + ctx
	}
	if contended[worst] {
		weight /= 2
		text += "; a long prefill there explains part of it"
	}
	c.add(causeImbal, "traces.one_pod_slow", rqPtr(worstMed), rqPtr(otherMed), weight, text)
}

// rqPodLoad returns the mean running + waiting requests of the pod and of
// the other pods (per pod) over the window.
func rqPodLoad(samples []PodSample, pod string, w verdict.Window, tol time.Duration) (mine, others float64, ok bool) {
	var m, o []float64
	otherPods := map[string]bool{}
	for _, s := range samples {
		if s.At.Before(w.Start.Add(-tol)) || s.At.After(w.End) {
			continue
		}
		run, ok1 := s.Values["num_requests_running"]
		wait, ok2 := s.Values["num_requests_waiting"]
		if !ok1 && !ok2 {
			continue
		}
		if s.Pod == pod {
			m = append(m, run+wait)
		} else {
			o = append(o, run+wait)
			otherPods[s.Pod] = true
		}
	}
	if len(m) == 0 || len(o) == 0 {
		return 0, 0, false
	}
	return rqMean(m), rqMean(o), true
}

// rqPodContrast compares the pod's mean queue and KV usage with the others'.
func rqPodContrast(samples []PodSample, pod string, w verdict.Window, tol time.Duration) string {
	var parts []string
	for _, key := range []string{"num_requests_waiting", "kv_cache_usage"} {
		var mine, others []float64
		for _, s := range samples {
			v, ok := s.Values[key]
			if !ok || s.At.Before(w.Start.Add(-tol)) || s.At.After(w.End) {
				continue
			}
			if s.Pod == pod {
				mine = append(mine, v)
			} else {
				others = append(others, v)
			}
		}
		if len(mine) == 0 || len(others) == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("mean %s %.2f there vs %.2f elsewhere", key, rqMean(mine), rqMean(others)))
	}
	return strings.Join(parts, ", ")
}

func rqMean(vs []float64) float64 {
	s := 0.0
	for _, v := range vs {
		s += v
	}
	return s / float64(len(vs))
}

// reconcileTTFT compares the engine's TTFT metric with the spans'.
func (c *Correlation) reconcileTTFT(all []RequestBreakdown, server *float64, q float64) {
	if server == nil || *server <= 0 {
		return
	}
	if q <= 0 || q >= 1 {
		q = 0.5
	}
	var eng, client []float64
	for i := range all {
		if all[i].EngineTTFT > 0 {
			eng = append(eng, all[i].EngineTTFT)
			client = append(client, all[i].TTFT)
		}
	}
	if len(eng) == 0 {
		return
	}
	e, cl := rqQuantile(eng, q), rqQuantile(client, q)
	// Histogram quantiles interpolate inside coarse buckets: allow 40%.
	agree := func(a, b float64) bool { return math.Abs(a-b) <= 0.4*max(a, b) }
	qs := fmt.Sprintf("p%g", 100*q)
	switch {
	case agree(e, *server) && agree(cl, *server):
		return
	case agree(e, *server):
		c.Notes = append(c.Notes, fmt.Sprintf("server-side TTFT %s %.3fs matches the engine spans (%.3fs) but clients saw %.3fs: the difference is time before the engine", qs, *server, e, cl))
		if cl >= 2*e {
			c.add(causeOutside, "traces.client_ttft_exceeds_server_ttft", rqPtr(cl), rqPtr(*server), 0.5,
				fmt.Sprintf("TTFT %s seen by clients/gateway is %.3fs while the engine reports %.3fs", qs, cl, *server))
		}
	default:
		c.Notes = append(c.Notes, fmt.Sprintf("server-side TTFT %s %.3fs disagrees with the %d traced requests' engine TTFT %s %.3fs: traces may be sampled (llm-d samples 10%% by default), cover other pods, or the window edges differ", qs, *server, len(eng), qs, e))
	}
}

// ExplainRequests returns the verdict form of the requests, each joined to
// its pod's latest sample at or before the time the engine queued it
// (within tolerance; 0 means one minute).
func ExplainRequests(reqs []RequestBreakdown, samples []PodSample, tolerance time.Duration) []verdict.Request {
	if tolerance <= 0 {
		tolerance = time.Minute
	}
	out := make([]verdict.Request, 0, len(reqs))
	for i := range reqs {
		r := reqs[i].Request()
		if s := rqSampleAt(samples, reqs[i].Pod, reqs[i].EngineStart, tolerance); s != nil {
			r.Context = s.Values
		}
		out = append(out, r)
	}
	return out
}

// InWindow keeps the requests that started or finished in [w.Start,
// w.End): those the window's metrics saw.
func InWindow(reqs []RequestBreakdown, w verdict.Window) []RequestBreakdown {
	var out []RequestBreakdown
	for _, r := range reqs {
		end := r.Start.Add(rqDur(r.E2E))
		if r.Start.Before(w.End) && !end.Before(w.Start) {
			out = append(out, r)
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
