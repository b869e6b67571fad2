package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"

	"github.com/whyslow/whyslow/incident"
	"github.com/whyslow/whyslow/notifiers/outbox"
	"github.com/whyslow/whyslow/testbed/secrettest"
)

// manyAlerts is a webhook with n firing alerts on n scopes.
func manyAlerts(n int, label string) string {
	var alerts []map[string]any
	for i := 0; i < n; i++ {
		alerts = append(alerts, map[string]any{
			"status": "firing", "labels": map[string]string{"alertname": "HighTTFT", "model_name": fmt.Sprintf("%s-%d", label, i)},
			"startsAt": t0.UTC().Format(time.RFC3339), "fingerprint": fmt.Sprintf("fp%d", i),
		})
	}
	b, _ := json.Marshal(map[string]any{"version": "4", "status": "firing", "receiver": "whyslow", "alerts": alerts})
	return string(b)
}

// TestAlertTriageOutsideTheLoop is finding 2 of issue 14: the intake
// triaged while holding the detect loop's lock, so one slow Alertmanager
// triage (a 900 kB label took 73 s) stopped the scrapes.
func TestAlertTriageOutsideTheLoop(t *testing.T) {
	h := newHarness(t, testConfig())
	h.ticks(t, 2)
	h.tri.cause = "queue_saturation"
	release := make(chan struct{})
	var once sync.Once
	started := make(chan struct{})
	h.tri.mu.Lock()
	h.tri.hook = func(ctx context.Context, req TriageRequest) error {
		if strings.Contains(req.Selector, "slow") {
			blocked := false
			once.Do(func() { blocked = true })
			if blocked {
				close(started)
				<-release
			}
		}
		return nil
	}
	h.tri.mu.Unlock()
	done := make(chan int, 1)
	go func() {
		code, _ := h.do(t, http.MethodPost, "/api/v1/alerts", "", strings.NewReader(alertBody("firing", "fp1",
			map[string]string{"alertname": "A", "model_name": "slow"})))
		done <- code
	}()
	<-started
	ticked := make(chan error, 1)
	go func() { ticked <- h.d.Tick(context.Background(), h.now.Add(5*time.Second)) }()
	select {
	case err := <-ticked:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Minute): // the triage waits for release: a hang guard
		close(release)
		t.Fatal("a tick waited for an Alertmanager triage")
	}
	close(release)
	if code := <-done; code != http.StatusOK {
		t.Fatalf("intake: %d", code)
	}
	if got := h.ob.kinds(); got != "open:queue_saturation" {
		t.Errorf("notifications: %q", got)
	}
}

// TestAlertIntakeBounds is finding 2 of issue 14 (its other half): a 900 kB
// label value was triaged and stored, and 500 alerts in one POST opened 500
// incidents and 500 notifications per receiver. Each bound now answers a
// clear 4xx and counts.
func TestAlertIntakeBounds(t *testing.T) {
	cfg := testConfig()
	cfg.Alerts.MaxOpenIncidents = 3
	h := newHarness(t, cfg)
	h.ticks(t, 2)
	h.tri.cause = "queue_saturation"

	code, body := h.do(t, http.MethodPost, "/api/v1/alerts", "", strings.NewReader(manyAlerts(500, "m")))
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(body, "alerts.max_alerts") {
		t.Errorf("500 alerts: %d %s", code, body)
	}
	huge := alertBody("firing", "fp-huge", map[string]string{"alertname": "A", "model_name": strings.Repeat("x", 300<<10)})
	code, body = h.do(t, http.MethodPost, "/api/v1/alerts", "", strings.NewReader(huge))
	if code != http.StatusUnprocessableEntity || !strings.Contains(body, "max_label_bytes") {
		t.Errorf("300 kB label: %d %s", code, body)
	}
	if n := len(h.d.Incidents()); n != 0 || h.tri.runs != 0 {
		t.Fatalf("refused webhooks made %d incidents, %d triages", n, h.tri.runs)
	}
	// Five scopes with room for three: three open, two are refused (429)
	// and not remembered.
	code, body = h.do(t, http.MethodPost, "/api/v1/alerts", "", strings.NewReader(manyAlerts(5, "m")))
	if code != http.StatusTooManyRequests || !strings.Contains(body, `"refused":2`) || !strings.Contains(body, "max_open_incidents") {
		t.Errorf("over the open-incident bound: %d %s", code, body)
	}
	if n := len(h.d.Incidents()); n != 3 {
		t.Errorf("%d incidents open, want 3", n)
	}
	metrics := h.get(t, "/metrics", "", http.StatusOK)
	for _, want := range []string{
		`whyslow_alertmanager_refused_total{reason="too_many_alerts"} 500`,
		`whyslow_alertmanager_refused_total{reason="label_too_long"} 1`,
		`whyslow_alertmanager_refused_total{reason="open_incidents"} 2`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// Once one resolves, the refused alert is taken on its next delivery.
	one := strings.Replace(manyAlerts(1, "m"), `"firing"`, `"resolved"`, -1)
	if code, body := h.do(t, http.MethodPost, "/api/v1/alerts", "", strings.NewReader(one)); code != http.StatusOK {
		t.Fatalf("resolve: %d %s", code, body)
	}
	code, body = h.do(t, http.MethodPost, "/api/v1/alerts", "", strings.NewReader(manyAlerts(5, "m")))
	// m-0's firing was seen before (same start): a duplicate; m-3 opens,
	// m-4 is refused.
	if code != http.StatusTooManyRequests || !strings.Contains(body, `"refused":1`) || !strings.Contains(body, `"processed":1`) {
		t.Errorf("redelivery: %d %s", code, body)
	}
}

// TestRestartPrunesOversizedAlertIncidents: a state written before the
// bounds (500 incidents with huge labels) does not keep a restarted daemon
// busy triaging them every tick.
func TestRestartPrunesOversizedAlertIncidents(t *testing.T) {
	cfg := testConfig()
	cfg.DataDir = t.TempDir()
	cfg.Alerts.MaxLabelBytes = 1 << 20
	cfg.Alerts.MaxOpenIncidents = 1000
	cfg.Alerts.MaxAlerts = 1000
	h := newHarness(t, cfg)
	h.ticks(t, 1)
	if code, body := h.do(t, http.MethodPost, "/api/v1/alerts", "", strings.NewReader(manyAlerts(100, strings.Repeat("y", 2000)))); code != http.StatusOK {
		t.Fatalf("intake: %d %.200s", code, body)
	}
	h.d.Shutdown(context.Background())
	h2 := newHarnessWith(t, testConfigIn(cfg.DataDir), func(o *Options) { o.Outbox = h.ob })
	open := 0
	for _, in := range h2.d.Incidents() {
		if in.Status == incident.IncidentOpen {
			open++
		}
	}
	if open != 0 {
		t.Errorf("%d oversized incidents still open after the restart", open)
	}
}

func testConfigIn(dir string) Config {
	cfg := testConfig()
	cfg.DataDir = dir
	return cfg
}

// TestOutboxFailureKeepsTheNotification is finding 3 of issue 14: when the
// outbox write failed (a full disk) the incident counted the notification
// as sent, the outbox had nothing, and nothing ever retried.
func TestOutboxFailureKeepsTheNotification(t *testing.T) {
	cfg := testConfig()
	cfg.DataDir = t.TempDir()
	h := newHarness(t, cfg)
	h.ticks(t, 2)
	h.get(t, "/readyz", "", http.StatusOK)
	h.tri.cause = "queue_saturation"
	h.ob.setErr(errors.New("write pending/00000000000000000001.json: no space left on device"))
	if code, body := h.do(t, http.MethodPost, "/api/v1/alerts", "", strings.NewReader(alertBody("firing", "fp1",
		map[string]string{"alertname": "A", "model_name": "m"}))); code != http.StatusOK {
		t.Fatalf("intake: %d %s", code, body)
	}
	if body := h.get(t, "/readyz", "", http.StatusServiceUnavailable); !strings.Contains(body, "not yet in the outbox") {
		t.Errorf("readyz while the outbox fails: %q", body)
	}
	if !strings.Contains(h.get(t, "/metrics", "", http.StatusOK), "whyslow_notifications_pending 1") {
		t.Error("/metrics does not count the pending notification")
	}
	h.ticks(t, 2) // still failing: still pending
	h.ob.setErr(nil)
	h.ticks(t, 1)
	if got := h.ob.kinds(); got != "open:queue_saturation" {
		t.Fatalf("after the outbox recovered: notifications %q", got)
	}
	h.get(t, "/readyz", "", http.StatusOK)
	h.ticks(t, 3)
	if got := h.ob.kinds(); got != "open:queue_saturation" {
		t.Errorf("delivered more than once: %q", got)
	}
}

// TestPendingNotificationSurvivesRestart: a notification the outbox did not
// take is in the state file and reaches the outbox after a restart.
func TestPendingNotificationSurvivesRestart(t *testing.T) {
	cfg := testConfig()
	cfg.DataDir = t.TempDir()
	h := newHarness(t, cfg)
	h.ticks(t, 2)
	h.tri.cause = "queue_saturation"
	h.ob.setErr(errors.New("no space left on device"))
	h.do(t, http.MethodPost, "/api/v1/alerts", "", strings.NewReader(alertBody("firing", "fp1", map[string]string{"alertname": "A", "model_name": "m"})))
	h.d.Shutdown(context.Background())
	ob := &memOutbox{}
	newHarnessWith(t, cfg, func(o *Options) { o.Outbox = ob })
	if len(ob.all) != 1 || ob.all[0].Kind != "open" {
		t.Fatalf("after restart the outbox got %d notifications", len(ob.all))
	}
}

// failingAppendable is a store on a full disk: every commit fails.
type failingAppendable struct{}

type failingAppender struct{ storage.Appender }

func (failingAppendable) Appender(context.Context) storage.Appender { return failingAppender{} }
func (failingAppender) Append(storage.SeriesRef, labels.Labels, int64, float64) (storage.SeriesRef, error) {
	return 0, nil
}
func (failingAppender) Commit() error   { return errors.New("write to WAL: no space left on device") }
func (failingAppender) Rollback() error { return nil }

// TestFullDiskIsNotEngineDown is finding 3 of issue 14 (its last part): a
// store that could not write (disk full) was reported as "engine down".
func TestFullDiskIsNotEngineDown(t *testing.T) {
	eng := newFakeEngine(t, "")
	es, err := NewEngineScraper(failingAppendable{}, ScraperOptions{Targets: []string{eng.url()}, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	var mu sync.Mutex
	h := newHarnessWith(t, testConfig(), func(o *Options) {
		o.Scraper = es
		o.Logger = slogTo(&mu, &logs)
	})
	h.ticks(t, 2)
	v, err := h.d.TriageNow(context.Background(), "api", `model_name="m"`, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range v.DataGaps {
		if strings.Contains(g.Reason, "down since") {
			t.Errorf("data gap says the engine is down: %+v", g)
		}
	}
	body := h.get(t, "/readyz", "", http.StatusServiceUnavailable)
	if !strings.Contains(body, "store refuses writes") || !strings.Contains(body, "no space left") {
		t.Errorf("readyz %q", body)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Contains(logs.String(), "Engine scrape failed") {
		t.Errorf("logged as an engine failure:\n%s", logs.String())
	}
}

// TestTriageBounds is finding 4 of issue 14: POST /api/v1/triage had no
// concurrency or cost limit (a 1 MB selector took 20 s, 50 in parallel took
// 700 MB). Beyond the slots it answers 429, past the timeout 503, both with
// Retry-After; a huge selector is a 400 before any work.
func TestTriageBounds(t *testing.T) {
	cfg := testConfig()
	cfg.API.MaxConcurrentTriages = 1
	// Ten times the old 300 ms: on a busy machine the second request still
	// finds the slot taken; the held triage then runs into it (503).
	cfg.API.TriageTimeout = 3 * time.Second
	cfg.API.MaxBodyBytes = 2 << 20
	h := newHarness(t, cfg)
	h.ticks(t, 2)
	block := make(chan struct{})
	var hugeTriaged atomic.Bool
	h.tri.mu.Lock()
	h.tri.hook = func(ctx context.Context, req TriageRequest) error {
		if len(req.Selector) > 1<<10 {
			hugeTriaged.Store(true)
		}
		if strings.Contains(req.Selector, "block") {
			select {
			case <-block:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	h.tri.mu.Unlock()
	client := &http.Client{Timeout: 2 * time.Minute} // a hang guard
	post := func(sel string) *http.Response {
		b, _ := json.Marshal(map[string]string{"selector": sel})
		resp, err := client.Post(h.srv.URL+"/api/v1/triage", "application/json", strings.NewReader(string(b)))
		if err != nil {
			t.Fatalf("triage %.40s: %v", sel, err)
		}
		return resp
	}
	// One slot, held by a triage that waits: the next one is told to retry.
	first := make(chan *http.Response, 1)
	go func() { first <- post(`model_name="block"`) }()
	deadline := time.Now().Add(time.Minute) // a hang guard
	for len(*h.d.triages.Load()) == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	resp := post(`model_name="m"`)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Errorf("second triage: %s, Retry-After %q", resp.Status, resp.Header.Get("Retry-After"))
	}
	// The waiting one runs into the timeout.
	resp = <-first
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("slow triage: %s, Retry-After %q", resp.Status, resp.Header.Get("Retry-After"))
	}
	close(block)
	// "Before any work" is checked as work, not time: the triage never
	// starts for the huge selector.
	resp = post(`model_name="` + strings.Repeat("x", 1<<20) + `"`)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("1 MB selector: %s, want 400", resp.Status)
	}
	if hugeTriaged.Load() {
		t.Error("1 MB selector: a triage ran for it before it was refused")
	}
	resp = post(`model_name="m"`)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("after the storm: %s", resp.Status)
	}
	m := h.get(t, "/metrics", "", http.StatusOK)
	for _, want := range []string{`whyslow_triage_refused_total{reason="busy",source="api"} 1`, `whyslow_triage_refused_total{reason="timeout",source="api"} 1`} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestMetricNameMatcherIs400 is finding 12 of issue 14 (its second part): a
// __name__ matcher in a triage request made the real triage fail with 500.
func TestMetricNameMatcherIs400(t *testing.T) {
	h := newHarnessWith(t, testConfig(), nil)
	tri, err := TriageWith(h.eng.st, nil, nil, "auto")
	if err != nil {
		t.Fatal(err)
	}
	h2 := newHarnessWith(t, testConfig(), func(o *Options) { o.Triage = tri; o.Metrics = h.eng.st; o.Scraper = h.eng })
	h2.ticks(t, 3)
	for _, sel := range []string{`__name__="up"`, `{model_name="m",__name__=~".+"}`} {
		b, _ := json.Marshal(map[string]string{"selector": sel, "window": "1m", "baseline": "10m"})
		code, body := h2.do(t, http.MethodPost, "/api/v1/triage", "", strings.NewReader(string(b)))
		if code != http.StatusBadRequest || !strings.Contains(body, "__name__") {
			t.Errorf("%s: %d %s", sel, code, body)
		}
	}
	if code, body := h2.do(t, http.MethodGet, "/api/v1/verdict?scope="+`__name__%3D"up"`, "", nil); code != http.StatusBadRequest {
		t.Errorf("verdict with __name__: %d %s", code, body)
	}
}

// TestAuthFailsClosed is finding 7 of issue 14: an empty token meant no
// authentication, silently, on every interface. Now /api/* and the profiles
// refuse every request there unless api.insecure is set; /metrics, /healthz
// and /readyz stay open; the bearer scheme is case-insensitive (finding 12).
func TestAuthFailsClosed(t *testing.T) {
	for _, tc := range []struct {
		name     string
		listen   string
		token    string
		insecure bool
		header   string
		want     int
		mode     AuthMode
	}{
		{"all interfaces, no token", ":9109", "", false, "", http.StatusForbidden, AuthLocked},
		{"0.0.0.0, no token, any header", "0.0.0.0:9109", "", false, "Bearer x", http.StatusForbidden, AuthLocked},
		{"insecure", ":9109", "", true, "", http.StatusOK, AuthInsecure},
		{"loopback", "127.0.0.1:9109", "", false, "", http.StatusOK, AuthLoopback},
		{"localhost v6", "[::1]:9109", "", false, "", http.StatusOK, AuthLoopback},
		{"token", ":9109", "tok-123", false, "Bearer tok-123", http.StatusOK, AuthToken},
		{"token, lower-case scheme", ":9109", "tok-123", false, "bearer tok-123", http.StatusOK, AuthToken},
		{"token, wrong", ":9109", "tok-123", false, "Bearer tok-124", http.StatusUnauthorized, AuthToken},
		{"token, basic", ":9109", "tok-123", false, "Basic tok-123", http.StatusUnauthorized, AuthToken},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.Listen, cfg.API.Token, cfg.API.Insecure, cfg.API.Pprof = tc.listen, tc.token, tc.insecure, true
			if mode, warning := APIAuth(cfg); mode != tc.mode || (mode == AuthLocked || mode == AuthInsecure) != (warning != "") {
				t.Errorf("APIAuth = %v, %q", mode, warning)
			}
			h := newHarness(t, cfg)
			h.ticks(t, 1)
			for _, path := range []string{"/api/v1/incidents", "/debug/pprof/"} {
				req, _ := http.NewRequest(http.MethodGet, h.srv.URL+path, nil)
				if tc.header != "" {
					req.Header.Set("Authorization", tc.header)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != tc.want {
					t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, tc.want)
				}
			}
			for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
				h.get(t, path, "", http.StatusOK)
			}
		})
	}
}

// TestReloadThatDropsTheTokenSaysSo: a SIGHUP that empties the token logged
// only "Configuration reloaded".
func TestReloadThatDropsTheTokenSaysSo(t *testing.T) {
	var logs strings.Builder
	var mu sync.Mutex
	cfg := testConfig()
	cfg.Listen, cfg.API.Token = ":9109", "tok-123"
	h := newHarnessWith(t, cfg, func(o *Options) { o.Logger = slogTo(&mu, &logs) })
	next := cfg
	next.API.Token = ""
	if err := h.d.Reload(next, nil, nil); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "API authentication changed") || !strings.Contains(out, "locked") {
		t.Errorf("reload log:\n%s", out)
	}
	if code, _ := h.do(t, http.MethodGet, "/api/v1/incidents", "tok-123", nil); code != http.StatusForbidden {
		t.Errorf("after the token was removed: %d", code)
	}
}

// TestCorruptStateIsMovedAside is finding 11 of issue 14 (its first part):
// a truncated incidents.json stopped the daemon from starting, so a sidecar
// crash-looped.
func TestCorruptStateIsMovedAside(t *testing.T) {
	dir := t.TempDir()
	full := `{"version":1,"open":[{"id":"x@1","key":"x","status":"open"}],"resolved":[]}`
	if err := os.WriteFile(filepath.Join(dir, stateFile), []byte(full[:40]), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	var mu sync.Mutex
	h := newHarnessWith(t, testConfigIn(dir), func(o *Options) { o.Logger = slogTo(&mu, &logs) })
	if n := len(h.d.Incidents()); n != 0 {
		t.Errorf("%d incidents from a corrupt file", n)
	}
	aside, _ := filepath.Glob(filepath.Join(dir, stateFile+".corrupt-*"))
	if len(aside) != 1 {
		t.Fatalf("moved aside: %v", aside)
	}
	if b, _ := os.ReadFile(aside[0]); string(b) != full[:40] {
		t.Errorf("moved-aside file holds %q", b)
	}
	mu.Lock()
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "moved aside") {
		t.Errorf("no error line:\n%s", logs.String())
	}
	mu.Unlock()
	h.ticks(t, 1)
	if _, err := os.Stat(filepath.Join(dir, stateFile)); err != nil {
		t.Errorf("no fresh state written: %v", err)
	}
	if !strings.Contains(h.get(t, "/metrics", "", http.StatusOK), "whyslow_state_corrupt_total 1") {
		t.Error("/metrics does not count the corrupt state")
	}
}

// TestStateSaveFailureDoesNotDuplicate is finding 11 of issue 14 (its
// second part): when saving the incident state failed and the daemon
// restarted, the same alert opened a second incident (and a second page)
// and the first never resolved. Notifications are now only sent for a state
// that is saved.
func TestStateSaveFailureDoesNotDuplicate(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfigIn(dir)
	h := newHarness(t, cfg)
	h.ticks(t, 2)
	h.tri.cause = "queue_saturation"
	// The state file's place is taken: every save fails.
	os.Remove(filepath.Join(dir, stateFile))
	if err := os.Mkdir(filepath.Join(dir, stateFile), 0o700); err != nil {
		t.Fatal(err)
	}
	alert := alertBody("firing", "fp1", map[string]string{"alertname": "A", "model_name": "m"})
	if code, body := h.do(t, http.MethodPost, "/api/v1/alerts", "", strings.NewReader(alert)); code != http.StatusOK {
		t.Fatalf("intake: %d %s", code, body)
	}
	if body := h.get(t, "/readyz", "", http.StatusServiceUnavailable); !strings.Contains(body, "incident state not saved") {
		t.Errorf("readyz: %q", body)
	}
	if m := h.get(t, "/metrics", "", http.StatusOK); !strings.Contains(m, "whyslow_notifications_pending 1") || !strings.Contains(m, "whyslow_state_persist_errors_total") {
		t.Error("/metrics does not show the held notification")
	}
	h.d.Shutdown(context.Background())
	// The disk is fixed; the daemon restarts and Alertmanager sends again.
	os.Remove(filepath.Join(dir, stateFile))
	h2 := newHarnessWith(t, cfg, func(o *Options) { o.Outbox = h.ob })
	h2.now = h.now.Add(10 * time.Minute) // the restart takes a while
	h2.tri.cause = "queue_saturation"
	h2.ticks(t, 2)
	if code, body := h2.do(t, http.MethodPost, "/api/v1/alerts", "", strings.NewReader(alert)); code != http.StatusOK {
		t.Fatalf("intake after restart: %d %s", code, body)
	}
	if got := h.ob.kinds(); got != "open:queue_saturation" {
		t.Fatalf("notifications across the restart: %q (one open expected)", got)
	}
	resolved := alertBody("resolved", "fp1", map[string]string{"alertname": "A", "model_name": "m"})
	h2.do(t, http.MethodPost, "/api/v1/alerts", "", strings.NewReader(resolved))
	if got := h.ob.kinds(); got != "open:queue_saturation resolve:queue_saturation" {
		t.Errorf("after resolve: %q", got)
	}
}

// TestNoSecretLeaves: the daemon's responses, logs and files never show a
// configured secret, even when a bad request echoes one or a triage error
// carries one.
func TestNoSecretLeaves(t *testing.T) {
	tok, hookPW := secrettest.Secret("api"), secrettest.Secret("hook")
	sc := secrettest.New(t, tok, "ops:"+hookPW)
	cfg := testConfig()
	cfg.DataDir = t.TempDir()
	cfg.API.Token = tok
	h := newHarnessWith(t, cfg, func(o *Options) {
		o.Logger = sc.Logger()
		o.Secrets = ConfigSecrets(cfg)
		o.Secrets.AddBasic("ops", hookPW)
	})
	h.ticks(t, 2)
	h.tri.mu.Lock()
	h.tri.err = fmt.Errorf("query http://ops:%s@prom/api?token=%s failed: Authorization: Bearer %s", hookPW, tok, tok)
	h.tri.mu.Unlock()
	for _, req := range []struct{ method, path, token, body string }{
		{"POST", "/api/v1/triage", tok, `{"selector":"model_name=\"m\""}`},
		{"POST", "/api/v1/triage", tok, `{"selector":"` + tok + `"}`},
		{"GET", "/api/v1/verdict?scope=" + tok, tok, ""},
		{"POST", "/api/v1/alerts", "wrong", ""},
		{"GET", "/readyz", "", ""},
	} {
		r, _ := http.NewRequest(req.method, h.srv.URL+req.path, strings.NewReader(req.body))
		if req.token != "" {
			r.Header.Set("Authorization", "Bearer "+req.token)
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		sc.Response(req.method+" "+req.path, resp)
	}
	h.tri.mu.Lock()
	h.tri.err = nil
	h.tri.cause = "queue_saturation"
	h.tri.mu.Unlock()
	h.do(t, http.MethodPost, "/api/v1/alerts", tok, strings.NewReader(alertBody("firing", "fp1", map[string]string{"alertname": "A", "model_name": "m"})))
	h.d.Shutdown(context.Background())
	sc.Dir(cfg.DataDir)
	if sc.Checked() < 6 {
		t.Fatalf("only %d checks ran", sc.Checked())
	}
}

// FuzzDecodeState: any incidents.json either restores a tracker or is an
// error (the daemon then moves it aside); it never panics.
func FuzzDecodeState(f *testing.F) {
	f.Add([]byte(`{"version":1,"open":[],"resolved":[]}`))
	f.Add([]byte(`{"version":2,"tracker":{"version":1,"open":[{"id":"k@1","key":"k","status":"open","alerts":{"fp":{"fingerprint":"fp"}}}],"resolved":[]},"pending":[]}`))
	f.Add([]byte(`{"version":2,"tracker":{"version":1,"open":[],"resolved":[]},"pending":[{"id":"x"}]}`))
	f.Add([]byte(`{"version":1,"open":[null]}`))
	cfg := incident.IncidentConfig{}.WithDefaults()
	f.Fuzz(func(t *testing.T, b []byte) {
		tr, pending, err := decodeState(cfg, b)
		if err != nil {
			return
		}
		for _, n := range pending {
			if n.Validate() != nil {
				t.Fatalf("accepted an invalid pending notification %+v", n)
			}
		}
		if _, err := tr.Snapshot(); err != nil {
			t.Fatalf("restored a tracker that does not snapshot: %v", err)
		}
	})
}

// slogTo returns a text logger writing into b under mu.
func slogTo(mu *sync.Mutex, b *strings.Builder) *slog.Logger {
	return slog.New(slog.NewTextHandler(lockedWriter{mu: mu, b: b}, nil))
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// TestStackOTLPRequiresToken: otlp.require_token puts the receivers behind
// api.token, and the setting needs a token.
func TestStackOTLPRequiresToken(t *testing.T) {
	eng := newFakeEngine(t, "")
	cfg := stackConfig(eng.url())
	addr, off := "127.0.0.1:0", ""
	cfg.OTLP = OTLPConfig{HTTP: &addr, GRPC: &off, RequireToken: true}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "otlp.require_token: needs api.token") {
		t.Fatalf("require_token without a token: %v", err)
	}
	cfg.API.Token = "otlp-tok-123"
	s := newTestStack(t, StackOptions{Config: cfg, GPULib: noNVML{t}})
	post := func(auth string) int {
		req, _ := http.NewRequest(http.MethodPost, "http://"+s.OTLP.HTTPAddr()+"/v1/traces", strings.NewReader(""))
		req.Header.Set("Content-Type", "application/x-protobuf")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(""); code != http.StatusUnauthorized {
		t.Errorf("no token: %d", code)
	}
	if code := post("Bearer otlp-tok-123"); code != http.StatusOK {
		t.Errorf("token: %d", code)
	}
	if w := OTLPAuthWarning(cfg); w != "" {
		t.Errorf("warning with the token required: %q", w)
	}
	cfg.OTLP.RequireToken = false
	if w := OTLPAuthWarning(cfg); w != "" {
		t.Errorf("loopback receivers warned about: %q", w)
	}
	all := ":4318"
	cfg.OTLP.HTTP = &all
	if w := OTLPAuthWarning(cfg); !strings.Contains(w, ":4318") {
		t.Errorf("open receiver not warned about: %q", w)
	}
}

func TestConfigValidatesBounds(t *testing.T) {
	for _, tc := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.Alerts.ScopeLabels = map[string]string{"x": "__name__"} }, "alerts.scope_labels"},
		{func(c *Config) { c.Alerts.MaxAlerts = -1 }, "alerts: max_alerts"},
		{func(c *Config) { c.API.TriageTimeout = -time.Second }, "api: triage_timeout"},
		{func(c *Config) { c.OTLP.MaxTriageSpans = -1 }, "max_triage_spans"},
	} {
		cfg := testConfig()
		tc.edit(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("want %q, got %v", tc.want, err)
		}
	}
	if LoopbackOnly(":9109") || LoopbackOnly("0.0.0.0:1") || LoopbackOnly("example.com:1") || !LoopbackOnly("localhost:1") || !LoopbackOnly("127.0.0.2:1") {
		t.Error("LoopbackOnly")
	}
}

// TestRejectedNotificationDoesNotBlock: a notification the outbox can
// never take (too large) is dropped, not held in front of the others.
func TestRejectedNotificationDoesNotBlock(t *testing.T) {
	h := newHarness(t, testConfig())
	h.ticks(t, 2)
	h.tri.cause = "queue_saturation"
	h.ob.setErr(fmt.Errorf("enqueue x: %w: 70000000 bytes exceeds the outbox limit", outbox.ErrRejected))
	h.do(t, http.MethodPost, "/api/v1/alerts", "", strings.NewReader(alertBody("firing", "fp1", map[string]string{"alertname": "A", "model_name": "m"})))
	h.ob.setErr(nil)
	h.do(t, http.MethodPost, "/api/v1/alerts", "", strings.NewReader(alertBody("firing", "fp2", map[string]string{"alertname": "A", "model_name": "n"})))
	if got := h.ob.kinds(); got != "open:queue_saturation" {
		t.Errorf("notifications: %q (the second incident's only)", got)
	}
	h.get(t, "/readyz", "", http.StatusOK)
}

// TestStaleStateTempsRemoved is finding 8 of issue 26: a crash during a
// state write left incidents.json.tmp* behind, one more each time.
func TestStaleStateTempsRemoved(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{stateFile + ".tmp123", stateFile + ".tmp-old"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(`{"version":2,"trac`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	other := filepath.Join(dir, "notes.tmp1")
	if err := os.WriteFile(other, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	newHarness(t, testConfigIn(dir))
	if left, _ := filepath.Glob(filepath.Join(dir, stateFile+".tmp*")); len(left) != 0 {
		t.Errorf("stale temporary state files left: %v", left)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("a file that is not a state temp was removed: %v", err)
	}
}
