package main

import (
	"os"
	"testing"
)

// asWhyslowEnv set to 1 makes the test binary run as whyslow (main) instead
// of the tests: the docs test runs the doc commands through it, which spares
// a second build and link of the same package.
const asWhyslowEnv = "WHYSLOW_TEST_AS_WHYSLOW"

// TestMain runs the tests under what main sets up for every command: the
// in-process runs (runCLI) would otherwise pay for a span per PromQL node.
func TestMain(m *testing.M) {
	if os.Getenv(asWhyslowEnv) == "1" {
		main() // exits
	}
	noTracing()
	os.Exit(m.Run())
}
