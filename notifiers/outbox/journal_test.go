package outbox

import (
	"fmt"
	"testing"
	"time"

	"github.com/whyslow/whyslow/notifiers"
	"github.com/whyslow/whyslow/notifiers/notifytest"
)

func statuses(es []JournalEntry) string {
	s := ""
	for _, e := range es {
		s += fmt.Sprintf("%s:%s ", e.ID, e.Status)
	}
	return s
}

// TestJournal: the outbox remembers each incident's notifications and what
// became of them: pending, delivered (with when), dropped on a permanent
// failure or to make room; the pending ones of a previous run too.
func TestJournal(t *testing.T) {
	clock := notifytest.NewFakeClock(t0)
	dir := t.TempDir()
	ob, _, _ := open(t, dir, clock, Options{MaxEntries: 3})
	ns := lifecycle("hook", 2)
	enqueueAll(t, ob, ns[:3])
	clock.Advance(time.Minute)
	e, ok, err := ob.Next("hook")
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if err := ob.Ack(e); err != nil {
		t.Fatal(err)
	}
	e, _, _ = ob.Next("hook")
	ob.Drop(e)
	got := ob.Journal("inc-1")
	if s := statuses(got); s != "hook/inc-1/1/open:delivered hook/inc-1/2/update:dropped hook/inc-1/3/resolve:pending " {
		t.Errorf("journal %s", s)
	}
	if e := got[0]; !e.StatusAt.Equal(t0.Add(time.Minute)) || e.Cause != "queue_saturation" || e.Severity != "critical" ||
		e.Kind != notifiers.TransitionOpen || e.Sequence != 1 {
		t.Errorf("entry %+v", e)
	}
	// A full outbox drops the oldest pending entry.
	enqueueAll(t, ob, ns[3:6])
	if s := statuses(ob.Journal("inc-1")); s != "hook/inc-1/1/open:delivered hook/inc-1/2/update:dropped hook/inc-1/3/resolve:dropped " {
		t.Errorf("after overflow: %s", s)
	}
	if ob.Journal("inc-9") != nil {
		t.Error("journal of an unknown incident")
	}
	// A reopened outbox knows its pending notifications.
	ob.Close()
	ob2, _, _ := open(t, dir, clock, Options{})
	if s := statuses(ob2.Journal("inc-2")); s != "hook/inc-2/1/open:pending hook/inc-2/2/update:pending hook/inc-2/3/resolve:pending " {
		t.Errorf("reopened: %s", s)
	}
}

// TestJournalBounded: the journal keeps the newest incidents, and the
// newest notifications of each.
func TestJournalBounded(t *testing.T) {
	j := newJournal()
	for i := range journalIncidents + 5 {
		j.add(notification("hook", i, 1, notifiers.TransitionOpen), t0)
	}
	if len(j.byIncident) != journalIncidents || j.byIncident["inc-0"] != nil || j.byIncident["inc-5"] == nil {
		t.Errorf("%d incidents kept; inc-0 kept %v", len(j.byIncident), j.byIncident["inc-0"] != nil)
	}
	for seq := 2; seq <= journalEntries+10; seq++ {
		j.add(notification("hook", 7, seq, notifiers.TransitionRepeat), t0)
	}
	if list := j.byIncident["inc-7"]; len(list) != journalEntries || list[len(list)-1].Sequence != journalEntries+10 {
		t.Errorf("%d entries kept, last %d", len(list), list[len(list)-1].Sequence)
	}
}
