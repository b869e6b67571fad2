package daemon

import (
	"context"
	"sync"
	"time"
)

// SimClock is simulated time for the demo and end-to-end tests. It satisfies
// notifiers.Clock: Sleep blocks until the clock has been advanced past the
// deadline (or ctx ends), so the outbox dispatcher and the retry stage wait
// out simulated minutes exactly as they would real ones, without sleeping.
type SimClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []simWaiter
}

type simWaiter struct {
	at time.Time
	ch chan struct{}
}

// NewSimClock returns a clock standing at t.
func NewSimClock(t time.Time) *SimClock { return &SimClock{now: t} }

// Now returns the simulated time.
func (c *SimClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to t (never backwards) and wakes the sleepers whose
// deadline has passed.
func (c *SimClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.Before(c.now) {
		return
	}
	c.now = t
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if !w.at.After(t) {
			close(w.ch)
			continue
		}
		kept = append(kept, w)
	}
	c.waiters = kept
}

// Advance moves the clock forward by d.
func (c *SimClock) Advance(d time.Duration) { c.Set(c.Now().Add(d)) }

// Sleep waits until the clock reaches now+d or ctx ends.
func (c *SimClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	c.mu.Lock()
	w := simWaiter{at: c.now.Add(d), ch: make(chan struct{})}
	c.waiters = append(c.waiters, w)
	c.mu.Unlock()
	select {
	case <-w.ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
