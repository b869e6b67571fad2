package daemon

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/whyslow/whyslow/query"
	"github.com/whyslow/whyslow/testbed/promtest"
)

// TestPrometheusSourceDownLogsOnce is issue 25 item 9: a fleet daemon
// whose Prometheus was down logged "Engine scrape failed", then "Detection
// failed" and "Tick failed" every cycle. Now: one line naming the
// Prometheus source when it goes down, one when it answers again, none in
// between, and the Tick error is one Run does not log again.
func TestPrometheusSourceDownLogsOnce(t *testing.T) {
	promtest.SkipUnlessAvailable(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prom, err := url.Parse(promtest.Start(ctx, t, nil))
	if err != nil {
		t.Fatal(err)
	}
	// The real Prometheus, behind a switch that takes it down.
	var down atomic.Bool
	proxy := httputil.NewSingleHostReverseProxy(prom)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			http.Error(w, "maintenance", http.StatusServiceUnavailable)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	defer front.Close()

	var logs strings.Builder
	var mu sync.Mutex
	cfg := Config{Source: SourceConfig{Prometheus: &PrometheusSource{URL: front.URL}}, Listen: "127.0.0.1:0", OTLP: OTLPDisabled()}
	stack, err := NewStack(StackOptions{Config: cfg, Logger: slogTo(&mu, &logs), LogWriter: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	defer stack.Close(context.Background())
	at := time.Now().Add(-time.Hour).Truncate(time.Minute)
	tick := func(n int, fail bool) {
		t.Helper()
		for range n {
			at = at.Add(15 * time.Second)
			err := stack.Daemon.Tick(ctx, at)
			if (err != nil) != fail {
				t.Fatalf("Tick at %s (Prometheus down: %v) = %v", at, fail, err)
			}
			if err != nil && !errors.As(err, new(loggedError)) {
				t.Errorf("Tick error %v is not marked logged: Run logs it again every cycle", err)
			}
		}
	}
	tick(2, false)
	down.Store(true)
	tick(6, true)
	down.Store(false)
	tick(2, false)

	mu.Lock()
	text := logs.String()
	mu.Unlock()
	for msg, want := range map[string]int{
		"Prometheus source failed": 1, "Prometheus source answers again": 1,
		"Engine scrape failed": 0, "Detection failed": 0, "Tick failed": 0,
	} {
		if got := strings.Count(text, msg); got != want {
			t.Errorf("%q logged %d times, want %d:\n%s", msg, got, want, text)
		}
	}
	if !strings.Contains(grepLines(text, "Prometheus source failed"), "source="+front.URL) {
		t.Errorf("the failure does not name the source:\n%s", text)
	}
}

// switchedMetrics fails every query while off is set: a store that has
// gone bad under the detector while the engine still answers.
type switchedMetrics struct {
	query.Metrics
	off atomic.Bool
}

var errStoreBad = errors.New("query: store closed")

func (m *switchedMetrics) Query(ctx context.Context, expr string, at time.Time) (model.Vector, []string, error) {
	if m.off.Load() {
		return nil, nil, errStoreBad
	}
	return m.Metrics.Query(ctx, expr, at)
}

func (m *switchedMetrics) QueryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) (model.Matrix, []string, error) {
	if m.off.Load() {
		return nil, nil, errStoreBad
	}
	return m.Metrics.QueryRange(ctx, expr, start, end, step)
}

// TestDetectionFailureLogsOncePerStreak: a detection that fails for its own
// reason (the engine answers) is logged when the streak starts and when it
// ends, not every cycle.
func TestDetectionFailureLogsOncePerStreak(t *testing.T) {
	var logs strings.Builder
	var mu sync.Mutex
	var m *switchedMetrics
	h := newHarnessWith(t, testConfig(), func(o *Options) {
		m = &switchedMetrics{Metrics: o.Metrics}
		o.Metrics, o.Logger = m, slogTo(&mu, &logs)
	})
	h.ticks(t, 2)
	m.off.Store(true)
	for range 5 {
		h.now = h.now.Add(5 * time.Second)
		if err := h.d.Tick(context.Background(), h.now); err == nil || !errors.As(err, new(loggedError)) {
			t.Fatalf("Tick = %v, want a logged detection error", err)
		}
	}
	m.off.Store(false)
	h.ticks(t, 1)
	mu.Lock()
	text := logs.String()
	mu.Unlock()
	if n := strings.Count(text, "Detection failed"); n != 1 {
		t.Errorf("Detection failed logged %d times, want 1:\n%s", n, text)
	}
	if !strings.Contains(text, "Detection recovered") || !strings.Contains(text, "failed_cycles=5") {
		t.Errorf("no recovery line with the failed cycles:\n%s", text)
	}
}
