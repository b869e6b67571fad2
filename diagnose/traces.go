package diagnose

import (
	"context"
	"time"

	"github.com/whyslow/whyslow/span"
)

// Traces answers span queries. The span store of the daemon, a bundle's
// traces.jsonl, Tempo and Jaeger all implement it, so triage never sees
// OTLP or the wire.
type Traces interface {
	// SpansBetween returns spans whose start time lies in [start, end),
	// oldest first, at most limit of them (limit <= 0: no limit).
	SpansBetween(ctx context.Context, start, end time.Time, limit int) ([]span.Span, error)
	// Trace returns every span of one trace, oldest first, or
	// span.ErrTraceNotFound.
	Trace(ctx context.Context, id span.TraceID) ([]span.Span, error)
	// ByRequestID returns the spans carrying gen_ai.request.id = id (engine
	// and gateway spans), oldest first; empty when none.
	ByRequestID(ctx context.Context, id string) ([]span.Span, error)
}
