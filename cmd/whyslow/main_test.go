package main

import (
	"os"
	"testing"

	"github.com/whyslow/whyslow/testbed/testgc"
)

// asWhyslowEnv set to 1 makes the test binary run as whyslow (main) instead
// of the tests: the docs test runs the doc commands through it, which spares
// a second build and link of the same package.
const asWhyslowEnv = "WHYSLOW_TEST_AS_WHYSLOW"

// TestMain runs the tests under what main sets up for every command: the
// in-process runs (runCLI) would otherwise pay for a span per PromQL node.
// The collector runs less often (testgc): the in-process demo, replay and
// fleet runs are most of this package's CPU. The commands the docs test
// runs as whyslow keep Go's defaults, as the binary does.
func TestMain(m *testing.M) {
	if os.Getenv(asWhyslowEnv) == "1" {
		main() // exits
	}
	noTracing()
	testgc.Relax()
	os.Exit(m.Run())
}
