package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/whyslow/whyslow/incident"
	"github.com/whyslow/whyslow/internal/httplimit"
	"github.com/whyslow/whyslow/notifiers/alertmanager"
	"github.com/whyslow/whyslow/notifiers/render"
	"github.com/whyslow/whyslow/verdict"
)

// metricsHandler serves what g gathers in the classic text format (0.0.4),
// which Prometheus and every other scraper read whatever they ask for in
// Accept: the page promhttp.HandlerFor served with compression off, as a
// 500 with the error when gathering fails, and only the families named by
// name[] parameters when there are some. Not linking promhttp, nor through
// its format negotiation the protobuf encoders, made the binary ~370 KB
// smaller, all of it file-backed pages of the sidecar (issue 27).
func metricsHandler(g prometheus.Gatherer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mfs, err := g.Gather()
		if err != nil {
			http.Error(w, "An error has occurred while serving metrics:\n\n"+err.Error(), http.StatusInternalServerError)
			return
		}
		var only map[string]bool
		if names := r.URL.Query()["name[]"]; len(names) > 0 {
			only = map[string]bool{}
			for _, n := range names {
				only[n] = true
			}
		}
		w.Header().Set("Content-Type", string(expfmt.FmtText))
		for _, mf := range mfs {
			if only != nil && !only[mf.GetName()] {
				continue
			}
			if _, err := expfmt.MetricFamilyToText(w, mf); err != nil {
				return // the client went away
			}
		}
	})
}

// Handler returns the HTTP API (/healthz, /readyz, /metrics, /api/v1/*)
// and the pages (pages.go), also under the path of api.external_url.
func (d *Daemon) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ps := d.Problems(); len(ps) > 0 {
			http.Error(w, d.secrets.Scrub("not ready: "+joinProblems(ps)), http.StatusServiceUnavailable)
			return
		}
		if ds := d.Degraded(); len(ds) > 0 {
			_, _ = io.WriteString(w, d.secrets.Scrub("ready, "+joinProblems(ds))+"\n")
			return
		}
		_, _ = io.WriteString(w, "ready\n")
	})
	gs := prometheus.Gatherers{d.stats.reg}
	gs = append(gs, d.opts.Gatherers...)
	// Served uncompressed: the page is ~14 KB (a sidecar's), and gzip
	// made a new compressor of ~0.8 MB for each scrape (the pool that
	// keeps one is emptied by the collections between two scrapes), one
	// large allocation that grew the sidecar's heap from the OS when no
	// run of free pages held it.
	mux.Handle("GET /metrics", metricsHandler(gs))
	for pattern, h := range d.opts.Routes {
		mux.Handle(pattern, h)
	}
	api := http.NewServeMux()
	api.HandleFunc("GET /api/v1/incidents", d.handleIncidents)
	api.HandleFunc("GET /api/v1/verdict", d.handleVerdict)
	api.HandleFunc("GET /api/v1/predicted", d.handlePredicted)
	api.HandleFunc("POST /api/v1/triage", d.handleTriage)
	api.HandleFunc("POST /api/v1/alerts", d.handleAlerts)
	for pattern, h := range d.opts.APIRoutes {
		api.Handle(pattern, h)
	}
	mux.Handle("/api/", d.authorize(d.requireJSON(api)))
	prof := http.NewServeMux()
	prof.HandleFunc("/debug/pprof/", pprof.Index)
	prof.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	prof.HandleFunc("/debug/pprof/profile", pprof.Profile)
	prof.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	prof.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.Handle("/debug/pprof/", d.authorize(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !d.Config().API.Pprof {
			http.NotFound(w, r)
			return
		}
		prof.ServeHTTP(w, r)
	})))
	d.registerPages(mux)
	return secureHeaders(d.underPrefix(d.guardSite(mux)))
}

// secureHeaders sets the headers every answer carries: nosniff, so a
// browser never runs a JSON error or a label value as HTML or script.
func secureHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		h.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// writeError answers {"error": ...}, the message scrubbed of secrets.
func (d *Daemon) writeError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, map[string]string{"error": d.secrets.Scrub(err.Error())})
}

// retryLater answers 429 or 503 with Retry-After.
func (d *Daemon) retryLater(w http.ResponseWriter, code int, after time.Duration, err error) {
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int(after/time.Second))))
	d.writeError(w, code, err)
}

// bodyBudget bounds the request bytes the API's handlers hold at once.
const bodyBudget = 32 << 20

// readBody reads a size-limited request body within the API's body budget;
// it writes 413, 503, 408 or 400 itself and returns ok false then.
func (d *Daemon) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	limit := d.Config().API.MaxBodyBytes
	body, release, err := httplimit.ReadBody(http.MaxBytesReader(w, r.Body, limit), limit, d.budget)
	release() // the handlers copy what they keep
	if err != nil {
		code := httplimit.Status(err)
		switch code {
		case http.StatusRequestEntityTooLarge:
			err = fmt.Errorf("request body larger than %d bytes", limit)
		case http.StatusServiceUnavailable:
			d.retryLater(w, code, time.Second, err)
			return nil, false
		}
		d.writeError(w, code, err)
		return nil, false
	}
	return body, true
}

func (d *Daemon) handleIncidents(w http.ResponseWriter, r *http.Request) {
	status := r.URL.Query().Get("status")
	if status != "" && status != "open" && status != "resolved" {
		d.writeError(w, http.StatusBadRequest, fmt.Errorf("status: %q (want open or resolved)", status))
		return
	}
	out := []incident.Incident{}
	for _, in := range d.Incidents() {
		if status == "" || in.Status.String() == status {
			if in.Verdict != nil {
				in.Verdict = render.Normalize(in.Verdict)
			}
			out = append(out, in)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"incidents": out})
}

// handleVerdict answers the latest verdict of a scope (?scope= or
// ?selector=, PromQL label matchers): the one its incident holds, or else a
// triage run now. A malformed selector is a 400.
func (d *Daemon) handleVerdict(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	scope := append(append([]string(nil), q["scope"]...), q["selector"]...)
	if len(scope) != 1 {
		d.writeError(w, http.StatusBadRequest, errors.New("scope: give exactly one scope selector (scope= or selector=), e.g. scope=model_name=\"llama\""))
		return
	}
	sel, err := d.scopeSelector(scope[0])
	if err != nil {
		d.writeError(w, http.StatusBadRequest, err)
		return
	}
	if v, ok := d.Verdict(scope[0]); ok {
		v = render.Normalize(v)
		if in, ok := d.incidentOf(v); ok && v.Predicted == nil {
			// the incident page's predictions, once computed for this verdict
			v.Predicted = d.currentPrediction(in)
		}
		writeJSON(w, http.StatusOK, v)
		return
	}
	// No incident holds a verdict for this scope: triage it now.
	cfg := d.Config()
	if strings.TrimSpace(sel) == "" {
		sel = cfg.Detect.Selector
	}
	d.serveTriage(w, r, cfg, TriageRequest{
		Selector: sel, At: d.opts.Now(), Window: cfg.Triage.Window, Baseline: cfg.Triage.Baseline, Engine: cfg.Engine,
	})
}

// scopeSelector checks a scope given by a caller (?scope=, optional braces)
// and returns its matchers without braces; too long or malformed is an
// error (a 400).
func (d *Daemon) scopeSelector(scope string) (string, error) {
	sel := strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(scope), "{"), "}")
	if len(sel) > DefaultMaxSelectorBytes {
		d.stats.triageRefused.WithLabelValues("api", "selector_too_long").Inc()
		return "", fmt.Errorf("scope: %d bytes, more than the %d allowed", len(sel), DefaultMaxSelectorBytes)
	}
	if strings.TrimSpace(sel) != "" {
		if _, err := parseMatchers(sel); err != nil {
			return "", fmt.Errorf("scope: %w", err)
		}
	}
	return sel, nil
}

// TriageBody is the body of POST /api/v1/triage. Every field is optional:
// the selector defaults to the detector's, at to now, window and baseline
// to the configured triage windows.
type TriageBody struct {
	Selector string `json:"selector"`
	// At is RFC 3339, the end of the incident window.
	At string `json:"at"`
	// Window and Baseline are PromQL durations (5m, 1h).
	Window   string `json:"window"`
	Baseline string `json:"baseline"`
}

// ParseTriageBody validates an ad-hoc triage request against cfg and now.
func ParseTriageBody(body []byte, cfg Config, now time.Time) (TriageRequest, error) {
	var b TriageBody
	if len(bytes.TrimSpace(body)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&b); err != nil {
			return TriageRequest{}, fmt.Errorf("decode triage request: %w", jsonErrorWithOffset(body, err))
		}
		if dec.More() {
			return TriageRequest{}, errors.New("decode triage request: trailing data after the JSON object")
		}
	}
	return b.Request(cfg, now)
}

// Request validates b against cfg and now and fills in the defaults: every
// problem, joined. The triage form of the pages sends the same fields.
func (b TriageBody) Request(cfg Config, now time.Time) (TriageRequest, error) {
	req := TriageRequest{Selector: b.Selector, At: now, Window: cfg.Triage.Window, Baseline: cfg.Triage.Baseline, Engine: cfg.Engine}
	if req.Selector == "" {
		req.Selector = cfg.Detect.Selector
	}
	var errs []error
	if len(req.Selector) > DefaultMaxSelectorBytes {
		// A selector is a few label matchers; a megabyte of them is a
		// denial of service (minutes of PromQL parsing and matching).
		errs = append(errs, fmt.Errorf("selector: %d bytes, more than the %d allowed", len(req.Selector), DefaultMaxSelectorBytes))
	} else if req.Selector != "" {
		if _, err := parseMatchers(strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(req.Selector), "{"), "}")); err != nil {
			errs = append(errs, fmt.Errorf("selector: %w", err))
		}
	}
	if b.At != "" {
		at, err := time.Parse(time.RFC3339, b.At)
		if err != nil {
			errs = append(errs, fmt.Errorf("at: %q is not RFC 3339", b.At))
		}
		req.At = at
	}
	parseDur := func(name, s string, dst *time.Duration) {
		if s == "" {
			return
		}
		v, err := model.ParseDuration(s)
		if err != nil || v <= 0 {
			errs = append(errs, fmt.Errorf("%s: %q is not a positive duration", name, s))
			return
		}
		*dst = time.Duration(v)
	}
	parseDur("window", b.Window, &req.Window)
	parseDur("baseline", b.Baseline, &req.Baseline)
	if req.Baseline < req.Window {
		errs = append(errs, fmt.Errorf("baseline: %s is shorter than the window %s", req.Baseline, req.Window))
	}
	return req, errors.Join(errs...)
}

func (d *Daemon) handleTriage(w http.ResponseWriter, r *http.Request) {
	body, ok := d.readBody(w, r)
	if !ok {
		return
	}
	cfg := d.Config()
	req, err := ParseTriageBody(body, cfg, d.opts.Now())
	if err != nil {
		d.writeError(w, http.StatusBadRequest, err)
		return
	}
	d.serveTriage(w, r, cfg, req)
}

// serveTriage runs an API triage (adHocTriage) and writes its verdict.
func (d *Daemon) serveTriage(w http.ResponseWriter, r *http.Request, cfg Config, req TriageRequest) {
	v, terr := d.adHocTriage(r.Context(), cfg, req)
	switch {
	case terr != nil && terr.retryAfter > 0:
		d.retryLater(w, terr.code, terr.retryAfter, terr.err)
	case terr != nil:
		d.writeError(w, terr.code, terr.err)
	default:
		writeJSON(w, http.StatusOK, render.Normalize(v))
	}
}

// triageError is why an ad-hoc triage gave no verdict: the HTTP status to
// answer, and when to retry for a 429 or 503.
type triageError struct {
	code       int
	retryAfter time.Duration
	err        error
}

// adHocTriage runs a triage asked for over HTTP (the API or a page) in a
// free slot, bounded by api.triage_timeout.
func (d *Daemon) adHocTriage(ctx context.Context, cfg Config, req TriageRequest) (*verdict.Verdict, *triageError) {
	release, ok := d.tryTriageSlot()
	if !ok {
		d.stats.triageRefused.WithLabelValues("api", "busy").Inc()
		return nil, &triageError{http.StatusTooManyRequests, 5 * time.Second,
			fmt.Errorf("%d triages are running, the most allowed (api.max_concurrent_triages); retry later", cfg.API.MaxConcurrentTriages)}
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, cfg.API.TriageTimeout)
	defer cancel()
	v, err := d.runTriage(ctx, "api", req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || ctx.Err() == context.DeadlineExceeded {
			d.stats.triageRefused.WithLabelValues("api", "timeout").Inc()
			return nil, &triageError{http.StatusServiceUnavailable, 10 * time.Second,
				fmt.Errorf("triage took longer than %s (api.triage_timeout); retry later or narrow the selector", cfg.API.TriageTimeout)}
		}
		return nil, &triageError{code: http.StatusInternalServerError, err: fmt.Errorf("triage: %w", err)}
	}
	return v, nil
}

// tryTriageSlot takes a slot for an ad-hoc triage without waiting.
func (d *Daemon) tryTriageSlot() (func(), bool) {
	slots := *d.triages.Load()
	select {
	case slots <- struct{}{}:
		return func() { <-slots }, true
	default:
		return nil, false
	}
}

// waitTriageSlot takes a slot, waiting until ctx ends.
func (d *Daemon) waitTriageSlot(ctx context.Context) (func(), error) {
	slots := *d.triages.Load()
	select {
	case slots <- struct{}{}:
		return func() { <-slots }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// AlertsResult is the response to an Alertmanager webhook.
type AlertsResult struct {
	Processed  int      `json:"processed"`
	Duplicates int      `json:"duplicates"`
	Incidents  []string `json:"incidents"`
	// Refused counts alerts not taken because the open incidents of
	// Alertmanager reached alerts.max_open_incidents; a later delivery of
	// them is processed once there is room.
	Refused int `json:"refused,omitempty"`
	// Own counts whyslow's own alerts (alertname WhyslowVerdict, from an
	// Alertmanager receiver) routed back: ignored, or each verdict would
	// open an incident about itself.
	Own   int    `json:"own,omitempty"`
	Error string `json:"error,omitempty"`
}

func (d *Daemon) handleAlerts(w http.ResponseWriter, r *http.Request) {
	body, ok := d.readBody(w, r)
	if !ok {
		return
	}
	p, err := ParseAlertmanager(body)
	if err != nil {
		d.writeError(w, http.StatusBadRequest, err)
		return
	}
	if code, err := d.checkAlertBounds(p); err != nil {
		d.writeError(w, code, err)
		return
	}
	res := d.IngestAlerts(r.Context(), p, d.opts.Now())
	if res.Refused > 0 {
		w.Header().Set("Retry-After", "60")
		writeJSON(w, http.StatusTooManyRequests, res)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// checkAlertBounds refuses a webhook whole when it has more alerts than
// alerts.max_alerts (413) or a label value longer than
// alerts.max_label_bytes (422), and counts it.
func (d *Daemon) checkAlertBounds(p *AlertmanagerPayload) (int, error) {
	cfg := d.Config().Alerts
	if len(p.Alerts) > cfg.MaxAlerts {
		d.stats.alertsRefused.WithLabelValues("too_many_alerts").Add(float64(len(p.Alerts)))
		return http.StatusRequestEntityTooLarge, fmt.Errorf("alerts: %d in one webhook, more than alerts.max_alerts %d "+
			"(set max_alerts in the Alertmanager receiver, or group alerts more finely)", len(p.Alerts), cfg.MaxAlerts)
	}
	for i, a := range p.Alerts {
		for k, v := range a.Labels {
			if len(v) > cfg.MaxLabelBytes || len(k) > cfg.MaxLabelBytes {
				d.stats.alertsRefused.WithLabelValues("label_too_long").Add(float64(len(p.Alerts)))
				return http.StatusUnprocessableEntity, fmt.Errorf("alerts[%d].labels.%s: %d bytes, more than alerts.max_label_bytes %d",
					i, truncate(k, 64), max(len(v), len(k)), cfg.MaxLabelBytes)
			}
		}
	}
	return 0, nil
}

// alertTriage is a scope the intake triages once its bookkeeping is done.
type alertTriage struct {
	key, incident string
	scope         verdict.Scope
}

// IngestAlerts applies a validated Alertmanager payload at time at: firing
// alerts open or join the incident of their scope, which is triaged once;
// resolved ones detach and may close it. Deliveries seen before (same
// fingerprint, status and start) are skipped. A firing alert that would
// open more than alerts.max_open_incidents incidents is refused (and not
// remembered). The bookkeeping holds the daemon's lock briefly; the
// triages run outside it, bounded by the triage slots and
// api.triage_timeout, so the detect loop keeps its interval.
func (d *Daemon) IngestAlerts(ctx context.Context, p *AlertmanagerPayload, at time.Time) AlertsResult {
	cfg := d.Config()
	res := AlertsResult{Incidents: []string{}}
	var todo []alertTriage

	d.work.Lock()
	var events []incident.Event
	toTriage := map[string]verdict.Scope{}
	touched := map[string]bool{}
	open := d.openAlertIncidents()
	for _, a := range p.Alerts {
		if a.Labels["alertname"] == alertmanager.AlertName {
			res.Own++
			d.stats.alerts.WithLabelValues(a.Status, "own").Inc()
			continue
		}
		key, scope := AlertScope(a.Labels, cfg.Alerts.ScopeLabels, cfg.Detect.Selector)
		if a.Status == alertFiring && !d.tracker.Open(key) && open >= cfg.Alerts.MaxOpenIncidents {
			res.Refused++
			d.stats.alertsRefused.WithLabelValues("open_incidents").Inc()
			continue
		}
		if d.tracker.SeenAlert(a.Fingerprint, a.Status, a.StartsAt, at) {
			res.Duplicates++
			d.stats.alerts.WithLabelValues(a.Status, "duplicate").Inc()
			continue
		}
		res.Processed++
		d.stats.alerts.WithLabelValues(a.Status, "processed").Inc()
		touched[key] = true
		if a.Status == alertFiring {
			if !d.tracker.Open(key) {
				open++
			}
			d.tracker.AlertFiring(key, scope, incident.AlertRef{
				Fingerprint: a.Fingerprint, Name: a.Labels["alertname"], StartsAt: a.StartsAt, Labels: a.Labels,
			}, alertSeverity(a.Labels), at)
			toTriage[key] = scope
			continue
		}
		events = append(events, d.tracker.AlertResolved(key, a.Fingerprint, at)...)
		delete(toTriage, key)
	}
	for key := range touched {
		if in, ok := d.tracker.Get(key); ok {
			res.Incidents = append(res.Incidents, in.ID)
		}
	}
	sort.Strings(res.Incidents)
	for key, scope := range toTriage {
		if in, ok := d.tracker.Get(key); ok && in.Status == incident.IncidentOpen {
			todo = append(todo, alertTriage{key: key, incident: in.ID, scope: scope})
		}
	}
	d.commit(events, at)
	d.work.Unlock()
	if res.Refused > 0 {
		res.Error = fmt.Sprintf("%d alerts refused: %d incidents opened by alerts are open, the most allowed (alerts.max_open_incidents)",
			res.Refused, cfg.Alerts.MaxOpenIncidents)
		d.log.Warn("Alertmanager alerts refused", "refused", res.Refused, "max_open_incidents", cfg.Alerts.MaxOpenIncidents)
	}

	sort.Slice(todo, func(i, j int) bool { return todo[i].key < todo[j].key })
	type result struct {
		alertTriage
		v *verdict.Verdict
	}
	var done []result
	for _, tr := range todo {
		v, err := d.alertTriage(ctx, cfg, tr.scope, at)
		if err != nil {
			continue // the detect loop triages the open incident next tick
		}
		done = append(done, result{tr, v})
	}
	if len(done) == 0 {
		return res
	}
	d.work.Lock()
	defer d.work.Unlock()
	events = nil
	for _, r := range done {
		// The incident may have resolved (and another opened) meanwhile.
		if in, ok := d.tracker.Get(r.key); ok && in.ID == r.incident && in.Status == incident.IncidentOpen {
			events = append(events, d.tracker.Record(r.key, r.v, at)...)
		}
	}
	d.commit(events, at)
	return res
}

// alertTriage runs one Alertmanager triage outside the daemon's lock,
// waiting for a triage slot and bounded by api.triage_timeout.
func (d *Daemon) alertTriage(ctx context.Context, cfg Config, scope verdict.Scope, at time.Time) (*verdict.Verdict, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.API.TriageTimeout)
	defer cancel()
	release, err := d.waitTriageSlot(ctx)
	if err != nil {
		d.stats.triageRefused.WithLabelValues("alert", "busy").Inc()
		return nil, err
	}
	defer release()
	v, err := d.runTriage(ctx, "alert", TriageRequest{
		Selector: scope.Selector, At: at, Window: cfg.Triage.Window, Baseline: cfg.Triage.Baseline, Engine: cfg.Engine,
	})
	if err != nil && ctx.Err() == context.DeadlineExceeded {
		d.stats.triageRefused.WithLabelValues("alert", "timeout").Inc()
	}
	return v, err
}

// openAlertIncidents counts the open incidents that alerts alone hold
// (the detector's are bounded by the engine's label values).
func (d *Daemon) openAlertIncidents() int {
	n := 0
	for _, key := range d.tracker.OpenKeys() {
		if in, _ := d.tracker.Get(key); !in.Detected && len(in.Alerts) > 0 {
			n++
		}
	}
	return n
}

// pruneAlertIncidents applies the intake's bounds to a restored state (one
// written before they existed): alert incidents whose scope has a label
// value over alerts.max_label_bytes, and those beyond
// alerts.max_open_incidents (newest first), are resolved, with an error
// line, so a restart does not keep triaging them every cycle.
func (d *Daemon) pruneAlertIncidents(at time.Time) {
	cfg := d.Config()
	var keep, drop []incident.Incident
	for _, key := range d.tracker.OpenKeys() {
		in, _ := d.tracker.Get(key)
		if in.Detected || len(in.Alerts) == 0 {
			continue
		}
		long := false
		for _, v := range in.Scope.Labels {
			long = long || len(v) > cfg.Alerts.MaxLabelBytes
		}
		if long {
			drop = append(drop, in)
			continue
		}
		keep = append(keep, in)
	}
	sort.Slice(keep, func(i, j int) bool { return keep[i].OpenedAt.Before(keep[j].OpenedAt) })
	if len(keep) > cfg.Alerts.MaxOpenIncidents {
		drop = append(drop, keep[cfg.Alerts.MaxOpenIncidents:]...)
	}
	if len(drop) == 0 {
		return
	}
	var events []incident.Event
	for _, in := range drop {
		fps := make([]string, 0, len(in.Alerts))
		for fp := range in.Alerts {
			fps = append(fps, fp)
		}
		sort.Strings(fps)
		for _, fp := range fps {
			events = append(events, d.tracker.AlertResolved(in.Key, fp, at)...)
		}
	}
	d.log.Error("Restored state had alert incidents beyond the intake's bounds; resolved them",
		"resolved", len(drop), "max_open_incidents", cfg.Alerts.MaxOpenIncidents, "max_label_bytes", cfg.Alerts.MaxLabelBytes)
	d.stats.alertsRefused.WithLabelValues("open_incidents").Add(float64(len(drop)))
	d.commit(events, at)
}

// ErrBusy is returned by TriageNow when every triage slot is taken.
var ErrBusy = errors.New("whyslow is busy with other triages; try again in a minute")

// TriageNow runs an ad-hoc triage of scope (PromQL matchers; "" for the
// detector's selector) over the last window, now. The baseline offset is the
// configured one, or the window when that is longer (so the windows never
// overlap). The slash command uses it; source labels the metrics. It takes
// a triage slot (ErrBusy when none is free) and is bounded by
// api.triage_timeout.
func (d *Daemon) TriageNow(ctx context.Context, source, scope string, window time.Duration) (*verdict.Verdict, error) {
	cfg := d.Config()
	if scope == "" {
		scope = cfg.Detect.Selector
	}
	if window <= 0 {
		window = cfg.Triage.Window
	}
	release, ok := d.tryTriageSlot()
	if !ok {
		d.stats.triageRefused.WithLabelValues(source, "busy").Inc()
		return nil, ErrBusy
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, cfg.API.TriageTimeout)
	defer cancel()
	return d.runTriage(ctx, source, TriageRequest{
		Selector: scope, At: d.opts.Now(), Window: window, Baseline: max(cfg.Triage.Baseline, window), Engine: cfg.Engine,
	})
}

// truncate shortens s to n bytes for a message.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
