package daemon

import (
	"context"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/whyslow/whyslow/collectors/store"
	"github.com/whyslow/whyslow/incident"
)

func TestFleetConfig(t *testing.T) {
	cfg := Config{Source: SourceConfig{Prometheus: &PrometheusSource{URL: "http://prometheus:9090"}}}.WithDefaults()
	if !cfg.Fleet() || cfg.Engine != "auto" || cfg.ScrapeInterval != DefaultFleetInterval || cfg.GPU.On() ||
		len(cfg.EngineURLs) != 0 || cfg.Triage.CycleBudget != DefaultFleetInterval || cfg.Source.Prometheus.Timeout == 0 {
		t.Errorf("fleet defaults: %+v", cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("fleet defaults invalid: %v", err)
	}
	if c := (Config{}).WithDefaults(); c.Fleet() || c.Engine != DefaultEngine || c.ScrapeInterval != DefaultScrapeInterval {
		t.Errorf("sidecar defaults changed: %+v", c)
	}
	on := true
	for _, tc := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.Source.Prometheus.URL = "prometheus:9090" }, `source.prometheus.url: "prometheus:9090" is not an http(s) URL`},
		{func(c *Config) { c.EngineURLs = []string{"http://127.0.0.1:8000/metrics"} }, "engine_urls: not used with source.prometheus"},
		{func(c *Config) { c.GPU.Enabled = &on }, "gpu.enabled: not available with source.prometheus"},
		{func(c *Config) {
			c.Source.Prometheus.BearerToken = "t"
			c.Source.Prometheus.BasicAuth = &BasicAuth{Username: "u"}
		}, "bearer_token and basic_auth are exclusive"},
		{func(c *Config) { c.Source.Prometheus.Headers = map[string]string{"X Bad": "v"} }, `invalid header name "X Bad"`},
		{func(c *Config) { c.Triage.Concurrency = -1 }, "triage: concurrency and cycle_budget must not be negative"},
		{func(c *Config) { c.Engine = "lmdeploy" }, `unknown engine "lmdeploy" (want auto, vllm, sglang, trtllm or tgi)`},
	} {
		c := Config{Source: SourceConfig{Prometheus: &PrometheusSource{URL: "http://prometheus:9090"}}}
		tc.edit(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("want %q, got %v", tc.want, err)
		}
	}
	s := ConfigSecrets(Config{Source: SourceConfig{Prometheus: &PrometheusSource{URL: "http://u:s3cretpw@p:9090",
		BearerToken: "tok3n", Headers: map[string]string{"X-Scope-OrgID": "tenant-secret"}}}})
	if got := s.Scrub("get http://u:s3cretpw@p:9090/api: tok3n tenant-secret"); strings.Contains(got, "tok3n") || strings.Contains(got, "tenant-secret") || strings.Contains(got, "s3cretpw") {
		t.Errorf("source secrets not scrubbed: %q", got)
	}
}

// TestTriageOpenConcurrentWithinBudget: the detector's triages of open
// incidents run at most triage.concurrency at once; those the cycle budget
// leaves out are counted and go first in the next cycle.
func TestTriageOpenConcurrentWithinBudget(t *testing.T) {
	st, err := store.Open(store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var engines multiScraper
	for _, m := range []string{"a", "b", "c", "d", "e"} {
		engines = append(engines, &synthEngine{st: st, model: m, pod: "p-" + m})
	}
	cfg := testConfig()
	cfg.Triage.Concurrency = 2
	cfg.Triage.CycleBudget = time.Hour
	tri := &fakeTriage{cause: "queue_saturation"}
	var running, peak, calls atomic.Int32
	var mu sync.Mutex
	var order []string
	var stall atomic.Bool // the third and later triages of a cycle wait for its budget to end
	tri.hook = func(ctx context.Context, req TriageRequest) error {
		n := running.Add(1)
		defer running.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		mu.Lock()
		order = append(order, req.Selector)
		mu.Unlock()
		if stall.Load() && calls.Add(1) > 2 {
			<-ctx.Done()
			return ctx.Err()
		}
		time.Sleep(time.Millisecond) // long enough for the other slot to fill
		return nil
	}
	now := t0
	d, err := New(Options{Config: cfg, Metrics: st, Scraper: engines, Triage: tri.run, Outbox: &memOutbox{},
		Receivers: []string{"hook"}, Now: func() time.Time { return now }, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	tick := func() {
		t.Helper()
		now = now.Add(5 * time.Second)
		if err := d.Tick(context.Background(), now); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 130; i++ { // the baseline (10m) and then some
		tick()
	}
	for _, e := range engines {
		e.(*synthEngine).setSlow(true)
	}
	for i := 0; i < 6; i++ {
		tick()
	}
	open := 0
	for _, in := range d.Incidents() {
		if in.Status == incident.IncidentOpen {
			open++
		}
	}
	if open != 5 {
		t.Fatalf("%d open incidents, want 5", open)
	}
	if p := peak.Load(); p != 2 {
		t.Errorf("peak concurrent triages %d, want triage.concurrency 2", p)
	}

	// A budget that runs out: the first two triages return, the next two
	// (in the freed slots) wait for the budget's end, the last is not
	// started. The next cycle starts with those left out.
	cfg.Triage.CycleBudget = 200 * time.Millisecond
	if err := d.Reload(cfg, nil, nil); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	order = nil
	mu.Unlock()
	stall.Store(true)
	tick()
	stall.Store(false)
	mu.Lock()
	first := append([]string(nil), order...)
	order = nil
	mu.Unlock()
	if skipped := testutil.ToFloat64(d.stats.triageRefused.WithLabelValues("detector", "cycle_budget")); len(first) != 4 || skipped != 1 {
		t.Fatalf("with a spent budget %d triages started (%v) and %v were skipped, want 4 and 1", len(first), first, skipped)
	}
	tick()
	mu.Lock()
	second := append([]string(nil), order...)
	mu.Unlock()
	// The first two a cycle records are the first two it dispatched (a
	// third starts only when one of them has returned).
	if len(second) != 5 || slices.Contains(second[:2], first[0]) || slices.Contains(second[:2], first[1]) {
		t.Errorf("next cycle's order %v; the spent cycle completed %v: the others must go first", second, first[:2])
	}
}

// TestOpenIncidentMetric: whyslow_incident_open carries the scope's labels,
// the top cause, the severity, the incident's id and, with
// api.external_url, its verdict page (issue 25: the dashboard links each
// incident to it).
func TestOpenIncidentMetric(t *testing.T) {
	cfg := testConfig()
	cfg.API.ExternalURL = "https://ops.example/whyslow/"
	h := newHarness(t, cfg)
	h.ticks(t, 130)
	h.tri.cause = "kv_cache_pressure"
	h.eng.setSlow(true)
	h.ticks(t, 4)
	got := h.get(t, "/metrics", "", 200)
	incs := h.d.Incidents()
	if len(incs) != 1 {
		t.Fatalf("%d incidents, want 1", len(incs))
	}
	link := "https://ops.example/whyslow/verdict?scope=" + url.QueryEscape(incs[0].Scope.Selector)
	want := `whyslow_incident_open{cause="kv_cache_pressure",incident_id="` + strings.ReplaceAll(incs[0].ID, `"`, `\"`) + `",model_name="m",severity="warning",verdict_url="` + link + `"} 1`
	if !strings.Contains(got, want) {
		t.Errorf("/metrics lacks %s:\n%s", want, grepLines(got, "whyslow_incident_open"))
	}
	for _, name := range []string{"whyslow_fleet_scopes 1", "whyslow_fleet_scopes_violating 1", "whyslow_cycle_duration_seconds_count", "whyslow_cycle_queries"} {
		if !strings.Contains(got, name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
}

// TestIntakeIgnoresOwnAlerts: an Alertmanager that routes whyslow's own
// WhyslowVerdict alerts back to the intake opens no incident about them.
func TestIntakeIgnoresOwnAlerts(t *testing.T) {
	h := newHarness(t, testConfig())
	h.ticks(t, 2)
	h.tri.cause = "queue_saturation"
	own := map[string]string{"alertname": "WhyslowVerdict", "model_name": "m", "severity": "warning"}
	code, body := h.do(t, "POST", "/api/v1/alerts", "", strings.NewReader(alertBody("firing", "fp-own", own)))
	if code != 200 || !strings.Contains(body, `"own":1`) || !strings.Contains(body, `"processed":0`) {
		t.Fatalf("own alert: %d %s", code, body)
	}
	if incs := h.d.Incidents(); len(incs) != 0 {
		t.Errorf("whyslow's own alert opened incidents: %+v", incs)
	}
	if got := h.ob.kinds(); got != "" {
		t.Errorf("notifications: %q", got)
	}
}
