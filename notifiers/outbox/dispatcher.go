package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sort"
	"sync"
	"time"

	"github.com/whyslow/whyslow/notifiers"
)

// DispatcherOptions configure a Dispatcher.
type DispatcherOptions struct {
	// Receivers maps receiver names to their notifiers.
	Receivers map[string]notifiers.Notifier
	// Retrier is the shared retry stage (required).
	Retrier *notifiers.Retrier
	// RedeliverAfter is the pause before a receiver whose retry round failed
	// is tried again (default 30s, on the retrier's clock).
	RedeliverAfter time.Duration
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// Dispatcher drains an outbox: one worker per receiver delivers that
// receiver's notifications in order through the retry stage, removing each
// once delivered. A receiver that stays down holds its queue (in order) and
// is retried every RedeliverAfter; a permanent failure drops the entry.
type Dispatcher struct {
	ob  *Outbox
	o   DispatcherOptions
	log *slog.Logger

	stop    chan struct{}
	hardCtx context.Context
	hard    context.CancelFunc
	wg      sync.WaitGroup
	once    sync.Once
	started bool
}

// NewDispatcher returns a dispatcher for ob; call Start to run it.
func NewDispatcher(ob *Outbox, o DispatcherOptions) (*Dispatcher, error) {
	if ob == nil {
		return nil, errors.New("dispatcher: nil outbox")
	}
	if o.Retrier == nil {
		return nil, errors.New("dispatcher: nil retrier")
	}
	if len(o.Receivers) == 0 {
		return nil, errors.New("dispatcher: no receivers")
	}
	for name, n := range o.Receivers {
		if n == nil {
			return nil, fmt.Errorf("dispatcher: receiver %q has a nil notifier", name)
		}
	}
	if o.RedeliverAfter <= 0 {
		o.RedeliverAfter = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	o.Receivers = maps.Clone(o.Receivers)
	hardCtx, hard := context.WithCancel(context.Background())
	return &Dispatcher{
		ob: ob, o: o, log: o.Logger.With("component", "dispatcher"),
		stop: make(chan struct{}), hardCtx: hardCtx, hard: hard,
	}, nil
}

// Start launches one worker per receiver; pending entries left by a previous
// run are delivered first. Pending entries for receivers that are not
// configured stay in the outbox and are logged.
func (d *Dispatcher) Start() {
	if d.started {
		return
	}
	d.started = true
	for _, r := range d.ob.Receivers() {
		if _, ok := d.o.Receivers[r]; !ok {
			d.log.Warn("Outbox holds notifications for an unknown receiver; keeping them", "receiver", r,
				"pending", len(d.ob.PendingIDs(r)))
		}
	}
	names := make([]string, 0, len(d.o.Receivers))
	for name := range d.o.Receivers {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		d.wg.Add(1)
		go d.worker(name, d.o.Receivers[name])
	}
}

// Shutdown stops the dispatcher, first flushing: each worker keeps
// delivering what is pending (one retry round per entry) until its queue is
// empty or ctx is done, at which point in-flight deliveries are cancelled.
// Undelivered entries stay on disk. It returns ctx's error when the deadline
// cut the flush short, or an error naming the count still pending.
func (d *Dispatcher) Shutdown(ctx context.Context) error {
	d.once.Do(func() { close(d.stop) })
	done := make(chan struct{})
	go func() { d.wg.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		d.hard()
		<-done
		err = ctx.Err()
	}
	d.hard()
	pending := 0
	for name := range d.o.Receivers {
		pending += len(d.ob.PendingIDs(name))
	}
	if err != nil {
		return fmt.Errorf("flush outbox: %w (%d notifications still pending)", err, pending)
	}
	if pending > 0 {
		return fmt.Errorf("flush outbox: %d notifications still pending", pending)
	}
	return nil
}

func (d *Dispatcher) stopping() bool {
	select {
	case <-d.stop:
		return true
	default:
		return false
	}
}

// worker delivers receiver's queue in order.
func (d *Dispatcher) worker(receiver string, n notifiers.Notifier) {
	defer d.wg.Done()
	log := d.log.With("notifier", receiver)
	wake := d.ob.wakeChan(receiver)
	// stopCtx ends redelivery pauses when Shutdown begins.
	stopCtx, cancel := context.WithCancel(d.hardCtx)
	defer cancel()
	go func() {
		select {
		case <-d.stop:
			cancel()
		case <-stopCtx.Done():
		}
	}()
	for {
		if d.hardCtx.Err() != nil {
			return
		}
		e, ok, err := d.ob.Next(receiver)
		if err != nil {
			log.Error("Outbox read failed", "err", err)
			return
		}
		if !ok {
			if d.stopping() {
				return
			}
			select {
			case <-wake:
			case <-d.stop:
			case <-d.hardCtx.Done():
			}
			continue
		}
		if !d.deliver(log, n, e) {
			if d.stopping() || d.hardCtx.Err() != nil {
				return
			}
			// The receiver is still failing: keep the order, pause, retry.
			_ = d.o.Retrier.Clock().Sleep(stopCtx, d.o.RedeliverAfter)
		}
	}
}

// deliver runs one retry round for e and settles it: acked on success,
// dropped on a permanent failure. It returns false when e is still pending.
func (d *Dispatcher) deliver(log *slog.Logger, n notifiers.Notifier, e *Entry) bool {
	notif := e.Notification
	notif.State = d.ob.State(notif.Receiver, notif.IncidentID)
	before := maps.Clone(notif.State)
	retry, err := d.o.Retrier.Deliver(d.hardCtx, n, notif)
	if !maps.Equal(before, notif.State) {
		if serr := d.ob.SetState(notif.Receiver, notif.IncidentID, notif.State); serr != nil {
			log.Error("Saving notifier state failed", "incident", notif.IncidentID, "err", serr)
		}
	}
	switch {
	case err == nil:
		if aerr := d.ob.Ack(e); aerr != nil {
			log.Error("Outbox acknowledge failed", "notification", notif.ID, "err", aerr)
		}
		return true
	case !retry && d.hardCtx.Err() == nil:
		log.Error("Dropping notification after a permanent failure", "notification", notif.ID,
			"reason", notifiers.ReasonOf(err), "err", err)
		d.ob.Drop(e)
		return true
	}
	return false
}
