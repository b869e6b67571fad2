package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/whyslow/whyslow/testbed/fleettest"
)

// manyScopes is a fake Prometheus holding n scopes, every one with a
// growing queue (queue_growth 0.3 and up, past its 0.2 bound): scope i
// grows a little faster than scope i-1, so the ranking is known.
func manyScopes(n int) *manyScopesFake {
	return &manyScopesFake{ManySeries: fleettest.ManySeries{N: n, Value: func(i int) float64 { return 0.3 + float64(i)/1e6 }}}
}

type manyScopesFake struct {
	fleettest.ManySeries
	// onScoped runs on the first query naming one scope (a triage's).
	onScoped func()
	once     sync.Once
}

func (m *manyScopesFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if m.onScoped != nil && strings.Contains(r.FormValue("query"), `model_name="m-`) {
		m.once.Do(m.onScoped)
	}
	m.ManySeries.ServeHTTP(w, r)
}

// TestWhyGroupByBounded: `why --group-by` against more anomalous scopes
// than the detector reads (its max_series, 100000) triages only
// --max-scopes of them, the furthest past their bound, and names the rest
// in one line. 101,000 scopes are past the bound as 200,000 were: every
// series is decoded before the detector cuts, so the extra 99,000 only
// cost CPU (issue 23).
func TestWhyGroupByBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("decodes 101,000-series answers for a few seconds of CPU")
	}
	fake := manyScopes(101000)
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a failure guard only
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := runWhy(ctx, []string{"--prometheus", srv.URL, "--group-by", "model_name", "--max-scopes", "3",
		"--at", "2026-01-01T12:00:00Z"}, &stdout, &stderr)
	out := stdout.String()
	if code != exitCause {
		t.Fatalf("exit %d, want %d\nstderr: %s\nstdout: %.2000s", code, exitCause, stderr.String(), out)
	}
	// The detector reads the first 100000 series of each answer (its
	// max_series); of those, the 3 growing fastest are triaged.
	if !strings.Contains(out, "100000 of 100000 scopes (by model_name) anomalous") || !strings.Contains(out, "detection read the first 100000") {
		t.Errorf("header: want all 100000 read scopes anomalous and the truncation said:\n%.1000s", out)
	}
	for i, want := range []string{`model_name="m-099999"`, `model_name="m-099998"`, `model_name="m-099997"`} {
		if !strings.Contains(out, "── "+string(rune('1'+i))+". "+want+" ──") {
			t.Errorf("triage %d: want %s\n%.3000s", i+1, want, out)
		}
	}
	if n := strings.Count(out, "\n── "); n != 3 {
		t.Errorf("%d triages printed, want 3 (--max-scopes)", n)
	}
	if n := strings.Count(out, "not triaged"); n != 1 || !strings.Contains(out, "99997 more anomalous scopes not triaged (--max-scopes 3): model_name=\"m-099996\"") {
		t.Errorf("%d lines about the scopes not triaged, want one naming 99997 of them:\n%.3000s", n, out)
	}
	if n := strings.Count(out, "\n"); n > 400 {
		t.Errorf("%d lines of output for 3 triages", n)
	}
}

// TestWhyGroupByInterrupted: an interrupt during the triages of `why
// --group-by` stops them and says so in one line, not one per scope.
func TestWhyGroupByInterrupted(t *testing.T) {
	if testing.Short() {
		t.Skip("decodes 20,000-series answers")
	}
	// 20,000 scopes: the old code printed a line per scope; one line is
	// what it must print whatever the count.
	fake := manyScopes(20000)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fake.onScoped = cancel // SIGTERM as the first triage starts
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	guard, stop := context.WithTimeout(ctx, 5*time.Minute) // a failure guard only
	defer stop()
	var stdout, stderr bytes.Buffer
	code := runWhy(guard, []string{"--prometheus", srv.URL, "--group-by", "model_name", "--at", "2026-01-01T12:00:00Z"}, &stdout, &stderr)
	if code != exitFailed {
		t.Errorf("exit %d, want %d", code, exitFailed)
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()+stdout.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "interrupted") || !strings.Contains(lines[0], "context canceled") {
		t.Errorf("want one line saying it was interrupted, got %d lines:\n%.2000s", len(lines), strings.Join(lines, "\n"))
	}
}
