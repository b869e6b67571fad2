package memlimit

import (
	"math"
	"runtime"
	"runtime/debug"
	"testing"
)

func TestLimit(t *testing.T) {
	l := Limiter{Bound: 64 << 20, Floor: 32 << 20} // a floor of its own, to test the arithmetic
	for _, c := range []struct {
		name       string
		live, held int64
		want       int64
	}{
		{"idle: the floor", 10 << 20, 0, 96 << 20},
		{"span store full, little else: the bound is not doubled", 72 << 20, 64 << 20, 96 << 20},
		{"much else live: it keeps one live heap of headroom", 164 << 20, 64 << 20, (64 + 200) << 20},
		{"held above live (estimate ahead of a collection)", 10 << 20, 30 << 20, 96 << 20},
	} {
		if got := l.Limit(c.live, c.held); got != c.want {
			t.Errorf("%s: Limit(%d MiB, %d MiB) = %d MiB, want %d MiB", c.name, c.live>>20, c.held>>20, got>>20, c.want>>20)
		}
	}
}

func TestUpdateSetsTheRuntimeLimit(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	runtime.GC() // so the live heap metric is current
	l := Limiter{Bound: 1 << 30, Held: func() int64 { return 0 }}
	got := l.Update()
	if got < 1<<30+DefaultFloor {
		t.Fatalf("Update = %d, want at least bound + floor", got)
	}
	if cur := debug.SetMemoryLimit(-1); cur != got {
		t.Fatalf("runtime limit %d, Update returned %d", cur, got)
	}
	if cur := debug.SetMemoryLimit(-1); cur == math.MaxInt64 {
		t.Fatal("no limit set")
	}
}
