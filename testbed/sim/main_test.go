package sim

import (
	"os"
	"testing"

	"github.com/whyslow/whyslow/testbed/testgc"
)

// TestMain runs the tests with the collector running less often (testgc):
// recording hours of the engine model is this package's CPU, and none of
// its tests bounds the heap.
func TestMain(m *testing.M) {
	testgc.Relax()
	os.Exit(m.Run())
}
