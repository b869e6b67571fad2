package outbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/whyslow/whyslow/notifiers"
	"github.com/whyslow/whyslow/notifiers/notifytest"
)

// TestDeliveredLogLongLine is finding 11 of issue 14 (its last part): one
// line over 1 MiB in delivered.log made the outbox discard the whole file,
// so notifications already delivered would be delivered again.
func TestDeliveredLogLongLine(t *testing.T) {
	dir := t.TempDir()
	clock := notifytest.NewFakeClock(t0)
	ob, _, _ := open(t, dir, clock, Options{})
	first := notification("hook", 1, 1, notifiers.TransitionOpen)
	last := notification("hook", 2, 1, notifiers.TransitionOpen)
	for _, n := range []*notifiers.Notification{first, last} {
		enqueueAll(t, ob, []*notifiers.Notification{n})
		e, ok, err := ob.Next("hook")
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		if err := ob.Ack(e); err != nil {
			t.Fatal(err)
		}
		if n == first {
			// A torn write or a stray blob between two deliveries.
			f, _ := os.OpenFile(filepath.Join(dir, "delivered.log"), os.O_APPEND|os.O_WRONLY, 0o600)
			f.WriteString(strings.Repeat("x", 2<<20) + "\n")
			f.Close()
		}
	}
	ob.Close()
	ob2, _, _ := open(t, dir, clock, Options{})
	for _, n := range []*notifiers.Notification{first, last} {
		if ok, err := ob2.Enqueue(n); ok || err != nil {
			t.Errorf("%s accepted again after a restart (%v): the delivered log was discarded", n.ID, err)
		}
	}
	b, _ := os.ReadFile(filepath.Join(dir, "delivered.log"))
	if len(b) > 4096 {
		t.Errorf("the over-long line was kept: delivered.log is %d bytes", len(b))
	}
}
