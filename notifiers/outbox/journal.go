package outbox

import (
	"fmt"
	"slices"
	"time"

	"github.com/whyslow/whyslow/notifiers"
	"github.com/whyslow/whyslow/verdict"
)

// DeliveryStatus is what became of a notification the outbox took.
type DeliveryStatus int

// Delivery statuses.
const (
	// StatusPending is waiting for (another) delivery attempt.
	StatusPending DeliveryStatus = iota
	// StatusDelivered was accepted by its receiver.
	StatusDelivered
	// StatusDropped was given up: a permanent failure, or dropped to make
	// room in a full outbox.
	StatusDropped
)

// String returns the status's name.
func (s DeliveryStatus) String() string {
	switch s {
	case StatusPending:
		return "pending"
	case StatusDelivered:
		return "delivered"
	case StatusDropped:
		return "dropped"
	}
	return fmt.Sprintf("delivery_status(%d)", int(s))
}

// JournalEntry is one notification of an incident as the outbox took it,
// and what became of it.
type JournalEntry struct {
	ID       string
	Receiver string
	Kind     notifiers.Transition
	Sequence int
	// CreatedAt is the notification's time (the triage that made it).
	CreatedAt time.Time
	// Cause and CauseTitle are its verdict's top cause ("" for none),
	// Severity its verdict's severity.
	Cause, CauseTitle string
	Severity          verdict.Severity
	Status            DeliveryStatus
	// StatusAt is when the status was set (the outbox's clock).
	StatusAt time.Time
}

// Journal bounds: the notifications of the newest journalIncidents
// incidents are kept, at most journalEntries each (the newest).
const (
	journalIncidents = 256
	journalEntries   = 64
)

// journal remembers, per incident, the notifications the outbox took in
// this run (and the pending ones it found at Open): the incident page's
// "where each notification went". In memory only; guarded by Outbox.mu.
type journal struct {
	byIncident map[string][]JournalEntry
	order      []string // incident ids, oldest first
}

func newJournal() *journal { return &journal{byIncident: map[string][]JournalEntry{}} }

// add records n as pending.
func (j *journal) add(n *notifiers.Notification, at time.Time) {
	e := JournalEntry{ID: n.ID, Receiver: n.Receiver, Kind: n.Kind, Sequence: n.Sequence, CreatedAt: n.CreatedAt,
		Status: StatusPending, StatusAt: at}
	if v := n.Verdict; v != nil {
		e.Severity = v.Severity
		if len(v.Causes) > 0 {
			e.Cause, e.CauseTitle = v.Causes[0].ID, v.Causes[0].Title
		}
	}
	list, ok := j.byIncident[n.IncidentID]
	if !ok {
		j.order = append(j.order, n.IncidentID)
		if len(j.order) > journalIncidents {
			delete(j.byIncident, j.order[0])
			j.order = j.order[1:]
		}
	}
	list = append(list, e)
	if len(list) > journalEntries {
		list = list[len(list)-journalEntries:]
	}
	j.byIncident[n.IncidentID] = list
}

// set records the status of notification id of an incident.
func (j *journal) set(incidentID, id string, s DeliveryStatus, at time.Time) {
	list := j.byIncident[incidentID]
	for i := range list {
		if list[i].ID == id {
			list[i].Status, list[i].StatusAt = s, at
			return
		}
	}
}

// Journal returns the notifications of an incident the outbox took since it
// was opened (and those pending from before), oldest first; nil when it
// knows none. Bounded: the newest 256 incidents, 64 notifications each.
func (ob *Outbox) Journal(incidentID string) []JournalEntry {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	return slices.Clone(ob.journal.byIncident[incidentID])
}
