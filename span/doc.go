// Package span holds the span data the trace collectors produce and the
// analysis consumes: trace and span ids, the compact Span, its typed
// attributes, the span and attribute names of the request model
// (docs/engines.md §6), and the errors trace sources return. The query interface, Traces, is the
// diagnosis' own (diagnose.Traces).
//
// It is data only: ids, values and trivial accessors, no analysis. It
// imports nothing of whyslow, so collectors (collectors/otlp,
// collectors/spanstore, collectors/tracequery) depend on it and never on
// diagnose, requests or the verdict — collectors know nothing of the analysis.
package span
