// Package testgc lets the test packages that play hours of simulated time
// through the daemon (daemon, daemon/demo, cmd/whyslow) spend less CPU in
// the garbage collector: many short-lived allocations over a live heap of
// tens of MB, so with Go's default GOGC=100 the collector runs every few
// MB. Letting the heap grow to five times the live heap took a third off
// daemon/demo's end-to-end tests (issue 23, item 7) and changes no result
// and nothing a test asserts; a test that bounds the heap in use runs under
// Go's defaults (Default), and so do benchmarks. testbed/sim's tests gained
// nothing from it and do not use it.
package testgc

import (
	"flag"
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"testing"
)

// gcPercent is the GOGC the tests run with: 5× the live heap before a
// collection instead of 2×.
const gcPercent = 400

// memoryLimit is the soft limit on the Go heap that comes with it: a test
// whose live heap is large (200,000-series answers) collects as often as it
// needs to stay under it instead of growing five-fold.
const memoryLimit = 2 << 30

// Relax applies gcPercent and memoryLimit, unless GOGC or GOMEMLIMIT is set
// in the environment (a run that sets them, to measure or to reproduce, gets
// what it asked for) or benchmarks run (-test.bench: they report what the
// binary spends, under Go's defaults). Call it from TestMain, before m.Run;
// it parses the test flags.
func Relax() {
	if !flag.Parsed() {
		flag.Parse()
	}
	if userSet() {
		return
	}
	if b := flag.Lookup("test.bench"); b != nil && b.Value.String() != "" {
		return
	}
	debug.SetGCPercent(gcPercent)
	debug.SetMemoryLimit(memoryLimit)
}

// Default runs the rest of tb under Go's defaults (GOGC=100, no memory
// limit), as the whyslow binary runs, and puts back what was set when tb
// ends: for the tests that measure the heap or the CPU. The
// setting is the process's: tb must not run in parallel with others. With
// GOGC or GOMEMLIMIT set in the environment it changes nothing.
func Default(tb testing.TB) {
	tb.Helper()
	if userSet() {
		return
	}
	percent := debug.SetGCPercent(100)
	limit := debug.SetMemoryLimit(math.MaxInt64)
	tb.Cleanup(func() {
		debug.SetGCPercent(percent)
		debug.SetMemoryLimit(limit)
	})
}

// ChildEnv is the environment for a Go server a test starts (Prometheus,
// Alertmanager, promtool): this process's, with the same gcPercent and
// memoryLimit, unless GOGC or GOMEMLIMIT is set in the environment (then
// the child inherits them as set). The servers' collectors are their own
// CPU: Prometheus answering TestFleetReplay's 22,000 queries spent 30
// CPU-s under Go's defaults, 19 with these. A query's answer does not
// depend on when the collector runs.
func ChildEnv() []string {
	env := os.Environ()
	if userSet() {
		return env
	}
	return append(env, fmt.Sprintf("GOGC=%d", gcPercent), fmt.Sprintf("GOMEMLIMIT=%d", memoryLimit))
}

// userSet reports whether the environment sets the collector's settings.
func userSet() bool { return os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" }
