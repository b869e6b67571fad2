package demo

import (
	"os"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace/noop"
)

// TestMain runs the daemon with the no-op tracer provider that `whyslow`
// installs at start (cmd/whyslow's noTracing): without it Prometheus's query
// engine allocates a span per PromQL node, CPU the binary does not spend.
func TestMain(m *testing.M) {
	otel.SetTracerProvider(noop.NewTracerProvider())
	os.Exit(m.Run())
}
