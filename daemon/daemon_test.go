package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/whyslow/whyslow/collectors/store"
	"github.com/whyslow/whyslow/detect"
	"github.com/whyslow/whyslow/incident"
	"github.com/whyslow/whyslow/notifiers"
	"github.com/whyslow/whyslow/rules"
	"github.com/whyslow/whyslow/verdict"
)

var t0 = time.Unix(1700000000, 0)

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// synthEngine appends a vLLM-like TTFT histogram into a store on every
// scrape: healthy requests land below 0.1 s, slow ones in (0.25, 1].
type synthEngine struct {
	st   *store.Store
	mu   sync.Mutex
	slow bool
	down bool
	n    float64 // cumulative fast observations
	s    float64 // cumulative slow observations
	// model, pod and target name the engine (default m, p0, synth).
	model, pod, target string
	// sglang writes SGLang's names instead of vLLM's.
	sglang bool
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func (e *synthEngine) setSlow(v bool) { e.mu.Lock(); e.slow = v; e.mu.Unlock() }
func (e *synthEngine) setDown(v bool) { e.mu.Lock(); e.down = v; e.mu.Unlock() }

func (e *synthEngine) Scrape(ctx context.Context, at time.Time) []ScrapeResult {
	e.mu.Lock()
	defer e.mu.Unlock()
	model, pod, target := orDefault(e.model, "m"), orDefault(e.pod, "p0"), orDefault(e.target, "synth")
	if e.down {
		return []ScrapeResult{{Target: target, Err: errors.New("connection refused")}}
	}
	if e.slow {
		e.s += 10
	} else {
		e.n += 10
	}
	app := e.st.Appender(ctx)
	ts := at.UnixMilli()
	ttft, finished := "vllm:time_to_first_token_seconds", []string{"__name__", "vllm:request_success_total", "finished_reason", "stop"}
	if e.sglang {
		ttft, finished = "sglang:time_to_first_token_seconds", []string{"__name__", "sglang:num_requests_total"}
	}
	add := func(le string, v float64) {
		ls := labels.FromStrings("__name__", ttft+"_bucket", "model_name", model, "le", le, "pod", pod)
		if _, err := app.Append(0, ls, ts, v); err != nil {
			panic(err)
		}
	}
	add("0.1", e.n)
	add("0.25", e.n)
	add("1", e.n+e.s)
	add("+Inf", e.n+e.s)
	cnt := labels.FromStrings("__name__", ttft+"_count", "model_name", model, "pod", pod)
	if _, err := app.Append(0, cnt, ts, e.n+e.s); err != nil {
		panic(err)
	}
	ls := labels.FromStrings(append(finished, "model_name", model, "pod", pod)...)
	if _, err := app.Append(0, ls, ts, e.n+e.s); err != nil {
		panic(err)
	}
	if err := app.Commit(); err != nil {
		panic(err)
	}
	return []ScrapeResult{{Target: target, Samples: 5}}
}

// multiScraper scrapes several engines, as a daemon with several targets.
type multiScraper []Scraper

func (m multiScraper) Scrape(ctx context.Context, at time.Time) []ScrapeResult {
	var out []ScrapeResult
	for _, s := range m {
		out = append(out, s.Scrape(ctx, at)...)
	}
	return out
}

// fakeTriage names a fixed cause when the scope is slow.
type fakeTriage struct {
	mu    sync.Mutex
	cause string
	runs  int
	err   error
	last  TriageRequest
	// engine names the verdicts' engine ("" : none, as an unknown one)
	engine string
	// hook, when set, runs first (outside the lock): tests block or fail
	// a triage with it.
	hook func(ctx context.Context, req TriageRequest) error
}

func (f *fakeTriage) run(ctx context.Context, req TriageRequest) (*verdict.Verdict, error) {
	f.mu.Lock()
	hook := f.hook
	f.mu.Unlock()
	if hook != nil {
		if err := hook(ctx, req); err != nil {
			return nil, err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.runs++
	f.last = req
	if f.err != nil {
		return nil, f.err
	}
	v := &verdict.Verdict{SchemaVersion: verdict.SchemaVersion, Status: verdict.StatusHealthy, Severity: verdict.SeverityNone,
		Scope: verdict.Scope{Selector: req.Selector}, At: req.At}
	if f.engine != "" {
		v.Engine = f.engine
		v.Incident = verdict.Window{Start: req.At.Add(-req.Window), End: req.At}
		v.Baseline = verdict.Window{Start: req.At.Add(-req.Baseline - req.Window), End: req.At.Add(-req.Baseline)}
	}
	if f.cause != "" {
		v.Status, v.Severity = verdict.StatusAnomaly, verdict.SeverityWarning
		v.Causes = []verdict.Cause{{ID: f.cause, Rank: 1, Score: 0.9, Title: f.cause}}
	}
	return v, nil
}

// memOutbox records notifications.
type memOutbox struct {
	mu  sync.Mutex
	ids map[string]bool
	all []*notifiers.Notification
	err error // Enqueue fails with it while set (a full disk)
}

func (o *memOutbox) setErr(err error) { o.mu.Lock(); o.err = err; o.mu.Unlock() }

func (o *memOutbox) Enqueue(n *notifiers.Notification) (bool, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.err != nil {
		return false, o.err
	}
	if o.ids == nil {
		o.ids = map[string]bool{}
	}
	if o.ids[n.ID] {
		return false, nil
	}
	o.ids[n.ID] = true
	o.all = append(o.all, n)
	return true, nil
}

func (o *memOutbox) Depth() int { return 0 }

func (o *memOutbox) kinds() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var ks []string
	for _, n := range o.all {
		// The dedupe key is scope|cause|kind|opened.
		parts := strings.Split(n.IncidentKey, "|")
		ks = append(ks, string(n.Kind)+":"+parts[1])
	}
	return strings.Join(ks, " ")
}

type harness struct {
	d      *Daemon
	eng    *synthEngine
	tri    *fakeTriage
	ob     *memOutbox
	now    time.Time
	srv    *httptest.Server
	dir    string
	config Config
}

func testConfig() Config {
	return Config{
		// Loopback: without a token the API answers (see APIAuth).
		Listen: "127.0.0.1:9109",
		// A one-interval hold: these tests are about the incident lifecycle
		// (the default hold is covered in package triage and the e2e tests).
		Detect:    detect.DetectConfig{Baseline: 10 * time.Minute, For: 5 * time.Second},
		Incidents: incident.IncidentConfig{ResolveAfter: time.Minute},
		Triage:    TriageConfig{Window: time.Minute, Baseline: 10 * time.Minute},
	}
}

func newHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	return newHarnessWith(t, cfg, nil)
}

// newHarnessWith is newHarness with the options edited by edit (a logger, a
// triage function).
func newHarnessWith(t *testing.T, cfg Config, edit func(*Options)) *harness {
	t.Helper()
	st, err := store.Open(store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h := &harness{eng: &synthEngine{st: st}, tri: &fakeTriage{}, ob: &memOutbox{}, now: t0, config: cfg}
	o := Options{
		Config: cfg, Metrics: st, Scraper: h.eng, Triage: h.tri.run, Outbox: h.ob,
		Receivers: []string{"hook"}, Now: func() time.Time { return h.now }, Logger: quietLogger(),
	}
	if edit != nil {
		edit(&o)
	}
	h.d, err = New(o)
	if err != nil {
		t.Fatal(err)
	}
	h.srv = httptest.NewServer(h.d.Handler())
	t.Cleanup(h.srv.Close)
	return h
}

// ticks advances n scrape intervals.
func (h *harness) ticks(t *testing.T, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		h.now = h.now.Add(5 * time.Second)
		if err := h.d.Tick(context.Background(), h.now); err != nil {
			t.Fatal(err)
		}
	}
}

func TestDaemonIncidentLifecycle(t *testing.T) {
	h := newHarness(t, testConfig())
	h.ticks(t, 15*12) // 15 healthy minutes
	if got := h.ob.kinds(); got != "" {
		t.Fatalf("healthy period notified: %s", got)
	}
	if h.tri.runs != 0 {
		t.Fatalf("healthy period triaged %d times", h.tri.runs)
	}
	h.eng.setSlow(true)
	h.tri.cause = "kv_cache_pressure"
	opened := -1
	for i := 1; i <= 10 && opened < 0; i++ {
		h.ticks(t, 1)
		if len(h.d.Incidents()) > 0 && h.ob.kinds() != "" {
			opened = i
		}
	}
	if opened < 0 || opened > 3 {
		t.Fatalf("incident opened after %d intervals (want 1..3)", opened)
	}
	h.ticks(t, 5*12) // five slow minutes: no more notifications
	if got := h.ob.kinds(); got != "open:kv_cache_pressure" {
		t.Fatalf("notifications during the incident: %s", got)
	}
	h.eng.setSlow(false)
	h.tri.cause = ""
	h.ticks(t, 10*12)
	if got := h.ob.kinds(); got != "open:kv_cache_pressure resolve:kv_cache_pressure" {
		t.Fatalf("notifications: %s", got)
	}
	incs := h.d.Incidents()
	if len(incs) != 1 || incs[0].Status != incident.IncidentResolved {
		t.Fatalf("incidents = %+v", incs)
	}
	// The top-cause gauge is gone once resolved; counters are there.
	body := h.get(t, "/metrics", "", http.StatusOK)
	for _, want := range []string{"whyslow_incidents_open 0", `whyslow_scrapes_total{result="success",target="synth"}`, "whyslow_triage_runs_total", "whyslow_ready 1"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestDaemonEngineDownIsReported(t *testing.T) {
	h := newHarness(t, testConfig())
	if body := h.get(t, "/readyz", "", http.StatusServiceUnavailable); !strings.Contains(body, "no successful scrape") {
		t.Errorf("readyz body %q", body)
	}
	h.eng.setDown(true)
	h.ticks(t, 3)
	h.get(t, "/readyz", "", http.StatusServiceUnavailable)
	h.get(t, "/healthz", "", http.StatusOK)
	body := h.get(t, "/metrics", "", http.StatusOK)
	if !strings.Contains(body, `whyslow_scrapes_total{result="failure",target="synth"} 3`) {
		t.Errorf("down target not reported:\n%s", body)
	}
	h.eng.setDown(false)
	h.ticks(t, 1)
	h.get(t, "/readyz", "", http.StatusOK)
}

func TestDaemonPersistsIncidents(t *testing.T) {
	cfg := testConfig()
	cfg.DataDir = t.TempDir()
	h := newHarness(t, cfg)
	h.ticks(t, 15*12)
	h.eng.setSlow(true)
	h.tri.cause = "queue_saturation"
	h.ticks(t, 6)
	if len(h.d.Incidents()) != 1 {
		t.Fatal("no incident")
	}
	if err := h.d.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := h.d.Tick(context.Background(), h.now.Add(time.Second)); err == nil {
		t.Error("tick after shutdown succeeded")
	}
	h2, err := New(Options{Config: cfg, Metrics: h.eng.st, Scraper: h.eng, Triage: h.tri.run, Outbox: h.ob, Receivers: []string{"hook"}, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	incs := h2.Incidents()
	if len(incs) != 1 || incs[0].Status != incident.IncidentOpen || incs[0].TopCause != "queue_saturation" {
		t.Fatalf("restored incidents = %+v", incs)
	}
}

func (h *harness) do(t *testing.T, method, path, token string, body io.Reader) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, h.srv.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if method != http.MethodGet && method != http.MethodHead {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (h *harness) get(t *testing.T, path, token string, want int) string {
	t.Helper()
	code, body := h.do(t, http.MethodGet, path, token, nil)
	if code != want {
		t.Fatalf("GET %s: %d, want %d: %s", path, code, want, body)
	}
	return body
}

func alertBody(status, fp string, labels map[string]string) string {
	p := map[string]any{
		"version": "4", "groupKey": "{}:{alertname=\"HighTTFT\"}", "status": status, "receiver": "whyslow",
		"alerts": []map[string]any{{
			"status": status, "labels": labels, "annotations": map[string]string{"summary": "slow"},
			"startsAt": t0.UTC().Format(time.RFC3339), "endsAt": "0001-01-01T00:00:00Z",
			"generatorURL": "http://prometheus/graph", "fingerprint": fp,
		}},
	}
	b, _ := json.Marshal(p)
	return string(b)
}

func TestAPIAlertmanagerIntake(t *testing.T) {
	cfg := testConfig()
	cfg.API.Token = "tok"
	h := newHarness(t, cfg)
	h.ticks(t, 2)
	h.tri.cause = "queue_saturation"
	labels := map[string]string{"alertname": "HighTTFT", "model_name": "m", "pod": "p0", "severity": "critical", "instance": "x"}

	code, body := h.do(t, http.MethodPost, "/api/v1/alerts", "tok", strings.NewReader(alertBody("firing", "fp1", labels)))
	if code != http.StatusOK || !strings.Contains(body, `"processed":1`) {
		t.Fatalf("firing: %d %s", code, body)
	}
	incs := h.d.Incidents()
	if len(incs) != 1 || incs[0].Key != `model_name="m",pod="p0"` || incs[0].TopCause != "queue_saturation" || incs[0].Severity != verdict.SeverityCritical {
		t.Fatalf("incidents = %+v", incs)
	}
	if incs[0].Verdict == nil {
		t.Fatal("no verdict attached")
	}
	// The same delivery again is a duplicate and changes nothing.
	code, body = h.do(t, http.MethodPost, "/api/v1/alerts", "tok", strings.NewReader(alertBody("firing", "fp1", labels)))
	if code != http.StatusOK || !strings.Contains(body, `"duplicates":1`) {
		t.Fatalf("duplicate: %d %s", code, body)
	}
	if got := h.ob.kinds(); got != "open:queue_saturation" {
		t.Fatalf("notifications: %s", got)
	}
	// GET verdict, any matcher order.
	vb := h.get(t, `/api/v1/verdict?scope=`+url.QueryEscape(`pod="p0",model_name="m"`), "tok", http.StatusOK)
	if !strings.Contains(vb, `"queue_saturation"`) {
		t.Errorf("verdict %s", vb)
	}
	h.get(t, "/api/v1/incidents?status=open", "tok", http.StatusOK)

	code, body = h.do(t, http.MethodPost, "/api/v1/alerts", "tok", strings.NewReader(alertBody("resolved", "fp1", labels)))
	if code != http.StatusOK {
		t.Fatalf("resolved: %d %s", code, body)
	}
	incs = h.d.Incidents()
	if len(incs) != 1 || incs[0].Status != incident.IncidentResolved {
		t.Fatalf("after resolve: %+v", incs)
	}
	if got := h.ob.kinds(); got != "open:queue_saturation resolve:queue_saturation" {
		t.Fatalf("notifications: %s", got)
	}
}

func TestAPIBadInput(t *testing.T) {
	cfg := testConfig()
	cfg.API.Token = "tok"
	cfg.API.MaxBodyBytes = 4096
	h := newHarness(t, cfg)
	h.ticks(t, 2)
	labels := map[string]string{"alertname": "A", "model_name": "m"}
	good := alertBody("firing", "fp1", labels)
	tests := []struct {
		name, method, path, token, body string
		code                            int
		msg                             string
	}{
		{"no token", "POST", "/api/v1/alerts", "", good, 401, "bearer token"},
		{"wrong token", "POST", "/api/v1/alerts", "tok2", good, 401, "bearer token"},
		{"malformed json", "POST", "/api/v1/alerts", "tok", `{"version":"4",`, 400, "decode alertmanager webhook"},
		{"syntax offset", "POST", "/api/v1/alerts", "tok", `{"version":4}`, 400, "field version"},
		{"wrong version", "POST", "/api/v1/alerts", "tok", strings.Replace(good, `"version":"4"`, `"version":"3"`, 1), 400, "version:"},
		{"missing fingerprint", "POST", "/api/v1/alerts", "tok", strings.Replace(good, `"fingerprint":"fp1"`, `"fingerprint":""`, 1), 400, "alerts[0].fingerprint: missing"},
		{"oversized", "POST", "/api/v1/alerts", "tok", `{"version":"4","pad":"` + strings.Repeat("x", 5000) + `"}`, 413, "larger than 4096 bytes"},
		{"empty", "POST", "/api/v1/alerts", "tok", "", 400, "empty body"},
		{"triage unknown field", "POST", "/api/v1/triage", "tok", `{"selektor":"x"}`, 400, "unknown field"},
		{"triage bad selector", "POST", "/api/v1/triage", "tok", `{"selector":"model_name=="}`, 400, "selector:"},
		{"triage bad window", "POST", "/api/v1/triage", "tok", `{"window":"soon","at":"yesterday"}`, 400, "window:"},
		{"verdict no scope", "GET", "/api/v1/verdict", "tok", "", 400, "scope"},
		{"verdict bad scope", "GET", "/api/v1/verdict?scope=" + url.QueryEscape(`model_name==`), "tok", "", 400, "scope:"},
		{"verdict two scopes", "GET", "/api/v1/verdict?scope=a%3D%22b%22&selector=a%3D%22c%22", "tok", "", 400, "exactly one"},
		{"incidents bad status", "GET", "/api/v1/incidents?status=x", "tok", "", 400, "status"},
		{"wrong method", "GET", "/api/v1/alerts", "tok", "", 405, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader
			if tc.body != "" {
				body = strings.NewReader(tc.body)
			}
			code, got := h.do(t, tc.method, tc.path, tc.token, body)
			if code != tc.code || !strings.Contains(got, tc.msg) {
				t.Fatalf("%d %q, want %d containing %q", code, got, tc.code, tc.msg)
			}
		})
	}
	if n := len(h.d.Incidents()); n != 0 || h.ob.kinds() != "" || h.tri.runs != 0 {
		t.Fatalf("bad input changed state: %d incidents, notifications %q, %d triage runs", n, h.ob.kinds(), h.tri.runs)
	}
	// The daemon keeps serving.
	h.get(t, "/healthz", "", http.StatusOK)
	code, got := h.do(t, http.MethodPost, "/api/v1/triage", "tok", bytes.NewBufferString(`{"selector":"model_name=\"m\"","window":"1m","baseline":"10m"}`))
	if code != http.StatusOK || !strings.Contains(got, `"schema_version":2`) {
		t.Fatalf("triage: %d %s", code, got)
	}
}

func TestReloadAllOrNothing(t *testing.T) {
	h := newHarness(t, testConfig())
	bad := testConfig()
	bad.Detect.Triggers = []detect.Trigger{{Name: "x", Signal: "nope", Ratio: 2}}
	bad.API.Token = "new"
	if err := h.d.Reload(bad, nil, nil); err == nil {
		t.Fatal("bad reload accepted")
	}
	if h.d.Config().API.Token != "" {
		t.Fatal("a failed reload changed the token")
	}
	good := testConfig()
	good.API.Token = "new"
	if err := h.d.Reload(good, nil, []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	if h.d.Config().API.Token != "new" {
		t.Fatal("reload did not apply")
	}
}

func TestSimClock(t *testing.T) {
	c := NewSimClock(t0)
	done := make(chan error, 1)
	go func() { done <- c.Sleep(context.Background(), time.Minute) }()
	for i := 0; i < 1000; i++ {
		c.mu.Lock()
		n := len(c.waiters)
		c.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	c.Advance(30 * time.Second)
	select {
	case <-done:
		t.Fatal("woke early")
	default:
	}
	c.Advance(30 * time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Sleep(ctx, time.Hour); err == nil {
		t.Fatal("sleep ignored a cancelled context")
	}
}

func TestDaemonTriageGetsConfiguredEngineFacts(t *testing.T) {
	on := true
	tests := []struct {
		name      string
		sched     SchedulerConfig
		class     string
		want      rules.Scheduler
		gpu, from string
	}{
		{name: "unknown", want: rules.Scheduler{}},
		{name: "configured", sched: SchedulerConfig{ChunkedPrefill: &on, MaxNumBatchedTokens: 2048, MaxNumSeqs: 256}, class: "H100",
			want: rules.Scheduler{Known: true, ChunkedPrefill: true, MaxNumBatchedTokens: 2048, MaxNumSeqs: 256, Source: "config"}, gpu: "H100", from: "config"},
		{name: "budget only", sched: SchedulerConfig{MaxNumBatchedTokens: 8192},
			want: rules.Scheduler{Known: true, MaxNumBatchedTokens: 8192, Source: "config"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.Scheduler, cfg.GPU.Class = tt.sched, tt.class
			h := newHarness(t, cfg)
			h.ticks(t, 15*12)
			h.eng.setSlow(true)
			h.tri.cause = "chunked_prefill_mismatch"
			for i := 0; i < 10 && h.tri.runs == 0; i++ {
				h.ticks(t, 1)
			}
			if _, err := h.d.TriageNow(context.Background(), "api", "", 0); err != nil {
				t.Fatal(err)
			}
			h.tri.mu.Lock()
			defer h.tri.mu.Unlock()
			if h.tri.runs < 2 {
				t.Fatalf("triage ran %d times", h.tri.runs)
			}
			if got := h.tri.last; got.Scheduler != tt.want || got.GPU != tt.gpu || got.GPUSource != tt.from {
				t.Errorf("triage request scheduler %+v gpu %q (%q), want %+v %q (%q)", got.Scheduler, got.GPU, got.GPUSource, tt.want, tt.gpu, tt.from)
			}
		})
	}
}

func TestIncidentWindow(t *testing.T) {
	cfg := Config{}.WithDefaults()
	tests := []struct {
		age, want time.Duration
	}{
		{-time.Second, cfg.Detect.ShortWindow},
		{0, cfg.Detect.ShortWindow},
		{time.Minute, cfg.Detect.ShortWindow + time.Minute},
		{time.Hour, cfg.Triage.Window},
	}
	for _, tt := range tests {
		t.Run(tt.age.String(), func(t *testing.T) {
			if got := IncidentWindow(cfg, tt.age); got != tt.want {
				t.Errorf("IncidentWindow(%s) = %s, want %s", tt.age, got, tt.want)
			}
		})
	}
}
