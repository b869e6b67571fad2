package span

import (
	"cmp"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
)

// ErrTraceNotFound is returned by a trace source asked for a trace it holds
// no span of.
var ErrTraceNotFound = errors.New("trace not found")

// ErrUnsupported is returned by a trace source that cannot answer a kind of
// query (for example a Jaeger source without a service to search in).
var ErrUnsupported = errors.New("query not supported by this trace source")

// TraceID is a 16-byte W3C trace id.
type TraceID [16]byte

// String returns the id as 32 lower-case hex digits.
func (t TraceID) String() string { return hex.EncodeToString(t[:]) }

// IsZero reports whether the id is all zeros (invalid in OTLP and W3C).
func (t TraceID) IsZero() bool { return t == TraceID{} }

// ParseTraceID parses 32 hex digits. Shorter 64-bit ids (16 hex digits, as
// Jaeger and Zipkin print them) are left-padded with zeros.
func ParseTraceID(s string) (TraceID, error) {
	var id TraceID
	if len(s) != 32 && len(s) != 16 {
		return id, fmt.Errorf("trace id %q: want 32 hex digits, got %d", s, len(s))
	}
	if _, err := hex.Decode(id[16-len(s)/2:], []byte(s)); err != nil {
		return TraceID{}, fmt.Errorf("trace id %q: %w", s, err)
	}
	return id, nil
}

// SpanID is an 8-byte span id.
type SpanID [8]byte

// String returns the id as 16 lower-case hex digits.
func (s SpanID) String() string { return hex.EncodeToString(s[:]) }

// IsZero reports whether the id is all zeros (no span: e.g. no parent).
func (s SpanID) IsZero() bool { return s == SpanID{} }

// ParseSpanID parses 16 hex digits.
func ParseSpanID(s string) (SpanID, error) {
	var id SpanID
	if len(s) != 16 {
		return id, fmt.Errorf("span id %q: want 16 hex digits, got %d", s, len(s))
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return SpanID{}, fmt.Errorf("span id %q: %w", s, err)
	}
	return id, nil
}

// SpanKind is the OTLP span kind.
type SpanKind uint8

// Span kinds, numbered as in OTLP.
const (
	SpanKindUnspecified SpanKind = iota
	SpanKindInternal
	SpanKindServer
	SpanKindClient
	SpanKindProducer
	SpanKindConsumer
)

// String returns the lower-case kind name.
func (k SpanKind) String() string {
	switch k {
	case SpanKindInternal:
		return "internal"
	case SpanKindServer:
		return "server"
	case SpanKindClient:
		return "client"
	case SpanKindProducer:
		return "producer"
	case SpanKindConsumer:
		return "consumer"
	}
	return "unspecified"
}

// AttrKind says which field of an Attr holds its value.
type AttrKind uint8

// Attribute value kinds. Arrays, maps and bytes are kept as their text form
// (AttrString).
const (
	AttrString AttrKind = iota
	AttrInt
	AttrFloat
	AttrBool
)

// String returns the kind name.
func (k AttrKind) String() string {
	switch k {
	case AttrInt:
		return "int"
	case AttrFloat:
		return "float"
	case AttrBool:
		return "bool"
	}
	return "string"
}

// Attr is one span or resource attribute: a key and a typed value. Numbers
// and booleans live in bits so the struct stays small (48 bytes).
type Attr struct {
	Key  string
	Str  string
	bits uint64
	Kind AttrKind
}

// StringAttr returns a string attribute.
func StringAttr(key, v string) Attr { return Attr{Key: key, Str: v, Kind: AttrString} }

// IntAttr returns an integer attribute.
func IntAttr(key string, v int64) Attr { return Attr{Key: key, bits: uint64(v), Kind: AttrInt} }

// FloatAttr returns a floating-point attribute.
func FloatAttr(key string, v float64) Attr {
	return Attr{Key: key, bits: math.Float64bits(v), Kind: AttrFloat}
}

// BoolAttr returns a boolean attribute.
func BoolAttr(key string, v bool) Attr {
	var b uint64
	if v {
		b = 1
	}
	return Attr{Key: key, bits: b, Kind: AttrBool}
}

// Int returns the value of an AttrInt attribute.
func (a Attr) Int() int64 { return int64(a.bits) }

// Float returns the value of an AttrFloat attribute.
func (a Attr) Float() float64 { return math.Float64frombits(a.bits) }

// Bool returns the value of an AttrBool attribute.
func (a Attr) Bool() bool { return a.bits != 0 }

// Number returns the attribute as a float64 when it is numeric or a string
// that parses as a number (some exporters send numbers as strings).
func (a Attr) Number() (float64, bool) {
	switch a.Kind {
	case AttrInt:
		return float64(a.Int()), true
	case AttrFloat:
		return a.Float(), true
	case AttrString:
		f, err := strconv.ParseFloat(a.Str, 64)
		return f, err == nil
	}
	return 0, false
}

// Text returns the value as text, whatever its kind.
func (a Attr) Text() string {
	switch a.Kind {
	case AttrInt:
		return strconv.FormatInt(a.Int(), 10)
	case AttrFloat:
		return strconv.FormatFloat(a.Float(), 'g', -1, 64)
	case AttrBool:
		return strconv.FormatBool(a.Bool())
	}
	return a.Str
}

// Attrs is a small attribute list, searched linearly (spans carry a few
// dozen attributes at most).
type Attrs []Attr

// Get returns the attribute with the key.
func (as Attrs) Get(key string) (Attr, bool) {
	for _, a := range as {
		if a.Key == key {
			return a, true
		}
	}
	return Attr{}, false
}

// String returns the text of the attribute with the key, or "".
func (as Attrs) String(key string) string {
	if a, ok := as.Get(key); ok {
		return a.Text()
	}
	return ""
}

// Number returns the attribute with the key as a number.
func (as Attrs) Number(key string) (float64, bool) {
	if a, ok := as.Get(key); ok {
		return a.Number()
	}
	return 0, false
}

// Span is one finished span in the compact form triage consumes: ids, name,
// kind, times as Unix nanoseconds, span attributes, and the attributes of the
// resource that emitted it (service.name, k8s.pod.name, ...). Spans decoded
// from one OTLP resource share the Resource slice: treat it as read-only.
type Span struct {
	TraceID       TraceID
	SpanID        SpanID
	ParentID      SpanID
	Kind          SpanKind
	Error         bool // OTLP status code ERROR
	Name          string
	StartUnixNano int64
	EndUnixNano   int64
	Attrs         Attrs
	Resource      Attrs
}

// Start returns the start time.
func (s *Span) Start() time.Time { return time.Unix(0, s.StartUnixNano) }

// End returns the end time.
func (s *Span) End() time.Time { return time.Unix(0, s.EndUnixNano) }

// Duration returns end − start (zero when the end precedes the start).
func (s *Span) Duration() time.Duration {
	if s.EndUnixNano < s.StartUnixNano {
		return 0
	}
	return time.Duration(s.EndUnixNano - s.StartUnixNano)
}

// Service returns the resource's service.name.
func (s *Span) Service() string { return s.Resource.String("service.name") }

// Attr returns a span attribute, falling back to the resource's.
func (s *Span) Attr(key string) (Attr, bool) {
	if a, ok := s.Attrs.Get(key); ok {
		return a, true
	}
	return s.Resource.Get(key)
}

// SortByStart orders spans by start time, keeping the order of equal starts.
func SortByStart(spans []Span) {
	slices.SortStableFunc(spans, func(a, b Span) int { return cmp.Compare(a.StartUnixNano, b.StartUnixNano) })
}
