package demo

import (
	"os"
	"testing"

	"github.com/whyslow/whyslow/testbed/testgc"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace/noop"
)

// TestMain runs the daemon with the no-op tracer provider that `whyslow`
// installs at start (cmd/whyslow's noTracing): without it Prometheus's query
// engine allocates a span per PromQL node, CPU the binary does not spend.
// The collector runs less often (testgc): the end-to-end runs are this
// package's CPU.
func TestMain(m *testing.M) {
	otel.SetTracerProvider(noop.NewTracerProvider())
	testgc.Relax()
	os.Exit(m.Run())
}
