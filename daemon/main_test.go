package daemon

import (
	"os"
	"testing"

	"github.com/whyslow/whyslow/testbed/testgc"
)

// TestMain runs the tests with the collector running less often (testgc):
// the daemon's cycles over simulated hours are this package's CPU. The
// fleet bounds test, which bounds the heap in use, runs under Go's
// defaults (testgc.Default).
func TestMain(m *testing.M) {
	testgc.Relax()
	os.Exit(m.Run())
}
