// Package incident tracks incidents per scope: opening on the detector's
// firing, the verdicts that follow, notifications, resolution, and the
// cohorts of scopes that slow together.
package incident

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/whyslow/whyslow/detect"
	"github.com/whyslow/whyslow/verdict"
)

// Incident defaults.
const (
	DefaultResolveAfter   = 3 * time.Minute
	DefaultRepeatInterval = 4 * time.Hour
	DefaultCauseHold      = 3
	DefaultCauseMargin    = 0.25
	DefaultUpdateInterval = 5 * time.Minute
	DefaultOpenWait       = time.Minute
	DefaultKeepResolved   = 100
	// alertSeenTTL is how long an Alertmanager delivery is remembered for dedupe.
	alertSeenTTL = 24 * time.Hour
)

// IncidentConfig sets the noise controls of incident tracking (the
// `incidents:` section of the daemon config); zero values get defaults.
type IncidentConfig struct {
	// ResolveAfter is how long the detector must stay clear before an
	// incident resolves (default 3m).
	ResolveAfter time.Duration `yaml:"resolve_after,omitempty" json:"resolve_after,omitempty"`
	// RepeatInterval re-notifies a long incident (default 4h).
	RepeatInterval time.Duration `yaml:"repeat_interval,omitempty" json:"repeat_interval,omitempty"`
	// CauseHold is how many consecutive triages a new top cause must lead
	// confidently (see CauseMargin) before a "cause changed" notification
	// (default 3). Rankings that alternate between candidates never get
	// there.
	CauseHold int `yaml:"cause_hold,omitempty" json:"cause_hold,omitempty"`
	// CauseMargin is how far the new top cause's score must lead the
	// notified cause's score in the same verdict, as a fraction (default
	// 0.25: 1.25 times; a notified cause no longer ranked counts as 0).
	CauseMargin float64 `yaml:"cause_margin,omitempty" json:"cause_margin,omitempty"`
	// UpdateInterval is the least time between two notifications of one
	// incident other than an escalation or the resolve (default 5m), as
	// Alertmanager's group_interval: a confident change found sooner waits,
	// and goes out if it still holds then.
	UpdateInterval time.Duration `yaml:"update_interval,omitempty" json:"update_interval,omitempty"`
	// OpenWait is how long after an incident opens its first notification
	// waits for a verdict that names a cause (default 1m). A verdict with a
	// cause is sent at once; an incident that clears before OpenWait without
	// one (a blip nobody can explain) is never notified.
	OpenWait time.Duration `yaml:"open_wait,omitempty" json:"open_wait,omitempty"`
	// KeepResolved bounds the resolved incidents kept for the API (default 100).
	KeepResolved int `yaml:"keep_resolved,omitempty" json:"keep_resolved,omitempty"`
}

// WithDefaults returns c with zero values replaced by defaults.
func (c IncidentConfig) WithDefaults() IncidentConfig {
	if c.ResolveAfter == 0 {
		c.ResolveAfter = DefaultResolveAfter
	}
	if c.RepeatInterval == 0 {
		c.RepeatInterval = DefaultRepeatInterval
	}
	if c.CauseHold == 0 {
		c.CauseHold = DefaultCauseHold
	}
	if c.CauseMargin == 0 {
		c.CauseMargin = DefaultCauseMargin
	}
	if c.UpdateInterval == 0 {
		c.UpdateInterval = DefaultUpdateInterval
	}
	if c.OpenWait == 0 {
		c.OpenWait = DefaultOpenWait
	}
	if c.KeepResolved == 0 {
		c.KeepResolved = DefaultKeepResolved
	}
	return c
}

// Validate reports every problem with c, joined.
func (c IncidentConfig) Validate() error {
	var errs []error
	if c.ResolveAfter < 0 {
		errs = append(errs, errors.New("resolve_after must not be negative"))
	}
	if c.RepeatInterval < 0 {
		errs = append(errs, errors.New("repeat_interval must not be negative"))
	}
	if c.CauseHold < 0 {
		errs = append(errs, errors.New("cause_hold must not be negative"))
	}
	if c.CauseMargin < 0 {
		errs = append(errs, errors.New("cause_margin must not be negative"))
	}
	if c.UpdateInterval < 0 {
		errs = append(errs, errors.New("update_interval must not be negative"))
	}
	if c.OpenWait < 0 {
		errs = append(errs, errors.New("open_wait must not be negative"))
	}
	if c.KeepResolved < 0 {
		errs = append(errs, errors.New("keep_resolved must not be negative"))
	}
	return errors.Join(errs...)
}

// IncidentStatus says whether an incident is still going on.
type IncidentStatus int

// Incident statuses.
const (
	IncidentOpen IncidentStatus = iota
	IncidentResolved
)

// String returns the status name.
func (s IncidentStatus) String() string {
	switch s {
	case IncidentOpen:
		return "open"
	case IncidentResolved:
		return "resolved"
	}
	return fmt.Sprintf("incident_status(%d)", int(s))
}

// MarshalText encodes the status by name.
func (s IncidentStatus) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText decodes a status name.
func (s *IncidentStatus) UnmarshalText(b []byte) error {
	switch string(b) {
	case "open":
		*s = IncidentOpen
	case "resolved":
		*s = IncidentResolved
	default:
		return fmt.Errorf("unknown incident status %q", b)
	}
	return nil
}

// EventKind is what happened to an incident that a human should hear about.
type EventKind int

// Event kinds.
const (
	EventOpened EventKind = iota
	EventCauseChanged
	EventEscalated
	EventRepeated
	EventResolved
)

// String returns the event kind's name.
func (k EventKind) String() string {
	switch k {
	case EventOpened:
		return "opened"
	case EventCauseChanged:
		return "cause_changed"
	case EventEscalated:
		return "escalated"
	case EventRepeated:
		return "repeated"
	case EventResolved:
		return "resolved"
	}
	return fmt.Sprintf("event_kind(%d)", int(k))
}

// MarshalText encodes the kind by name.
func (k EventKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// Condition is the incident's condition in node-problem-detector's sense:
// its TransitionTime changes only when Status or Reason changes, so a flapping
// input does not look like a stream of new problems.
type Condition struct {
	Type           string    `json:"type"`
	Status         bool      `json:"status"`
	Reason         string    `json:"reason"`
	Message        string    `json:"message,omitempty"`
	TransitionTime time.Time `json:"transition_time"`
}

// ConditionType is the type of every incident condition.
const ConditionType = "InferenceDegraded"

// AlertRef is an Alertmanager alert attached to an incident.
type AlertRef struct {
	Fingerprint string            `json:"fingerprint"`
	Name        string            `json:"name,omitempty"`
	StartsAt    time.Time         `json:"starts_at"`
	Labels      map[string]string `json:"labels,omitempty"`
}

// Notified records the last notification sent for an incident.
type Notified struct {
	Count    int              `json:"count"`
	At       time.Time        `json:"at,omitzero"`
	Cause    string           `json:"cause,omitempty"`
	Severity verdict.Severity `json:"severity,omitempty"`
}

// Incident is one degradation of one scope, from open to resolve.
type Incident struct {
	ID       string           `json:"id"`
	Key      string           `json:"key"`
	Scope    verdict.Scope    `json:"scope"`
	Status   IncidentStatus   `json:"status"`
	Severity verdict.Severity `json:"severity"`
	// TopCause is the id of the leading cause of the incident's verdict
	// (the latest one that is not insufficient_data): it follows every
	// triage, and is empty once the latest verdict names no cause. What was
	// notified is Notified.Cause.
	TopCause string `json:"top_cause,omitempty"`
	// Triggers are the detector triggers firing at the last evaluation.
	Triggers   []string  `json:"triggers,omitempty"`
	OpenedAt   time.Time `json:"opened_at"`
	UpdatedAt  time.Time `json:"updated_at"`
	ResolvedAt time.Time `json:"resolved_at,omitzero"`
	// ResolveReason says why an incident resolves other than by its
	// detector going clear (its scope's data is gone, see Gone); set while
	// that holds, kept once resolved.
	ResolveReason string `json:"resolve_reason,omitempty"`
	// ClearSince is when the detector last went clear while the incident was open.
	ClearSince time.Time `json:"clear_since,omitzero"`
	// Detected says the detector opened or holds the incident.
	Detected bool `json:"detected"`
	// Firing says the detector fired at its last evaluation of this scope.
	Firing    bool                `json:"firing"`
	Alerts    map[string]AlertRef `json:"alerts,omitempty"`
	Condition Condition           `json:"condition"`
	Verdict   *verdict.Verdict    `json:"verdict,omitempty"`
	Triages   int                 `json:"triages"`
	Notified  Notified            `json:"notified"`
	// PendingCause is a new top cause that has led the notified one
	// confidently for PendingCount consecutive triages (CauseHold).
	PendingCause string `json:"pending_cause,omitempty"`
	PendingCount int    `json:"pending_count,omitempty"`
	// PendingSeverity is a verdict severity above the notified one, seen in
	// PendingSeverityCount consecutive triages.
	PendingSeverity      verdict.Severity `json:"pending_severity,omitempty"`
	PendingSeverityCount int              `json:"pending_severity_count,omitempty"`
}

// Event is a change to an incident that goes to the notifiers.
type Event struct {
	Kind EventKind `json:"kind"`
	At   time.Time `json:"at"`
	// Incident is a snapshot taken when the event happened.
	Incident Incident `json:"incident"`
	// PreviousCause is the cause notified before a cause change.
	PreviousCause string `json:"previous_cause,omitempty"`
	// DedupeKey is built from deterministic fields only (scope, cause id,
	// kind, incident open time, repeat number), never from rendered text.
	DedupeKey string `json:"dedupe_key"`
}

// Tracker is the incident state machine: it opens incidents from detections
// and alerts, decides which triage results are worth a notification, and
// resolves. It does no I/O; time comes in as an argument. Its state
// serialises to JSON (Snapshot, LoadTracker). Not safe for concurrent use.
type Tracker struct {
	cfg      IncidentConfig
	open     map[string]*Incident
	resolved []*Incident // newest last
	seen     map[string]time.Time
}

// NewTracker returns an empty tracker.
func NewTracker(cfg IncidentConfig) *Tracker {
	return &Tracker{cfg: cfg.WithDefaults(), open: map[string]*Incident{}, seen: map[string]time.Time{}}
}

// SetConfig changes the noise controls (on reload); state is kept.
func (t *Tracker) SetConfig(cfg IncidentConfig) { t.cfg = cfg.WithDefaults() }

// Open reports whether an incident is open for key.
func (t *Tracker) Open(key string) bool { return t.open[key] != nil }

// Get returns a copy of the open incident for key, or of the newest resolved one.
func (t *Tracker) Get(key string) (Incident, bool) {
	if in := t.open[key]; in != nil {
		return in.clone(), true
	}
	for i := len(t.resolved) - 1; i >= 0; i-- {
		if t.resolved[i].Key == key {
			return t.resolved[i].clone(), true
		}
	}
	return Incident{}, false
}

// OpenKeys returns the keys of the open incidents, sorted.
func (t *Tracker) OpenKeys() []string {
	keys := make([]string, 0, len(t.open))
	for k := range t.open {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Incidents returns copies of the open incidents (by key) followed by the
// resolved ones, newest first.
func (t *Tracker) Incidents() []Incident {
	out := make([]Incident, 0, len(t.open)+len(t.resolved))
	for _, k := range t.OpenKeys() {
		out = append(out, t.open[k].clone())
	}
	for i := len(t.resolved) - 1; i >= 0; i-- {
		out = append(out, t.resolved[i].clone())
	}
	return out
}

// Observe feeds the detector's result for one scope at time at. A firing
// detection opens an incident (the caller then triages it and calls Record);
// a clear one starts the resolve countdown and may resolve the incident.
//
// The detector's `for` hold guards the opening only: once an incident is
// open, a trigger whose condition holds again (pending) keeps it firing, so
// a signal that dips for a few scrapes inside the incident neither resolves
// it nor waits out the hold again while the resolve countdown runs.
func (t *Tracker) Observe(d detect.Detection, at time.Time) []Event {
	in := t.open[d.Key]
	holding := in != nil && in.Detected && len(d.Holding()) > 0
	if d.Firing || holding {
		if in == nil {
			in = t.openIncident(d.Key, d.Scope, at)
		}
		in.Detected, in.Firing = true, true
		in.ResolveReason = ""
		in.Triggers = d.FiringTriggers()
		if len(in.Triggers) == 0 {
			in.Triggers = d.Holding()
		}
		in.ClearSince = time.Time{}
		if d.Severity.Rank() > in.Severity.Rank() {
			in.Severity = d.Severity
		}
		in.UpdatedAt = at
		return nil
	}
	if in == nil {
		return nil
	}
	in.ResolveReason = ""
	return t.clear(in, at)
}

// Gone records that the open incident of key has lost its data: the scope's
// series stopped (its engine targets are down, or the model is gone). It
// counts as clear for the resolve countdown (ResolveAfter), and the
// incident resolves with reason, so an engine that stopped does not hold
// its incidents open forever, nor resolve them as if they had recovered.
// A later firing detection cancels it.
func (t *Tracker) Gone(key, reason string, at time.Time) []Event {
	in := t.open[key]
	if in == nil {
		return nil
	}
	in.ResolveReason = reason
	return t.clear(in, at)
}

// clear starts or continues the resolve countdown of an open incident.
func (t *Tracker) clear(in *Incident, at time.Time) []Event {
	if in.Firing || in.ClearSince.IsZero() {
		in.ClearSince = at
	}
	in.Firing = false
	in.Triggers = nil
	return t.maybeResolve(in, at)
}

// Record takes the verdict of a triage of an open incident and returns the
// notifications it warrants. The policy pages a human only for what they
// care about, judged on deterministic fields (cause ids, scores, severity):
//
//   - opened: the first verdict that names a cause, or after OpenWait
//     without one;
//   - cause_changed: a new top cause that has led the notified cause by
//     CauseMargin for CauseHold consecutive triages, and not sooner than
//     UpdateInterval after the last notification — a ranking that
//     alternates between candidates is not a change;
//   - escalated: a higher severity from the detector at once (its triggers
//     have their own hold), or from the verdicts for CauseHold consecutive
//     triages;
//   - repeated: RepeatInterval after the last notification.
//
// Nothing is sent while the detector is clear and the resolve countdown runs.
func (t *Tracker) Record(key string, v *verdict.Verdict, at time.Time) []Event {
	in := t.open[key]
	if in == nil || v == nil {
		return nil
	}
	in.Triages++
	// Keep the last verdict that says something: a scope that lost its
	// data should not replace the diagnosis with "insufficient data".
	if in.Verdict == nil || v.Status != verdict.StatusInsufficientData {
		in.Verdict = v
	}
	// The incident's state follows its verdict; the notification policy
	// below decides what of it is news (Notified).
	in.TopCause = topCause(in.Verdict)
	in.UpdatedAt = at
	if in.Detected && !in.Firing && len(in.Alerts) == 0 {
		// The detector is clear and the resolve countdown runs: a verdict
		// over a recovering window is not news, nor a reason to page.
		in.PendingCause, in.PendingCount = "", 0
		in.PendingSeverity, in.PendingSeverityCount = "", 0
		return nil
	}
	top := topCause(v)
	if in.Notified.Count == 0 {
		if v.Severity.Rank() > in.Severity.Rank() {
			in.Severity = v.Severity
		}
		// Wait a little for a verdict that names a cause.
		if top == "" && at.Sub(in.OpenedAt) < t.cfg.OpenWait {
			return nil
		}
		t.setCondition(in, true, top, at)
		return []Event{t.notify(in, EventOpened, top, "", at)}
	}

	// A verdict severity above the notified one must hold to count.
	if v.Severity.Rank() > in.Notified.Severity.Rank() {
		if v.Severity == in.PendingSeverity {
			in.PendingSeverityCount++
		} else {
			in.PendingSeverity, in.PendingSeverityCount = v.Severity, 1
		}
		if in.PendingSeverityCount >= t.cfg.CauseHold && v.Severity.Rank() > in.Severity.Rank() {
			in.Severity = v.Severity
		}
	} else {
		in.PendingSeverity, in.PendingSeverityCount = "", 0
	}

	// A new top cause must lead the notified one by the margin, triage
	// after triage. A verdict without a cause says nothing either way.
	if top != "" {
		if top != in.Notified.Cause && confidentLead(v, top, in.Notified.Cause, t.cfg.CauseMargin) {
			if top == in.PendingCause {
				in.PendingCount++
			} else {
				in.PendingCause, in.PendingCount = top, 1
			}
		} else {
			in.PendingCause, in.PendingCount = "", 0
		}
	}

	if in.Severity.Rank() > in.Notified.Severity.Rank() {
		cause := in.Notified.Cause
		if in.PendingCause != "" && in.PendingCount >= t.cfg.CauseHold {
			cause = in.PendingCause
			in.PendingCause, in.PendingCount = "", 0
			t.setCondition(in, true, cause, at)
		}
		return []Event{t.notify(in, EventEscalated, cause, "", at)}
	}
	if in.PendingCause != "" && in.PendingCount >= t.cfg.CauseHold && at.Sub(in.Notified.At) >= t.cfg.UpdateInterval {
		prev, cause := in.Notified.Cause, in.PendingCause
		in.PendingCause, in.PendingCount = "", 0
		t.setCondition(in, true, cause, at)
		return []Event{t.notify(in, EventCauseChanged, cause, prev, at)}
	}
	if at.Sub(in.Notified.At) >= t.cfg.RepeatInterval {
		return []Event{t.notify(in, EventRepeated, in.Notified.Cause, "", at)}
	}
	return nil
}

// topCause is the id of the leading cause of an anomaly verdict, "" otherwise.
func topCause(v *verdict.Verdict) string {
	if v == nil || v.Status != verdict.StatusAnomaly || len(v.Causes) == 0 {
		return ""
	}
	return v.Causes[0].ID
}

// confidentLead reports whether cause top leads cause prev in v by margin:
// score(top) >= (1+margin) × score(prev), where prev missing from the
// ranking scores 0. A prev cause that is unscored (0) is led by any
// ranked cause.
func confidentLead(v *verdict.Verdict, top, prev string, margin float64) bool {
	var sTop, sPrev float64
	for _, c := range v.Causes {
		switch c.ID {
		case top:
			sTop = c.Score
		case prev:
			sPrev = c.Score
		}
	}
	if sPrev <= 0 {
		return true
	}
	return sTop >= (1+margin)*sPrev
}

// SeenAlert reports whether an Alertmanager delivery of this alert with the
// same status and start was already handled, and remembers it otherwise.
func (t *Tracker) SeenAlert(fingerprint, status string, startsAt, at time.Time) bool {
	k := fingerprint + "|" + status + "|" + startsAt.UTC().Format(time.RFC3339Nano)
	for sk, when := range t.seen {
		if at.Sub(when) > alertSeenTTL {
			delete(t.seen, sk)
		}
	}
	if _, ok := t.seen[k]; ok {
		return true
	}
	t.seen[k] = at
	return false
}

// AlertFiring attaches a firing Alertmanager alert to the incident of key,
// opening one when none is open. The caller then triages and calls Record.
func (t *Tracker) AlertFiring(key string, scope verdict.Scope, a AlertRef, sev verdict.Severity, at time.Time) {
	in := t.open[key]
	if in == nil {
		in = t.openIncident(key, scope, at)
	}
	if in.Alerts == nil {
		in.Alerts = map[string]AlertRef{}
	}
	in.Alerts[a.Fingerprint] = a
	if sev.Rank() > in.Severity.Rank() {
		in.Severity = sev
	}
	in.UpdatedAt = at
}

// AlertResolved detaches a resolved alert; the incident closes at once when
// no alert is left and the detector does not hold it.
func (t *Tracker) AlertResolved(key, fingerprint string, at time.Time) []Event {
	in := t.open[key]
	if in == nil {
		return nil
	}
	if _, ok := in.Alerts[fingerprint]; !ok {
		return nil
	}
	delete(in.Alerts, fingerprint)
	in.UpdatedAt = at
	if len(in.Alerts) > 0 {
		return nil
	}
	if !in.Detected {
		return t.resolve(in, at)
	}
	return t.maybeResolve(in, at)
}

func (t *Tracker) maybeResolve(in *Incident, at time.Time) []Event {
	if len(in.Alerts) > 0 || in.Firing {
		return nil
	}
	if in.Detected && at.Sub(in.ClearSince) < t.cfg.ResolveAfter {
		return nil
	}
	return t.resolve(in, at)
}

func (t *Tracker) openIncident(key string, scope verdict.Scope, at time.Time) *Incident {
	in := &Incident{
		ID:       key + "@" + strconv.FormatInt(at.Unix(), 10),
		Key:      key,
		Scope:    scope,
		Status:   IncidentOpen,
		Severity: verdict.SeverityNone,
		OpenedAt: at,
	}
	in.UpdatedAt = at
	t.setCondition(in, true, "", at)
	t.open[key] = in
	return in
}

func (t *Tracker) resolve(in *Incident, at time.Time) []Event {
	in.Status = IncidentResolved
	in.ResolvedAt = at
	in.UpdatedAt = at
	t.setCondition(in, false, "", at)
	delete(t.open, in.Key)
	t.resolved = append(t.resolved, in)
	if n := len(t.resolved) - t.cfg.KeepResolved; n > 0 {
		t.resolved = append([]*Incident(nil), t.resolved[n:]...)
	}
	if in.Notified.Count == 0 {
		// Nobody heard about it opening; a lone resolve would only confuse.
		return nil
	}
	return []Event{t.notify(in, EventResolved, in.Notified.Cause, "", at)}
}

// setCondition updates the condition (its reason the cause notified); the
// transition time moves only when the status or the reason changes.
func (t *Tracker) setCondition(in *Incident, status bool, cause string, at time.Time) {
	reason := "Resolved"
	msg := "the detector has been clear and no alert is firing"
	if in.ResolveReason != "" {
		reason, msg = "DataGone", in.ResolveReason
	}
	if status {
		reason = cause
		if reason == "" {
			reason = "Degraded"
		}
		msg = "triggers: " + strings.Join(in.Triggers, ", ")
		if len(in.Triggers) == 0 && len(in.Alerts) > 0 {
			msg = fmt.Sprintf("%d Alertmanager alert(s) firing", len(in.Alerts))
		}
	}
	c := &in.Condition
	if c.Type == "" || c.Status != status || c.Reason != reason {
		c.TransitionTime = at
	}
	c.Type, c.Status, c.Reason, c.Message = ConditionType, status, reason, msg
}

// notify records a notification of kind about cause (the cause it names)
// and returns its event.
func (t *Tracker) notify(in *Incident, kind EventKind, cause, prev string, at time.Time) Event {
	in.Notified.Count++
	in.Notified.At = at
	in.Notified.Cause = cause
	in.Notified.Severity = in.Severity
	return Event{
		Kind:          kind,
		At:            at,
		Incident:      in.clone(),
		PreviousCause: prev,
		DedupeKey:     DedupeKey(in, kind),
	}
}

// DedupeKey builds a notification's dedupe key from deterministic fields:
// the scope key, the notified cause id (Notified.Cause), the event kind and
// the incident's open time, plus the notification count for repeats and
// escalations.
func DedupeKey(in *Incident, kind EventKind) string {
	cause := in.Notified.Cause
	if cause == "" {
		cause = "-"
	}
	k := fmt.Sprintf("%s|%s|%s|%d", in.Key, cause, kind, in.OpenedAt.Unix())
	if kind == EventRepeated || kind == EventEscalated {
		k += "|" + strconv.Itoa(in.Notified.Count)
	}
	return k
}

func (in *Incident) clone() Incident {
	c := *in
	c.Triggers = append([]string(nil), in.Triggers...)
	if in.Alerts != nil {
		c.Alerts = make(map[string]AlertRef, len(in.Alerts))
		for k, v := range in.Alerts {
			c.Alerts[k] = v
		}
	}
	return c
}

// trackerState is the persisted form of a Tracker.
type trackerState struct {
	Version  int                  `json:"version"`
	Open     []*Incident          `json:"open"`
	Resolved []*Incident          `json:"resolved"`
	Seen     map[string]time.Time `json:"seen_alerts,omitempty"`
}

// Snapshot serialises the tracker's state to JSON.
func (t *Tracker) Snapshot() ([]byte, error) {
	st := trackerState{Version: 1, Resolved: t.resolved, Seen: t.seen}
	for _, k := range t.OpenKeys() {
		st.Open = append(st.Open, t.open[k])
	}
	if st.Open == nil {
		st.Open = []*Incident{}
	}
	if st.Resolved == nil {
		st.Resolved = []*Incident{}
	}
	b, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("snapshot incidents: %w", err)
	}
	return b, nil
}

// LoadTracker restores a tracker from a Snapshot.
func LoadTracker(cfg IncidentConfig, data []byte) (*Tracker, error) {
	var st trackerState
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("load incidents: %w", err)
	}
	if st.Version != 1 {
		return nil, fmt.Errorf("load incidents: unsupported state version %d", st.Version)
	}
	t := NewTracker(cfg)
	for _, in := range st.Open {
		if in == nil || in.Key == "" {
			return nil, errors.New("load incidents: open incident without a key")
		}
		t.open[in.Key] = in
	}
	t.resolved = st.Resolved
	for k, v := range st.Seen {
		t.seen[k] = v
	}
	return t, nil
}
