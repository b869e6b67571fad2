package demo

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// countdown is a fake outbox depth that goes down by one each time it is
// read, from n to 0.
func countdown(n int64) (depth func() int, left func() int64) {
	var v atomic.Int64
	v.Store(n)
	depth = func() int {
		d := v.Load()
		if d > 0 {
			v.Add(-1)
		}
		return int(d)
	}
	return depth, v.Load
}

// waitReturns runs f and fails if it does not return within a hang guard.
func waitReturns(t *testing.T, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("waitDrained did not return")
	}
}

// TestWaitDrainedFollowsProgress: the wait lasts as long as notifications
// keep leaving the outbox, however slowly the machine delivers them. Here
// the stall bound is shorter than one poll, so only progress (the depth
// going down at every poll) keeps the wait going until the outbox is empty.
func TestWaitDrainedFollowsProgress(t *testing.T) {
	depth, left := countdown(20)
	waitReturns(t, func() { waitDrained(context.Background(), depth, time.Nanosecond, 2*time.Minute) })
	if n := left(); n != 0 {
		t.Errorf("returned with %d notifications queued and delivery still moving", n)
	}
}

// TestWaitDrainedGivesUp: a stuck outbox does not hang the demo: the wait
// ends on its stall bound, and at once when ctx ends.
func TestWaitDrainedGivesUp(t *testing.T) {
	stuck := func() int { return 3 }
	waitReturns(t, func() { waitDrained(context.Background(), stuck, 50*time.Millisecond, 2*time.Minute) })
	waitReturns(t, func() { waitDrained(context.Background(), stuck, 2*time.Minute, 50*time.Millisecond) })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	waitReturns(t, func() { waitDrained(ctx, stuck, 2*time.Minute, 2*time.Minute) })
}
