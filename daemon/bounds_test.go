package daemon

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/whyslow/whyslow/detect"
	"github.com/whyslow/whyslow/incident"
	"github.com/whyslow/whyslow/notifiers"
	"github.com/whyslow/whyslow/notifiers/logsink"
	"github.com/whyslow/whyslow/notifiers/render"
	"github.com/whyslow/whyslow/notifiers/slack"
	"github.com/whyslow/whyslow/testbed/fleettest"
	"github.com/whyslow/whyslow/testbed/testgc"
	"github.com/whyslow/whyslow/verdict"
)

// fleetHeapBound is the most heap a fleet daemon may hold in use after a
// cycle over a Prometheus answering 200,000 series per query (issue 26
// measured 2.78 GB RSS without the bounds).
const fleetHeapBound = 512 << 20

// TestFleetCycleBounded: a Prometheus whose every answer holds 200,000
// series (all of them firing queue_growth) keeps the fleet cycle within its
// bounds: answers truncated to detect.max_series and scopes judged in turn
// (detect.max_scopes), both counted; incidents opened up to
// detect.max_open_incidents; their notifications grouped into one message
// per receiver; /readyz degraded, /metrics answering; and the heap in use
// after each cycle under fleetHeapBound.
func TestFleetCycleBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("decodes 200,000-series answers for a few seconds of CPU")
	}
	testgc.Default(t) // the heap bound is the binary's, under Go's defaults
	const series = 200000
	fake := &fleettest.ManySeries{N: series}
	prom := httptest.NewServer(fake)
	t.Cleanup(prom.Close)

	zero := time.Duration(0)
	cfg := Config{Source: SourceConfig{Prometheus: &PrometheusSource{URL: prom.URL}}, Listen: "127.0.0.1:0", OTLP: OTLPDisabled(),
		Receivers: []ReceiverConfig{{Name: "log", Log: &logsink.Config{Format: "json"}}}}
	cfg.Detect = detect.DetectConfig{
		GroupBy: []string{"model_name"}, MaxSeries: 50000, MaxScopes: 1000, MaxOpenIncidents: 30, MaxNotifications: 5,
		// queue_growth 0.5 > 0.2 fires at once (no hold) for every scope.
		Triggers: []detect.Trigger{{Name: "queue_growth", Signal: detect.SignalQueueGrowth, Above: ptrF(0.2), For: &zero}},
	}
	cfg.Incidents.OpenWait = time.Second // the opened notifications go out at the second cycle
	// Every open incident is triaged each cycle however loaded the machine
	// (a failure guard, not a timing): the 30 opened notifications then
	// all come from the second cycle.
	cfg.Triage.CycleBudget = 10 * time.Minute
	stack, err := NewStack(StackOptions{Config: cfg, LogWriter: io.Discard, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stack.Close(context.Background()) })
	d := stack.Daemon

	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the heap in use while cycles run, sampled
		defer wg.Done()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	ctx := context.Background()
	at := time.Now().UTC().Truncate(time.Second)
	const cycles = 3
	for i := 0; i < cycles; i++ {
		if err := d.Tick(ctx, at.Add(time.Duration(i)*15*time.Second)); err != nil {
			t.Fatal(err)
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		t.Logf("cycle %d: heap in use %d MiB after the cycle (peak so far %d MiB), %d queries, %d of them 200,000 series",
			i+1, ms.HeapInuse>>20, peak.Load()>>20, fake.Queries.Load(), fake.Full.Load())
		if ms.HeapInuse > fleetHeapBound {
			t.Errorf("cycle %d: heap in use %d MiB, over the bound %d MiB", i+1, ms.HeapInuse>>20, fleetHeapBound>>20)
		}
		st := d.detector.Stats()
		if st.Detected > cfg.Detect.MaxScopes || st.Truncated == 0 || st.Skipped == 0 {
			t.Errorf("cycle %d: detection %+v, want at most %d scopes judged and the rest counted", i+1, st, cfg.Detect.MaxScopes)
		}
		open := 0
		for _, in := range d.Incidents() {
			if in.Status == incident.IncidentOpen {
				open++
			}
		}
		if open > cfg.Detect.MaxOpenIncidents {
			t.Errorf("cycle %d: %d incidents open, more than detect.max_open_incidents %d", i+1, open, cfg.Detect.MaxOpenIncidents)
		}
		if i == 0 && open != cfg.Detect.MaxOpenIncidents {
			t.Errorf("cycle 1: %d incidents open, want %d (every scope fires)", open, cfg.Detect.MaxOpenIncidents)
		}
	}

	refused := func(reason string) float64 { return testutil.ToFloat64(d.stats.detectRefused.WithLabelValues(reason)) }
	if got, want := refused("max_series"), float64(cycles*2*(series-50000)); got != want {
		t.Errorf("max_series refused %g series, want %g (2 queries a cycle, 150,000 dropped from each)", got, want)
	}
	if refused("max_scopes") < float64(cycles*(50000-1000)) || refused("open_incidents") == 0 {
		t.Errorf("refused: max_scopes %g, open_incidents %g; want both counted", refused("max_scopes"), refused("open_incidents"))
	}
	// The 30 incidents opened together: one grouped "opened" message for
	// the receiver, the 29 others counted as folded into it.
	opened := testutil.ToFloat64(d.stats.notifications.WithLabelValues("log", "open", "enqueued"))
	if opened != 1 || refused("notifications") != float64(cfg.Detect.MaxOpenIncidents-1) {
		t.Errorf("open notifications enqueued %g (want 1, grouped), folded %g (want %d)", opened, refused("notifications"), cfg.Detect.MaxOpenIncidents-1)
	}
	for _, n := range d.pending {
		t.Errorf("notification still pending: %s", n.ID)
	}

	gap := false
	for _, in := range d.Incidents() {
		if v, ok := d.Verdict(in.Scope.Selector); ok {
			for _, g := range v.DataGaps {
				gap = gap || (g.Signal == "detection" && strings.Contains(g.Reason, "detect.max_series"))
			}
		}
	}
	if !gap {
		t.Error("no verdict carries the bounded detection as a data gap")
	}
	h := d.Handler()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "degraded: ") ||
		!strings.Contains(rec.Body.String(), "detect.max_series 50000") || !strings.Contains(rec.Body.String(), "detect.max_scopes 1000") {
		t.Errorf("/readyz = %d %q, want 200 degraded naming the bounds (a bounded daemon stays in its Service)", rec.Code, rec.Body.String())
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `whyslow_detect_refused_total{reason="max_scopes"}`) {
		t.Errorf("/metrics = %d, want 200 with whyslow_detect_refused_total", rec.Code)
	}
	t.Logf("peak heap in use %d MiB; refused: max_series %g, max_scopes %g, open_incidents %g, notifications %g",
		peak.Load()>>20, refused("max_series"), refused("max_scopes"), refused("open_incidents"), refused("notifications"))
}

func ptrF(v float64) *float64 { return &v }

// TestGroupedNotifications: up to detect.max_notifications events a cycle
// each get their message; past it, each kind goes as one message that
// names the scopes, renders as text and Slack blocks, and has an id made
// of the events alone (a retry dedupes).
func TestGroupedNotifications(t *testing.T) {
	at := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	var events []incident.Event
	for i := 0; i < 25; i++ {
		kind := incident.EventOpened
		if i%5 == 4 {
			kind = incident.EventResolved
		}
		in := incident.Incident{ID: fmt.Sprintf("k%d@1", i), Key: fmt.Sprintf(`model_name="m-%d"`, i),
			Scope: verdict.Scope{Selector: fmt.Sprintf(`model_name="m-%d"`, i)}, Severity: verdict.SeverityWarning, TopCause: "queue_saturation"}
		if i == 3 {
			in.Severity = verdict.SeverityCritical
		}
		events = append(events, incident.Event{Kind: kind, At: at, Incident: in, DedupeKey: in.Key + "|" + kind.String()})
	}
	if g := groupEvents(events[:5], 5); len(g) != 5 {
		t.Errorf("5 events under max_notifications 5: %d messages, want 5", len(g))
	}
	groups := groupEvents(events, 5)
	if len(groups) != 2 || len(groups[0]) != 20 || len(groups[1]) != 5 {
		t.Fatalf("25 events past max_notifications 5: groups of %v, want 20 opened and 5 resolved", lens(groups))
	}
	if g := groupEvents(events, 1); len(g) != 1 || len(g[0]) != 25 {
		t.Errorf("max_notifications 1: %v, want one message", lens(g))
	}
	n := groupNotification(groups[0], "oncall", "", at)
	if err := n.Validate(); err != nil {
		t.Fatal(err)
	}
	if n.Kind != notifiers.TransitionOpen || n.Verdict.Severity != verdict.SeverityCritical || n.Verdict.Scope.Selector != "20 scopes opened" ||
		len(n.Verdict.Warnings) != groupListed+1 {
		t.Errorf("grouped: kind %s, severity %s, scope %q, %d lines", n.Kind, n.Verdict.Severity, n.Verdict.Scope.Selector, len(n.Verdict.Warnings))
	}
	if again := groupNotification(groups[0], "oncall", "", at); again.ID != n.ID {
		t.Errorf("ids differ for the same events: %s, %s", n.ID, again.ID)
	}
	if other := groupNotification(groups[1], "oncall", "", at); other.ID == n.ID || other.Kind != notifiers.TransitionResolve {
		t.Errorf("resolved group: id %s kind %s", other.ID, other.Kind)
	}
	var text bytes.Buffer
	if err := render.Render(&text, n.Verdict, render.FormatText, render.Options{}); err != nil || !strings.Contains(text.String(), `model_name="m-3" opened: queue_saturation (critical)`) {
		t.Errorf("text render (err %v):\n%s", err, text.String())
	}
	if msg := slack.Blocks(n.Verdict, slack.RenderOptions{}); len(msg.Blocks) == 0 {
		t.Error("no Slack blocks")
	}
}

func lens(groups [][]incident.Event) []int {
	var out []int
	for _, g := range groups {
		out = append(out, len(g))
	}
	return out
}

// TestBoundsConfig: the bounds default, and a negative one is refused
// naming its section.
func TestBoundsConfig(t *testing.T) {
	c := Config{Source: SourceConfig{Prometheus: &PrometheusSource{URL: "http://prometheus:9090"}}}.WithDefaults()
	if c.Detect.MaxSeries != detect.DefaultMaxSeries || c.Detect.MaxScopes != detect.DefaultMaxScopes ||
		c.Detect.MaxOpenIncidents != detect.DefaultMaxOpenIncidents || c.Detect.MaxNotifications != detect.DefaultMaxNotifications {
		t.Errorf("defaults: %+v", c.Detect)
	}
	c.Detect.MaxScopes = -1
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "detect") || !strings.Contains(err.Error(), "max_scopes") {
		t.Errorf("max_scopes -1: %v", err)
	}
}

// TestCycleOverrunDegraded: one cycle longer than the interval is counted;
// three in a row make /readyz say degraded, and a cycle within it clears.
func TestCycleOverrunDegraded(t *testing.T) {
	h := newHarness(t, testConfig())
	d := h.d
	cfg := d.Config()
	slow, fast := cfg.ScrapeInterval+time.Second, cfg.ScrapeInterval/2
	problem := func() string {
		d.viewMu.RLock()
		defer d.viewMu.RUnlock()
		return d.problems[problemCycle]
	}
	for i := 1; i <= overrunsDegraded; i++ {
		d.checkBounds(cfg, detect.CycleStats{}, slow, 0)
		if got := problem(); (got != "") != (i == overrunsDegraded) {
			t.Errorf("after %d overruns: problem %q", i, got)
		}
	}
	if got := problem(); !strings.Contains(got, "3 cycles in a row took longer than the 5s interval") {
		t.Errorf("problem %q", got)
	}
	if got := testutil.ToFloat64(d.stats.cycleOverruns); got != overrunsDegraded {
		t.Errorf("whyslow_cycle_overruns_total %g, want %d", got, overrunsDegraded)
	}
	d.checkBounds(cfg, detect.CycleStats{}, fast, 0)
	if got := problem(); got != "" {
		t.Errorf("a cycle within the interval left %q", got)
	}
	d.checkBounds(cfg, detect.CycleStats{Detected: 10, Scopes: 30, Skipped: 20, Parts: 4}, fast, 2)
	if got := problem(); !strings.Contains(got, "10 of about 30 scopes detected this cycle") || !strings.Contains(got, "2 firing scopes have no incident") {
		t.Errorf("bounded detection: problem %q", got)
	}
}
