package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/whyslow/whyslow/collectors/scrape"
	"github.com/whyslow/whyslow/collectors/store"
	"github.com/whyslow/whyslow/diagnose"
	"github.com/whyslow/whyslow/testbed/promtest"
	"github.com/whyslow/whyslow/testbed/sim"
	"github.com/whyslow/whyslow/verdict"
)

// TestWhyPrometheusMatchesEmbedded runs the engine model live (sped up),
// has a real Prometheus and whyslow's embedded scraper scrape the same
// replicas every second, and checks that `why --prometheus` and the
// embedded store give the same verdict for the same windows.
//
// Time: the model runs at speed simulated seconds per real second, and both
// Prometheus and the embedded scraper stamp samples with the wall clock, so
// one real second of samples holds speed seconds of the model. The windows
// are given in wall-clock time: a 10 s window covers 2.5 simulated minutes
// and holds ten scrapes, so a scraper starved for a few seconds on a busy
// machine still leaves the two samples a rate needs.
// Rates come out speed times larger than the model's; both paths see the
// same scaling, and ratios, quantiles and means are unaffected.
func TestWhyPrometheusMatchesEmbedded(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Prometheus and runs for about 35 s; skipped with -short")
	}
	promtest.SkipUnlessAvailable(t)
	const (
		scenario = "gpu_throttle"
		cause    = "gpu_throttling"
		speed    = 15.0             // simulated seconds per real second
		lead     = 4 * time.Minute  // simulated time between the clock start and the onset
		window   = 10 * time.Second // wall clock: 150 simulated seconds
		baseline = 16 * time.Second // wall clock: the baseline window ends 4 simulated minutes before at
		after    = 12 * time.Second // wall clock from the onset to at: 3 simulated minutes
	)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	live, err := sim.NewLive(sim.Options{Scenario: scenario, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Warm up to shortly before the onset, instantly.
	live.Advance(live.Onset().Sub(live.Now()) - lead)

	var targets, urls []string
	for i := range live.Replicas() {
		srv := httptest.NewServer(live.Handler(i))
		t.Cleanup(srv.Close)
		targets = append(targets, strings.TrimPrefix(srv.URL, "http://"))
		urls = append(urls, srv.URL+"/metrics")
	}

	promURL := promtest.Start(ctx, t, targets)
	// Prometheus applies its scrape config a few seconds after it is ready:
	// wait for its first scrape of every target before starting the clock.
	promtest.WaitScraped(ctx, t, promURL, len(targets))

	// The embedded path: the same targets, the same interval, the same job.
	st, err := store.Open(store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sc, err := scrape.New(st, scrape.Options{Job: "engine", Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stopRun := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stopRun(); wg.Wait() }()
	wg.Add(2)
	go func() {
		defer wg.Done()
		(&scrape.Loop{Scraper: sc, Targets: urls, Interval: time.Second}).Run(runCtx)
	}()

	// Start the model's clock: the onset comes lead/speed from now.
	t0 := time.Now()
	go func() {
		defer wg.Done()
		advanceReal(runCtx, live, speed, 75*time.Second)
	}()
	onset := t0.Add(time.Duration(float64(lead) / speed))
	at := onset.Add(after).Truncate(time.Second)
	// Let both scrapers store the samples up to at, then a little more.
	select {
	case <-time.After(time.Until(at.Add(2 * time.Second))):
	case <-ctx.Done():
		t.Fatal("timed out waiting for the incident")
	}
	t.Logf("model at %s (onset %s); triaging at %s, window %s, baseline offset %s (wall clock)",
		live.Now().Format(time.TimeOnly), live.Onset().Format(time.TimeOnly), at.Format(time.TimeOnly), window, baseline)

	// The Prometheus path, through the CLI.
	r := runCLI(t, "why", "--prometheus", promURL, "--engine", "vllm", "--output", "json", "--timeout", "10s",
		"--at", at.Format(time.RFC3339), "--window", window.String(), "--baseline", baseline.String())
	if r.code == exitFailed {
		t.Fatalf("why --prometheus: exit 2: %s", r.stderr)
	}
	var promV verdict.Verdict
	if err := json.Unmarshal([]byte(r.stdout), &promV); err != nil {
		t.Fatalf("why --prometheus: %v\n%s", err, r.stdout)
	}

	// The embedded path, with the same options.
	opts := diagnose.Options{Metrics: st, Engine: "vllm", At: at, Window: window, Baseline: baseline}
	if err := shippedRulesets(&opts); err != nil {
		t.Fatal(err)
	}
	embV, err := diagnose.Run(ctx, opts)
	if err != nil {
		t.Fatalf("embedded triage: %v", err)
	}

	top := func(v *verdict.Verdict) string {
		if len(v.Causes) == 0 {
			return "none"
		}
		return v.Causes[0].ID
	}
	t.Logf("prometheus: %s, top %s, causes %v, gaps %v", promV.Status, top(&promV), causeIDs(&promV), promV.DataGaps)
	t.Logf("embedded:   %s, top %s, causes %v, gaps %v", embV.Status, top(embV), causeIDs(embV), embV.DataGaps)
	if promV.Status != embV.Status || top(&promV) != top(embV) {
		t.Errorf("prometheus says %s/%s, embedded says %s/%s", promV.Status, top(&promV), embV.Status, top(embV))
	}
	if top(&promV) != cause {
		t.Errorf("prometheus path: top cause %s, want the injected %s", top(&promV), cause)
	}
	if r.code != exitCause {
		t.Errorf("why --prometheus: exit %d, want %d", r.code, exitCause)
	}
}

func causeIDs(v *verdict.Verdict) []string {
	var ids []string
	for _, c := range v.Causes {
		ids = append(ids, fmt.Sprintf("%s(%.1f)", c.ID, c.Score))
	}
	return ids
}
