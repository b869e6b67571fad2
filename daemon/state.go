package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/whyslow/whyslow/incident"
	"github.com/whyslow/whyslow/notifiers"
	"github.com/whyslow/whyslow/notifiers/outbox"
)

// The daemon's state file holds the incident tracker and the notifications
// the tracker produced that the outbox has not taken yet, in one file
// written atomically. The order of a cycle is write-ahead:
//
//  1. the tracker changes and its notifications join the pending list;
//  2. the state (tracker + pending) is written;
//  3. only then are the pending notifications handed to the outbox, and
//     the state is written again without them.
//
// So an incident counts as notified only in a state that also holds the
// notification: a failed state write sends nothing (a restart then sees
// neither, and opens the incident once), and a failed outbox write keeps the
// notification pending, on disk, until the outbox takes it.

// stateVersion is the version of the daemon's state envelope; version 1 was
// the bare tracker snapshot, which still loads.
const stateVersion = 2

type stateFileV2 struct {
	Version int                       `json:"version"`
	Tracker json.RawMessage           `json:"tracker"`
	Pending []*notifiers.Notification `json:"pending,omitempty"`
	// HistorySince is when the store's history starts (the first
	// successful scrape into this data dir's TSDB): a restarted daemon
	// keeps its baseline rather than learning it again.
	HistorySince time.Time `json:"history_since,omitzero"`
}

// Readiness problems, by key; /readyz answers 503 while any is set.
// problemCycle (bounds.go: a cycle that overran or left something out) is
// kept apart as degraded: the daemon still works, so /readyz says it with a
// 200 and a readiness probe keeps the replica in its Service (Alertmanager's
// webhooks and the pages go on reaching it); WhyslowCycleBounded pages.
const (
	problemState  = "state"
	problemOutbox = "outbox"
	problemStore  = "store"
)

// decodeState reads a state file: the envelope or a bare v1 snapshot.
func decodeState(cfg incident.IncidentConfig, b []byte) (*incident.Tracker, []*notifiers.Notification, error) {
	t, pending, _, err := decodeStateFile(cfg, b)
	return t, pending, err
}

// decodeStateFile is decodeState that also returns the history start
// (zero when the file has none).
func decodeStateFile(cfg incident.IncidentConfig, b []byte) (*incident.Tracker, []*notifiers.Notification, time.Time, error) {
	var env stateFileV2
	if err := json.Unmarshal(b, &env); err != nil {
		return nil, nil, time.Time{}, fmt.Errorf("decode state: %w", err)
	}
	if env.Version != stateVersion || len(env.Tracker) == 0 {
		t, err := incident.LoadTracker(cfg, b)
		return t, nil, time.Time{}, err
	}
	t, err := incident.LoadTracker(cfg, env.Tracker)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	var pending []*notifiers.Notification
	for i, n := range env.Pending {
		if err := n.Validate(); err != nil {
			return nil, nil, time.Time{}, fmt.Errorf("decode state: pending[%d]: %w", i, err)
		}
		pending = append(pending, n)
	}
	return t, pending, env.HistorySince, nil
}

// loadState restores the tracker and the pending notifications from the
// state file in dir. A missing file is an empty state. A file that cannot
// be read or decoded is moved aside (to incidents.json.corrupt-<unix>) with
// an error line, and the daemon starts with an empty state: a sidecar that
// crash-loops on a truncated file helps nobody.
func (d *Daemon) loadState(dir string, now time.Time) {
	d.removeStaleTemps(dir)
	path := filepath.Join(dir, stateFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err == nil {
		var t *incident.Tracker
		var pending []*notifiers.Notification
		var since time.Time
		if t, pending, since, err = decodeStateFile(d.Config().Incidents, b); err == nil {
			d.tracker, d.pending = t, pending
			if !since.IsZero() && !since.After(now) {
				d.history.Store(since.UnixNano())
			}
			d.persisted = b
			if len(pending) > 0 {
				d.log.Info("Incident state has notifications not yet in the outbox", "pending", len(pending))
			}
			return
		}
	}
	aside := path + ".corrupt-" + strconv.FormatInt(now.Unix(), 10)
	if rerr := os.Rename(path, aside); rerr != nil {
		d.log.Error("Incident state unreadable and could not be moved aside; starting without it",
			"file", path, "err", err, "rename_err", rerr)
		return
	}
	d.log.Error("Incident state unreadable; moved aside, starting without it", "file", path, "moved_to", aside, "err", err)
	d.stats.stateCorrupt.Inc()
}

// removeStaleTemps removes the temporary files of state writes a crash
// interrupted (incidents.json.tmp*): never renamed, so never the state, and
// each crash would leave one more.
func (d *Daemon) removeStaleTemps(dir string) {
	tmps, _ := filepath.Glob(filepath.Join(dir, stateFile+".tmp*"))
	for _, tmp := range tmps {
		if err := os.Remove(tmp); err != nil {
			d.log.Warn("Could not remove a stale temporary state file", "file", tmp, "err", err)
		}
	}
}

// encodeState returns the state file's bytes.
func (d *Daemon) encodeState() ([]byte, error) {
	tr, err := d.tracker.Snapshot()
	if err != nil {
		return nil, err
	}
	return json.Marshal(stateFileV2{Version: stateVersion, Tracker: tr, Pending: d.pending, HistorySince: d.HistorySince()})
}

// persist writes the state to the data dir (atomically) when it changed,
// and reports whether the state on disk is now current. Without a data dir
// there is nothing to write and it is always current.
func (d *Daemon) persist() bool {
	dir := d.Config().DataDir
	if dir == "" {
		return true
	}
	b, err := d.encodeState()
	if err == nil && bytes.Equal(b, d.persisted) {
		return true
	}
	if err == nil {
		err = writeFileAtomic(filepath.Join(dir, stateFile), b)
	}
	if err != nil {
		d.stats.persistErrors.Inc()
		if d.setProblem(problemState, "incident state not saved: "+err.Error()) {
			d.log.Error("Persist incidents failed; notifications wait until the state is saved", "err", err)
		}
		return false
	}
	d.persisted = b
	if d.clearProblem(problemState) {
		d.log.Info("Incident state saved again")
	}
	return true
}

// queue turns incident events into one notification per receiver and adds
// them to the pending list (the outbox gets them in commit).
// Past detect.max_notifications events in one cycle, each receiver gets
// one message per event kind ("12 scopes opened") rather than a page each.
func (d *Daemon) queue(events []incident.Event, at time.Time) {
	cfg := d.Config()
	for _, ev := range events {
		d.log.Info("Incident "+ev.Kind.String(), "incident", ev.Incident.ID, "scope", ev.Incident.Key,
			"top_cause", ev.Incident.TopCause, "severity", ev.Incident.Severity)
	}
	recvs := *d.receivers.Load()
	groups := groupEvents(events, cfg.Detect.MaxNotifications)
	for _, g := range groups {
		for _, recv := range recvs {
			if len(g) == 1 {
				d.pending = append(d.pending, notificationFor(g[0], recv, cfg.API.ExternalURL, at))
				continue
			}
			d.pending = append(d.pending, groupNotification(g, recv, cfg.API.ExternalURL, at))
		}
	}
	if folded := len(events) - len(groups); folded > 0 && len(recvs) > 0 {
		d.stats.detectRefused.WithLabelValues("notifications").Add(float64(folded * len(recvs)))
		d.log.Warn("Incident notifications grouped", "events", len(events), "messages_per_receiver", len(groups),
			"max_notifications", cfg.Detect.MaxNotifications)
	}
}

// commit finishes a cycle that changed the tracker: queue the events, write
// the state, hand the pending notifications to the outbox, write the state
// again without them, and publish the view.
func (d *Daemon) commit(events []incident.Event, at time.Time) {
	d.queue(events, at)
	if d.persist() && d.flushPending() {
		d.persist()
	}
	d.publish()
}

// flushPending hands pending notifications to the outbox, in order, until
// one fails; the rest stay pending (and the daemon unready) for the next
// cycle. It reports whether any left the list.
func (d *Daemon) flushPending() bool {
	done := 0
	var ferr error
	for _, n := range d.pending {
		added, err := d.opts.Outbox.Enqueue(n)
		if errors.Is(err, outbox.ErrRejected) {
			// Retrying cannot help; holding it would hold all the others.
			d.stats.notifications.WithLabelValues(n.Receiver, string(n.Kind), "rejected").Inc()
			d.log.Error("Outbox rejected a notification; dropping it", "notification", n.ID, "err", err)
			done++
			continue
		}
		if err != nil {
			d.stats.notifications.WithLabelValues(n.Receiver, string(n.Kind), "error").Inc()
			ferr = fmt.Errorf("enqueue %s: %w", n.ID, err)
			break
		}
		if added {
			d.stats.notifications.WithLabelValues(n.Receiver, string(n.Kind), "enqueued").Inc()
		} else {
			d.stats.notifications.WithLabelValues(n.Receiver, string(n.Kind), "duplicate").Inc()
		}
		done++
	}
	d.pending = d.pending[done:]
	if len(d.pending) == 0 {
		d.pending = nil
	}
	if ferr != nil {
		if d.setProblem(problemOutbox, fmt.Sprintf("%d notifications not yet in the outbox: %v", len(d.pending), ferr)) {
			d.log.Error("Enqueue notification failed; keeping it pending and retrying every cycle", "pending", len(d.pending), "err", ferr)
		}
	} else if d.clearProblem(problemOutbox) {
		d.log.Info("Outbox takes notifications again")
	}
	return done > 0
}

// setProblem records a readiness problem; it reports whether it is new.
func (d *Daemon) setProblem(key, msg string) bool {
	d.viewMu.Lock()
	defer d.viewMu.Unlock()
	_, had := d.problems[key]
	d.problems[key] = msg
	return !had
}

// clearProblem removes a readiness problem; it reports whether there was one.
func (d *Daemon) clearProblem(key string) bool {
	d.viewMu.Lock()
	defer d.viewMu.Unlock()
	_, had := d.problems[key]
	delete(d.problems, key)
	return had
}

// Problems returns what keeps the daemon unready, sorted: no successful
// scrape yet, a state that is not saved, notifications the outbox did not
// take, a store that refuses writes. None means ready.
func (d *Daemon) Problems() []string {
	d.viewMu.RLock()
	defer d.viewMu.RUnlock()
	var out []string
	if !d.scraped.Load() {
		out = append(out, "no successful scrape yet")
	}
	for key, msg := range d.problems {
		if !degradedProblems[key] {
			out = append(out, msg)
		}
	}
	sort.Strings(out)
	return out
}

// degradedProblems are the problems that leave the daemon ready.
var degradedProblems = map[string]bool{problemCycle: true}

// Degraded lists the degraded problems, sorted.
func (d *Daemon) Degraded() []string {
	d.viewMu.RLock()
	defer d.viewMu.RUnlock()
	var out []string
	for key, msg := range d.problems {
		if degradedProblems[key] {
			out = append(out, msg)
		}
	}
	sort.Strings(out)
	return out
}

func joinProblems(ps []string) string { return strings.Join(ps, "; ") }
