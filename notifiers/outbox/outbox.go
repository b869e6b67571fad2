// Package outbox is the durable queue between incident handling and the
// receivers: every notification is written to disk before delivery is
// attempted and removed only once delivered, so a verdict survives a down
// receiver and a restart. A Dispatcher drains it through the shared retry
// stage.
//
// Layout of the directory:
//
//	pending/<seq>.json   one file per pending notification (temp+fsync+rename)
//	state/<hash>.json    per-receiver, per-incident notifier state (e.g. Slack ts)
//	delivered.log        ids delivered recently, one per line (dedupe)
//	corrupt/             entries that could not be read, moved aside
//
// Delivery is at least once: a crash after the receiver accepted a
// notification but before the outbox recorded it can deliver it again.
// Within a run and across clean restarts, notification ids are delivered once.
package outbox

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/whyslow/whyslow/notifiers"
)

// Options configure an outbox. Zero values get defaults.
type Options struct {
	// MaxEntries bounds the pending notifications (default 10000); beyond it
	// the oldest are dropped and counted.
	MaxEntries int
	// MaxBytes bounds the pending notifications' size on disk (default 64 MiB).
	MaxBytes int64
	// RememberDelivered is how many delivered ids are kept for dedupe
	// (default 4096).
	RememberDelivered int
	// Clock stamps entries (default notifiers.RealClock).
	Clock notifiers.Clock
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// Registerer receives the outbox metrics (nil: not registered).
	Registerer prometheus.Registerer
}

// entryVersion is the version of the on-disk entry format.
const entryVersion = 1

// record is one pending entry on disk.
type record struct {
	Version      int                     `json:"version"`
	Seq          uint64                  `json:"seq"`
	EnqueuedAt   time.Time               `json:"enqueued_at"`
	Notification *notifiers.Notification `json:"notification"`
}

// entry is the in-memory index of a pending record (no body).
type entry struct {
	seq        uint64
	id         string
	receiver   string
	incidentID string
	size       int64
}

// Entry is a pending notification handed to a dispatcher.
type Entry struct {
	seq uint64
	// Notification is the decoded notification.
	Notification *notifiers.Notification
	// EnqueuedAt is when it entered the outbox.
	EnqueuedAt time.Time
}

// Outbox is a directory-backed queue of notifications. It is safe for
// concurrent use.
type Outbox struct {
	dir string
	o   Options
	log *slog.Logger
	m   *metrics

	mu        sync.Mutex
	entries   map[uint64]*entry
	byID      map[string]uint64
	nextSeq   uint64
	bytes     int64
	delivered map[string]struct{}
	order     []string // delivered ids, oldest first
	dlog      *os.File
	wake      map[string]chan struct{}
	journal   *journal
	closed    bool
}

type metrics struct {
	depth    prometheus.Gauge
	bytes    prometheus.Gauge
	dropped  *prometheus.CounterVec
	deduped  prometheus.Counter
	enqueued prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		depth: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "whyslow_outbox_depth", Help: "Notifications waiting in the outbox.",
		}),
		bytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "whyslow_outbox_bytes", Help: "Size on disk of the notifications waiting in the outbox.",
		}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "whyslow_outbox_dropped_total",
			Help: "Notifications removed from the outbox undelivered, by reason (overflow, rejected, corrupt).",
		}, []string{"reason"}),
		deduped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "whyslow_outbox_deduplicated_total", Help: "Enqueued notifications ignored as duplicates by id.",
		}),
		enqueued: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "whyslow_outbox_enqueued_total", Help: "Notifications written to the outbox.",
		}),
	}
	var err error
	if m.depth, err = notifiers.Register(reg, m.depth); err != nil {
		return nil, err
	}
	if m.bytes, err = notifiers.Register(reg, m.bytes); err != nil {
		return nil, err
	}
	if m.dropped, err = notifiers.Register(reg, m.dropped); err != nil {
		return nil, err
	}
	if m.deduped, err = notifiers.Register(reg, m.deduped); err != nil {
		return nil, err
	}
	if m.enqueued, err = notifiers.Register(reg, m.enqueued); err != nil {
		return nil, err
	}
	return m, nil
}

// Drop reasons.
const (
	dropOverflow = "overflow"
	dropRejected = "rejected"
	dropCorrupt  = "corrupt"
)

// ErrClosed is returned by operations on a closed outbox.
var ErrClosed = errors.New("outbox closed")

// ErrRejected is wrapped by Enqueue errors that retrying cannot fix (an
// invalid notification, one larger than the outbox): the caller drops the
// notification instead of holding it. Other errors (a full disk) may pass.
var ErrRejected = errors.New("notification rejected")

// Open opens (creating if needed) the outbox in dir and indexes the pending
// entries left by a previous run; corrupt entries are moved to corrupt/ with
// a log line. Entries already recorded as delivered are removed.
func Open(dir string, o Options) (*Outbox, error) {
	if o.MaxEntries <= 0 {
		o.MaxEntries = 10000
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = 64 << 20
	}
	if o.RememberDelivered <= 0 {
		o.RememberDelivered = 4096
	}
	if o.Clock == nil {
		o.Clock = notifiers.RealClock
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	m, err := newMetrics(o.Registerer)
	if err != nil {
		return nil, fmt.Errorf("open outbox %s: %w", dir, err)
	}
	for _, sub := range []string{"pending", "state", "corrupt"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return nil, fmt.Errorf("open outbox: %w", err)
		}
	}
	// A write a crash interrupted leaves a .tmp-* file; pending/ is swept
	// by loadPending, the others here.
	for _, sub := range []string{".", "state"} {
		removeTemps(filepath.Join(dir, sub))
	}
	ob := &Outbox{
		dir:       dir,
		o:         o,
		log:       o.Logger.With("component", "outbox"),
		m:         m,
		entries:   map[uint64]*entry{},
		byID:      map[string]uint64{},
		nextSeq:   1,
		delivered: map[string]struct{}{},
		wake:      map[string]chan struct{}{},
		journal:   newJournal(),
	}
	if err := ob.loadDelivered(); err != nil {
		return nil, err
	}
	if err := ob.loadPending(); err != nil {
		ob.dlog.Close()
		return nil, err
	}
	ob.updateGauges()
	return ob, nil
}

// Dir returns the outbox directory.
func (ob *Outbox) Dir() string { return ob.dir }

func (ob *Outbox) pendingPath(seq uint64) string {
	return filepath.Join(ob.dir, "pending", fmt.Sprintf("%020d.json", seq))
}

// loadDelivered reads delivered.log, keeps its newest ids, rewrites it
// compacted and opens it for appending.
func (ob *Outbox) loadDelivered() error {
	path := filepath.Join(ob.dir, "delivered.log")
	var ids []string
	if f, err := os.Open(path); err == nil {
		var skipped int
		ids, skipped, err = readIDs(f)
		f.Close()
		if skipped > 0 {
			ob.log.Warn("Outbox delivered log has over-long lines; skipped them", "lines", skipped, "max_bytes", maxIDLen)
		}
		if err != nil {
			// Keep what was read: forgetting delivered ids would deliver
			// them again.
			ob.log.Warn("Outbox delivered log partly unreadable, keeping the ids read", "ids", len(ids), "err", err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("open outbox: %w", err)
	}
	if len(ids) > ob.o.RememberDelivered {
		ids = ids[len(ids)-ob.o.RememberDelivered:]
	}
	for _, id := range ids {
		ob.rememberLocked(id)
	}
	var b strings.Builder
	for _, id := range ob.order {
		b.WriteString(id)
		b.WriteByte('\n')
	}
	if err := writeFileAtomic(path, []byte(b.String())); err != nil {
		return fmt.Errorf("open outbox: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open outbox: %w", err)
	}
	ob.dlog = f
	return nil
}

// maxIDLen bounds a line of delivered.log; notification ids are short, so a
// longer line is garbage (a torn write, a stray file) and is skipped.
const maxIDLen = 4 << 10

// readIDs reads delivered.log line by line, skipping lines over maxIDLen
// instead of giving up on the file.
func readIDs(r io.Reader) (ids []string, skipped int, err error) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, isPrefix, rerr := br.ReadLine()
		if rerr != nil {
			if errors.Is(rerr, io.EOF) {
				return ids, skipped, nil
			}
			return ids, skipped, rerr
		}
		if isPrefix || len(line) > maxIDLen {
			skipped++
			for isPrefix && rerr == nil {
				_, isPrefix, rerr = br.ReadLine()
			}
			if rerr != nil && !errors.Is(rerr, io.EOF) {
				return ids, skipped, rerr
			}
			continue
		}
		if id := strings.TrimSpace(string(line)); id != "" {
			ids = append(ids, id)
		}
	}
}

func (ob *Outbox) rememberLocked(id string) {
	if _, ok := ob.delivered[id]; ok {
		return
	}
	ob.delivered[id] = struct{}{}
	ob.order = append(ob.order, id)
	if len(ob.order) > ob.o.RememberDelivered {
		old := ob.order[0]
		ob.order = ob.order[1:]
		delete(ob.delivered, old)
	}
}

// loadPending indexes pending/, moving corrupt files aside.
func (ob *Outbox) loadPending() error {
	pdir := filepath.Join(ob.dir, "pending")
	des, err := os.ReadDir(pdir)
	if err != nil {
		return fmt.Errorf("open outbox: %w", err)
	}
	for _, de := range des {
		name := de.Name()
		path := filepath.Join(pdir, name)
		if strings.HasPrefix(name, ".tmp-") {
			os.Remove(path) // a write interrupted by a crash; never renamed, never acknowledged
			continue
		}
		seq, perr := strconv.ParseUint(strings.TrimSuffix(name, ".json"), 10, 64)
		if !strings.HasSuffix(name, ".json") || perr != nil || de.IsDir() {
			ob.moveAside(path, fmt.Errorf("unexpected file name"))
			continue
		}
		rec, size, err := readRecord(path)
		if err == nil && rec.Seq != seq {
			err = fmt.Errorf("sequence %d does not match file name", rec.Seq)
		}
		if err != nil {
			ob.moveAside(path, err)
			continue
		}
		n := rec.Notification
		if _, ok := ob.delivered[n.ID]; ok {
			// Delivered, then the process stopped before removing the file.
			os.Remove(path)
			continue
		}
		if _, dup := ob.byID[n.ID]; dup {
			os.Remove(path)
			continue
		}
		ob.entries[seq] = &entry{seq: seq, id: n.ID, receiver: n.Receiver, incidentID: n.IncidentID, size: size}
		ob.byID[n.ID] = seq
		ob.bytes += size
		ob.journal.add(n, rec.EnqueuedAt)
		if seq >= ob.nextSeq {
			ob.nextSeq = seq + 1
		}
	}
	if len(ob.entries) > 0 {
		ob.log.Info("Outbox has pending notifications from a previous run", "pending", len(ob.entries), "dir", ob.dir)
	}
	return nil
}

// readRecord reads and validates one pending file.
func readRecord(path string) (*record, int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, err
	}
	rec, err := decodeRecord(b)
	if err != nil {
		return nil, 0, err
	}
	return rec, int64(len(b)), nil
}

// decodeRecord parses and validates the bytes of one pending file.
func decodeRecord(b []byte) (*record, error) {
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	if rec.Version != entryVersion {
		return nil, fmt.Errorf("unsupported entry version %d", rec.Version)
	}
	if err := rec.Notification.Validate(); err != nil {
		return nil, err
	}
	return &rec, nil
}

// moveAside moves a bad file into corrupt/ and logs it; failing that, it
// removes it. It never fails the caller.
func (ob *Outbox) moveAside(path string, why error) {
	dst := filepath.Join(ob.dir, "corrupt", filepath.Base(path))
	if err := os.Rename(path, dst); err != nil {
		ob.log.Error("Outbox entry is corrupt and could not be moved aside; removing it", "file", path, "reason", why, "err", err)
		os.Remove(path)
	} else {
		ob.log.Error("Outbox entry is corrupt; moved aside", "file", path, "moved_to", dst, "reason", why)
	}
	ob.m.dropped.WithLabelValues(dropCorrupt).Inc()
}

// Enqueue writes n durably to the outbox. It returns false (and no error)
// when a notification with the same id is pending or was delivered
// recently. When the outbox is full the oldest entries are dropped.
func (ob *Outbox) Enqueue(n *notifiers.Notification) (bool, error) {
	if err := n.Validate(); err != nil {
		return false, fmt.Errorf("enqueue: %w: %w", ErrRejected, err)
	}
	ob.mu.Lock()
	defer ob.mu.Unlock()
	if ob.closed {
		return false, ErrClosed
	}
	if _, ok := ob.byID[n.ID]; ok {
		ob.m.deduped.Inc()
		return false, nil
	}
	if _, ok := ob.delivered[n.ID]; ok {
		ob.m.deduped.Inc()
		return false, nil
	}
	seq := ob.nextSeq
	rec := record{Version: entryVersion, Seq: seq, EnqueuedAt: ob.o.Clock.Now().UTC(), Notification: n}
	body, err := json.Marshal(&rec)
	if err != nil {
		return false, fmt.Errorf("enqueue %s: %w: %w", n.ID, ErrRejected, err)
	}
	size := int64(len(body))
	if size > ob.o.MaxBytes {
		return false, fmt.Errorf("enqueue %s: %w: %d bytes exceeds the outbox limit of %d", n.ID, ErrRejected, size, ob.o.MaxBytes)
	}
	for len(ob.entries) >= ob.o.MaxEntries || ob.bytes+size > ob.o.MaxBytes {
		ob.dropOldestLocked()
	}
	if err := writeFileAtomic(ob.pendingPath(seq), body); err != nil {
		return false, fmt.Errorf("enqueue %s: %w", n.ID, err)
	}
	ob.nextSeq++
	ob.entries[seq] = &entry{seq: seq, id: n.ID, receiver: n.Receiver, incidentID: n.IncidentID, size: size}
	ob.byID[n.ID] = seq
	ob.bytes += size
	ob.journal.add(n, rec.EnqueuedAt)
	ob.m.enqueued.Inc()
	ob.updateGauges()
	ob.wakeLocked(n.Receiver)
	return true, nil
}

func (ob *Outbox) dropOldestLocked() {
	var oldest *entry
	for _, e := range ob.entries {
		if oldest == nil || e.seq < oldest.seq {
			oldest = e
		}
	}
	if oldest == nil {
		return
	}
	ob.removeLocked(oldest)
	ob.journal.set(oldest.incidentID, oldest.id, StatusDropped, ob.o.Clock.Now().UTC())
	ob.m.dropped.WithLabelValues(dropOverflow).Inc()
	ob.log.Warn("Outbox full, dropped the oldest notification", "notification", oldest.id, "receiver", oldest.receiver)
}

func (ob *Outbox) removeLocked(e *entry) {
	if err := os.Remove(ob.pendingPath(e.seq)); err != nil && !errors.Is(err, os.ErrNotExist) {
		ob.log.Error("Outbox could not remove an entry", "notification", e.id, "err", err)
	}
	delete(ob.entries, e.seq)
	delete(ob.byID, e.id)
	ob.bytes -= e.size
	ob.updateGauges()
}

func (ob *Outbox) updateGauges() {
	ob.m.depth.Set(float64(len(ob.entries)))
	ob.m.bytes.Set(float64(ob.bytes))
}

// wakeChan returns the channel that is signalled when receiver gets a new
// entry.
func (ob *Outbox) wakeChan(receiver string) chan struct{} {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	return ob.wakeChanLocked(receiver)
}

func (ob *Outbox) wakeChanLocked(receiver string) chan struct{} {
	c, ok := ob.wake[receiver]
	if !ok {
		c = make(chan struct{}, 1)
		ob.wake[receiver] = c
	}
	return c
}

func (ob *Outbox) wakeLocked(receiver string) {
	select {
	case ob.wakeChanLocked(receiver) <- struct{}{}:
	default:
	}
}

// Depth returns the number of pending notifications.
func (ob *Outbox) Depth() int {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	return len(ob.entries)
}

// Receivers returns the receivers that have pending notifications, sorted.
func (ob *Outbox) Receivers() []string {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	set := map[string]bool{}
	for _, e := range ob.entries {
		set[e.receiver] = true
	}
	out := make([]string, 0, len(set))
	for r := range set {
		out = append(out, r)
	}
	sort.Strings(out)
	return out
}

// PendingIDs returns the ids pending for receiver ("" for all), oldest first.
func (ob *Outbox) PendingIDs(receiver string) []string {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	es := ob.sortedLocked(receiver)
	ids := make([]string, len(es))
	for i, e := range es {
		ids[i] = e.id
	}
	return ids
}

func (ob *Outbox) sortedLocked(receiver string) []*entry {
	var es []*entry
	for _, e := range ob.entries {
		if receiver == "" || e.receiver == receiver {
			es = append(es, e)
		}
	}
	sort.Slice(es, func(i, j int) bool { return es[i].seq < es[j].seq })
	return es
}

// Next returns the oldest pending notification for receiver, reading it
// from disk; ok is false when there is none. Entries that turn out to be
// unreadable are moved aside and skipped.
func (ob *Outbox) Next(receiver string) (e *Entry, ok bool, err error) {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	if ob.closed {
		return nil, false, ErrClosed
	}
	for {
		es := ob.sortedLocked(receiver)
		if len(es) == 0 {
			return nil, false, nil
		}
		head := es[0]
		rec, _, rerr := readRecord(ob.pendingPath(head.seq))
		if rerr != nil {
			ob.moveAside(ob.pendingPath(head.seq), rerr)
			delete(ob.entries, head.seq)
			delete(ob.byID, head.id)
			ob.bytes -= head.size
			ob.updateGauges()
			continue
		}
		return &Entry{seq: head.seq, Notification: rec.Notification, EnqueuedAt: rec.EnqueuedAt}, true, nil
	}
}

// Ack records e as delivered and removes it. The delivered id is written to
// delivered.log (fsynced) before the entry file is removed.
func (ob *Outbox) Ack(e *Entry) error {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	id := e.Notification.ID
	ob.rememberLocked(id)
	ob.journal.set(e.Notification.IncidentID, id, StatusDelivered, ob.o.Clock.Now().UTC())
	var werr error
	if ob.dlog != nil {
		if _, err := ob.dlog.WriteString(id + "\n"); err != nil {
			werr = err
		} else if err := ob.dlog.Sync(); err != nil {
			werr = err
		}
	}
	if en, ok := ob.entries[e.seq]; ok {
		ob.removeLocked(en)
	}
	if e.Notification.Kind == notifiers.TransitionResolve {
		ob.deleteStateLocked(e.Notification.Receiver, e.Notification.IncidentID)
	}
	if werr != nil {
		return fmt.Errorf("ack %s: record delivery: %w", id, werr)
	}
	return nil
}

// Drop removes e undelivered (a permanent failure), counting it.
func (ob *Outbox) Drop(e *Entry) {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	if en, ok := ob.entries[e.seq]; ok {
		ob.removeLocked(en)
		ob.journal.set(en.incidentID, en.id, StatusDropped, ob.o.Clock.Now().UTC())
		ob.m.dropped.WithLabelValues(dropRejected).Inc()
	}
}

// statePath names the state file of one receiver and incident.
func (ob *Outbox) statePath(receiver, incidentID string) string {
	h := sha256.Sum256([]byte(receiver + "\x00" + incidentID))
	return filepath.Join(ob.dir, "state", hex.EncodeToString(h[:16])+".json")
}

type stateFile struct {
	Receiver   string          `json:"receiver"`
	IncidentID string          `json:"incident_id"`
	State      notifiers.State `json:"state"`
}

// State returns the persisted state of receiver for an incident (a copy;
// empty when none).
func (ob *Outbox) State(receiver, incidentID string) notifiers.State {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	s := notifiers.State{}
	b, err := os.ReadFile(ob.statePath(receiver, incidentID))
	if err != nil {
		return s
	}
	var sf stateFile
	if err := json.Unmarshal(b, &sf); err != nil || sf.Receiver != receiver || sf.IncidentID != incidentID {
		ob.log.Warn("Outbox state file unreadable, ignoring it", "receiver", receiver, "incident", incidentID)
		return s
	}
	for k, v := range sf.State {
		s[k] = v
	}
	return s
}

// SetState persists the state of receiver for an incident.
func (ob *Outbox) SetState(receiver, incidentID string, s notifiers.State) error {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	b, err := json.Marshal(stateFile{Receiver: receiver, IncidentID: incidentID, State: s})
	if err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	if err := writeFileAtomic(ob.statePath(receiver, incidentID), b); err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	return nil
}

func (ob *Outbox) deleteStateLocked(receiver, incidentID string) {
	if err := os.Remove(ob.statePath(receiver, incidentID)); err != nil && !errors.Is(err, os.ErrNotExist) {
		ob.log.Warn("Outbox could not remove incident state", "receiver", receiver, "incident", incidentID, "err", err)
	}
}

// Close closes the outbox; pending entries stay on disk for the next Open.
func (ob *Outbox) Close() error {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	if ob.closed {
		return nil
	}
	ob.closed = true
	if ob.dlog != nil {
		return ob.dlog.Close()
	}
	return nil
}

// removeTemps removes the temporary files of writeFileAtomic in dir.
func removeTemps(dir string) {
	tmps, _ := filepath.Glob(filepath.Join(dir, ".tmp-*"))
	for _, tmp := range tmps {
		os.Remove(tmp)
	}
}

// writeFileAtomic writes b to path via a temporary file in the same
// directory: write, fsync, rename, fsync the directory.
func writeFileAtomic(path string, b []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
