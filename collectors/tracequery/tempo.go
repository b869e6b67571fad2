// Package tracequery reads spans from where they already are: a Tempo or
// Jaeger query API, or a bundle's traces.jsonl. Every source serves
// diagnose.Traces.
package tracequery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/whyslow/whyslow/collectors/otlp"
	"github.com/whyslow/whyslow/internal/redact"
	"github.com/whyslow/whyslow/span"
)

// maxResponseBytes bounds a query response.
const maxResponseBytes = 64 << 20

// DefaultSearchLimit is how many traces a search fetches when no limit is set.
const DefaultSearchLimit = 200

// Tempo queries a Grafana Tempo query frontend: /api/traces/{id} and
// /api/search (TraceQL).
type Tempo struct {
	// BaseURL is e.g. http://tempo:3200.
	BaseURL string
	// Client defaults to a client with a 30s timeout.
	Client *http.Client
	// SearchLimit bounds the traces fetched per search (default
	// DefaultSearchLimit).
	SearchLimit int
}

func client(c *http.Client) *http.Client {
	if c != nil {
		return c
	}
	return &http.Client{Timeout: 30 * time.Second}
}

// get fetches a URL and returns its body; 404 is span.ErrTraceNotFound.
func get(ctx context.Context, c *http.Client, u string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	// What the server echoes back may hold the credentials it was sent
	// (an error page quoting the request's Authorization header).
	secrets := redact.NewSecrets()
	secrets.AddURL(u, false)
	resp, err := client(c).Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is in the message already, redacted
		}
		return nil, secrets.Error(fmt.Errorf("get %s: %w", redact.URL(u), err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return nil, secrets.Error(fmt.Errorf("get %s: %w", redact.URL(u), err))
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil, span.ErrTraceNotFound
	case resp.StatusCode/100 != 2:
		msg := strings.ToValidUTF8(strings.TrimSpace(secrets.Scrub(string(body))), "\uFFFD")
		if len(msg) > 200 {
			msg = msg[:200]
		}
		return nil, fmt.Errorf("get %s: %s: %s", redact.URL(u), resp.Status, msg)
	}
	return body, nil
}

// parseLooseTraceID accepts hex trace ids with leading zeros trimmed (as
// Tempo search prints them) or 64-bit ones.
func parseLooseTraceID(s string) (span.TraceID, error) {
	if len(s) == 0 || len(s) > 32 {
		return span.TraceID{}, fmt.Errorf("trace id %q: want up to 32 hex digits", s)
	}
	return span.ParseTraceID(strings.Repeat("0", 32-len(s)) + s)
}

// ParseTempoTrace parses a Tempo trace-by-id response: OTLP/JSON as
// {"batches": [...]} (Tempo 1.x/2.x), {"resourceSpans": [...]}, or
// {"trace": {...}} (/api/v2/traces), with hex or base64 ids.
func ParseTempoTrace(body []byte) ([]span.Span, error) {
	var wrapped struct {
		Trace json.RawMessage `json:"trace"`
	}
	if err := json.Unmarshal(body, &wrapped); err == nil && len(wrapped.Trace) > 0 && wrapped.Trace[0] == '{' {
		body = wrapped.Trace
	}
	req, err := otlp.DecodeJSON(body, otlp.IDHexOrBase64)
	if err != nil {
		return nil, err
	}
	spans, _, err := otlp.Convert(nil, req.ResourceSpans)
	return spans, err
}

// Trace serves diagnose.Traces.
func (t *Tempo) Trace(ctx context.Context, id span.TraceID) ([]span.Span, error) {
	body, err := get(ctx, t.Client, strings.TrimRight(t.BaseURL, "/")+"/api/traces/"+id.String())
	if err != nil {
		return nil, fmt.Errorf("tempo trace %s: %w", id, err)
	}
	spans, err := ParseTempoTrace(body)
	if err != nil {
		return nil, fmt.Errorf("tempo trace %s: %w", id, err)
	}
	if len(spans) == 0 {
		return nil, fmt.Errorf("tempo trace %s: %w", id, span.ErrTraceNotFound)
	}
	span.SortByStart(spans)
	return spans, nil
}

// tempoSearch is the /api/search response.
type tempoSearch struct {
	Traces []struct {
		TraceID string `json:"traceID"`
	} `json:"traces"`
}

// ParseTempoSearch returns the trace ids of a /api/search response.
func ParseTempoSearch(body []byte) ([]span.TraceID, error) {
	var s tempoSearch
	if err := json.Unmarshal(body, &s); err != nil {
		return nil, fmt.Errorf("parse tempo search: %w", err)
	}
	ids := make([]span.TraceID, 0, len(s.Traces))
	for _, t := range s.Traces {
		id, err := parseLooseTraceID(t.TraceID)
		if err != nil {
			return nil, fmt.Errorf("parse tempo search: %w", err)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

func (t *Tempo) search(ctx context.Context, q string, start, end time.Time, limit int) ([]span.Span, error) {
	if limit <= 0 {
		limit = t.SearchLimit
	}
	if limit <= 0 {
		limit = DefaultSearchLimit
	}
	v := url.Values{"q": {q}, "limit": {strconv.Itoa(limit)}}
	if !start.IsZero() {
		v.Set("start", strconv.FormatInt(start.Unix(), 10))
		v.Set("end", strconv.FormatInt(end.Add(time.Second-1).Unix(), 10))
	}
	body, err := get(ctx, t.Client, strings.TrimRight(t.BaseURL, "/")+"/api/search?"+v.Encode())
	if err != nil {
		return nil, fmt.Errorf("tempo search: %w", err)
	}
	ids, err := ParseTempoSearch(body)
	if err != nil {
		return nil, err
	}
	var out []span.Span
	for _, id := range ids {
		spans, err := t.Trace(ctx, id)
		if err != nil {
			return nil, err
		}
		out = append(out, spans...)
	}
	return out, nil
}

// SpansBetween serves diagnose.Traces: it searches for traces holding an
// llm_request span in the window and returns their spans that started in it.
// limit bounds the traces fetched and the spans returned.
func (t *Tempo) SpansBetween(ctx context.Context, start, end time.Time, limit int) ([]span.Span, error) {
	spans, err := t.search(ctx, `{ name = "`+span.SpanLLMRequest+`" }`, start, end, limit)
	if err != nil {
		return nil, err
	}
	return window(spans, start, end, limit), nil
}

// ByRequestID serves diagnose.Traces.
func (t *Tempo) ByRequestID(ctx context.Context, id string) ([]span.Span, error) {
	spans, err := t.search(ctx, `{ span.`+span.AttrRequestID+` = `+strconv.Quote(id)+` }`, time.Time{}, time.Time{}, 20)
	if err != nil {
		return nil, err
	}
	return withRequestID(spans, id), nil
}

// window keeps spans that started in [start, end), sorted, at most limit.
func window(spans []span.Span, start, end time.Time, limit int) []span.Span {
	lo, hi := start.UnixNano(), end.UnixNano()
	out := spans[:0]
	for _, s := range spans {
		if s.StartUnixNano >= lo && s.StartUnixNano < hi {
			out = append(out, s)
		}
	}
	span.SortByStart(out)
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}

func withRequestID(spans []span.Span, id string) []span.Span {
	out := spans[:0]
	for _, s := range spans {
		if s.Attrs.String(span.AttrRequestID) == id {
			out = append(out, s)
		}
	}
	span.SortByStart(out)
	return out
}
