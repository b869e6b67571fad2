package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/whyslow/whyslow/collectors/remote"
	"github.com/whyslow/whyslow/collectors/scrape"
	"github.com/whyslow/whyslow/collectors/store"
	"github.com/whyslow/whyslow/diagnose"
	"github.com/whyslow/whyslow/internal/redact"
	"github.com/whyslow/whyslow/verdict"
)

// sampleInterval is how often --scrape samples the engine.
const sampleInterval = time.Second

// whyScrape samples bare engine endpoints and compares the sample window
// with the engines' lifetime averages from their cumulative counters.
func whyScrape(ctx context.Context, f *whyFlags, opts diagnose.Options) (*verdict.Verdict, error) {
	if !opts.At.IsZero() || opts.Window != 0 || opts.Baseline != 0 {
		return nil, errors.New("--at, --window and --baseline do not apply to --scrape: the window is the --sample taken now, the baseline the engine's lifetime")
	}
	if f.sample < 3*sampleInterval {
		return nil, fmt.Errorf("--sample %s is too short: rate() needs at least 3 scrapes (%s apart)", f.sample, sampleInterval)
	}
	st, err := store.Open(store.Options{})
	if err != nil {
		return nil, fmt.Errorf("embedded store: %w", err)
	}
	defer st.Close()
	targets := splitList(f.scrape)
	if len(targets) == 0 {
		return nil, fmt.Errorf("--scrape %q: no URL", f.scrape)
	}
	sc, err := scrape.New(st, scrape.Options{Timeout: min(f.timeout, f.sample), Targets: targets})
	if err != nil {
		return nil, err
	}
	// The first round fails fast on a target that does not answer, rather
	// than after the whole sample; its samples are the sample's first.
	if err := scrapeAll(ctx, sc, targets, time.Now()); err != nil {
		return nil, err
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(sampleInterval):
	}
	loop := &scrape.Loop{Scraper: sc, Targets: targets, Interval: sampleInterval}
	if _, err := loop.Sample(ctx, f.sample-sampleInterval); err != nil {
		return nil, err
	}
	stats := st.Stats()
	first, last := stats.MinTime, stats.MaxTime

	// The baseline window sits before the first scrape, clear of every rate() range.
	window := last.Sub(first)
	baseEnd := first.Add(-time.Minute)
	lb, err := scrape.WriteLifetimeBaseline(ctx, st, st, first, baseEnd, window)
	if err != nil {
		return nil, err
	}
	opts.Metrics = st
	opts.At = last
	opts.Window = window
	opts.Baseline = last.Sub(baseEnd)
	opts.BaselineWithoutRates = !lb.StartKnown
	v, err := triageThen(ctx, opts, f.finish)
	if err != nil {
		return nil, err
	}
	v.DataGaps = foldGaugeGaps(v.DataGaps)
	scrapeReason(v.InsufficientReason)
	// The baseline is no clock-time window: say what it really is.
	v.Incident.Label = "sample " + shortDuration(window)
	if lb.StartKnown {
		v.Baseline = verdict.Window{Start: first.Add(-lb.Lifetime).UTC(), End: first.UTC(),
			Label: "the engine's lifetime of " + shortDuration(lb.Lifetime) + " (its counters at the first scrape)"}
	} else {
		v.Baseline = verdict.Window{Label: "the engine's lifetime, length unknown (no start time exported: means, quantiles and ratios only)"}
	}
	return v, nil
}

// scrapeReason restates an insufficient-data reason in a sample's terms:
// its baseline is the engine's lifetime before the first scrape, not a
// window the user chose.
func scrapeReason(r *verdict.InsufficientReason) {
	if r == nil {
		return
	}
	if r.Code == verdict.InsufficientBaseline || (r.Code == verdict.InsufficientSignal && r.Window == "baseline") {
		r.Code = verdict.InsufficientBaseline
		r.Message = "the engine had served no requests before the sample began, so its lifetime counters give no baseline " +
			"(a --scrape compares the sample with the engine's lifetime): let it serve traffic for a while, then sample again"
	}
	if r.Code == verdict.InsufficientSignal && r.Window == "incident" && r.Signal == "requests" {
		r.Message = "no request completed during the sample (the engine was idle): sample again under traffic, or use a longer --sample"
	}
}

// shortDuration renders 6h12m0s as 6h12m and 20s as 20s.
func shortDuration(d time.Duration) string {
	d = d.Round(time.Second)
	if d >= time.Minute {
		d = d.Round(time.Minute)
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// scrapeAll scrapes every target once, concurrently, stamped at, and
// returns the errors of those that failed.
func scrapeAll(ctx context.Context, sc *scrape.Scraper, targets []string, at time.Time) error {
	errs := make([]error, len(targets))
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = sc.Scrape(ctx, t, at)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// foldGaugeGaps replaces the baseline gaps of signals that have a value in
// the sample window (gauges: a bare engine exposes only their current value,
// so the lifetime baseline has none) by one gap that says so, instead of one
// misleading "no series matched" per signal.
func foldGaugeGaps(gaps []verdict.DataGap) []verdict.DataGap {
	missingNow := map[string]bool{}
	leftOut := map[string]bool{} // baseline values the baseline_rates gap explains
	for _, g := range gaps {
		if g.Window == "incident" {
			missingNow[g.Signal] = true
		}
		if g.Signal == "baseline_rates" {
			for _, s := range g.Signals {
				leftOut[s] = true
			}
		}
	}
	var out []verdict.DataGap
	var gauges []string
	for _, g := range gaps {
		if g.Window == "baseline" && leftOut[g.Signal] {
			continue
		}
		if g.Window == "baseline" && g.Reason == "no series matched" && !missingNow[g.Signal] {
			gauges = append(gauges, g.Signal)
			continue
		}
		out = append(out, g)
	}
	if len(gauges) > 0 {
		out = append(out, verdict.DataGap{Signal: strings.Join(gauges, ", "), Window: "baseline",
			Reason: "gauges have no lifetime baseline: a bare engine exposes only their current value, so rules comparing them with the baseline are skipped"})
	}
	return out
}

// whyServer asks a running whyslow daemon to triage (POST /api/v1/triage).
func whyServer(ctx context.Context, f *whyFlags, opts diagnose.Options) (*verdict.Verdict, error) {
	if len(opts.SLOs) > 0 {
		return nil, errors.New("--slo applies to a triage this process runs; a daemon applies its own (triage.slo in its config)")
	}
	req := map[string]string{"selector": opts.Selector}
	if !opts.At.IsZero() {
		req["at"] = opts.At.Format(time.RFC3339)
	}
	if opts.Window > 0 {
		req["window"] = opts.Window.String()
	}
	if opts.Baseline > 0 {
		req["baseline"] = opts.Baseline.String()
	}
	body, _ := json.Marshal(req)
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	url := strings.TrimSuffix(f.server, "/") + "/api/v1/triage"
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("--server: %w", err)
	}
	hr.Header.Set("Content-Type", "application/json")
	// A server (or a proxy in front of it) may echo the request back in an
	// error: what it says is scrubbed of the credentials sent.
	secrets := redact.NewSecrets()
	secrets.AddURL(f.server, false)
	if tok := bearerToken(f); tok != "" {
		hr.Header.Set("Authorization", "Bearer "+tok)
		secrets.Add(tok)
	}
	server := redact.URL(f.server)
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		return nil, secrets.Error(fmt.Errorf("whyslow server %s unreachable: %w", server, unwrapURLError(err)))
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, secrets.Error(fmt.Errorf("whyslow server %s: read response: %w", server, err))
	}
	if resp.StatusCode != http.StatusOK {
		msg := strings.TrimSpace(secrets.Scrub(string(data)))
		if len(msg) > 2000 {
			msg = msg[:2000] + "…"
		}
		return nil, fmt.Errorf("whyslow server %s: %s: %s", server, resp.Status, msg)
	}
	var v verdict.Verdict
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("whyslow server %s: bad verdict JSON: %w", server, err)
	}
	// The daemon keeps the metrics: the page comes without curves.
	return &v, f.html.write(ctx, nil, &v, f.maps)
}

func bearerToken(f *whyFlags) string {
	if f.token != "" {
		return f.token
	}
	return os.Getenv("WHYSLOW_BEARER_TOKEN")
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// unwrapURLError drops net/url's "Post URL:" prefix, which repeats the URL.
func unwrapURLError(err error) error {
	type unwrapper interface{ Unwrap() error }
	if u, ok := err.(unwrapper); ok && strings.HasPrefix(err.Error(), "Post ") {
		return u.Unwrap()
	}
	return err
}

// remoteClient builds the --prometheus client with the auth flags.
func remoteClient(f *whyFlags) (*remote.Client, error) {
	ro := remote.Options{URL: f.prometheus, Timeout: f.timeout, BearerToken: bearerToken(f)}
	if f.basicUser != "" {
		pass := f.basicPass
		if pass == "" {
			pass = os.Getenv("WHYSLOW_BASIC_PASSWORD")
		}
		ro.BasicAuthUser, ro.BasicAuthPassword = f.basicUser, pass
	}
	return remote.New(ro)
}

// whyPrometheus triages against a Prometheus-compatible query API.
func whyPrometheus(ctx context.Context, f *whyFlags, opts diagnose.Options) (*verdict.Verdict, error) {
	c, err := remoteClient(f)
	if err != nil {
		return nil, err
	}
	if opts.At.IsZero() {
		opts.At = time.Now()
	}
	opts.Metrics = c
	v, err := triageThen(ctx, opts, f.finish)
	if err != nil {
		return nil, unreachableCause(err)
	}
	return v, nil
}

// unreachableCause returns the remote client's own error when err says the
// server could not be reached ("prometheus URL unreachable: dial tcp …"):
// one clear reason instead of the chain of what failed because of it.
// Other errors are returned unchanged.
func unreachableCause(err error) error {
	if !remote.Unreachable(err) {
		return err
	}
	for u := errors.Unwrap(err); u != nil && remote.Unreachable(u); u = errors.Unwrap(u) {
		err = u
	}
	return err
}
