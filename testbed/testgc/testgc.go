// Package testgc lets the simulation-heavy test packages spend less CPU in
// the garbage collector. Their tests play hours of an engine model through
// the daemon on simulated time: many short-lived allocations over a live
// heap of tens of MB, so with Go's default GOGC=100 the collector runs
// every few MB and took a fifth of their CPU (issue 23, item 7). Letting
// the heap grow to five times the live heap instead changes no result and
// nothing a test asserts; packages whose tests bound the heap in use (the
// daemon's fleet bounds) do not call it.
package testgc

import (
	"os"
	"runtime/debug"
)

// gcPercent is the GOGC the tests run with: 5× the live heap before a
// collection instead of 2×.
const gcPercent = 400

// memoryLimit is the soft limit on the Go heap that comes with it: a test
// whose live heap is large (200,000-series answers) collects as often as it
// needs to stay under it instead of growing five-fold.
const memoryLimit = 2 << 30

// Relax applies gcPercent and memoryLimit, unless GOGC or GOMEMLIMIT is set
// in the environment: a run that sets them (to measure, to reproduce) gets
// what it asked for. Call it from TestMain, before m.Run.
func Relax() {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	debug.SetGCPercent(gcPercent)
	debug.SetMemoryLimit(memoryLimit)
}
