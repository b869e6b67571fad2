package spanstore

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/whyslow/whyslow/collectors/otlp"
	"github.com/whyslow/whyslow/span"
)

// Query API limits.
const (
	defaultSearchLimit = 20
	maxSearchLimit     = 1000
	// searchLookback is the window searched when a query gives no start.
	searchLookback = time.Hour
)

// QueryHandler serves the store through the subset of Grafana Tempo's query
// API that whyslow's Tempo client (tracequery.Tempo, `why --traces
// whyslow:URL`) uses:
//
//	GET /api/traces/{id}   the trace as OTLP/JSON ({"resourceSpans": [...]}, hex ids); 404 when unknown
//	GET /api/search        ?q=TraceQL&start=&end= (Unix seconds)&limit=: {"traces": [{"traceID", ...}]}
//
// The search understands the TraceQL that whyslow sends: `{}`, or one or
// more `name = "..."`, `span.KEY = "..."`, `resource.KEY = "..."` or
// `.KEY = "..."` conditions joined by `&&`. now gives the time a search
// without start/end ends at (time.Now when nil).
func (s *Store) QueryHandler(now func() time.Time) http.Handler {
	if now == nil {
		now = time.Now
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/traces/{id}", s.serveTrace)
	mux.HandleFunc("GET /api/search", func(w http.ResponseWriter, r *http.Request) { s.serveSearch(w, r, now()) })
	return mux
}

func writeJSON(w http.ResponseWriter, code int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(body)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	http.Error(w, msg, code)
}

func (s *Store) serveTrace(w http.ResponseWriter, r *http.Request) {
	raw := r.PathValue("id")
	if len(raw) == 0 || len(raw) > 32 {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("trace id %q: want up to 32 hex digits", raw))
		return
	}
	id, err := span.ParseTraceID(strings.Repeat("0", 32-len(raw)) + strings.ToLower(raw))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	spans, err := s.Trace(r.Context(), id)
	if errors.Is(err, span.ErrTraceNotFound) {
		writeError(w, http.StatusNotFound, "trace not found")
		return
	}
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	body, err := otlp.EncodeJSON(ToOTLP(spans))
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, body)
}

// searchTrace is one entry of a /api/search response (Tempo's shape).
type searchTrace struct {
	TraceID           string `json:"traceID"`
	RootServiceName   string `json:"rootServiceName,omitempty"`
	RootTraceName     string `json:"rootTraceName,omitempty"`
	StartTimeUnixNano string `json:"startTimeUnixNano"`
	DurationMs        int64  `json:"durationMs"`
}

func (s *Store) serveSearch(w http.ResponseWriter, r *http.Request, now time.Time) {
	q := r.URL.Query()
	conds, err := ParseTraceQL(q.Get("q"))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	limit := defaultSearchLimit
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n <= 0 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("limit %q: want a positive integer", l))
			return
		}
		limit = min(n, maxSearchLimit)
	}
	end, start := now, now.Add(-searchLookback)
	for _, p := range []struct {
		name string
		dst  *time.Time
	}{{"start", &start}, {"end", &end}} {
		if v := q.Get(p.name); v != "" {
			sec, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("%s %q: want Unix seconds", p.name, v))
				return
			}
			*p.dst = time.Unix(sec, 0)
		}
	}
	if q.Get("start") != "" && q.Get("end") == "" {
		end = start.Add(searchLookback)
	}
	if !end.After(start) {
		writeError(w, http.StatusBadRequest, "end must be after start")
		return
	}
	traces, err := s.search(r.Context(), conds, start, end, limit)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	body, _ := json.Marshal(map[string]any{"traces": traces})
	writeJSON(w, http.StatusOK, body)
}

// search returns the traces with a span matching every condition that
// started in [start, end), oldest first, at most limit.
func (s *Store) search(ctx context.Context, conds []Cond, start, end time.Time, limit int) ([]searchTrace, error) {
	var spans []span.Span
	var err error
	if rid, ok := requestIDCond(conds); ok {
		spans, err = s.ByRequestID(ctx, rid)
	} else {
		spans, err = s.SpansBetween(ctx, start, end, 0)
	}
	if err != nil {
		return nil, err
	}
	lo, hi := start.UnixNano(), end.UnixNano()
	seen := map[span.TraceID]bool{}
	out := []searchTrace{}
	for i := range spans {
		sp := &spans[i]
		if sp.StartUnixNano < lo || sp.StartUnixNano >= hi || seen[sp.TraceID] || !matchAll(sp, conds) {
			continue
		}
		seen[sp.TraceID] = true
		st := searchTrace{TraceID: sp.TraceID.String()}
		if all, err := s.Trace(ctx, sp.TraceID); err == nil && len(all) > 0 {
			root := &all[0]
			for j := range all {
				if all[j].ParentID.IsZero() {
					root = &all[j]
					break
				}
			}
			first, last := all[0].StartUnixNano, all[0].EndUnixNano
			for j := range all {
				first, last = min(first, all[j].StartUnixNano), max(last, all[j].EndUnixNano)
			}
			st.RootServiceName, st.RootTraceName = root.Service(), root.Name
			st.StartTimeUnixNano = strconv.FormatInt(first, 10)
			st.DurationMs = (last - first) / int64(time.Millisecond)
		}
		out = append(out, st)
		if len(out) == limit {
			break
		}
	}
	return out, nil
}

// Cond is one TraceQL equality condition: Scope is "name", "span",
// "resource" or "" (either span or resource attribute).
type Cond struct {
	Scope, Key, Value string
}

var condRe = regexp.MustCompile(`^\s*(name|span\.[\w.\-]+|resource\.[\w.\-]+|\.[\w.\-]+)\s*=\s*"((?:[^"\\]|\\.)*)"\s*$`)

// ParseTraceQL parses the TraceQL subset QueryHandler understands: `{}` or
// `{ C && C ... }` where each C is name = "x", span.KEY = "x",
// resource.KEY = "x" or .KEY = "x". An empty query matches everything.
func ParseTraceQL(q string) ([]Cond, error) {
	q = strings.TrimSpace(q)
	if q == "" {
		return nil, nil
	}
	if !strings.HasPrefix(q, "{") || !strings.HasSuffix(q, "}") {
		return nil, fmt.Errorf("query %q: want a TraceQL spanset { ... }", q)
	}
	body := strings.TrimSpace(q[1 : len(q)-1])
	if body == "" || body == "true" {
		return nil, nil
	}
	var out []Cond
	for _, part := range strings.Split(body, "&&") {
		m := condRe.FindStringSubmatch(part)
		if m == nil {
			return nil, fmt.Errorf("query %q: unsupported condition %q (want name, span.KEY, resource.KEY or .KEY = \"value\")", q, strings.TrimSpace(part))
		}
		val, err := strconv.Unquote(`"` + m[2] + `"`)
		if err != nil {
			return nil, fmt.Errorf("query %q: value %q: %w", q, m[2], err)
		}
		c := Cond{Value: val}
		switch {
		case m[1] == "name":
			c.Scope = "name"
		case strings.HasPrefix(m[1], "span."):
			c.Scope, c.Key = "span", strings.TrimPrefix(m[1], "span.")
		case strings.HasPrefix(m[1], "resource."):
			c.Scope, c.Key = "resource", strings.TrimPrefix(m[1], "resource.")
		default:
			c.Key = strings.TrimPrefix(m[1], ".")
		}
		out = append(out, c)
	}
	return out, nil
}

func requestIDCond(conds []Cond) (string, bool) {
	for _, c := range conds {
		if c.Key == RequestIDKey && c.Scope != "resource" {
			return c.Value, true
		}
	}
	return "", false
}

func matchAll(sp *span.Span, conds []Cond) bool {
	for _, c := range conds {
		var ok bool
		switch c.Scope {
		case "name":
			ok = sp.Name == c.Value
		case "span":
			a, found := sp.Attrs.Get(c.Key)
			ok = found && a.Text() == c.Value
		case "resource":
			a, found := sp.Resource.Get(c.Key)
			ok = found && a.Text() == c.Value
		default:
			a, found := sp.Attr(c.Key)
			ok = found && a.Text() == c.Value
		}
		if !ok {
			return false
		}
	}
	return true
}

// ToOTLP turns spans back into an OTLP export request, one ResourceSpans per
// distinct resource, in first-seen order.
func ToOTLP(spans []span.Span) *coltracepb.ExportTraceServiceRequest {
	req := &coltracepb.ExportTraceServiceRequest{}
	byRes := map[uint64]*tracepb.ScopeSpans{}
	for i := range spans {
		sp := &spans[i]
		k := attrsKey(sp.Resource)
		ss, ok := byRes[k]
		if !ok {
			ss = &tracepb.ScopeSpans{}
			req.ResourceSpans = append(req.ResourceSpans, &tracepb.ResourceSpans{
				Resource:   &resourcepb.Resource{Attributes: kvs(sp.Resource)},
				ScopeSpans: []*tracepb.ScopeSpans{ss}})
			byRes[k] = ss
		}
		ps := &tracepb.Span{
			TraceId: sp.TraceID[:], SpanId: sp.SpanID[:], Name: sp.Name,
			Kind:              tracepb.Span_SpanKind(sp.Kind),
			StartTimeUnixNano: uint64(sp.StartUnixNano), EndTimeUnixNano: uint64(sp.EndUnixNano),
			Attributes: kvs(sp.Attrs),
		}
		if !sp.ParentID.IsZero() {
			ps.ParentSpanId = sp.ParentID[:]
		}
		if sp.Error {
			ps.Status = &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR}
		}
		ss.Spans = append(ss.Spans, ps)
	}
	return req
}

func attrsKey(as span.Attrs) uint64 {
	h := fnv.New64a()
	var b [8]byte
	for _, a := range as {
		h.Write([]byte(a.Key))
		h.Write([]byte{0, byte(a.Kind)})
		h.Write([]byte(a.Text()))
		binary.BigEndian.PutUint64(b[:], uint64(len(a.Key)))
		h.Write(b[:])
	}
	return h.Sum64()
}

func kvs(as span.Attrs) []*commonpb.KeyValue {
	out := make([]*commonpb.KeyValue, 0, len(as))
	for _, a := range as {
		v := &commonpb.AnyValue{}
		switch a.Kind {
		case span.AttrInt:
			v.Value = &commonpb.AnyValue_IntValue{IntValue: a.Int()}
		case span.AttrFloat:
			f := a.Float()
			if math.IsNaN(f) || math.IsInf(f, 0) {
				v.Value = &commonpb.AnyValue_StringValue{StringValue: a.Text()}
			} else {
				v.Value = &commonpb.AnyValue_DoubleValue{DoubleValue: f}
			}
		case span.AttrBool:
			v.Value = &commonpb.AnyValue_BoolValue{BoolValue: a.Bool()}
		default:
			v.Value = &commonpb.AnyValue_StringValue{StringValue: a.Str}
		}
		out = append(out, &commonpb.KeyValue{Key: a.Key, Value: v})
	}
	return out
}
