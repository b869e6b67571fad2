package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestBinaryLinksNoTestOrSDKPackages keeps packages the sidecar never runs
// out of the production binary: every linked package's init runs at start,
// and its code pages count in the process's file-backed RSS (issue 27).
// whyslow receives spans (OTLP protos) but never produces them, so it needs
// no OpenTelemetry SDK; its /metrics page is written with expfmt's text
// encoder, without promhttp (and the protobuf encoders its negotiation
// links); testing helpers belong in tests.
func TestBinaryLinksNoTestOrSDKPackages(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	banned := []string{
		"go.opentelemetry.io/otel/sdk", // the SDK, with tracetest and resource detection
		"github.com/prometheus/client_golang/prometheus/promhttp",
		"github.com/stretchr/testify",
		"testing",
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, b := range banned {
			if pkg == b || strings.HasPrefix(pkg, b+"/") {
				t.Errorf("cmd/whyslow links %s", pkg)
			}
		}
	}
}
