package triage

// Imported as spandata: triage has a type span (insufficient.go).
import (
	"context"
	"time"

	spandata "github.com/whyslow/whyslow/span"
)

// The span data types live in package span, which the collectors import
// without knowing of triage. The aliases below keep triage's own code, and
// its callers, spelling them triage.Span, triage.TraceID, ...

// Traces answers span queries. The span store of the daemon, a bundle's
// traces.jsonl, Tempo and Jaeger all implement it, so triage never sees
// OTLP or the wire.
type Traces interface {
	// SpansBetween returns spans whose start time lies in [start, end),
	// oldest first, at most limit of them (limit <= 0: no limit).
	SpansBetween(ctx context.Context, start, end time.Time, limit int) ([]Span, error)
	// Trace returns every span of one trace, oldest first, or
	// ErrTraceNotFound.
	Trace(ctx context.Context, id TraceID) ([]Span, error)
	// ByRequestID returns the spans carrying gen_ai.request.id = id (engine
	// and gateway spans), oldest first; empty when none.
	ByRequestID(ctx context.Context, id string) ([]Span, error)
}

// ErrTraceNotFound is span.ErrTraceNotFound.
var ErrTraceNotFound = spandata.ErrTraceNotFound

// ErrUnsupported is span.ErrUnsupported.
var ErrUnsupported = spandata.ErrUnsupported

type (
	// TraceID is span.TraceID.
	TraceID = spandata.TraceID
	// SpanID is span.SpanID.
	SpanID = spandata.SpanID
	// SpanKind is span.SpanKind.
	SpanKind = spandata.SpanKind
	// AttrKind is span.AttrKind.
	AttrKind = spandata.AttrKind
	// Attr is span.Attr.
	Attr = spandata.Attr
	// Attrs is span.Attrs.
	Attrs = spandata.Attrs
	// Span is span.Span.
	Span = spandata.Span
)

// Span kinds the request model reads (span.SpanKind*).
const (
	SpanKindServer = spandata.SpanKindServer
	SpanKindClient = spandata.SpanKindClient
)

// Span and attribute names of the request model (span/names.go).
const (
	SpanLLMRequest           = spandata.SpanLLMRequest
	SpanGatewayRequest       = spandata.SpanGatewayRequest
	SpanGatewayOrchestration = spandata.SpanGatewayOrchestration
	SpanPDProxyPrefill       = spandata.SpanPDProxyPrefill
	SpanPDProxyDecode        = spandata.SpanPDProxyDecode

	AttrRequestID        = spandata.AttrRequestID
	AttrPromptTokens     = spandata.AttrPromptTokens
	AttrCompletionTokens = spandata.AttrCompletionTokens
	AttrTimeInQueue      = spandata.AttrTimeInQueue
	AttrTTFT             = spandata.AttrTTFT
	AttrTimeInPrefill    = spandata.AttrTimeInPrefill
	AttrTimeInDecode     = spandata.AttrTimeInDecode
	AttrE2E              = spandata.AttrE2E
	AttrResponseModel    = spandata.AttrResponseModel
	AttrRequestModel     = spandata.AttrRequestModel
	AttrNamespace        = spandata.AttrNamespace
)

// ParseTraceID is span.ParseTraceID.
func ParseTraceID(s string) (TraceID, error) { return spandata.ParseTraceID(s) }

// StringAttr is span.StringAttr.
func StringAttr(key, v string) Attr { return spandata.StringAttr(key, v) }

// IntAttr is span.IntAttr.
func IntAttr(key string, v int64) Attr { return spandata.IntAttr(key, v) }

// FloatAttr is span.FloatAttr.
func FloatAttr(key string, v float64) Attr { return spandata.FloatAttr(key, v) }

// SortByStart is span.SortByStart.
func SortByStart(spans []Span) { spandata.SortByStart(spans) }
