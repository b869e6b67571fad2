package main

import (
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"

	"github.com/whyslow/whyslow/daemon"
)

// sidecarGCPercent is a sidecar's GOGC without OTLP. Its live heap is
// about 4 MB and its queries allocate about 0.6 MB a second, so most of
// its anonymous memory is the collector's headroom (the heap grows to
// twice the live heap between collections at the default 100). 75 keeps
// the idle sidecar under 50 MiB; 50 took 3–4 MB more off but cost a third
// more CPU (README, Cost).
const sidecarGCPercent = 75

// runtimeSettings are the Go runtime settings serve chooses for its mode;
// a zero field leaves that setting as it is.
type runtimeSettings struct {
	// MaxProcs: a sidecar's work is one engine's scrapes and queries, a
	// fraction of one core; one P used a fifth less CPU than two (fewer
	// idle Ps spinning, one GC worker).
	MaxProcs int
	// GCPercent: less collector headroom for a sidecar without OTLP
	// receivers (a span store needs its headroom; with receivers on,
	// memlimit sizes it).
	GCPercent int
	// NoHeapSampling turns off the runtime's heap profile (one sampled
	// allocation per 512 KiB, each with its stack kept for the process's
	// life) unless api.pprof serves it.
	NoHeapSampling bool
}

// serveRuntime picks the settings for cfg. An operator's environment
// (GOMAXPROCS, GOGC, GODEBUG=memprofilerate=) always wins.
func serveRuntime(cfg daemon.Config, getenv func(string) string) runtimeSettings {
	var s runtimeSettings
	if !cfg.Fleet() {
		if getenv("GOMAXPROCS") == "" {
			s.MaxProcs = 1
		}
		if getenv("GOGC") == "" && !cfg.OTLP.Enabled() {
			s.GCPercent = sidecarGCPercent
		}
	}
	if !cfg.API.Pprof && !strings.Contains(getenv("GODEBUG"), "memprofilerate=") {
		s.NoHeapSampling = true
	}
	return s
}

// gogc describes the collector's target for the log: the one set, else
// the environment's, else the runtime's default.
func (s runtimeSettings) gogc(getenv func(string) string) string {
	switch {
	case s.GCPercent > 0:
		return strconv.Itoa(s.GCPercent)
	case getenv("GOGC") != "":
		return getenv("GOGC")
	}
	return "100"
}

// runtimeMu and runtimeHolders let serve run more than once in one process
// (the tests do): the first applies its settings, the last restores them.
var (
	runtimeMu      sync.Mutex
	runtimeHolders int
	runtimeUndo    func()
)

// heapSampling reports whether the runtime samples heap allocations (read
// under runtimeMu: another serve in the process may be setting it).
func heapSampling() bool {
	runtimeMu.Lock()
	defer runtimeMu.Unlock()
	return runtime.MemProfileRate != 0
}

// applyRuntime applies s and returns the function that restores what was
// there before; call it once, when serve returns.
func applyRuntime(s runtimeSettings) (restore func()) {
	runtimeMu.Lock()
	defer runtimeMu.Unlock()
	runtimeHolders++
	if runtimeHolders == 1 {
		runtimeUndo = setRuntime(s)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			runtimeMu.Lock()
			defer runtimeMu.Unlock()
			runtimeHolders--
			if runtimeHolders == 0 {
				runtimeUndo()
				runtimeUndo = nil
			}
		})
	}
}

func setRuntime(s runtimeSettings) (undo func()) {
	var undos []func()
	if s.MaxProcs > 0 {
		runtime.GOMAXPROCS(s.MaxProcs)
		// Back to the runtime's own choice (which follows the CPU limit),
		// not a number fixed now: the setting applies only without the
		// GOMAXPROCS variable, so the default is what was there.
		undos = append(undos, func() { runtime.SetDefaultGOMAXPROCS() })
	}
	if s.GCPercent > 0 {
		prev := debug.SetGCPercent(s.GCPercent)
		undos = append(undos, func() { debug.SetGCPercent(prev) })
	}
	if s.NoHeapSampling {
		prev := runtime.MemProfileRate
		runtime.MemProfileRate = 0
		undos = append(undos, func() { runtime.MemProfileRate = prev })
	}
	return func() {
		for i := len(undos) - 1; i >= 0; i-- {
			undos[i]()
		}
	}
}
