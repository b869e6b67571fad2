// Package daemon is whyslow's sidecar loop: every scrape interval it
// collects the engine's metrics, runs the detector, triages open incidents,
// and queues the notifications worth sending; it also serves the HTTP API
// (health, own metrics, incidents, verdicts, ad-hoc triage, Alertmanager
// intake). The loop is driven by Tick(at), so tests and the demo run it on
// simulated time; Run drives it from a wall-clock ticker.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/whyslow/whyslow/collectors/scrape"
	"github.com/whyslow/whyslow/detect"
	"github.com/whyslow/whyslow/diagnose"
	"github.com/whyslow/whyslow/incident"
	"github.com/whyslow/whyslow/internal/httplimit"
	"github.com/whyslow/whyslow/internal/redact"
	"github.com/whyslow/whyslow/notifiers"
	"github.com/whyslow/whyslow/query"
	"github.com/whyslow/whyslow/rules"
	"github.com/whyslow/whyslow/rulesets"
	"github.com/whyslow/whyslow/verdict"
)

// Scraper collects every engine target once into the store.
type Scraper interface {
	Scrape(ctx context.Context, at time.Time) []ScrapeResult
}

// ScrapeResult is one target's scrape outcome.
type ScrapeResult struct {
	Target   string
	Duration time.Duration
	Samples  int
	Err      error
	// Prometheus marks the probe of a fleet's Prometheus source (its
	// failures are logged as the source's, not an engine's).
	Prometheus bool
}

// TriageRequest asks for one triage.
type TriageRequest struct {
	Selector string
	At       time.Time
	Window   time.Duration
	Baseline time.Duration
	Engine   string
	// Scheduler and GPU are the engine facts from the config (Config.Scheduler,
	// Config.GPU.Class); runTriage fills them. GPUSource says where GPU came
	// from ("config"), empty with no class.
	Scheduler rules.Scheduler
	GPU       string
	GPUSource string
	// SLOs are the configured SLO bounds, one a line (Config.Triage.SLO;
	// a string keeps the request comparable for verdict reuse); runTriage
	// fills them.
	SLOs string
	// Shared, when set, answers the triage's queries over every scope
	// (diagnose.Options.Shared): the cycle's, so its triages run those once.
	Shared query.Metrics
	// Learning is the daemon's learning state (prepare fills it while the
	// history is shorter than the baseline); zero otherwise. A value, so
	// that the request stays comparable.
	Learning verdict.Learning
}

// TriageFunc runs one triage against the daemon's metrics.
type TriageFunc func(ctx context.Context, req TriageRequest) (*verdict.Verdict, error)

// Outbox queues notifications durably; a dispatcher (notifiers/outbox)
// delivers them on its own goroutines. *outbox.Outbox implements it.
type Outbox interface {
	// Enqueue stores n for delivery. It returns false (and no error) when a
	// notification with the same ID is pending or was delivered recently.
	// An error wrapping outbox.ErrRejected is permanent (n is dropped);
	// others keep n pending and are retried every cycle.
	Enqueue(n *notifiers.Notification) (bool, error)
	// Depth is the number of notifications not yet delivered.
	Depth() int
}

// Options wires a Daemon. Metrics, Scraper, Triage and Outbox are required.
type Options struct {
	Config Config
	// Maps are the engine maps the detector, the mixed-models warning,
	// the engine-series check and the pages read (nil: Config.Maps()); the
	// Triage should read the same (TriageWith).
	Maps    *rulesets.Maps
	Metrics query.Metrics
	Scraper Scraper
	Triage  TriageFunc
	Outbox  Outbox
	// Receivers are the receiver names a notification fans out to.
	Receivers []string
	// AlertSenders get every incident after each cycle (Alertmanager
	// receivers: open incidents as alerts, re-sent while open).
	AlertSenders []AlertSender
	// Sources run every tick after the scrape (the GPU collector).
	Sources []Source
	// Gatherers add series to /metrics (the sources' last cycle).
	Gatherers []prometheus.Gatherer
	// Routes are extra HTTP handlers by ServeMux pattern, outside /api/ and
	// its bearer token (POST /slack/commands verifies Slack's signature).
	Routes map[string]http.Handler
	// APIRoutes are extra handlers inside /api/, behind its bearer token (the
	// span store's Tempo-compatible trace API).
	APIRoutes map[string]http.Handler
	// Flush delivers what the outbox holds until ctx ends (the dispatcher's
	// Shutdown); called by Shutdown. Optional.
	Flush func(ctx context.Context) error
	// OwnHistory says the metrics keep a history of their own (a
	// Prometheus source, a replayed bundle): the baseline is not learned
	// from the daemon's first scrape. HistoryStart is where that history
	// starts (zero: unknown, taken as long enough).
	OwnHistory   bool
	HistoryStart time.Time
	// SpansSeen counts the spans the triage's trace source has taken in
	// (nil without one): a verdict is reused only while it is unchanged.
	SpansSeen func() uint64
	// Registry receives the daemon's own metrics (default: a new registry).
	// Pass the one the outbox and retry stage register with so /metrics
	// serves them all.
	Registry *prometheus.Registry
	// Predict predicts the fixes of an incident's verdict for its page and
	// GET /api/v1/predicted (nil: whatif.ForVerdict over Metrics with
	// Maps and Config.Scheduler); never called by the cycle (predict.go).
	Predict PredictFunc
	// Now is the clock for API requests that do not say when (default time.Now).
	Now func() time.Time
	// Secrets are scrubbed from every error an API response carries and
	// every line the daemon logs (default: the secrets of Config, see
	// ConfigSecrets); reloads add the new configuration's.
	Secrets *redact.Secrets
	Logger  *slog.Logger
}

// AlertSender keeps an alert manager in step with the incidents
// (*alertmanager.Sender). Sync must not block.
type AlertSender interface {
	Sync(incidents []incident.Incident, at time.Time, link func(incident.Incident) string)
}

// Daemon is the sidecar loop and its API state. Changes to the incident
// state (Tick, the Alertmanager intake's bookkeeping, Reload, Shutdown) are
// serialised by one lock; triages other than the detector's run outside it,
// bounded in number and time, so a slow request never holds the loop up.
// Reads are served from a published view.
type Daemon struct {
	work sync.Mutex // serialises Tick, alert bookkeeping, Reload, Shutdown

	cfg       atomic.Pointer[Config]
	receivers atomic.Pointer[[]string]
	opts      Options
	log       *slog.Logger
	secrets   *redact.Secrets
	detector  *detect.Detector
	// engineQueries count the series of a known engine (blind.go);
	// engineChecked is when they last answered (guarded by work).
	engineQueries []engineQuery
	engineChecked time.Time
	// enginesHeld are the engines a check found series of, or could not
	// rule out; nil until a check answered (guarded by work). The
	// sidecar's detector reads only these and the configured engine.
	enginesHeld map[string]bool
	// engineSeen says a check found engine series once (a replay over no
	// data ends in an error).
	engineSeen  bool
	tracker     *incident.Tracker
	stats       *stats
	sessions    *sessions                     // signed-in browsers (session.go)
	predictor   *predictor                    // the incident pages' predictions (predict.go)
	limiter     *limiter                      // wrong tokens per client
	scraped     atomic.Bool                   // a scrape has succeeded
	history     atomic.Int64                  // unix ns of the first successful scrape the store holds; 0: none yet
	triages     atomic.Pointer[chan struct{}] // slots for ad-hoc, alert and Slack triages
	budget      *httplimit.Budget
	down        map[string]time.Time  // target → down since; guarded by viewMu
	metrics     query.Metrics         // opts.Metrics
	lastTriaged map[string]time.Time  // open incident key → its last detector triage (guarded by work)
	reusable    map[string]lastTriage // open incident key → what its last verdict was made of (guarded by work)
	closed      bool
	persisted   []byte                    // the state last written to the data dir
	pending     []*notifiers.Notification // not yet taken by the outbox (guarded by work)
	overrun     int                       // cycles in a row longer than the interval (guarded by work)
	// A failing detection is logged once per streak (guarded by work):
	// detectFailing counts the failed cycles, detectLogged says the streak
	// was logged. A streak while the Prometheus source is down is that
	// source's failure, already logged once by scrape.
	detectFailing int
	detectLogged  bool
	sourceDown    bool // the last cycle's Prometheus probe failed (guarded by work)

	viewMu   sync.RWMutex
	verdicts map[string]*verdict.Verdict // last verdict per scope key
	view     []incident.Incident
	gaps     []verdict.DataGap // from the sources' last cycle
	problems map[string]string // readiness problems by key (see Problems)
}

// TargetLabeler is implemented by scrapers that can name the single engine
// target's labels (EngineScraper); sources label their series with them.
type TargetLabeler interface {
	TargetLabels() map[string]string
}

const stateFile = "incidents.json"

// New builds a daemon and restores the incident state from Config.DataDir.
func New(opts Options) (*Daemon, error) {
	if opts.Metrics == nil || opts.Scraper == nil || opts.Triage == nil || opts.Outbox == nil {
		return nil, errors.New("new daemon: metrics, scraper, triage and outbox are required")
	}
	cfg := opts.Config.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("new daemon: %w", err)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Secrets == nil {
		opts.Secrets = ConfigSecrets(cfg)
	}
	// Whatever logger comes in, the daemon's lines go through the redaction
	// layer (a triage error may quote a URL with a token).
	opts.Logger = slog.New(redact.Handler(opts.Logger.Handler(), opts.Secrets))
	if opts.Maps == nil {
		var err error
		if opts.Maps, err = cfg.Maps(); err != nil {
			return nil, fmt.Errorf("new daemon: %w", err)
		}
		opts.Maps = opts.Maps.Releasable()
	}
	det, err := newDetector(cfg.Detect, opts.Maps)
	if err != nil {
		return nil, fmt.Errorf("new daemon: %w", err)
	}
	d := &Daemon{
		opts:          opts,
		log:           opts.Logger.With("component", "daemon"),
		secrets:       opts.Secrets,
		detector:      det,
		engineQueries: engineSeriesQueries(opts.Maps),
		tracker:       incident.NewTracker(cfg.Incidents),
		budget:        httplimit.NewBudget(bodyBudget),
		sessions:      newSessions(),
		predictor:     newPredictor(),
		limiter:       newLimiter(),
		down:          map[string]time.Time{},
		metrics:       opts.Metrics,
		lastTriaged:   map[string]time.Time{},
		reusable:      map[string]lastTriage{},
		verdicts:      map[string]*verdict.Verdict{},
		problems:      map[string]string{},
	}
	d.cfg.Store(&cfg)
	slots := make(chan struct{}, cfg.API.MaxConcurrentTriages)
	d.triages.Store(&slots)
	recv := append([]string(nil), opts.Receivers...)
	d.receivers.Store(&recv)
	d.stats = newStats(d, opts.Registry)
	if cfg.DataDir != "" {
		d.loadState(cfg.DataDir, opts.Now())
	}
	if opts.OwnHistory {
		d.history.Store(0)
		if !opts.HistoryStart.IsZero() {
			d.history.Store(opts.HistoryStart.UnixNano())
		}
	}
	d.pruneAlertIncidents(opts.Now())
	if len(d.pending) > 0 && d.flushPending() {
		d.persist()
	}
	d.publish()
	return d, nil
}

// Config returns the current configuration (with defaults).
func (d *Daemon) Config() Config { return *d.cfg.Load() }

// Ready reports whether the daemon is ready: a scrape has succeeded and
// nothing in Problems is set (state saved, outbox taking notifications,
// store writable).
func (d *Daemon) Ready() bool { return len(d.Problems()) == 0 }

// Tick runs one cycle at time at: scrape, detect, triage every open
// incident, queue notifications, attempt deliveries, persist the state. A
// failing target or a failing triage is logged and counted; Tick returns an
// error only when the cycle could not run at all (detection failed).
func (d *Daemon) Tick(ctx context.Context, at time.Time) error {
	d.work.Lock()
	defer d.work.Unlock()
	if d.closed {
		return errors.New("tick: daemon shut down")
	}
	cfg := d.Config()
	cycleStart, queriesBefore := time.Now(), d.queries()
	allUp := d.scrape(ctx, at)
	d.checkEngineSeries(ctx, at)
	d.collectSources(ctx, at)
	if len(d.pending) > 0 && d.persist() && d.flushPending() {
		d.persist() // what an earlier cycle could not hand to the outbox
	}

	dets, err := d.detector.EvaluateSince(ctx, d.metrics, at, d.HistorySince())
	if err != nil {
		d.stats.detectErrors.Inc()
		d.detectFailing++
		if !d.detectLogged && !d.sourceDown {
			d.detectLogged = true
			d.log.Error("Detection failed; logged again when it recovers", "err", err)
		}
		return loggedError{fmt.Errorf("tick at %s: %w", at.Format(time.RFC3339), err)}
	}
	if d.detectFailing > 0 {
		if d.detectLogged {
			d.log.Info("Detection recovered", "failed_cycles", d.detectFailing)
		}
		d.detectFailing, d.detectLogged = 0, false
	}
	bounds := d.detector.Stats()
	d.stats.detectRefused.WithLabelValues("max_series").Add(float64(bounds.Truncated))
	d.stats.detectRefused.WithLabelValues("max_scopes").Add(float64(bounds.Skipped))
	var events []incident.Event
	seen := map[string]bool{}
	refusedOpen := 0
	for _, det := range d.roomToOpen(dets, cfg.Detect.MaxOpenIncidents) {
		seen[det.Key] = true
		if det.Refused {
			refusedOpen++
			continue
		}
		events = append(events, d.tracker.Observe(det.Detection, at)...)
	}
	d.stats.detectRefused.WithLabelValues("open_incidents").Add(float64(refusedOpen))
	// A scope the detector no longer sees has lost its data: its engine
	// stopped (a target is down), or the model was renamed or the engine
	// restarted with another one. Each such incident counts down to its
	// resolve on its own, with the reason, whatever other targets do: a
	// stopped engine's incidents must not stay open while another target
	// is down, nor resolve as if they had recovered. A scope a bounded
	// detection left for a later cycle (detect.max_scopes) is not news.
	for _, key := range d.tracker.OpenKeys() {
		if in, _ := d.tracker.Get(key); in.Detected && !seen[key] && d.detector.Covers(key) {
			events = append(events, d.tracker.Gone(key, d.unseenReason(allUp), at)...)
		}
	}
	verdicts := d.triageOpen(ctx, cfg, at, cycleStart, seen)
	cohorts := incident.FindCohorts(d.tracker.Incidents(), dets, cfg.Detect.GroupBy, at)
	for _, key := range d.tracker.OpenKeys() {
		v, ok := verdicts[key]
		if !ok {
			continue
		}
		if c, ok := cohorts[key]; ok {
			v.Cohort = c
		}
		events = append(events, d.tracker.Record(key, v, at)...)
	}
	d.commit(events, at)
	d.syncAlerts(at)
	if len(d.tracker.OpenKeys()) == 0 {
		// Nothing left to triage: the compiled rulesets go (Releasable
		// maps) and the next incident's triage compiles them again, tens
		// of milliseconds once, rather than holding megabytes idle.
		d.opts.Maps.Release()
	}
	took := time.Since(cycleStart)
	d.stats.observeCycle(dets, bounds, took, d.queries()-queriesBefore)
	d.checkBounds(cfg, bounds, took, refusedOpen)
	return nil
}

// syncAlerts hands the incidents to the alert senders.
func (d *Daemon) syncAlerts(at time.Time) {
	if len(d.opts.AlertSenders) == 0 {
		return
	}
	external := d.Config().API.ExternalURL
	link := func(in incident.Incident) string { return verdictURL(external, in.Scope.Selector) }
	incs := d.tracker.Incidents()
	for _, s := range d.opts.AlertSenders {
		s.Sync(incs, at, link)
	}
}

// triageOpen triages the open incidents, at most Triage.Concurrency at
// once, within the cycle's budget (Triage.CycleBudget from the cycle's
// start). The incidents triaged longest ago go first, so those a spent
// budget skipped lead the next cycle. An incident of a detected scope
// (detected: this cycle's detection keys) whose inputs are unchanged since
// its last triage keeps that verdict (retriage.go). It returns the
// verdicts by key.
func (d *Daemon) triageOpen(ctx context.Context, cfg Config, at, cycleStart time.Time, detected map[string]bool) map[string]*verdict.Verdict {
	keys := d.tracker.OpenKeys()
	sort.SliceStable(keys, func(i, j int) bool { return d.lastTriaged[keys[i]].Before(d.lastTriaged[keys[j]]) })
	ctx, cancel := context.WithDeadline(ctx, cycleStart.Add(cfg.Triage.CycleBudget))
	defer cancel()
	newest := d.newestSamples(ctx, cfg, at, keys, detected)
	spans := d.spansSeen()
	shared := query.NewSharedQueries(d.metrics)
	var mu sync.Mutex
	out := map[string]*verdict.Verdict{}
	made := map[string]*lastTriage{} // key → its new triage (nil: failed, or unknown freshness)
	slots := make(chan struct{}, max(cfg.Triage.Concurrency, 1))
	var wg sync.WaitGroup
	for _, key := range keys {
		in, _ := d.tracker.Get(key)
		req, learning := d.prepare(TriageRequest{
			Selector: in.Scope.Selector, At: at, Window: IncidentWindow(cfg, at.Sub(in.OpenedAt)), Baseline: cfg.Triage.Baseline, Engine: cfg.Engine,
		})
		ts, fresh := newest(key)
		rk := retriageKey{incident: in.ID, req: req, learning: learning, newest: ts, spans: spans}
		rk.req.At = time.Time{}
		if last, ok := d.reusable[key]; ok && fresh && last.key == rk {
			d.stats.triageRuns.WithLabelValues("detector", "reused").Inc()
			out[key] = d.finish("detector", in.Scope.Selector, last.raw)
			continue
		}
		if ctx.Err() != nil {
			d.stats.triageRefused.WithLabelValues("detector", "cycle_budget").Inc()
			continue
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			d.stats.triageRefused.WithLabelValues("detector", "cycle_budget").Inc()
			continue
		}
		req.Shared = shared
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			raw, err := d.triagePrepared(ctx, "detector", req, learning)
			var v *verdict.Verdict
			if err == nil {
				v = d.finish("detector", req.Selector, raw)
			}
			mu.Lock()
			defer mu.Unlock()
			made[key] = nil
			if err != nil {
				return
			}
			out[key] = v
			if fresh {
				made[key] = &lastTriage{key: rk, raw: raw}
			}
		}()
	}
	wg.Wait()
	for key, last := range made {
		if last == nil {
			delete(d.reusable, key)
		} else {
			d.reusable[key] = *last
		}
	}
	for key := range out {
		d.lastTriaged[key] = at
	}
	for key := range d.lastTriaged {
		if !d.tracker.Open(key) {
			delete(d.lastTriaged, key)
		}
	}
	for key := range d.reusable {
		if !d.tracker.Open(key) {
			delete(d.reusable, key)
		}
	}
	return out
}

// unseenReason is the resolve reason of an incident whose scope the
// detector no longer sees.
func (d *Daemon) unseenReason(allUp bool) string {
	if allUp && d.Config().Fleet() {
		return "the scope's series stopped in Prometheus (the deployment was removed, renamed, or stopped being scraped)"
	}
	if allUp {
		return "the scope's series stopped while every engine target answers (the model was renamed or its engine restarted with another one)"
	}
	d.viewMu.RLock()
	defer d.viewMu.RUnlock()
	var parts []string
	targets := make([]string, 0, len(d.down))
	for target := range d.down {
		targets = append(targets, target)
	}
	sort.Strings(targets)
	for _, target := range targets {
		parts = append(parts, fmt.Sprintf("%s down since %s", target, d.down[target].UTC().Format(time.RFC3339)))
	}
	if msg, ok := d.problems[problemStore]; ok {
		parts = append(parts, msg)
	}
	if len(parts) == 0 {
		parts = append(parts, "no engine target answered")
	}
	return "the scope's series stopped (its engine targets are gone): " + strings.Join(parts, "; ")
}

// sourceKind names what the daemon's scrape reaches, for messages.
func (d *Daemon) sourceKind() string {
	if d.Config().Fleet() {
		return "Prometheus"
	}
	return "engine target"
}

// HistorySince is when the history in the store starts (the first
// successful scrape, kept in the state file with a data dir); zero before
// the first scrape.
func (d *Daemon) HistorySince() time.Time {
	ns := d.history.Load()
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

// IncidentWindow is the triage window of an incident open for age: the
// detector's short window (what detected it) plus the incident so far, at
// most Triage.Window (cfg with defaults). Early triages then look at the
// degradation itself rather than at a window still mostly made of the time
// before it; later ones average over more of it, so their ranking is
// steadier.
func IncidentWindow(cfg Config, age time.Duration) time.Duration {
	w := cfg.Detect.ShortWindow + max(age, 0)
	return min(w, cfg.Triage.Window)
}

// withEngineFacts adds the configured scheduler settings and GPU class to
// req, unless req already carries its own.
func withEngineFacts(cfg Config, req TriageRequest) TriageRequest {
	if !req.Scheduler.Known {
		req.Scheduler = cfg.Scheduler.Rules()
	}
	if req.GPU == "" && cfg.GPU.Class != "" {
		req.GPU, req.GPUSource = cfg.GPU.Class, "config"
	}
	if req.SLOs == "" {
		req.SLOs = strings.Join(cfg.Triage.SLO, "\n")
	}
	return req
}

// loggedError is an error Tick has logged already: Run does not log it
// again (a failing detection was three lines per cycle).
type loggedError struct{ error }

func (e loggedError) Unwrap() error { return e.error }

// scrape runs the scraper and reports whether every target answered. A
// target's (or the Prometheus source's) failure is logged when it starts
// and when it ends, not every cycle.
func (d *Daemon) scrape(ctx context.Context, at time.Time) bool {
	results := d.opts.Scraper.Scrape(ctx, at)
	allUp := len(results) > 0
	d.viewMu.Lock()
	defer d.viewMu.Unlock()
	storeErr := ""
	d.sourceDown = false
	for _, r := range results {
		d.stats.observeScrape(r, at)
		if r.Err != nil && errors.Is(r.Err, scrape.ErrStore) {
			// The engine answered; whyslow could not keep what it said
			// (a full disk). Not "engine down".
			storeErr = r.Err.Error()
			allUp = false
			continue
		}
		if r.Err != nil {
			d.sourceDown = d.sourceDown || r.Prometheus
			if _, ok := d.down[r.Target]; !ok {
				d.down[r.Target] = at
				if r.Prometheus {
					d.log.Error("Prometheus source failed; detection and triage wait for it, logged again when it answers",
						"source", r.Target, "err", r.Err)
				} else {
					d.log.Warn("Engine scrape failed", "target", r.Target, "err", r.Err)
				}
			}
			allUp = false
			continue
		}
		if since, ok := d.down[r.Target]; ok {
			if r.Prometheus {
				d.log.Info("Prometheus source answers again", "source", r.Target, "down_for", at.Sub(since))
			} else {
				d.log.Info("Engine scrape recovered", "target", r.Target, "down_for", at.Sub(since))
			}
			delete(d.down, r.Target)
		}
		d.scraped.Store(true)
		if !d.opts.OwnHistory {
			d.history.CompareAndSwap(0, at.UnixNano())
		}
	}
	_, had := d.problems[problemStore]
	switch {
	case storeErr != "" && !had:
		d.problems[problemStore] = "store refuses writes: " + storeErr
		d.log.Error("Writing scraped samples to the store failed", "err", storeErr)
	case storeErr == "" && had:
		delete(d.problems, problemStore)
		d.log.Info("Store takes samples again")
	}
	return allUp
}

// collectSources runs the sources and keeps their data gaps.
func (d *Daemon) collectSources(ctx context.Context, at time.Time) {
	if len(d.opts.Sources) == 0 {
		return
	}
	var target map[string]string
	if tl, ok := d.opts.Scraper.(TargetLabeler); ok {
		target = tl.TargetLabels()
	}
	var gaps []verdict.DataGap
	for _, src := range d.opts.Sources {
		gaps = append(gaps, src.Collect(ctx, at, target)...)
	}
	d.viewMu.Lock()
	d.gaps = gaps
	d.viewMu.Unlock()
}

// runTriage runs one triage, records its metrics, and adds a data gap for
// every engine target that is down (prepare, triagePrepared, finish).
func (d *Daemon) runTriage(ctx context.Context, source string, req TriageRequest) (*verdict.Verdict, error) {
	req, learning := d.prepare(req)
	raw, err := d.triagePrepared(ctx, source, req, learning)
	if err != nil {
		return nil, err
	}
	return d.finish(source, req.Selector, raw), nil
}

// prepare adds the engine facts to req. With less history in the store
// than the baseline offset (a fresh sidecar), the baseline shrinks to the
// history there is (detect.ChooseBaseline); learning is the warning that
// says so.
func (d *Daemon) prepare(req TriageRequest) (_ TriageRequest, learning string) {
	req = withEngineFacts(d.Config(), req)
	if since := d.HistorySince(); !since.IsZero() {
		c := detect.ChooseBaseline(req.Baseline, req.Window, since, req.At)
		if c.Offset > 0 {
			req.Baseline = c.Offset
		}
		learning = c.Note()
		if c.Learning {
			req.Learning = learningState(c)
		}
	}
	return req, learning
}

// learningState is the learning state of a baseline choice, in the words
// every rendering opens with: "learning the baseline (2 of 60 minutes);
// using the 2 minutes there are".
func learningState(c detect.BaselineChoice) verdict.Learning {
	hist, full := int(c.History/time.Minute), int(c.Configured/time.Minute)
	there := fmt.Sprintf("the %d minutes there are", hist)
	switch {
	case hist == 1:
		there = "the 1 minute there is"
	case hist == 0:
		there = fmt.Sprintf("the %s there are", c.History.Truncate(time.Second))
	}
	l := verdict.Learning{HistoryMinutes: hist, BaselineMinutes: full,
		Message: fmt.Sprintf("learning the baseline (%d of %d minutes); using %s", hist, full, there)}
	if c.Offset == 0 {
		l.NeededMinutes = int((max(c.Needed, detect.MinHistory) + time.Minute - 1) / time.Minute)
	}
	return l
}

// triagePrepared runs a prepared triage and records its metrics. The
// verdict carries the learning warning and, for a scope that mixes several
// models, a warning too; not the data gaps of the moment (finish).
func (d *Daemon) triagePrepared(ctx context.Context, source string, req TriageRequest, learning string) (*verdict.Verdict, error) {
	start := time.Now()
	v, err := d.opts.Triage(ctx, req)
	d.stats.triageDuration.WithLabelValues(source).Observe(time.Since(start).Seconds())
	if err == nil && v == nil {
		err = errors.New("triage returned no verdict")
	}
	if err != nil {
		d.stats.triageRuns.WithLabelValues(source, "error").Inc()
		d.log.Error("Triage failed", "scope", req.Selector, "source", source, "err", err)
		return nil, err
	}
	d.stats.triageRuns.WithLabelValues(source, "ok").Inc()
	if learning != "" {
		v.Warnings = append(v.Warnings, learning)
	}
	if v.Learning == nil && req.Learning.Message != "" {
		l := req.Learning
		v.Learning = &l
	}
	diagnose.CheckMixedModels(ctx, d.metrics, d.opts.Maps.Series(), v)
	return v, nil
}

// finish returns a copy of raw with a data gap for every engine target
// that is down, the store's problem and the sources' gaps, as they are
// now, and keeps it as the scope's latest verdict (but an api one). raw is
// left as it is, so a reused verdict gets the gaps of its own cycle.
func (d *Daemon) finish(source, selector string, raw *verdict.Verdict) *verdict.Verdict {
	v := *raw
	v.DataGaps = slices.Clip(raw.DataGaps)
	d.viewMu.Lock()
	defer d.viewMu.Unlock()
	targets := make([]string, 0, len(d.down))
	for target := range d.down {
		targets = append(targets, target)
	}
	sort.Strings(targets)
	for _, target := range targets {
		v.DataGaps = append(v.DataGaps, verdict.DataGap{
			Signal: "scrape",
			Reason: fmt.Sprintf("%s %s down since %s", d.sourceKind(), target, d.down[target].UTC().Format(time.RFC3339)),
		})
	}
	if msg, ok := d.problems[problemStore]; ok {
		v.DataGaps = append(v.DataGaps, verdict.DataGap{Signal: "scrape", Reason: msg})
	}
	if msg, ok := d.problems[problemCycle]; ok {
		// Detection read part of the fleet (detect.max_*): other scopes
		// may be slow too, unseen.
		v.DataGaps = append(v.DataGaps, verdict.DataGap{Signal: "detection", Reason: msg})
	}
	v.DataGaps = append(v.DataGaps, d.gaps...)
	if source != "api" {
		d.verdicts[selector] = &v
	}
	return &v
}

func writeFileAtomic(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, werr := tmp.Write(b)
	serr := tmp.Sync()
	cerr := tmp.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// publish refreshes the read-only view the API serves and the gauges.
func (d *Daemon) publish() {
	incs := d.tracker.Incidents()
	d.viewMu.Lock()
	d.view = incs
	d.viewMu.Unlock()
	d.stats.publish(incs, d.Config().API.ExternalURL)
	d.stats.pending.Set(float64(len(d.pending)))
}

// Incidents returns the open incidents followed by the resolved ones.
func (d *Daemon) Incidents() []incident.Incident {
	d.viewMu.RLock()
	defer d.viewMu.RUnlock()
	return append([]incident.Incident(nil), d.view...)
}

// Verdict returns the latest verdict for a scope selector (any matcher order).
func (d *Daemon) Verdict(scope string) (*verdict.Verdict, bool) {
	want := canonicalSelector(scope)
	d.viewMu.RLock()
	defer d.viewMu.RUnlock()
	if v, ok := d.verdicts[scope]; ok {
		return v, true
	}
	for k, v := range d.verdicts {
		if canonicalSelector(k) == want {
			return v, true
		}
	}
	return nil, false
}

// CheckReload reports whether Reload would accept cfg, changing nothing.
func (d *Daemon) CheckReload(cfg Config) error {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	if _, err := newDetector(cfg.Detect, d.opts.Maps); err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	return nil
}

// Reload applies a new configuration all-or-nothing: everything is validated
// before anything changes. Engine targets and receivers are rebuilt by the
// caller and passed in (nil keeps the current ones).
func (d *Daemon) Reload(cfg Config, scraper Scraper, receivers []string) error {
	if err := d.CheckReload(cfg); err != nil {
		return err
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	det, err := newDetector(cfg.Detect, d.opts.Maps)
	if err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	d.work.Lock()
	defer d.work.Unlock()
	before, _ := APIAuth(d.Config())
	d.detector = det
	d.narrowDetector(cfg)
	// New targets may be another engine's: look at the next cycle, not
	// up to a minute later (engineRecheck), so the detector reads them.
	d.engineChecked = time.Time{}
	d.tracker.SetConfig(cfg.Incidents)
	if scraper != nil {
		d.opts.Scraper = scraper
	}
	if receivers != nil {
		recv := append([]string(nil), receivers...)
		d.receivers.Store(&recv)
	}
	if cfg.API.MaxConcurrentTriages != cap(*d.triages.Load()) {
		// Triages running now release their old slot.
		slots := make(chan struct{}, cfg.API.MaxConcurrentTriages)
		d.triages.Store(&slots)
	}
	d.cfg.Store(&cfg)
	// The new secrets (a new token) are scrubbed from now on; the old ones
	// stay scrubbed too, as logs may still quote them.
	d.secrets.Merge(ConfigSecrets(cfg))
	d.stats.reloads.WithLabelValues("ok").Inc()
	after, warning := APIAuth(cfg)
	switch {
	case after != before && warning != "":
		d.log.Warn("Configuration reloaded; API authentication changed", "api_auth", after, "was", before, "warning", warning)
	case after != before:
		d.log.Info("Configuration reloaded; API authentication changed", "api_auth", after, "was", before)
	default:
		d.log.Info("Configuration reloaded", "api_auth", after)
	}
	return nil
}

// Run ticks every scrape interval until ctx ends. A tick that is running
// when ctx ends finishes (its triage is not cut short); call Shutdown next.
func (d *Daemon) Run(ctx context.Context) error {
	interval := d.Config().ScrapeInterval
	t := time.NewTicker(interval)
	defer t.Stop()
	tickCtx := context.WithoutCancel(ctx)
	if err := d.Tick(tickCtx, d.opts.Now()); err != nil && !errors.As(err, new(loggedError)) {
		d.log.Warn("Tick failed", "err", err)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if i := d.Config().ScrapeInterval; i != interval {
				interval = i
				t.Reset(i)
			}
			if err := d.Tick(tickCtx, d.opts.Now()); err != nil && !errors.As(err, new(loggedError)) {
				d.log.Warn("Tick failed", "err", err)
			}
		}
	}
}

// Shutdown waits for a running tick (and its triage) to finish, persists the
// state, and flushes the outbox until ctx ends. Later ticks fail.
func (d *Daemon) Shutdown(ctx context.Context) error {
	d.work.Lock()
	defer d.work.Unlock()
	d.closed = true
	d.predictor.stop()
	if d.persist() && len(d.pending) > 0 && d.flushPending() {
		d.persist()
	}
	if d.opts.Flush == nil {
		return nil
	}
	if err := d.opts.Flush(ctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

func promqlParser() parser.Parser { return parser.NewParser(parser.Options{}) }

// notificationFor builds one receiver's notification for an incident event.
func notificationFor(ev incident.Event, receiver, externalURL string, at time.Time) *notifiers.Notification {
	kind := notifiers.TransitionUpdate
	switch ev.Kind {
	case incident.EventOpened:
		kind = notifiers.TransitionOpen
	case incident.EventResolved:
		kind = notifiers.TransitionResolve
	case incident.EventRepeated:
		kind = notifiers.TransitionRepeat
	}
	v := ev.Incident.Verdict
	if v == nil {
		v = &verdict.Verdict{SchemaVersion: verdict.SchemaVersion, Status: verdict.StatusInsufficientData, Scope: ev.Incident.Scope, At: at}
	}
	n := &notifiers.Notification{
		ID:          notifiers.MakeID(receiver, ev.Incident.ID, ev.Incident.Notified.Count, kind),
		Receiver:    receiver,
		IncidentID:  ev.Incident.ID,
		IncidentKey: ev.DedupeKey,
		Kind:        kind,
		Sequence:    ev.Incident.Notified.Count,
		CreatedAt:   at,
		Verdict:     v,
	}
	n.VerdictURL = verdictURL(externalURL, ev.Incident.Scope.Selector)
	return n
}
