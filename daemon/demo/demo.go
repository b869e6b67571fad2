package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/whyslow/whyslow/daemon"
	"github.com/whyslow/whyslow/incident"
	"github.com/whyslow/whyslow/notifiers/logsink"
	"github.com/whyslow/whyslow/testbed/sim"
)

// Options configure Play. Zero values get defaults.
type Options struct {
	// Scenario is the engine-model scenario (default kv_pressure).
	Scenario string
	Seed     int64
	// IncidentFor is how long the cause lasts before the engine is fixed (default 10m).
	IncidentFor time.Duration
	// Format of the printed notifications: text (default), markdown or json.
	Format string
	// Logger gets the daemon's logs (default: discarded).
	Logger *slog.Logger
}

// Outcome is what a played incident came to.
type Outcome struct {
	// Opened reports whether the daemon opened (and notified) an incident.
	Opened bool
	// TopCause is the opened incident's top cause ("" when none was named).
	TopCause string
}

// Play plays one incident: the engine model runs healthy for its baseline
// hour, the scenario's cause sets in, the daemon opens an incident and
// prints the verdict, the engine is fixed, and the daemon prints the
// resolve. Simulated time: it takes seconds, not hours. The engine model
// serves its own GPU counters (whyslow_gpu_*), so the daemon's NVML
// collector stays off: this host's GPUs, or its lack of a driver, are no
// part of the modelled engine.
func Play(ctx context.Context, w io.Writer, o Options) (Outcome, error) {
	var out Outcome
	if o.Scenario == "" {
		o.Scenario = "kv_pressure"
	}
	if o.IncidentFor <= 0 {
		o.IncidentFor = 10 * time.Minute
	}
	if o.Format == "" {
		o.Format = "text"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	cause := ""
	for _, s := range sim.Scenarios() {
		if s.Name == o.Scenario {
			cause = s.Cause
		}
	}
	lc := logsink.Config{Format: o.Format, Verdict: true} // the demo shows the verdicts
	noNVML := false
	// An on-disk store in a temporary directory appends live scrapes faster
	// than the in-memory mode (built for loading bundles out of order).
	dir, err := os.MkdirTemp("", "whyslow-demo-")
	if err != nil {
		return out, fmt.Errorf("demo: %w", err)
	}
	defer os.RemoveAll(dir)
	// The log receiver delivers on the dispatcher's goroutine: its output
	// waits in held until the status line introducing it is printed.
	held := &heldWriter{}
	env, err := NewEnv(EnvOptions{
		Scenario: o.Scenario, Seed: o.Seed, LogWriter: held, Logger: o.Logger,
		Config: daemon.Config{DataDir: dir, Receivers: []daemon.ReceiverConfig{{Name: "terminal", Log: &lc}}, GPU: daemon.GPUConfig{Enabled: &noNVML}},
	})
	if err != nil {
		return out, fmt.Errorf("demo: %w", err)
	}
	defer env.Close(context.Background())
	start := env.Now()
	rel := func(t time.Time) string { return "t+" + t.Sub(start).Truncate(time.Second).String() }
	fmt.Fprintf(w, "whyslow demo: engine model %q (injects %s), daemon scraping every %s on simulated time\n",
		o.Scenario, orNone(cause), env.Step)
	fmt.Fprintf(w, "%s  baseline hour running; the cause sets in at %s\n", rel(start), rel(env.Onset()))
	d := env.Stack.Daemon
	fixAt := env.Onset().Add(o.IncidentFor)
	opened, fixed := false, false
	deadline := fixAt.Add(30 * time.Minute)
	for env.Now().Before(deadline) {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		if err := env.Tick(ctx); err != nil {
			return out, fmt.Errorf("demo: %w", err)
		}
		incs := d.Incidents()
		if !opened && len(incs) > 0 && incs[0].Notified.Count > 0 {
			opened = true
			in := incs[0]
			out = Outcome{Opened: true, TopCause: in.TopCause}
			fmt.Fprintf(w, "%s  incident %s opened (%d intervals after onset), top cause %s:\n\n",
				rel(env.Now()), in.Key, int(env.Now().Sub(env.Onset())/env.Step), orNone(in.TopCause))
			waitDelivered(ctx, env)
		}
		if !fixed && !env.Now().Before(fixAt) {
			fixed = true
			if err := env.Fix(o.Seed); err != nil {
				return out, fmt.Errorf("demo: %w", err)
			}
			fmt.Fprintf(w, "%s  the engine is fixed (restarted healthy)\n", rel(env.Now()))
		}
		if fixed && opened && len(incs) > 0 && incs[0].Status == incident.IncidentResolved {
			fmt.Fprintf(w, "%s  incident resolved:\n\n", rel(env.Now()))
			waitDelivered(ctx, env)
			if err := held.flushTo(w); err != nil {
				return out, fmt.Errorf("demo: %w", err)
			}
			break
		}
		if err := held.flushTo(w); err != nil {
			return out, fmt.Errorf("demo: %w", err)
		}
	}
	if !opened {
		fmt.Fprintf(w, "%s  no incident opened\n", rel(env.Now()))
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err = env.Close(sctx)
	return out, errors.Join(err, held.flushTo(w))
}

// heldWriter keeps what the log receiver writes until flushTo passes it on,
// so that the demo's status lines come before the notifications they
// introduce. Safe for concurrent use.
type heldWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write keeps p.
func (h *heldWriter) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.buf.Write(p)
}

// flushTo writes what is held to w and forgets it.
func (h *heldWriter) flushTo(w io.Writer) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.buf.Len() == 0 {
		return nil
	}
	_, err := h.buf.WriteTo(w)
	if err != nil {
		return fmt.Errorf("write notification: %w", err)
	}
	return nil
}

// Bounds of waitDelivered, in wall time. They only keep a stuck receiver
// from hanging the demo: on a busy machine delivery may be slow but still
// moving, and the wait goes on for as long as it moves.
const (
	// deliveryStall is how long the wait goes on with no notification
	// leaving the outbox.
	deliveryStall = 30 * time.Second
	// deliveryWaitMax bounds the whole wait.
	deliveryWaitMax = 2 * time.Minute
)

// waitDelivered waits for the outbox to drain so that the notifications a
// status line introduces are held before it is flushed. It returns as soon
// as the outbox is empty, or when ctx ends, when no notification has left
// the outbox for deliveryStall, or after deliveryWaitMax in all; what is
// still queued then is printed later (at the next flush, or at the end).
func waitDelivered(ctx context.Context, env *Env) {
	waitDrained(ctx, env.Stack.Outbox.Depth, deliveryStall, deliveryWaitMax)
}

// waitDrained polls depth until it is 0, ctx ends, depth has not gone down
// for stall, or total has passed.
func waitDrained(ctx context.Context, depth func() int, stall, total time.Duration) {
	n := depth()
	if n == 0 {
		return
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	moved := start
	for n > 0 {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		switch d := depth(); {
		case d < n:
			n, moved = d, now
		case d > n: // more queued meanwhile: not progress, but the new depth
			n = d
		}
		if n > 0 && (now.Sub(moved) > stall || now.Sub(start) > total) {
			return
		}
	}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
