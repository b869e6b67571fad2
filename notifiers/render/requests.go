package render

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/whyslow/whyslow/verdict"
)

// MaxRequests is how many of the slowest requests text and Markdown list;
// the JSON carries every request of the verdict.
const MaxRequests = 5

// partOrder is the time order of a request's parts (requests.RequestPart);
// beforeEngineOrder that of the sub-parts of before_engine, which the
// verdict names "before_engine.<sub-part>".
var (
	partOrder         = []string{"before_engine", "queue", "prefill", "decode", "engine_other", "after_engine"}
	beforeEngineOrder = []string{"client", "admission", "scoring", "routing", "proxy", "api_server"}
)

const beforeEnginePrefix = "before_engine."

// requestHead is the first line of a request: ids, pod, e2e, TTFT, tokens
// and the dominant part.
func requestHead(r verdict.Request) string {
	s := r.TraceID
	if s == "" {
		s = "(no trace id)"
	}
	if r.RequestID != "" {
		s += " request " + r.RequestID
	}
	if r.Pod != "" {
		s += " on " + r.Pod
	}
	s += ": e2e " + FormatSeconds(r.E2E)
	if r.TTFT > 0 {
		s += ", TTFT " + FormatSeconds(r.TTFT)
	}
	if p, ok := r.Tokens["prompt"]; ok {
		s += ", " + strconv.Itoa(p) + " prompt"
		if c, ok := r.Tokens["completion"]; ok {
			s += " / " + strconv.Itoa(c) + " completion"
		}
		s += " tokens"
	}
	if r.Dominant != "" {
		s += ", mostly " + r.Dominant
	}
	return s
}

// RequestPart is one part of a request's time, with its sub-parts (those
// of before_engine).
type RequestPart struct {
	Name    string
	Seconds float64
	Sub     []RequestPart
}

// RequestParts returns a request's parts in time order, before_engine with
// its sub-parts. Zero parts are left out; parts this renderer does not know
// come last, by name.
func RequestParts(r verdict.Request) []RequestPart {
	var subs []RequestPart
	known := map[string]bool{}
	for _, k := range beforeEngineOrder {
		known[beforeEnginePrefix+k] = true
		if v := r.Parts[beforeEnginePrefix+k]; v > 0 {
			subs = append(subs, RequestPart{Name: k, Seconds: v})
		}
	}
	for _, k := range sortedKeys(r.Parts) {
		if strings.HasPrefix(k, beforeEnginePrefix) && !known[k] && r.Parts[k] > 0 {
			subs = append(subs, RequestPart{Name: strings.TrimPrefix(k, beforeEnginePrefix), Seconds: r.Parts[k]})
		}
	}
	var parts []RequestPart
	for _, k := range partOrder {
		v, ok := r.Parts[k]
		if !ok || v <= 0 && !(k == "before_engine" && len(subs) > 0) {
			continue
		}
		p := RequestPart{Name: k, Seconds: v}
		if k == "before_engine" {
			p.Sub = subs
		}
		parts = append(parts, p)
	}
	for _, k := range sortedKeys(r.Parts) {
		if !slices.Contains(partOrder, k) && !strings.HasPrefix(k, beforeEnginePrefix) && r.Parts[k] > 0 {
			parts = append(parts, RequestPart{Name: k, Seconds: r.Parts[k]})
		}
	}
	return parts
}

// requestParts lists the parts in time order, before_engine with its
// sub-parts in brackets: "before_engine 62 ms [client 50 ms, admission
// 2 ms], queue 2.7 s, prefill 400 ms, decode 12.2 s".
func requestParts(r verdict.Request) string {
	var out []string
	for _, p := range RequestParts(r) {
		s := p.Name + " " + FormatSeconds(p.Seconds)
		if len(p.Sub) > 0 {
			subs := make([]string, len(p.Sub))
			for i, sp := range p.Sub {
				subs[i] = sp.Name + " " + FormatSeconds(sp.Seconds)
			}
			s += " [" + strings.Join(subs, ", ") + "]"
		}
		out = append(out, s)
	}
	return strings.Join(out, ", ")
}

// requestContext is the pod's state when the engine queued the request:
// "its pod then: KV cache 93%, 30 waiting, 12 running", or "" without
// pod context.
func requestContext(r verdict.Request) string {
	var parts []string
	if v, ok := r.Context["kv_cache_usage"]; ok {
		parts = append(parts, "KV cache "+FormatValue(v, UnitFraction))
	}
	if v, ok := r.Context["num_requests_waiting"]; ok {
		parts = append(parts, num(v)+" waiting")
	}
	if v, ok := r.Context["num_requests_running"]; ok {
		parts = append(parts, num(v)+" running")
	}
	if len(parts) == 0 {
		return ""
	}
	return "its pod then: " + strings.Join(parts, ", ")
}

// moreRequests says how many requests the listing left out, or "".
func moreRequests(v *verdict.Verdict) string {
	n := len(v.Requests) - MaxRequests
	if n <= 0 {
		return ""
	}
	return fmt.Sprintf("… and %d more in the verdict JSON", n)
}

// shownRequests returns the requests text and Markdown list.
func shownRequests(v *verdict.Verdict) []verdict.Request {
	return v.Requests[:min(len(v.Requests), MaxRequests)]
}

// gpuFmt renders the GPU class and where it came from: "H100 (from
// incident.yaml)", "H200 (from the GPU counters: model="NVIDIA H200" on
// …)", or "" when the verdict names none.
func gpuFmt(g *verdict.GPUClass) string {
	if g == nil || g.Class == "" {
		return ""
	}
	switch {
	case g.Source == verdict.GPUSourceMetrics && g.Detail != "":
		return g.Class + " (from the GPU counters: " + g.Detail + ")"
	case g.Source == verdict.GPUSourceMetrics:
		return g.Class + " (from the GPU counters)"
	case g.Detail != "":
		return g.Class + " (from " + g.Detail + ")"
	case g.Source != "":
		return g.Class + " (" + g.Source + ")"
	}
	return g.Class
}
