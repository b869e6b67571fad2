package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/whyslow/whyslow/collectors/tracequery"
	"github.com/whyslow/whyslow/diagnose"
	"github.com/whyslow/whyslow/notifiers/render"
	"github.com/whyslow/whyslow/query"
	"github.com/whyslow/whyslow/requests"
	"github.com/whyslow/whyslow/rulesets"
	"github.com/whyslow/whyslow/span"
	"github.com/whyslow/whyslow/verdict"
)

// traceFlags are the trace options of `whyslow why`.
type traceFlags struct {
	source    string
	service   string
	traceID   string
	requestID string
}

func (f *traceFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.source, "traces", "", "trace `SOURCE` for step 4 (correlate): a traces.jsonl[.gz] file, tempo:URL, jaeger:URL, "+
		"whyslow:URL (a whyslow daemon's trace API) or none; default: the bundle's traces.jsonl when it has one")
	fs.StringVar(&f.service, "trace-service", "", "with --traces jaeger:URL: the service to search (e.g. vllm)")
	fs.StringVar(&f.traceID, "trace-id", "", "explain one request by its trace `ID`: where its time went and its pod's state when it started")
	fs.StringVar(&f.requestID, "request-id", "", "explain one request by its gen_ai.request.id `ID` (e.g. chatcmpl-...)")
}

// oneRequest reports whether a single request is to be explained.
func (f *traceFlags) oneRequest() bool { return f.traceID != "" || f.requestID != "" }

// bearerTransport adds a bearer token to every request (for whyslow:URL).
type bearerTransport struct {
	token string
	next  http.RoundTripper
}

func (t bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+t.token)
	return t.next.RoundTrip(r)
}

// openTraces returns the trace source the flags name, or nil for none.
func openTraces(f *whyFlags) (diagnose.Traces, error) {
	src := f.traces.source
	if src == "none" {
		return nil, nil
	}
	if f.server != "" {
		if src != "" {
			return nil, errors.New("--traces does not apply to --server: the daemon correlates the traces it receives")
		}
		return nil, nil
	}
	if src == "" {
		if f.bundle == "" {
			return nil, nil
		}
		p, err := tracequery.BundleTraces(f.bundle)
		if err != nil || p == "" {
			return nil, err
		}
		src = p
	}
	kind, rest, _ := strings.Cut(src, ":")
	client := &http.Client{Timeout: f.timeout}
	switch kind {
	case "tempo":
		return &tracequery.Tempo{BaseURL: rest, Client: client}, nil
	case "whyslow":
		if tok := bearerToken(f); tok != "" {
			client.Transport = bearerTransport{token: tok, next: http.DefaultTransport}
		}
		return pagedTempo{&tracequery.Tempo{BaseURL: rest, Client: client, SearchLimit: tracePageSize}}, nil
	case "jaeger":
		return &tracequery.Jaeger{BaseURL: rest, Service: f.traces.service, Client: client}, nil
	case "http", "https":
		return nil, fmt.Errorf("--traces %q: say which API it is: tempo:%s, jaeger:%s or whyslow:%s", src, src, src, src)
	}
	file, err := tracequery.OpenJSONL(src)
	if err != nil {
		return nil, fmt.Errorf("--traces: %w", err)
	}
	if file.Rejected > 0 {
		fmt.Fprintf(os.Stderr, "whyslow why: %s: %d invalid spans skipped (first: %s)\n", src, file.Rejected, render.Escape(file.Reason))
	}
	return file, nil
}

// tracePageSize is how many traces one search of a whyslow daemon's
// Tempo-compatible API asks for (the most it answers).
const tracePageSize = 1000

// pagedTempo reads a window from a whyslow daemon's Tempo-compatible API
// page by page. One search answers at most SearchLimit traces (at most
// tracePageSize), oldest first; a window of a busy engine holds more. Read in one search, as
// tracequery.Tempo does (DefaultSearchLimit, 200 traces), the triage saw only
// the oldest traces of each window and gave another verdict than the same
// spans read from a file.
type pagedTempo struct{ *tracequery.Tempo }

// SpansBetween implements diagnose.Traces: without a limit it returns every
// span that started in [start, end) of the traces holding an llm_request
// span in it, as a traces.jsonl of the same spans would.
func (p pagedTempo) SpansBetween(ctx context.Context, start, end time.Time, limit int) ([]span.Span, error) {
	if limit > 0 {
		return p.Tempo.SpansBetween(ctx, start, end, limit)
	}
	done := map[span.TraceID]bool{}
	var out []span.Span
	for from := start; ; {
		page, err := p.Tempo.SpansBetween(ctx, from, end, 0)
		if err != nil {
			return nil, err
		}
		byTrace := map[span.TraceID][]span.Span{}
		// first: each trace's first llm_request span in the page, the span
		// the search matched it by.
		first := map[span.TraceID]int64{}
		for _, s := range page {
			byTrace[s.TraceID] = append(byTrace[s.TraceID], s)
			if t, ok := first[s.TraceID]; s.Name == span.SpanLLMRequest && (!ok || s.StartUnixNano < t) {
				first[s.TraceID] = s.StartUnixNano
			}
		}
		var last int64
		for id, spans := range byTrace {
			last = max(last, first[id])
			if done[id] {
				continue
			}
			done[id] = true
			if from.After(start) {
				// The page cut the trace's spans at from; read all of it.
				all, err := p.Trace(ctx, id)
				if err != nil {
					return nil, err
				}
				spans = slices.DeleteFunc(all, func(s span.Span) bool {
					return s.StartUnixNano < start.UnixNano() || s.StartUnixNano >= end.UnixNano()
				})
			}
			out = append(out, spans...)
		}
		if len(byTrace) < p.SearchLimit {
			break
		}
		// Searches take whole seconds: the next page starts at the second
		// of the newest trace found, and the traces seen again are skipped.
		next := time.Unix(last/int64(time.Second), 0)
		if !next.After(from) {
			return nil, fmt.Errorf("whyslow trace search: more than %d traces start at %s; cannot page", p.SearchLimit, from.UTC().Format(time.RFC3339))
		}
		from = next
	}
	span.SortByStart(out)
	return out, nil
}

// runWhyRequest explains one request: its breakdown and, when a metrics
// source is given, its pod's metrics when the engine queued it.
func runWhyRequest(ctx context.Context, f *whyFlags, stdout, stderr io.Writer) int {
	reqs, err := whyRequest(ctx, f)
	if err != nil {
		fmt.Fprintf(stderr, "whyslow why: %s\n", render.EscapeLines(err.Error()))
		return exitFailed
	}
	if f.output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(map[string]any{"requests": reqs}); err != nil {
			fmt.Fprintf(stderr, "whyslow why: %v\n", err)
			return exitFailed
		}
		return exitOK
	}
	for i, r := range reqs {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		writeRequest(stdout, r)
	}
	return exitOK
}

func whyRequest(ctx context.Context, f *whyFlags) ([]verdict.Request, error) {
	if f.traces.traceID != "" && f.traces.requestID != "" {
		return nil, errors.New("give --trace-id or --request-id, not both")
	}
	if _, err := render.ParseFormat(f.output); err != nil {
		return nil, err
	}
	tr, err := openTraces(f)
	if err != nil {
		return nil, err
	}
	if tr == nil {
		return nil, errors.New("--trace-id and --request-id need traces: --traces SOURCE, or a --bundle with traces.jsonl")
	}
	var spans []span.Span
	what := ""
	if f.traces.traceID != "" {
		id, err := span.ParseTraceID(strings.ToLower(f.traces.traceID))
		if err != nil {
			return nil, fmt.Errorf("--trace-id: %w", err)
		}
		what = "trace " + id.String()
		spans, err = tr.Trace(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
	} else {
		what = "request " + f.traces.requestID
		byReq, err := tr.ByRequestID(ctx, f.traces.requestID)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		if len(byReq) == 0 {
			return nil, fmt.Errorf("%s: no span carries %s=%q", what, span.AttrRequestID, f.traces.requestID)
		}
		// The whole traces of the request's spans: gateway and client too.
		seen := map[span.TraceID]bool{}
		for _, s := range byReq {
			if seen[s.TraceID] {
				continue
			}
			seen[s.TraceID] = true
			all, err := tr.Trace(ctx, s.TraceID)
			if err != nil {
				return nil, fmt.Errorf("%s: trace %s: %w", what, s.TraceID, err)
			}
			spans = append(spans, all...)
		}
	}
	built := requests.BuildRequests(spans)
	if f.traces.requestID != "" {
		built = slices.DeleteFunc(built, func(b requests.RequestBreakdown) bool { return b.RequestID != f.traces.requestID })
	}
	if len(built) == 0 {
		return nil, fmt.Errorf("%s: no llm_request span (the engine's span) found", what)
	}
	samples, err := requestContext(ctx, f, built)
	if err != nil {
		return nil, err
	}
	return requests.ExplainRequests(built, samples, 0), nil
}

// requestContext reads the pods' metrics around the requests from the
// metrics source, when one is given (--bundle or --prometheus).
func requestContext(ctx context.Context, f *whyFlags, reqs []requests.RequestBreakdown) ([]requests.PodSample, error) {
	if f.bundle == "" && f.prometheus == "" {
		return nil, nil
	}
	lo, hi := reqs[0].EngineStart, reqs[0].EngineStart
	var pods []string
	for _, r := range reqs {
		lo, hi = minTime(lo, r.EngineStart), maxTime(hi, r.EngineStart)
		if r.Pod != "" && !slices.Contains(pods, r.Pod) {
			pods = append(pods, r.Pod)
		}
	}
	q := requests.PodContextQuery{Selector: f.selector, Pods: pods, Start: lo.Add(-time.Minute), End: hi}
	maps := rulesets.Shipped()
	if len(f.rulesets) > 0 {
		if rss, err := rulesets.LoadAll(f.rulesets...); err == nil {
			maps = maps.WithUser(rss...) // a user's map adds its engine
		}
	}
	diagnose.PodContextGauges(&q, maps.Series())
	var m query.Metrics
	if f.bundle != "" {
		b, st, _, err := openBundle(ctx, f.bundle, f.maxSeries)
		if err != nil {
			return nil, err
		}
		defer st.Close()
		if q.Selector == "" && b.Incident != nil {
			q.Selector = b.Incident.Selector
		}
		m = st
	} else {
		c, err := remoteClient(f)
		if err != nil {
			return nil, err
		}
		m = c
	}
	samples, _, err := requests.PodContext(ctx, m, q)
	if err != nil {
		// The breakdown stands without the context.
		fmt.Fprintf(os.Stderr, "whyslow why: pod context: %v\n", err)
		return nil, nil
	}
	return samples, nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// requestPartOrder lists a request's parts in time order.
var requestPartOrder = []string{"before_engine", "queue", "prefill", "decode", "engine_other", "after_engine"}

// writeRequest prints one request's breakdown as text.
func writeRequest(w io.Writer, r verdict.Request) {
	name := r.TraceID
	if r.RequestID != "" {
		name = r.RequestID + " (trace " + r.TraceID + ")"
	}
	fmt.Fprintf(w, "Request %s\n", render.Escape(name))
	fmt.Fprintf(w, "  started %s on %s: e2e %s", r.Start.Format(time.RFC3339Nano), render.Escape(orDash(r.Pod)), render.FormatSeconds(r.E2E))
	if r.TTFT > 0 {
		fmt.Fprintf(w, ", TTFT %s", render.FormatSeconds(r.TTFT))
	}
	if r.Tokens != nil {
		fmt.Fprintf(w, ", %d prompt / %d completion tokens", r.Tokens["prompt"], r.Tokens["completion"])
	}
	fmt.Fprintf(w, "\n  where the time went (mostly %s):\n", r.Dominant)
	for _, p := range requestPartOrder {
		v, ok := r.Parts[p]
		if !ok {
			continue
		}
		share := 0.0
		if r.E2E > 0 {
			share = 100 * v / r.E2E
		}
		fmt.Fprintf(w, "    %-14s %10s  %5.1f%%\n", p, render.FormatSeconds(v), share)
		if p == "before_engine" {
			for _, k := range sortedParts(r.Parts, "before_engine.") {
				fmt.Fprintf(w, "      %-12s %10s\n", strings.TrimPrefix(k, "before_engine."), render.FormatSeconds(r.Parts[k]))
			}
		}
	}
	if len(r.Scores) > 0 {
		fmt.Fprintf(w, "  router scores:")
		for _, k := range sortedParts(r.Scores, "") {
			fmt.Fprintf(w, " %s=%g", render.Escape(k), r.Scores[k])
		}
		fmt.Fprintln(w)
	}
	if len(r.Context) > 0 {
		fmt.Fprintf(w, "  %s when the engine queued it:", render.Escape(orDash(r.Pod)))
		for _, k := range sortedParts(r.Context, "") {
			fmt.Fprintf(w, " %s=%s", render.Escape(k), render.Escape(contextValue(k, r.Context[k])))
		}
		fmt.Fprintln(w)
	}
}

func contextValue(k string, v float64) string {
	switch {
	case k == "kv_cache_usage" || strings.HasSuffix(k, "_utilization") || strings.HasSuffix(k, "_active"):
		return fmt.Sprintf("%.0f%%", 100*v)
	case strings.HasSuffix(k, "_mhz"):
		return fmt.Sprintf("%.0fMHz", v)
	}
	return fmt.Sprintf("%g", v)
}

func sortedParts(m map[string]float64, prefix string) []string {
	var ks []string
	for k := range m {
		if prefix == "" || strings.HasPrefix(k, prefix) {
			ks = append(ks, k)
		}
	}
	slices.Sort(ks)
	return ks
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
