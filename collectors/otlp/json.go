package otlp

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// OTLP/JSON differs from protojson in one place that matters: trace and span
// ids are hex strings, not base64. protojson would decode a 32-digit hex
// trace id as 24 bytes of base64 without complaint. So the JSON mapping is
// decoded here into mirror structs that keep ids as text, and ids are decoded
// with their field path. Unknown fields are ignored, as the OTLP spec
// requires; 64-bit integers are accepted as JSON numbers or strings, enums as
// numbers or names.

// IDEncoding says how ids are spelled in a JSON document.
type IDEncoding int

// ID encodings.
const (
	// IDHex accepts only hex ids (OTLP/JSON as the spec and the collector's
	// file exporter write it). Wrong-length ids are a *FieldError.
	IDHex IDEncoding = iota
	// IDHexOrBase64 also accepts base64 ids, told apart by length (Tempo's
	// and older exporters' protojson output).
	IDHexOrBase64
)

// String returns the encoding name.
func (e IDEncoding) String() string {
	if e == IDHexOrBase64 {
		return "hex_or_base64"
	}
	return "hex"
}

type jRequest struct {
	ResourceSpans []jResourceSpans `json:"resourceSpans"`
	// Batches is Tempo's name for resourceSpans in /api/traces/{id}.
	Batches []jResourceSpans `json:"batches,omitempty"`
}

type jResourceSpans struct {
	Resource   *jResource    `json:"resource,omitempty"`
	ScopeSpans []jScopeSpans `json:"scopeSpans"`
	// InstrumentationLibrarySpans is the pre-1.0 name of scopeSpans.
	InstrumentationLibrarySpans []jScopeSpans `json:"instrumentationLibrarySpans,omitempty"`
	SchemaURL                   string        `json:"schemaUrl,omitempty"`
}

type jResource struct {
	Attributes             []jKeyValue `json:"attributes,omitempty"`
	DroppedAttributesCount uint32      `json:"droppedAttributesCount,omitempty"`
}

type jScope struct {
	Name       string      `json:"name,omitempty"`
	Version    string      `json:"version,omitempty"`
	Attributes []jKeyValue `json:"attributes,omitempty"`
}

type jScopeSpans struct {
	Scope                  *jScope `json:"scope,omitempty"`
	InstrumentationLibrary *jScope `json:"instrumentationLibrary,omitempty"`
	Spans                  []jSpan `json:"spans"`
	SchemaURL              string  `json:"schemaUrl,omitempty"`
}

type jSpan struct {
	TraceID                string      `json:"traceId"`
	SpanID                 string      `json:"spanId"`
	TraceState             string      `json:"traceState,omitempty"`
	ParentSpanID           string      `json:"parentSpanId,omitempty"`
	Flags                  uint32      `json:"flags,omitempty"`
	Name                   string      `json:"name"`
	Kind                   jEnum       `json:"kind,omitempty"`
	StartTimeUnixNano      jU64        `json:"startTimeUnixNano"`
	EndTimeUnixNano        jU64        `json:"endTimeUnixNano"`
	Attributes             []jKeyValue `json:"attributes,omitempty"`
	DroppedAttributesCount uint32      `json:"droppedAttributesCount,omitempty"`
	Events                 []jEvent    `json:"events,omitempty"`
	DroppedEventsCount     uint32      `json:"droppedEventsCount,omitempty"`
	Links                  []jLink     `json:"links,omitempty"`
	DroppedLinksCount      uint32      `json:"droppedLinksCount,omitempty"`
	Status                 *jStatus    `json:"status,omitempty"`
}

type jEvent struct {
	TimeUnixNano           jU64        `json:"timeUnixNano"`
	Name                   string      `json:"name"`
	Attributes             []jKeyValue `json:"attributes,omitempty"`
	DroppedAttributesCount uint32      `json:"droppedAttributesCount,omitempty"`
}

type jLink struct {
	TraceID                string      `json:"traceId"`
	SpanID                 string      `json:"spanId"`
	TraceState             string      `json:"traceState,omitempty"`
	Attributes             []jKeyValue `json:"attributes,omitempty"`
	DroppedAttributesCount uint32      `json:"droppedAttributesCount,omitempty"`
	Flags                  uint32      `json:"flags,omitempty"`
}

type jStatus struct {
	Message string `json:"message,omitempty"`
	Code    jEnum  `json:"code,omitempty"`
}

type jKeyValue struct {
	Key   string    `json:"key"`
	Value jAnyValue `json:"value"`
}

type jAnyValue struct {
	StringValue *string  `json:"stringValue,omitempty"`
	BoolValue   *bool    `json:"boolValue,omitempty"`
	IntValue    *jI64    `json:"intValue,omitempty"`
	DoubleValue *jF64    `json:"doubleValue,omitempty"`
	ArrayValue  *jArray  `json:"arrayValue,omitempty"`
	KvlistValue *jKvlist `json:"kvlistValue,omitempty"`
	BytesValue  *jBase64 `json:"bytesValue,omitempty"`
}

type jArray struct {
	Values []jAnyValue `json:"values"`
}

type jKvlist struct {
	Values []jKeyValue `json:"values"`
}

// jU64 is a uint64 written as a JSON string (protojson style) and read from a
// string or a number.
type jU64 uint64

func (v jU64) MarshalJSON() ([]byte, error) {
	return []byte(`"` + strconv.FormatUint(uint64(v), 10) + `"`), nil
}

func (v *jU64) UnmarshalJSON(b []byte) error {
	s, err := numText(b)
	if err != nil || s == "" {
		return err
	}
	u, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		// Accept exponent forms such as 1.7e18 from loose writers.
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || f < 0 || f > math.MaxUint64 || f != math.Trunc(f) {
			return fmt.Errorf("invalid unsigned integer %s", b)
		}
		u = uint64(f)
	}
	*v = jU64(u)
	return nil
}

// jI64 is an int64 written as a JSON string and read from a string or number.
type jI64 int64

func (v jI64) MarshalJSON() ([]byte, error) {
	return []byte(`"` + strconv.FormatInt(int64(v), 10) + `"`), nil
}

func (v *jI64) UnmarshalJSON(b []byte) error {
	s, err := numText(b)
	if err != nil || s == "" {
		return err
	}
	i, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || f < math.MinInt64 || f > math.MaxInt64 || f != math.Trunc(f) {
			return fmt.Errorf("invalid integer %s", b)
		}
		i = int64(f)
	}
	*v = jI64(i)
	return nil
}

// jF64 is a float64; NaN and infinities travel as strings (protojson style).
type jF64 float64

func (v jF64) MarshalJSON() ([]byte, error) {
	f := float64(v)
	switch {
	case math.IsNaN(f):
		return []byte(`"NaN"`), nil
	case math.IsInf(f, 1):
		return []byte(`"Infinity"`), nil
	case math.IsInf(f, -1):
		return []byte(`"-Infinity"`), nil
	}
	return strconv.AppendFloat(nil, f, 'g', -1, 64), nil
}

func (v *jF64) UnmarshalJSON(b []byte) error {
	s, err := numText(b)
	if err != nil || s == "" {
		return err
	}
	switch s {
	case "NaN":
		*v = jF64(math.NaN())
		return nil
	case "Infinity":
		*v = jF64(math.Inf(1))
		return nil
	case "-Infinity":
		*v = jF64(math.Inf(-1))
		return nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("invalid number %s", b)
	}
	*v = jF64(f)
	return nil
}

// jEnum is an enum read from a number or its proto name; names are mapped by
// the caller through enumValue.
type jEnum struct {
	n    int32
	name string
}

func (e jEnum) MarshalJSON() ([]byte, error) { return strconv.AppendInt(nil, int64(e.n), 10), nil }

func (e *jEnum) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		return json.Unmarshal(b, &e.name)
	}
	if bytes.Equal(b, []byte("null")) {
		return nil
	}
	i, err := strconv.ParseInt(string(b), 10, 32)
	if err != nil {
		return fmt.Errorf("invalid enum value %s", b)
	}
	e.n = int32(i)
	return nil
}

// jBase64 is a bytes value (base64, standard or URL alphabet).
type jBase64 []byte

func (v jBase64) MarshalJSON() ([]byte, error) {
	return json.Marshal(base64.StdEncoding.EncodeToString(v))
}

func (v *jBase64) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	d, err := decodeBase64(s)
	if err != nil {
		return fmt.Errorf("invalid base64 bytes value")
	}
	*v = d
	return nil
}

func decodeBase64(s string) ([]byte, error) {
	s = strings.TrimRight(s, "=")
	if strings.ContainsAny(s, "-_") {
		return base64.RawURLEncoding.DecodeString(s)
	}
	return base64.RawStdEncoding.DecodeString(s)
}

// numText returns the text of a JSON number or of a JSON string holding one;
// "" for null.
func numText(b []byte) (string, error) {
	if bytes.Equal(b, []byte("null")) {
		return "", nil
	}
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return "", err
		}
		return s, nil
	}
	return string(b), nil
}

// DecodeJSON decodes an OTLP/JSON ExportTraceServiceRequest (also accepted:
// Tempo's {"batches": [...]} and the pre-1.0 instrumentationLibrarySpans
// names). Malformed ids are a *FieldError naming the field.
func DecodeJSON(data []byte, ids IDEncoding) (*coltracepb.ExportTraceServiceRequest, error) {
	// JSON is UTF-8 (RFC 8259) and so are OTLP strings; encoding/json would
	// quietly replace bad bytes, and echo them in some errors.
	if !utf8.Valid(data) {
		return nil, fmt.Errorf("invalid JSON at offset %d: not valid UTF-8", invalidUTF8At(data))
	}
	var jr jRequest
	if err := json.Unmarshal(data, &jr); err != nil {
		return nil, jsonError(data, err)
	}
	return fromJSON(&jr, ids)
}

// invalidUTF8At returns the offset of the first byte that is not valid UTF-8.
func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(b)
}

// jsonError adds the byte offset to a syntax or type error.
func jsonError(data []byte, err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("invalid JSON at offset %d: %w", se.Offset, err)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Errorf("invalid JSON at offset %d: field %s: %w", te.Offset, te.Field, err)
	}
	return fmt.Errorf("invalid JSON: %w", err)
}

func fromJSON(jr *jRequest, ids IDEncoding) (*coltracepb.ExportTraceServiceRequest, error) {
	rss := jr.ResourceSpans
	if len(rss) == 0 {
		rss = jr.Batches
	}
	out := &coltracepb.ExportTraceServiceRequest{ResourceSpans: make([]*tracepb.ResourceSpans, 0, len(rss))}
	for i := range rss {
		jrs := &rss[i]
		rs := &tracepb.ResourceSpans{SchemaUrl: jrs.SchemaURL}
		if jrs.Resource != nil {
			rs.Resource = &resourcepb.Resource{
				Attributes:             kvsFromJSON(jrs.Resource.Attributes),
				DroppedAttributesCount: jrs.Resource.DroppedAttributesCount,
			}
		}
		scopes := jrs.ScopeSpans
		if len(scopes) == 0 {
			scopes = jrs.InstrumentationLibrarySpans
		}
		for j := range scopes {
			jss := &scopes[j]
			ss := &tracepb.ScopeSpans{SchemaUrl: jss.SchemaURL, Spans: make([]*tracepb.Span, 0, len(jss.Spans))}
			sc := jss.Scope
			if sc == nil {
				sc = jss.InstrumentationLibrary
			}
			if sc != nil {
				ss.Scope = &commonpb.InstrumentationScope{Name: sc.Name, Version: sc.Version, Attributes: kvsFromJSON(sc.Attributes)}
			}
			for k := range jss.Spans {
				sp, err := spanFromJSON(&jss.Spans[k], ids, i, j, k)
				if err != nil {
					return nil, err
				}
				ss.Spans = append(ss.Spans, sp)
			}
			rs.ScopeSpans = append(rs.ScopeSpans, ss)
		}
		out.ResourceSpans = append(out.ResourceSpans, rs)
	}
	return out, nil
}

func spanFromJSON(js *jSpan, ids IDEncoding, i, j, k int) (*tracepb.Span, error) {
	var err error
	sp := &tracepb.Span{
		TraceState:             js.TraceState,
		Flags:                  js.Flags,
		Name:                   js.Name,
		StartTimeUnixNano:      uint64(js.StartTimeUnixNano),
		EndTimeUnixNano:        uint64(js.EndTimeUnixNano),
		Attributes:             kvsFromJSON(js.Attributes),
		DroppedAttributesCount: js.DroppedAttributesCount,
		DroppedEventsCount:     js.DroppedEventsCount,
		DroppedLinksCount:      js.DroppedLinksCount,
	}
	if sp.TraceId, err = decodeID(js.TraceID, 16, ids, i, j, k, "traceId"); err != nil {
		return nil, err
	}
	if sp.SpanId, err = decodeID(js.SpanID, 8, ids, i, j, k, "spanId"); err != nil {
		return nil, err
	}
	if js.ParentSpanID != "" {
		if sp.ParentSpanId, err = decodeID(js.ParentSpanID, 8, ids, i, j, k, "parentSpanId"); err != nil {
			return nil, err
		}
	}
	kind, ok := enumValue(js.Kind, tracepb.Span_SpanKind_value)
	if !ok {
		return nil, &FieldError{Path: spanPath(i, j, k, "kind"), Msg: fmt.Sprintf("unknown span kind %q", js.Kind.name)}
	}
	sp.Kind = tracepb.Span_SpanKind(kind)
	if js.Status != nil {
		code, ok := enumValue(js.Status.Code, tracepb.Status_StatusCode_value)
		if !ok {
			return nil, &FieldError{Path: spanPath(i, j, k, "status.code"), Msg: fmt.Sprintf("unknown status code %q", js.Status.Code.name)}
		}
		sp.Status = &tracepb.Status{Message: js.Status.Message, Code: tracepb.Status_StatusCode(code)}
	}
	for e := range js.Events {
		je := &js.Events[e]
		sp.Events = append(sp.Events, &tracepb.Span_Event{
			TimeUnixNano: uint64(je.TimeUnixNano), Name: je.Name,
			Attributes: kvsFromJSON(je.Attributes), DroppedAttributesCount: je.DroppedAttributesCount,
		})
	}
	for l := range js.Links {
		jl := &js.Links[l]
		field := "links[" + strconv.Itoa(l) + "]."
		link := &tracepb.Span_Link{
			TraceState: jl.TraceState, Attributes: kvsFromJSON(jl.Attributes),
			DroppedAttributesCount: jl.DroppedAttributesCount, Flags: jl.Flags,
		}
		if link.TraceId, err = decodeID(jl.TraceID, 16, ids, i, j, k, field+"traceId"); err != nil {
			return nil, err
		}
		if link.SpanId, err = decodeID(jl.SpanID, 8, ids, i, j, k, field+"spanId"); err != nil {
			return nil, err
		}
		sp.Links = append(sp.Links, link)
	}
	return sp, nil
}

func enumValue(e jEnum, names map[string]int32) (int32, bool) {
	if e.name == "" {
		return e.n, true
	}
	v, ok := names[e.name]
	return v, ok
}

// decodeID decodes a hex id of n bytes (or, with IDHexOrBase64, a base64 one:
// 24/22 characters for 16 bytes, 12/11 for 8). An empty id decodes to nil and
// is left to Convert, which rejects the span.
func decodeID(s string, n int, ids IDEncoding, i, j, k int, field string) ([]byte, error) {
	if s == "" {
		return nil, nil
	}
	if len(s) == 2*n {
		b, err := hex.DecodeString(s)
		if err != nil {
			return nil, &FieldError{Path: spanPath(i, j, k, field), Msg: fmt.Sprintf("%q is not hex", s)}
		}
		return b, nil
	}
	if ids == IDHexOrBase64 && (len(s) == base64.StdEncoding.EncodedLen(n) || len(s) == base64.RawStdEncoding.EncodedLen(n)) {
		if b, err := decodeBase64(s); err == nil && len(b) == n {
			return b, nil
		}
	}
	return nil, &FieldError{Path: spanPath(i, j, k, field), Msg: fmt.Sprintf("want %d hex digits (%d bytes), got %d characters", 2*n, n, len(s))}
}

func kvsFromJSON(jkvs []jKeyValue) []*commonpb.KeyValue {
	if len(jkvs) == 0 {
		return nil
	}
	out := make([]*commonpb.KeyValue, 0, len(jkvs))
	for i := range jkvs {
		out = append(out, &commonpb.KeyValue{Key: jkvs[i].Key, Value: anyFromJSON(&jkvs[i].Value)})
	}
	return out
}

func anyFromJSON(v *jAnyValue) *commonpb.AnyValue {
	switch {
	case v.StringValue != nil:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: *v.StringValue}}
	case v.BoolValue != nil:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: *v.BoolValue}}
	case v.IntValue != nil:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: int64(*v.IntValue)}}
	case v.DoubleValue != nil:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: float64(*v.DoubleValue)}}
	case v.BytesValue != nil:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_BytesValue{BytesValue: *v.BytesValue}}
	case v.ArrayValue != nil:
		arr := &commonpb.ArrayValue{}
		for i := range v.ArrayValue.Values {
			arr.Values = append(arr.Values, anyFromJSON(&v.ArrayValue.Values[i]))
		}
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: arr}}
	case v.KvlistValue != nil:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_KvlistValue{KvlistValue: &commonpb.KeyValueList{Values: kvsFromJSON(v.KvlistValue.Values)}}}
	}
	return &commonpb.AnyValue{}
}

// EncodeJSON writes req as OTLP/JSON with hex ids: the format of the
// collector's file exporter and of a bundle's traces.jsonl lines (no
// trailing newline).
func EncodeJSON(req *coltracepb.ExportTraceServiceRequest) ([]byte, error) {
	return json.Marshal(toJSON(req.GetResourceSpans()))
}

func toJSON(rss []*tracepb.ResourceSpans) *jRequest {
	jr := &jRequest{ResourceSpans: make([]jResourceSpans, 0, len(rss))}
	for _, rs := range rss {
		jrs := jResourceSpans{SchemaURL: rs.GetSchemaUrl(), ScopeSpans: []jScopeSpans{}}
		if r := rs.GetResource(); r != nil {
			jrs.Resource = &jResource{Attributes: kvsToJSON(r.Attributes), DroppedAttributesCount: r.DroppedAttributesCount}
		}
		for _, ss := range rs.GetScopeSpans() {
			jss := jScopeSpans{SchemaURL: ss.GetSchemaUrl(), Spans: make([]jSpan, 0, len(ss.GetSpans()))}
			if sc := ss.GetScope(); sc != nil {
				jss.Scope = &jScope{Name: sc.Name, Version: sc.Version, Attributes: kvsToJSON(sc.Attributes)}
			}
			for _, sp := range ss.GetSpans() {
				jss.Spans = append(jss.Spans, spanToJSON(sp))
			}
			jrs.ScopeSpans = append(jrs.ScopeSpans, jss)
		}
		jr.ResourceSpans = append(jr.ResourceSpans, jrs)
	}
	return jr
}

func spanToJSON(sp *tracepb.Span) jSpan {
	js := jSpan{
		TraceID:                hex.EncodeToString(sp.TraceId),
		SpanID:                 hex.EncodeToString(sp.SpanId),
		TraceState:             sp.TraceState,
		ParentSpanID:           hex.EncodeToString(sp.ParentSpanId),
		Flags:                  sp.Flags,
		Name:                   sp.Name,
		Kind:                   jEnum{n: int32(sp.Kind)},
		StartTimeUnixNano:      jU64(sp.StartTimeUnixNano),
		EndTimeUnixNano:        jU64(sp.EndTimeUnixNano),
		Attributes:             kvsToJSON(sp.Attributes),
		DroppedAttributesCount: sp.DroppedAttributesCount,
		DroppedEventsCount:     sp.DroppedEventsCount,
		DroppedLinksCount:      sp.DroppedLinksCount,
	}
	if sp.Status != nil {
		js.Status = &jStatus{Message: sp.Status.Message, Code: jEnum{n: int32(sp.Status.Code)}}
	}
	for _, e := range sp.Events {
		js.Events = append(js.Events, jEvent{TimeUnixNano: jU64(e.TimeUnixNano), Name: e.Name, Attributes: kvsToJSON(e.Attributes), DroppedAttributesCount: e.DroppedAttributesCount})
	}
	for _, l := range sp.Links {
		js.Links = append(js.Links, jLink{
			TraceID: hex.EncodeToString(l.TraceId), SpanID: hex.EncodeToString(l.SpanId), TraceState: l.TraceState,
			Attributes: kvsToJSON(l.Attributes), DroppedAttributesCount: l.DroppedAttributesCount, Flags: l.Flags,
		})
	}
	return js
}

func kvsToJSON(kvs []*commonpb.KeyValue) []jKeyValue {
	if len(kvs) == 0 {
		return nil
	}
	out := make([]jKeyValue, 0, len(kvs))
	for _, kv := range kvs {
		out = append(out, jKeyValue{Key: kv.GetKey(), Value: anyToJSON(kv.GetValue())})
	}
	return out
}

func anyToJSON(v *commonpb.AnyValue) jAnyValue {
	var out jAnyValue
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		out.StringValue = &x.StringValue
	case *commonpb.AnyValue_BoolValue:
		out.BoolValue = &x.BoolValue
	case *commonpb.AnyValue_IntValue:
		i := jI64(x.IntValue)
		out.IntValue = &i
	case *commonpb.AnyValue_DoubleValue:
		f := jF64(x.DoubleValue)
		out.DoubleValue = &f
	case *commonpb.AnyValue_BytesValue:
		b := jBase64(x.BytesValue)
		out.BytesValue = &b
	case *commonpb.AnyValue_ArrayValue:
		arr := &jArray{Values: []jAnyValue{}}
		for _, e := range x.ArrayValue.GetValues() {
			arr.Values = append(arr.Values, anyToJSON(e))
		}
		out.ArrayValue = arr
	case *commonpb.AnyValue_KvlistValue:
		kl := &jKvlist{Values: kvsToJSON(x.KvlistValue.GetValues())}
		if kl.Values == nil {
			kl.Values = []jKeyValue{}
		}
		out.KvlistValue = kl
	}
	return out
}
