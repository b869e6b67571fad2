package testgc

import (
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"slices"
	"testing"
)

// TestDefaultRestores: Default runs a test under Go's defaults and puts
// back the relaxed setting after it.
func TestDefaultRestores(t *testing.T) {
	if userSet() {
		t.Skip("GOGC or GOMEMLIMIT set in the environment: Default changes nothing")
	}
	defer debug.SetGCPercent(debug.SetGCPercent(gcPercent))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(memoryLimit))
	t.Run("measured", func(t *testing.T) {
		Default(t)
		if p, l := debug.SetGCPercent(-1), debug.SetMemoryLimit(-1); p != 100 || l != math.MaxInt64 {
			t.Errorf("under Default: GOGC %d, memory limit %d; want 100, none", p, l)
		}
		debug.SetGCPercent(100)
	})
	if p, l := debug.SetGCPercent(gcPercent), debug.SetMemoryLimit(-1); p != gcPercent || l != memoryLimit {
		t.Errorf("after Default: GOGC %d, memory limit %d; want %d, %d", p, l, gcPercent, memoryLimit)
	}
}

// TestChildEnv: a server a test starts gets the relaxed collector in its
// environment, after what this process has.
func TestChildEnv(t *testing.T) {
	if userSet() {
		t.Skip("GOGC or GOMEMLIMIT set in the environment: children inherit them")
	}
	env := ChildEnv()
	if len(env) != len(os.Environ())+2 {
		t.Fatalf("ChildEnv has %d entries, want this process's %d and two", len(env), len(os.Environ()))
	}
	got := env[len(env)-2:]
	want := []string{fmt.Sprintf("GOGC=%d", gcPercent), fmt.Sprintf("GOMEMLIMIT=%d", memoryLimit)}
	if !slices.Equal(got, want) {
		t.Errorf("ChildEnv adds %v, want %v", got, want)
	}
}
