// Package memlimit sets the Go runtime's soft memory limit for a daemon
// that holds a bounded cache (the span store).
//
// With GOGC=100 the heap may grow to twice the live heap before a
// collection. For a daemon whose live heap is mostly a span store filled
// to its configured max_bytes, that doubles the bound: 64 MiB of spans
// became 250–330 MB of RSS under OTLP load. The span store is bounded and
// long-lived, so it needs no growth headroom; everything else keeps the
// usual headroom of one live heap. The limit is therefore
//
//	bound + max(Floor, 2 × (live heap − bounded bytes held))
//
// recomputed as the live heap changes. It is a soft limit: a burst above
// it makes the collector run more often (the runtime caps that at about
// half the CPU), it never fails an allocation.
package memlimit

import (
	"context"
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// DefaultFloor is the least headroom over the bound. Collection cost
// grows as live heap / headroom: with the span store full (64 MiB, ~80 MiB
// live) at 5k spans/s the cost harness measured 6.0% of a core and 191 MB
// RSS without a limit, 6.5–7.2% and 160 MB at 64 MiB of headroom, 8.0–8.4%
// and 145 MB at 48 MiB, 11.7–13.5% and 130 MB at 32 MiB.
const DefaultFloor = 64 << 20

// UserSet reports whether GOMEMLIMIT is set in the environment: then the
// operator's limit stands and Limiter does nothing.
func UserSet() bool { return os.Getenv("GOMEMLIMIT") != "" }

// Limiter keeps the runtime's memory limit at Bound + headroom.
type Limiter struct {
	// Bound is the bytes the bounded caches may hold (the span store's
	// max_bytes).
	Bound int64
	// Held returns the bytes they hold now (the span store's estimate).
	Held func() int64
	// Floor is the least headroom (default DefaultFloor).
	Floor int64
	// Interval is how often the limit is recomputed (default 2 s).
	Interval time.Duration
}

// Limit is the limit for the given live heap and bytes held.
func (l *Limiter) Limit(live, held int64) int64 {
	floor := l.Floor
	if floor <= 0 {
		floor = DefaultFloor
	}
	other := max(live-held, 0)
	return l.Bound + max(floor, 2*other)
}

// Update sets the limit from the live heap the last collection measured
// and returns it.
func (l *Limiter) Update() int64 {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(sample)
	var live int64
	if sample[0].Value.Kind() == metrics.KindUint64 {
		live = int64(min(sample[0].Value.Uint64(), math.MaxInt64))
	}
	var held int64
	if l.Held != nil {
		held = l.Held()
	}
	limit := l.Limit(live, held)
	debug.SetMemoryLimit(limit)
	return limit
}

// Run updates the limit every Interval until ctx ends, then removes it.
func (l *Limiter) Run(ctx context.Context) {
	every := l.Interval
	if every <= 0 {
		every = 2 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	defer debug.SetMemoryLimit(math.MaxInt64)
	for {
		l.Update()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
