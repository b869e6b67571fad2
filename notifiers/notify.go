// Package notifiers delivers verdicts to people: the Notification type, the
// Notifier interface every receiver implements, typed delivery errors with a
// failure reason, and the one shared retry stage (backoff, retry-after,
// logging, metrics). Rendering lives in notifiers/render, the durable outbox
// in notifiers/outbox, and each receiver in its own package.
package notifiers

import (
	"context"
	"fmt"
	"time"

	"github.com/whyslow/whyslow/verdict"
)

// Transition is what happened to an incident that a notification reports.
type Transition string

// Transitions.
const (
	// TransitionOpen is a new incident.
	TransitionOpen Transition = "open"
	// TransitionUpdate is a change a human cares about (top cause changed,
	// severity escalated).
	TransitionUpdate Transition = "update"
	// TransitionResolve is the end of the incident.
	TransitionResolve Transition = "resolve"
	// TransitionRepeat re-notifies a long incident after repeat_interval.
	TransitionRepeat Transition = "repeat"
)

// String returns the transition's name.
func (t Transition) String() string { return string(t) }

// Valid reports whether t is one of the known transitions.
func (t Transition) Valid() bool {
	switch t {
	case TransitionOpen, TransitionUpdate, TransitionResolve, TransitionRepeat:
		return true
	}
	return false
}

// State is a receiver's small per-incident memory, persisted between the
// notifications of one incident: for example the Slack parent message's
// channel and ts, so that updates go into its thread and chat.update can
// rewrite it. A notifier reads it and sets keys on success; the outbox
// persists it per receiver and incident and hands it to the next
// notification of the same incident.
type State map[string]string

// Get returns the value of key, "" when unset (also on a nil State).
func (s State) Get(key string) string { return s[key] }

// Notification is one message about one incident to one receiver.
type Notification struct {
	// ID identifies this notification; the outbox dedupes on it. Build it
	// from deterministic fields (see MakeID), never from rendered text.
	ID string `json:"id"`
	// Receiver names the receiver this notification goes to.
	Receiver string `json:"receiver"`
	// IncidentID identifies the incident (one per open..resolve lifetime).
	IncidentID string `json:"incident_id"`
	// IncidentKey is the incident's dedupe key (scope + cause id).
	IncidentKey string `json:"incident_key"`
	// Kind is the transition this notification reports.
	Kind Transition `json:"kind"`
	// Sequence numbers the notifications of one incident from 1.
	Sequence int `json:"sequence"`
	// CreatedAt is when the notification was created (the triage time).
	CreatedAt time.Time `json:"created_at"`
	// VerdictURL optionally links to the verdict in whyslow's API.
	VerdictURL string `json:"verdict_url,omitempty"`
	// Verdict is the triage result being reported.
	Verdict *verdict.Verdict `json:"verdict"`
	// State is this receiver's per-incident state (see State). The outbox
	// fills it in just before delivery.
	State State `json:"state,omitempty"`
}

// MakeID builds a notification id from deterministic fields: the receiver,
// the incident, the sequence number and the transition.
func MakeID(receiver, incidentID string, seq int, kind Transition) string {
	return fmt.Sprintf("%s/%s/%d/%s", receiver, incidentID, seq, kind)
}

// Validate checks the fields every receiver relies on.
func (n *Notification) Validate() error {
	switch {
	case n == nil:
		return fmt.Errorf("notification is nil")
	case n.ID == "":
		return fmt.Errorf("notification has no id")
	case n.Receiver == "":
		return fmt.Errorf("notification %s has no receiver", n.ID)
	case !n.Kind.Valid():
		return fmt.Errorf("notification %s: unknown kind %q", n.ID, n.Kind)
	case n.Verdict == nil:
		return fmt.Errorf("notification %s has no verdict", n.ID)
	}
	return nil
}

// Notifier delivers a notification to one receiver. It returns whether a
// failed delivery is worth retrying; a non-nil error should be an *Error (or
// wrap one) so the retry stage can label the failure and honour Retry-After.
// A notifier may set keys in n.State on success (and on partial success).
type Notifier interface {
	Notify(ctx context.Context, n *Notification) (retry bool, err error)
}

// MaxAttempter is implemented by notifiers whose configuration limits the
// number of delivery attempts per retry round (e.g. webhook max_attempts).
type MaxAttempter interface {
	MaxAttempts() int
}

// NotifierFunc adapts a function to the Notifier interface.
type NotifierFunc func(ctx context.Context, n *Notification) (bool, error)

// Notify calls f.
func (f NotifierFunc) Notify(ctx context.Context, n *Notification) (bool, error) { return f(ctx, n) }
