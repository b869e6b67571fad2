package daemon

import (
	"bytes"
	"context"
	"fmt"
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
	"github.com/whyslow/whyslow/notifiers/render"
	"github.com/whyslow/whyslow/verdict"
)

// freshConfig is testConfig with the default 1h baselines: a sidecar that
// has less history than its baseline.
func freshConfig() Config {
	cfg := testConfig()
	cfg.Detect.Baseline = 0
	cfg.Triage.Baseline = 0
	return cfg
}

// TestDaemonFreshSidecarUsesItsHistory: 15 minutes after a fresh start
// with the default 1h baselines, a TTFT regression opens an incident (the
// ratio trigger compares with the history there is), the triage's baseline
// shrinks to that history, and the verdict says so.
func TestDaemonFreshSidecarUsesItsHistory(t *testing.T) {
	cfg := freshConfig()
	cfg.DataDir = t.TempDir()
	h := newHarness(t, cfg)
	first := h.now.Add(5 * time.Second)
	h.ticks(t, 15*12)
	h.eng.setSlow(true)
	h.tri.cause = "prefill_contention"
	h.ticks(t, 6)
	incs := h.d.Incidents()
	if len(incs) != 1 || incs[0].Notified.Count == 0 {
		t.Fatalf("no incident opened 15 minutes into a fresh sidecar: %+v", incs)
	}
	h.tri.mu.Lock()
	last := h.tri.last
	h.tri.mu.Unlock()
	history := last.At.Sub(first)
	if want := (history - last.Window).Truncate(time.Minute); last.Baseline != want {
		t.Errorf("triage baseline %s, want the history %s less the window %s", last.Baseline, history, last.Window)
	}
	v := incs[0].Verdict
	if v == nil || !hasWarning(v, "baseline "+strings.TrimSuffix(last.Baseline.String(), "0s")) || !hasWarning(v, "(learning: 15 of 60 minutes of history)") {
		t.Errorf("verdict warnings %q lack the shortened baseline", warnings(v))
	}
	// A restart with the data dir keeps the history (the TSDB has it).
	if err := h.d.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	d2, err := New(Options{Config: cfg, Metrics: h.eng.st, Scraper: h.eng, Triage: h.tri.run, Outbox: h.ob, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if got := d2.HistorySince(); !got.Equal(first) {
		t.Errorf("restored history starts %s, want %s", got, first)
	}
}

// TestDaemonLearningBaseline: with less than MinHistory (4 minutes) of
// history an absolute trigger still opens the incident, the ratio trigger
// does not, the triage gets no shortened baseline, and the verdict says it
// is learning.
func TestDaemonLearningBaseline(t *testing.T) {
	cfg := freshConfig()
	cfg.Detect.Triggers = []detect.Trigger{{Name: "ttft_abs", Signal: detect.SignalTTFTP95, Above: ptrTo(0.2)},
		{Name: "ttft_ratio", Signal: detect.SignalTTFTP95, Ratio: 2}}
	h := newHarness(t, cfg)
	h.ticks(t, 1*12)
	h.eng.setSlow(true)
	h.tri.cause = "queue_saturation"
	h.ticks(t, 2*12)
	incs := h.d.Incidents()
	if len(incs) != 1 || incs[0].Notified.Count == 0 {
		t.Fatalf("absolute trigger did not open an incident 3 minutes in: %+v", incs)
	}
	if got := strings.Join(incs[0].Triggers, ","); got != "ttft_abs" {
		t.Errorf("firing triggers %q, want only the absolute one", got)
	}
	h.tri.mu.Lock()
	last := h.tri.last
	h.tri.mu.Unlock()
	if last.Baseline != time.Hour {
		t.Errorf("learning triage baseline %s, want the configured 1h (nothing to shorten to)", last.Baseline)
	}
	if !hasWarning(incs[0].Verdict, "learning the baseline (2 of 60 minutes): less than 4 minutes of history") {
		t.Errorf("verdict warnings %q", warnings(incs[0].Verdict))
	}
}

// TestDaemonMinutesAfterRestart: a TTFT regression six minutes after a
// fresh start (the default 1h baselines) opens an incident within a
// minute on the ratio trigger, compared with the history there is; the
// triage's baseline shrinks to it and the verdict, as notified and as
// rendered, says so.
func TestDaemonMinutesAfterRestart(t *testing.T) {
	cfg := freshConfig()
	cfg.Detect.Triggers = []detect.Trigger{detect.DefaultTriggers()[0]} // ttft_p95: ratio 2, at least 20 requests
	h := newHarness(t, cfg)
	first := h.now.Add(5 * time.Second)
	h.ticks(t, 6*12)
	h.eng.setSlow(true)
	h.tri.cause = "prefill_contention"
	opened := 0
	for i := 1; i <= 12 && opened == 0; i++ {
		h.ticks(t, 1)
		if incs := h.d.Incidents(); len(incs) > 0 && incs[0].Notified.Count > 0 {
			opened = i
		}
	}
	if opened == 0 {
		t.Fatalf("no incident within a minute of a slowdown 6 minutes after the start: %+v", h.d.Incidents())
	}
	t.Logf("opened %s after the slowdown", time.Duration(opened)*5*time.Second)
	in := h.d.Incidents()[0]
	if got := strings.Join(in.Triggers, ","); got != "ttft_p95" {
		t.Errorf("firing triggers %q, want ttft_p95", got)
	}
	h.tri.mu.Lock()
	last := h.tri.last
	h.tri.mu.Unlock()
	history := last.At.Sub(first)
	if want := (history - last.Window).Truncate(time.Minute); last.Baseline != want || want <= 0 {
		t.Errorf("triage baseline %s, want the history %s less the window %s", last.Baseline, history, last.Window)
	}
	note := fmt.Sprintf("baseline %s (learning: %d of 60 minutes of history)",
		strings.TrimSuffix(last.Baseline.String(), "0s"), int(history/time.Minute))
	if !hasWarning(in.Verdict, note) {
		t.Errorf("verdict warnings %q lack %q", warnings(in.Verdict), note)
	}
	t.Logf("verdict warns %q", warnings(in.Verdict))
	ns := h.ob.notifications()
	if len(ns) == 0 {
		t.Fatal("nothing notified")
	}
	var text bytes.Buffer
	if err := render.Render(&text, ns[0].Verdict, render.FormatText, render.Options{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), note) {
		t.Errorf("notified verdict's text lacks %q:\n%s", note, text.String())
	}
}

func ptrTo[T any](v T) *T { return &v }

func hasWarning(v *verdict.Verdict, sub string) bool {
	for _, w := range warnings(v) {
		if strings.Contains(w, sub) {
			return true
		}
	}
	return false
}

func warnings(v *verdict.Verdict) []string {
	if v == nil {
		return nil
	}
	return v.Warnings
}

// TestDaemonTopCauseFollowsVerdict: the incident's top_cause and the
// whyslow_incident_top_cause gauge follow the latest verdict, also when it
// dropped the first cause.
func TestDaemonTopCauseFollowsVerdict(t *testing.T) {
	h := newHarness(t, testConfig())
	h.ticks(t, 15*12)
	h.eng.setSlow(true)
	h.tri.cause = "kv_cache_pressure"
	h.ticks(t, 6)
	h.tri.mu.Lock()
	h.tri.cause = "queue_saturation"
	h.tri.mu.Unlock()
	h.ticks(t, 2)
	if in := h.d.Incidents()[0]; in.TopCause != "queue_saturation" || in.Notified.Cause != "kv_cache_pressure" {
		t.Errorf("top_cause %q (notified %q), want the latest verdict's", in.TopCause, in.Notified.Cause)
	}
	h.tri.mu.Lock()
	h.tri.cause = ""
	h.tri.mu.Unlock()
	h.ticks(t, 2)
	in := h.d.Incidents()[0]
	if in.Status != incident.IncidentOpen || in.TopCause != "" {
		t.Errorf("incident %s top_cause %q after a verdict without a cause", in.Status, in.TopCause)
	}
	body := h.get(t, "/metrics", "", http.StatusOK)
	if strings.Contains(body, `cause="kv_cache_pressure"`) || strings.Contains(body, `cause="queue_saturation"`) ||
		!strings.Contains(body, `whyslow_incident_top_cause{cause="unknown"`) {
		t.Errorf("top cause gauge does not follow the verdict:\n%s", grepLines(body, "whyslow_incident_top_cause"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// twoEngines is a harness whose daemon scrapes two engines serving models
// a and b into one store.
func twoEngines(t *testing.T, cfg Config) (*harness, *synthEngine, *synthEngine) {
	t.Helper()
	var a, b *synthEngine
	h := newHarnessWith(t, cfg, func(o *Options) {
		st := o.Metrics.(*store.Store)
		a = &synthEngine{st: st, model: "a", pod: "pa", target: "engine-a"}
		b = &synthEngine{st: st, model: "b", pod: "pb", target: "engine-b"}
		o.Scraper = multiScraper{a, b}
	})
	return h, a, b
}

// TestDaemonStoppedEngineIncidentResolves: the engine of an open incident
// stops; while its target stays down the incident resolves (with a reason
// saying its data is gone) instead of staying open forever.
func TestDaemonStoppedEngineIncidentResolves(t *testing.T) {
	h, a, _ := twoEngines(t, testConfig())
	h.ticks(t, 15*12)
	a.setSlow(true)
	h.tri.cause = "kv_cache_pressure"
	h.ticks(t, 6)
	incs := h.d.Incidents()
	if len(incs) != 1 || incs[0].Key != `model_name="a"` || incs[0].Notified.Count == 0 {
		t.Fatalf("incidents %+v", incs)
	}
	a.setDown(true)
	h.ticks(t, 10*12)
	incs = h.d.Incidents()
	if len(incs) != 1 || incs[0].Status != incident.IncidentResolved {
		t.Fatalf("incident of the stopped engine is %s after 10 minutes", incs[0].Status)
	}
	if r := incs[0].ResolveReason; !strings.Contains(r, "engine-a down since") || incs[0].Condition.Reason != "DataGone" {
		t.Errorf("resolve reason %q, condition %+v", r, incs[0].Condition)
	}
	if got := h.ob.kinds(); got != "open:kv_cache_pressure resolve:kv_cache_pressure" {
		t.Errorf("notifications %s", got)
	}
}

// TestAPIVerdictOnDemand: a scope without an incident is triaged when its
// verdict is asked for, by ?scope= or ?selector=.
func TestAPIVerdictOnDemand(t *testing.T) {
	h := newHarness(t, testConfig())
	h.ticks(t, 3)
	for _, q := range []string{"scope=", "selector="} {
		body := h.get(t, "/api/v1/verdict?"+q+url.QueryEscape(`model_name="m"`), "", http.StatusOK)
		if !strings.Contains(body, `"selector":"model_name=\"m\""`) {
			t.Errorf("%s: verdict %s", q, body)
		}
	}
	if h.tri.runs != 2 {
		t.Errorf("%d triage runs, want 2", h.tri.runs)
	}
	if len(h.d.Incidents()) != 0 {
		t.Error("an on-demand verdict opened an incident")
	}
}

// TestDaemonGroupsByModel: two models behind one daemon are two scopes (the
// slow one opens its own incident); a triage of a scope that still holds
// both says so in a warning.
func TestDaemonGroupsByModel(t *testing.T) {
	h, a, _ := twoEngines(t, testConfig())
	h.ticks(t, 15*12)
	a.setSlow(true)
	h.tri.cause = "load_imbalance"
	h.ticks(t, 6)
	incs := h.d.Incidents()
	if len(incs) != 1 || incs[0].Key != `model_name="a"` {
		t.Fatalf("incidents %+v, want one for model a", incs)
	}
	if hasWarning(incs[0].Verdict, "mixes") {
		t.Errorf("one-model scope flagged: %q", warnings(incs[0].Verdict))
	}
	for _, path := range []string{"/api/v1/verdict?scope=", "/api/v1/verdict?scope=" + url.QueryEscape(`pod=~"pa|pb"`)} {
		body := h.get(t, path, "", http.StatusOK)
		if !strings.Contains(body, "mixes 2 models (a, b)") {
			t.Errorf("%s: verdict does not flag the mixed scope: %s", path, body)
		}
	}
}

// notifications returns what the outbox took, in order.
func (o *memOutbox) notifications() []*notifiers.Notification {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]*notifiers.Notification(nil), o.all...)
}

// servingEngine is a synthEngine that also exports the series an engine is
// recognised by (vllm:num_requests_running and the e2e count), so the real
// triage reads it as vLLM.
type servingEngine struct{ *synthEngine }

func (e servingEngine) Scrape(ctx context.Context, at time.Time) []ScrapeResult {
	res := e.synthEngine.Scrape(ctx, at)
	if len(res) == 0 || res[0].Err != nil {
		return res
	}
	e.mu.Lock()
	n := e.n + e.s
	e.mu.Unlock()
	app := e.st.Appender(ctx)
	ts := at.UnixMilli()
	for name, v := range map[string]float64{"vllm:num_requests_running": 4, "vllm:e2e_request_latency_seconds_count": n} {
		if _, err := app.Append(0, labels.FromStrings("__name__", name, "model_name", "m", "pod", "p0"), ts, v); err != nil {
			panic(err)
		}
	}
	if err := app.Commit(); err != nil {
		panic(err)
	}
	return res
}

// TestDaemonFirstIncidentSaysLearning is finding 1 of issue 25: a daemon
// started 20 s before an incident paged "the incident window lies outside
// the scope's data, which runs from 21:29:11 to 21:29:11: give an --at
// inside that range". Now, with the real triage, its first notification
// opens with the learning state, its reason is learning_baseline with no
// CLI flag, and the baseline window's gaps are one line.
func TestDaemonFirstIncidentSaysLearning(t *testing.T) {
	cfg := freshConfig()
	cfg.Triage.Window = 0 // the default 5m
	cfg.Detect.Triggers = []detect.Trigger{{Name: "ttft_abs", Signal: detect.SignalTTFTP95, Above: ptrTo(0.2)}}
	h := newHarnessWith(t, cfg, func(o *Options) {
		tri, err := TriageWith(o.Metrics, nil, nil, "auto")
		if err != nil {
			t.Fatal(err)
		}
		o.Triage = tri
		o.Scraper = servingEngine{o.Scraper.(*synthEngine)}
	})
	h.ticks(t, 4) // 20 s
	h.eng.setSlow(true)
	for i := 0; i < 24 && len(h.ob.notifications()) == 0; i++ {
		h.ticks(t, 1)
	}
	ns := h.ob.notifications()
	if len(ns) == 0 {
		t.Fatalf("no notification within 2 minutes of the incident: %+v", h.d.Incidents())
	}
	v := ns[0].Verdict
	if v.Learning == nil || !strings.HasPrefix(v.Learning.Message, "learning the baseline (") {
		t.Fatalf("first notification's verdict has no learning state: %+v", v.Learning)
	}
	if r := v.InsufficientReason; r != nil && r.Code == verdict.InsufficientOutsideData {
		t.Errorf("reason %s: %s", r.Code, r.Message)
	}
	if r := v.InsufficientReason; r != nil && r.Code != verdict.InsufficientLearning {
		t.Errorf("reason %s, want %s: %s", r.Code, verdict.InsufficientLearning, r.Message)
	}
	var text bytes.Buffer
	if err := render.Render(&text, v, render.FormatText, render.Options{}); err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(text.String(), "\n")
	if !strings.HasPrefix(first, "learning the baseline (") {
		t.Errorf("first line %q, want the learning state first", first)
	}
	if r := v.InsufficientReason; r != nil && strings.Contains(r.Message, "--") {
		t.Errorf("daemon advice names a CLI flag: %s", r.Message)
	}
	if n := strings.Count(text.String(), "(baseline window)"); n > 1 {
		t.Errorf("%d baseline-window gaps while learning, want one:\n%s", n, text.String())
	}
	// The page's verdict heading opens with it too.
	id := url.PathEscape(h.d.Incidents()[0].ID)
	resp, page := pageReq(t, h, "GET", "/incidents/"+id, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(page, `<h2 id="verdict-h">learning the baseline (`) {
		t.Errorf("incident page %d lacks the learning state in its verdict heading", resp.StatusCode)
	}
	t.Logf("first notification:\n%s", text.String())
}

// otherMetrics is a target that answers with series of no known engine (a
// node exporter, the API gateway's /metrics).
type otherMetrics struct{ st *store.Store }

func (o otherMetrics) Scrape(ctx context.Context, at time.Time) []ScrapeResult {
	app := o.st.Appender(ctx)
	if _, err := app.Append(0, labels.FromStrings("__name__", "node_load1", "instance", "gw"), at.UnixMilli(), 1); err != nil {
		panic(err)
	}
	if err := app.Commit(); err != nil {
		panic(err)
	}
	return []ScrapeResult{{Target: "gw", Samples: 1}}
}

// switchScraper scrapes one of two scrapers (a target fixed in place).
type switchScraper struct {
	mu        sync.Mutex
	now, next Scraper
}

func (s *switchScraper) Scrape(ctx context.Context, at time.Time) []ScrapeResult {
	s.mu.Lock()
	sc := s.now
	s.mu.Unlock()
	return sc.Scrape(ctx, at)
}

// lockedBuffer is a log sink tests read while the daemon writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// TestDaemonBlindIsNotReady is finding 2 of issue 25: a daemon pointed at
// a /metrics without engine series was ready (/readyz 200, scrapes
// succeeding) and said nothing. Within 2 scrape intervals it is not ready,
// says why with the fix, logs it once however long it lasts, and counts
// the engine series; once the engine is there it is ready again.
func TestDaemonBlindIsNotReady(t *testing.T) {
	logs := &lockedBuffer{}
	var sw *switchScraper
	h := newHarnessWith(t, testConfig(), func(o *Options) {
		st := o.Metrics.(*store.Store)
		sw = &switchScraper{now: otherMetrics{st}, next: o.Scraper}
		o.Scraper = sw
		o.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	h.ticks(t, 2)
	body := h.get(t, "/readyz", "", http.StatusServiceUnavailable)
	if !strings.Contains(body, "no series of a known engine") || !strings.Contains(body, "engine_urls") {
		t.Errorf("readyz body %q, want the problem and its fix", body)
	}
	if m := h.get(t, "/metrics", "", http.StatusOK); !strings.Contains(m, "whyslow_engine_series_found 0") || !strings.Contains(m, "whyslow_ready 0") {
		t.Errorf("metrics:\n%s", grepLines(m, "whyslow_engine_series_found")+grepLines(m, "whyslow_ready"))
	}
	h.ticks(t, 20)
	if n := strings.Count(logs.String(), "No engine series found"); n != 1 {
		t.Errorf("logged %d times over 22 cycles, want once:\n%s", n, logs.String())
	}
	sw.mu.Lock()
	sw.now = sw.next
	sw.mu.Unlock()
	h.ticks(t, 1)
	h.get(t, "/readyz", "", http.StatusOK)
	if n := strings.Count(logs.String(), "Engine series found"); n != 1 {
		t.Errorf("recovery logged %d times, want once", n)
	}
	if m := h.get(t, "/metrics", "", http.StatusOK); strings.Contains(m, "whyslow_engine_series_found 0") {
		t.Errorf("metrics:\n%s", grepLines(m, "whyslow_engine_series_found"))
	}
}

// TestStackNonEngineMetricsNotReady is TestDaemonBlindIsNotReady through
// the real scrape: a /metrics with no engine series (a node exporter's)
// scrapes fine (whyslow_scrape_success 1) and leaves the daemon not ready
// within 2 scrape intervals, said once in the log.
func TestStackNonEngineMetricsNotReady(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = io.WriteString(w, "# TYPE node_load1 gauge\nnode_load1 0.5\n# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 12\n")
	}))
	t.Cleanup(srv.Close)
	logs := &lockedBuffer{}
	clock := NewSimClock(t0)
	enabled := false
	cfg := stackConfig(srv.URL + "/metrics")
	cfg.GPU.Enabled = &enabled
	s := newTestStack(t, StackOptions{Config: cfg, Clock: clock, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	tickStack(t, s, clock, 2)
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/readyz", nil)
	req.Host = "127.0.0.1"
	s.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "no series of a known engine") {
		t.Errorf("/readyz after 2 scrapes of a non-engine /metrics: %d %q", rec.Code, rec.Body.String())
	}
	body := getBody(t, s.Handler(), "/metrics")
	for _, want := range []string{`whyslow_scrape_success{target="` + srv.URL + `/metrics"} 1`, "whyslow_engine_series_found 0", "whyslow_ready 0"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	tickStack(t, s, clock, 10)
	if n := strings.Count(logs.String(), "No engine series found"); n != 1 {
		t.Errorf("logged %d times in 12 scrapes, want once:\n%s", n, logs.String())
	}
}
