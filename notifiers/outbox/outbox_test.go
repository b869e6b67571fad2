package outbox

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/whyslow/whyslow/notifiers"
	"github.com/whyslow/whyslow/notifiers/notifytest"
	"github.com/whyslow/whyslow/notifiers/webhook"
)

var t0 = notifytest.T0

const hmacSecret = "s3cr3t-hmac-key"

// receiver is an httptest webhook receiver that is down until a given fake
// time, verifies signatures and counts deliveries per notification id.
type receiver struct {
	t         *testing.T
	clock     *notifytest.FakeClock
	downUntil time.Time

	mu       sync.Mutex
	counts   map[string]int
	order    []string
	refused  int
	badSig   int
	received chan string
	srv      *httptest.Server
}

func newReceiver(t *testing.T, clock *notifytest.FakeClock, downUntil time.Time) *receiver {
	r := &receiver{t: t, clock: clock, downUntil: downUntil, counts: map[string]int{}, received: make(chan string, 1000)}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.clock.Now().Before(r.downUntil) {
		r.refused++
		w.Header().Set("Retry-After", "20")
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
		return
	}
	if webhook.Verify([]byte(hmacSecret), body, req.Header.Get(webhook.TimestampHeader), req.Header.Get(webhook.SignatureHeader), r.clock.Now(), 0) != nil {
		r.badSig++
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	id := req.Header.Get(webhook.IDHeader)
	r.counts[id]++
	r.order = append(r.order, id)
	r.received <- id
	w.WriteHeader(http.StatusNoContent)
}

func (r *receiver) snapshot() (map[string]int, []string, int, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := map[string]int{}
	for k, v := range r.counts {
		c[k] = v
	}
	return c, append([]string(nil), r.order...), r.refused, r.badSig
}

// waitDelivered waits until n notifications arrived; the generous limit is
// a guard against a hang, not a timing assertion.
func (r *receiver) waitDelivered(n int) {
	r.t.Helper()
	guard := time.NewTimer(60 * time.Second)
	defer guard.Stop()
	for i := 0; i < n; i++ {
		select {
		case <-r.received:
		case <-guard.C:
			c, _, refused, bad := r.snapshot()
			r.t.Fatalf("only %d of %d notifications arrived (refused %d, bad signatures %d): %v", i, n, refused, bad, c)
		}
	}
}

func open(t *testing.T, dir string, clock *notifytest.FakeClock, o Options) (*Outbox, *prometheus.Registry, *notifytest.LogBuffer) {
	t.Helper()
	logger, logs := notifytest.NewLogger()
	reg := prometheus.NewRegistry()
	o.Clock, o.Logger, o.Registerer = clock, logger, reg
	ob, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ob.Close() })
	return ob, reg, logs
}

func dispatcher(t *testing.T, ob *Outbox, clock *notifytest.FakeClock, reg prometheus.Registerer, receivers map[string]notifiers.Notifier) *Dispatcher {
	t.Helper()
	logger, _ := notifytest.NewLogger()
	m, err := notifiers.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	r := notifiers.NewRetrier(notifiers.RetryOptions{Clock: clock, Logger: logger, Metrics: m})
	d, err := NewDispatcher(ob, DispatcherOptions{Receivers: receivers, Retrier: r, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func hook(t *testing.T, url string, clock *notifytest.FakeClock) notifiers.Notifier {
	t.Helper()
	logger, _ := notifytest.NewLogger()
	w, err := webhook.New(webhook.Config{URL: notifiers.Secret(url), HMACSecret: hmacSecret, MaxAttempts: 3},
		webhook.Options{Clock: clock, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func notification(receiver string, incident, seq int, kind notifiers.Transition) *notifiers.Notification {
	inc := fmt.Sprintf("inc-%d", incident)
	return &notifiers.Notification{
		ID: notifiers.MakeID(receiver, inc, seq, kind), Receiver: receiver, IncidentID: inc,
		IncidentKey: fmt.Sprintf(`model="m%d"/queue_saturation`, incident), Kind: kind, Sequence: seq,
		CreatedAt: t0, Verdict: notifytest.Anomaly(),
	}
}

// lifecycle returns open, update, resolve for incidents 1..n.
func lifecycle(receiver string, n int) []*notifiers.Notification {
	var out []*notifiers.Notification
	for i := 1; i <= n; i++ {
		out = append(out, notification(receiver, i, 1, notifiers.TransitionOpen),
			notification(receiver, i, 2, notifiers.TransitionUpdate),
			notification(receiver, i, 3, notifiers.TransitionResolve))
	}
	return out
}

func enqueueAll(t *testing.T, ob *Outbox, ns []*notifiers.Notification) {
	t.Helper()
	for _, n := range ns {
		if ok, err := ob.Enqueue(n); err != nil || !ok {
			t.Fatalf("Enqueue(%s) = %v, %v", n.ID, ok, err)
		}
	}
}

func assertExactlyOnce(t *testing.T, counts map[string]int, ns []*notifiers.Notification) {
	t.Helper()
	for _, n := range ns {
		if counts[n.ID] != 1 {
			t.Errorf("%s delivered %d times, want once", n.ID, counts[n.ID])
		}
	}
	if len(counts) != len(ns) {
		t.Errorf("%d distinct notifications delivered, want %d", len(counts), len(ns))
	}
}

func TestReceiverDownTenMinutes(t *testing.T) {
	clock := notifytest.NewFakeClock(t0)
	rcv := newReceiver(t, clock, t0.Add(10*time.Minute))
	ob, reg, _ := open(t, t.TempDir(), clock, Options{})
	ns := lifecycle("hook", 5)
	enqueueAll(t, ob, ns[:9])
	d := dispatcher(t, ob, clock, reg, map[string]notifiers.Notifier{"hook": hook(t, rcv.srv.URL, clock)})
	d.Start()
	enqueueAll(t, ob, ns[9:]) // more verdicts while the receiver is down
	rcv.waitDelivered(len(ns))
	if err := d.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	counts, order, refused, badSig := rcv.snapshot()
	assertExactlyOnce(t, counts, ns)
	if refused == 0 || badSig != 0 {
		t.Errorf("refused %d (want > 0), bad signatures %d (want 0)", refused, badSig)
	}
	if clock.Now().Before(t0.Add(10 * time.Minute)) {
		t.Errorf("delivered before the receiver came up: fake time %v", clock.Now())
	}
	// Order within each incident: open, update, resolve.
	pos := map[string]int{}
	for i, id := range order {
		pos[id] = i
	}
	for i := 0; i+2 < len(ns); i += 3 {
		if !(pos[ns[i].ID] < pos[ns[i+1].ID] && pos[ns[i+1].ID] < pos[ns[i+2].ID]) {
			t.Errorf("incident %s delivered out of order: %v", ns[i].IncidentID, order)
		}
	}
	if ob.Depth() != 0 {
		t.Errorf("depth = %d after delivery", ob.Depth())
	}
	if got := testutil.ToFloat64(mustGauge(t, reg, "whyslow_outbox_depth")); got != 0 {
		t.Errorf("whyslow_outbox_depth = %v", got)
	}
	// Enqueueing a delivered id again is a no-op.
	if ok, err := ob.Enqueue(ns[0]); ok || err != nil {
		t.Errorf("re-enqueue of a delivered notification = %v, %v", ok, err)
	}
}

func mustGauge(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: "copy"})
			g.Set(mf.GetMetric()[0].GetGauge().GetValue())
			return g
		}
	}
	t.Fatalf("metric %s not registered", name)
	return nil
}

func TestKilledWithPendingOutbox(t *testing.T) {
	dir := t.TempDir()
	clock := notifytest.NewFakeClock(t0)
	rcv := newReceiver(t, clock, time.Time{})
	ns := lifecycle("hook", 3)

	// First life: enqueue, then "die" without draining; a write was cut short.
	ob, _, _ := open(t, dir, clock, Options{})
	enqueueAll(t, ob, ns)
	ob.Close()
	if err := os.WriteFile(filepath.Join(dir, "pending", ".tmp-12345"), []byte(`{"version":1,"se`), 0o600); err != nil {
		t.Fatal(err)
	}

	// Second life: everything pending is delivered, once.
	ob2, reg, logs := open(t, dir, clock, Options{})
	if ob2.Depth() != len(ns) {
		t.Fatalf("reopened depth = %d, want %d", ob2.Depth(), len(ns))
	}
	d := dispatcher(t, ob2, clock, reg, map[string]notifiers.Notifier{"hook": hook(t, rcv.srv.URL, clock)})
	d.Start()
	rcv.waitDelivered(len(ns))
	if err := d.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	ob2.Close()
	counts, _, _, _ := rcv.snapshot()
	assertExactlyOnce(t, counts, ns)
	if strings.Contains(logs.String(), "corrupt") {
		t.Errorf("an interrupted temp file is not corruption:\n%s", logs)
	}

	// Third life: nothing left, and the delivered ids are remembered.
	ob3, _, _ := open(t, dir, clock, Options{})
	if ob3.Depth() != 0 {
		t.Errorf("depth after restart = %d", ob3.Depth())
	}
	if ok, _ := ob3.Enqueue(ns[1]); ok {
		t.Error("a delivered notification was accepted again after restart")
	}
}

func TestDeliveredButNotRemoved(t *testing.T) {
	dir := t.TempDir()
	clock := notifytest.NewFakeClock(t0)
	ob, _, _ := open(t, dir, clock, Options{})
	n := notification("hook", 1, 1, notifiers.TransitionOpen)
	enqueueAll(t, ob, []*notifiers.Notification{n})
	e, ok, err := ob.Next("hook")
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	path := ob.pendingPath(e.seq)
	saved, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Ack(e); err != nil {
		t.Fatal(err)
	}
	ob.Close()
	// The process died between recording the delivery and removing the file.
	if err := os.WriteFile(path, saved, 0o600); err != nil {
		t.Fatal(err)
	}
	ob2, _, _ := open(t, dir, clock, Options{})
	if ob2.Depth() != 0 {
		t.Errorf("a delivered entry would be delivered again: depth %d", ob2.Depth())
	}
}

func TestCorruptEntries(t *testing.T) {
	dir := t.TempDir()
	clock := notifytest.NewFakeClock(t0)
	ns := lifecycle("hook", 1)
	ob, _, _ := open(t, dir, clock, Options{})
	enqueueAll(t, ob, ns)
	ob.Close()
	pending := filepath.Join(dir, "pending")
	writes := map[string]string{
		"00000000000000000099.json": "{not json",
		"junk.txt":                  "hello",
		"00000000000000000098.json": `{"version":1,"seq":98,"notification":{"id":"x"}}`,
		"00000000000000000097.json": `{"version":9,"seq":97}`,
	}
	for name, body := range writes {
		if err := os.WriteFile(filepath.Join(pending, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ob2, reg, logs := open(t, dir, clock, Options{})
	if ob2.Depth() != len(ns) {
		t.Fatalf("depth = %d, want %d", ob2.Depth(), len(ns))
	}
	// Corrupt a good entry after it was indexed: found at delivery time.
	first, ok, _ := ob2.Next("hook")
	if !ok {
		t.Fatal("no entry")
	}
	if err := os.WriteFile(ob2.pendingPath(first.seq), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	rcv := newReceiver(t, clock, time.Time{})
	d := dispatcher(t, ob2, clock, reg, map[string]notifiers.Notifier{"hook": hook(t, rcv.srv.URL, clock)})
	d.Start()
	rcv.waitDelivered(len(ns) - 1)
	if err := d.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	counts, _, _, _ := rcv.snapshot()
	assertExactlyOnce(t, counts, ns[1:])
	moved, _ := os.ReadDir(filepath.Join(dir, "corrupt"))
	if len(moved) != len(writes)+1 {
		t.Errorf("%d files moved aside, want %d", len(moved), len(writes)+1)
	}
	if c := strings.Count(logs.String(), "corrupt; moved aside"); c != len(writes)+1 {
		t.Errorf("%d corrupt log lines, want %d:\n%s", c, len(writes)+1, logs)
	}
	mfs, _ := reg.Gather()
	found := false
	for _, mf := range mfs {
		if mf.GetName() == "whyslow_outbox_dropped_total" {
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == "corrupt" && m.GetCounter().GetValue() == float64(len(writes)+1) {
					found = true
				}
			}
		}
	}
	if !found {
		t.Error("whyslow_outbox_dropped_total{reason=\"corrupt\"} wrong")
	}
}

func TestBounded(t *testing.T) {
	clock := notifytest.NewFakeClock(t0)
	ob, reg, _ := open(t, t.TempDir(), clock, Options{MaxEntries: 3})
	ns := lifecycle("hook", 2)
	enqueueAll(t, ob, ns[:5])
	if ob.Depth() != 3 {
		t.Fatalf("depth = %d, want 3", ob.Depth())
	}
	if got := ob.PendingIDs("hook"); fmt.Sprint(got) != fmt.Sprint([]string{ns[2].ID, ns[3].ID, ns[4].ID}) {
		t.Errorf("kept %v, want the newest three", got)
	}
	if n := testutil.ToFloat64(ob.m.dropped.WithLabelValues("overflow")); n != 2 {
		t.Errorf("dropped{overflow} = %v, want 2", n)
	}
	if got := testutil.ToFloat64(mustGauge(t, reg, "whyslow_outbox_depth")); got != 3 {
		t.Errorf("whyslow_outbox_depth = %v", got)
	}
	// A byte bound too small for one entry is an error, not a silent drop.
	small, _, _ := open(t, t.TempDir(), clock, Options{MaxBytes: 100})
	if _, err := small.Enqueue(ns[0]); err == nil {
		t.Error("want error for an entry larger than MaxBytes")
	}
	// Dedupe while pending.
	if ok, err := ob.Enqueue(ns[4]); ok || err != nil {
		t.Errorf("duplicate enqueue = %v, %v", ok, err)
	}
	if _, err := ob.Enqueue(&notifiers.Notification{ID: "x"}); err == nil {
		t.Error("want validation error")
	}
}

// stateful mimics Slack: open records the parent ts, update and resolve
// need it.
type stateful struct {
	mu   sync.Mutex
	seen []string
	done chan struct{}
}

func (s *stateful) Notify(_ context.Context, n *notifiers.Notification) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch n.Kind {
	case notifiers.TransitionOpen:
		n.State["ts"] = "1700000000.000100-" + n.IncidentID
	default:
		if n.State.Get("ts") != "1700000000.000100-"+n.IncidentID {
			return false, notifiers.NewError(notifiers.ReasonClientError, fmt.Errorf("%s without parent ts", n.Kind))
		}
	}
	s.seen = append(s.seen, n.ID)
	s.done <- struct{}{}
	return false, nil
}

func TestStatePassedBetweenNotifications(t *testing.T) {
	clock := notifytest.NewFakeClock(t0)
	dir := t.TempDir()
	ob, reg, _ := open(t, dir, clock, Options{})
	ns := lifecycle("slack", 2)
	enqueueAll(t, ob, ns)
	st := &stateful{done: make(chan struct{}, 10)}
	d := dispatcher(t, ob, clock, reg, map[string]notifiers.Notifier{"slack": st})
	d.Start()
	for range ns {
		<-st.done
	}
	if err := d.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(st.seen) != len(ns) {
		t.Errorf("delivered %v", st.seen)
	}
	if s := ob.State("slack", "inc-1"); len(s) != 0 {
		t.Errorf("state should be removed after resolve, got %v", s)
	}
	if err := ob.SetState("slack", "inc-9", notifiers.State{"ts": "1.2"}); err != nil {
		t.Fatal(err)
	}
	if ob.State("slack", "inc-9").Get("ts") != "1.2" {
		t.Error("SetState/State round trip")
	}
}

func TestShutdownDeadline(t *testing.T) {
	clock := notifytest.NewFakeClock(t0)
	ob, reg, _ := open(t, t.TempDir(), clock, Options{})
	ns := lifecycle("slow", 1)
	enqueueAll(t, ob, ns)
	started := make(chan struct{}, 1)
	blocking := notifiers.NotifierFunc(func(ctx context.Context, n *notifiers.Notification) (bool, error) {
		started <- struct{}{}
		<-ctx.Done()
		return false, notifiers.NewError(notifiers.ReasonCanceled, ctx.Err())
	})
	d := dispatcher(t, ob, clock, reg, map[string]notifiers.Notifier{"slow": blocking})
	d.Start()
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := d.Shutdown(ctx); err == nil || !strings.Contains(err.Error(), "3 notifications still pending") {
		t.Errorf("Shutdown = %v", err)
	}
	if ob.Depth() != len(ns) {
		t.Errorf("undelivered entries must stay: depth %d", ob.Depth())
	}
}

func TestPermanentFailureDropped(t *testing.T) {
	clock := notifytest.NewFakeClock(t0)
	ob, reg, _ := open(t, t.TempDir(), clock, Options{})
	n := notification("bad", 1, 1, notifiers.TransitionOpen)
	enqueueAll(t, ob, []*notifiers.Notification{n})
	calls := make(chan struct{}, 10)
	rejecting := notifiers.NotifierFunc(func(context.Context, *notifiers.Notification) (bool, error) {
		calls <- struct{}{}
		return false, &notifiers.Error{Reason: notifiers.ReasonClientError, StatusCode: 400}
	})
	d := dispatcher(t, ob, clock, reg, map[string]notifiers.Notifier{"bad": rejecting})
	d.Start()
	<-calls
	if err := d.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 0 || ob.Depth() != 0 {
		t.Errorf("a 400 must be tried once and dropped: extra calls %d, depth %d", len(calls), ob.Depth())
	}
	if n := testutil.ToFloat64(ob.m.dropped.WithLabelValues("rejected")); n != 1 {
		t.Errorf("dropped{rejected} = %v", n)
	}
}

func TestNewDispatcherErrors(t *testing.T) {
	clock := notifytest.NewFakeClock(t0)
	ob, _, _ := open(t, t.TempDir(), clock, Options{})
	r := notifiers.NewRetrier(notifiers.RetryOptions{})
	cases := []DispatcherOptions{
		{Retrier: r},
		{Receivers: map[string]notifiers.Notifier{"x": nil}, Retrier: r},
		{Receivers: map[string]notifiers.Notifier{"x": notifiers.NotifierFunc(nil)}},
	}
	for i, o := range cases {
		if _, err := NewDispatcher(ob, o); err == nil {
			t.Errorf("case %d: want error", i)
		}
	}
}

// TestStaleTempsRemoved is finding 8 of issue 26: writes of delivered.log
// and of the receivers' state that a crash interrupted left .tmp-* files.
func TestStaleTempsRemoved(t *testing.T) {
	dir := t.TempDir()
	clock := notifytest.NewFakeClock(t0)
	ob, _, _ := open(t, dir, clock, Options{})
	ob.Close()
	for _, sub := range []string{".", "state", "pending"} {
		if err := os.WriteFile(filepath.Join(dir, sub, ".tmp-99"), []byte(`{"rec`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ob2, _, _ := open(t, dir, clock, Options{})
	defer ob2.Close()
	for _, sub := range []string{".", "state", "pending"} {
		if left, _ := filepath.Glob(filepath.Join(dir, sub, ".tmp-*")); len(left) != 0 {
			t.Errorf("%s: stale temporary files left: %v", sub, left)
		}
	}
}
