package tracequery

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/whyslow/whyslow/internal/redact"
	"github.com/whyslow/whyslow/span"
)

// Jaeger queries a Jaeger query service's HTTP API (/api/traces/{id}, and
// /api/traces?service=... for searches).
type Jaeger struct {
	// BaseURL is e.g. http://jaeger-query:16686.
	BaseURL string
	// Service is the service searched by SpansBetween and ByRequestID (e.g.
	// "vllm"); without it they return span.ErrUnsupported.
	Service string
	// Client defaults to a client with a 30s timeout.
	Client *http.Client
	// SearchLimit bounds the traces fetched per search (default
	// DefaultSearchLimit).
	SearchLimit int
}

// jaegerResponse is Jaeger's JSON model ({"data": [trace...]}).
type jaegerResponse struct {
	Data   []jaegerTrace `json:"data"`
	Errors []struct {
		Code int    `json:"code"`
		Msg  string `json:"msg"`
	} `json:"errors"`
}

type jaegerTrace struct {
	TraceID   string                   `json:"traceID"`
	Spans     []jaegerSpan             `json:"spans"`
	Processes map[string]jaegerProcess `json:"processes"`
}

type jaegerSpan struct {
	TraceID       string `json:"traceID"`
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		TraceID string `json:"traceID"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	StartTime int64       `json:"startTime"` // µs
	Duration  int64       `json:"duration"`  // µs
	Tags      []jaegerTag `json:"tags"`
	ProcessID string      `json:"processID"`
}

type jaegerProcess struct {
	ServiceName string      `json:"serviceName"`
	Tags        []jaegerTag `json:"tags"`
}

type jaegerTag struct {
	Key   string          `json:"key"`
	Type  string          `json:"type"`
	Value json.RawMessage `json:"value"`
}

func (t jaegerTag) attr() (span.Attr, error) {
	var err error
	switch t.Type {
	case "bool":
		var b bool
		if err = json.Unmarshal(t.Value, &b); err == nil {
			return span.BoolAttr(t.Key, b), nil
		}
	case "int64":
		var n json.Number
		d := json.NewDecoder(bytes.NewReader(t.Value))
		d.UseNumber()
		if err = d.Decode(&n); err == nil {
			var i int64
			if i, err = strconv.ParseInt(n.String(), 10, 64); err == nil {
				return span.IntAttr(t.Key, i), nil
			}
		}
	case "float64":
		var f float64
		if err = json.Unmarshal(t.Value, &f); err == nil {
			return span.FloatAttr(t.Key, f), nil
		}
	default: // string, binary
		var s string
		if err = json.Unmarshal(t.Value, &s); err == nil {
			return span.StringAttr(t.Key, s), nil
		}
	}
	return span.Attr{}, fmt.Errorf("tag %q: %s value %s: %w", t.Key, t.Type, t.Value, err)
}

var jaegerKinds = map[string]span.SpanKind{
	"internal": span.SpanKindInternal, "server": span.SpanKindServer, "client": span.SpanKindClient,
	"producer": span.SpanKindProducer, "consumer": span.SpanKindConsumer,
}

// ParseJaeger converts a Jaeger /api/traces response to spans.
func ParseJaeger(body []byte) ([]span.Span, error) {
	var r jaegerResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("parse jaeger response: %w", err)
	}
	if len(r.Data) == 0 && len(r.Errors) > 0 {
		if r.Errors[0].Code == http.StatusNotFound {
			return nil, span.ErrTraceNotFound
		}
		return nil, fmt.Errorf("jaeger: %s", redact.Text(r.Errors[0].Msg))
	}
	var out []span.Span
	for ti, tr := range r.Data {
		resources := map[string]span.Attrs{}
		for pid, p := range tr.Processes {
			res := span.Attrs{span.StringAttr("service.name", p.ServiceName)}
			for _, tag := range p.Tags {
				a, err := tag.attr()
				if err != nil {
					return nil, fmt.Errorf("parse jaeger response: data[%d].processes.%s: %w", ti, pid, err)
				}
				res = append(res, a)
			}
			resources[pid] = res
		}
		for si, js := range tr.Spans {
			where := fmt.Sprintf("data[%d].spans[%d]", ti, si)
			s, err := jaegerSpanOf(&js, resources[js.ProcessID])
			if err != nil {
				return nil, fmt.Errorf("parse jaeger response: %s: %w", where, err)
			}
			out = append(out, s)
		}
	}
	return out, nil
}

func jaegerSpanOf(js *jaegerSpan, res span.Attrs) (span.Span, error) {
	var s span.Span
	var err error
	if s.TraceID, err = parseLooseTraceID(js.TraceID); err != nil {
		return s, err
	}
	if s.SpanID, err = parseLooseSpanID(js.SpanID); err != nil {
		return s, err
	}
	for _, ref := range js.References {
		if ref.TraceID != js.TraceID && strings.TrimLeft(ref.TraceID, "0") != strings.TrimLeft(js.TraceID, "0") {
			continue
		}
		if ref.RefType == "CHILD_OF" || s.ParentID.IsZero() {
			if s.ParentID, err = parseLooseSpanID(ref.SpanID); err != nil {
				return s, fmt.Errorf("reference: %w", err)
			}
		}
	}
	s.Name = js.OperationName
	s.StartUnixNano = js.StartTime * 1000
	s.EndUnixNano = (js.StartTime + js.Duration) * 1000
	s.Resource = res
	for _, tag := range js.Tags {
		a, err := tag.attr()
		if err != nil {
			return s, err
		}
		switch a.Key {
		case "span.kind":
			s.Kind = jaegerKinds[a.Str]
			continue
		case "otel.status_code":
			s.Error = a.Str == "ERROR"
		case "error":
			s.Error = s.Error || a.Kind == span.AttrBool && a.Bool()
		}
		s.Attrs = append(s.Attrs, a)
	}
	return s, nil
}

func parseLooseSpanID(s string) (span.SpanID, error) {
	if len(s) == 0 || len(s) > 16 {
		return span.SpanID{}, fmt.Errorf("span id %q: want up to 16 hex digits", s)
	}
	return span.ParseSpanID(strings.Repeat("0", 16-len(s)) + s)
}

// Trace serves diagnose.Traces.
func (j *Jaeger) Trace(ctx context.Context, id span.TraceID) ([]span.Span, error) {
	body, err := get(ctx, j.Client, strings.TrimRight(j.BaseURL, "/")+"/api/traces/"+id.String())
	if err != nil {
		return nil, fmt.Errorf("jaeger trace %s: %w", id, err)
	}
	spans, err := ParseJaeger(body)
	if err != nil {
		return nil, fmt.Errorf("jaeger trace %s: %w", id, err)
	}
	if len(spans) == 0 {
		return nil, fmt.Errorf("jaeger trace %s: %w", id, span.ErrTraceNotFound)
	}
	span.SortByStart(spans)
	return spans, nil
}

func (j *Jaeger) search(ctx context.Context, v url.Values, limit int) ([]span.Span, error) {
	if j.Service == "" {
		return nil, fmt.Errorf("jaeger search needs a service: %w", span.ErrUnsupported)
	}
	if limit <= 0 {
		limit = j.SearchLimit
	}
	if limit <= 0 {
		limit = DefaultSearchLimit
	}
	v.Set("service", j.Service)
	v.Set("limit", strconv.Itoa(limit))
	body, err := get(ctx, j.Client, strings.TrimRight(j.BaseURL, "/")+"/api/traces?"+v.Encode())
	if err != nil {
		return nil, fmt.Errorf("jaeger search: %w", err)
	}
	return ParseJaeger(body)
}

// SpansBetween serves diagnose.Traces (needs Service).
func (j *Jaeger) SpansBetween(ctx context.Context, start, end time.Time, limit int) ([]span.Span, error) {
	v := url.Values{
		"start":     {strconv.FormatInt(start.UnixMicro(), 10)},
		"end":       {strconv.FormatInt(end.UnixMicro(), 10)},
		"operation": {span.SpanLLMRequest},
	}
	spans, err := j.search(ctx, v, limit)
	if err != nil {
		return nil, err
	}
	return window(spans, start, end, limit), nil
}

// ByRequestID serves diagnose.Traces (needs Service).
func (j *Jaeger) ByRequestID(ctx context.Context, id string) ([]span.Span, error) {
	tags, _ := json.Marshal(map[string]string{span.AttrRequestID: id})
	spans, err := j.search(ctx, url.Values{"tags": {string(tags)}}, 20)
	if err != nil {
		return nil, err
	}
	return withRequestID(spans, id), nil
}
