package daemon

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/model"

	"github.com/whyslow/whyslow/notifiers/render"
	"github.com/whyslow/whyslow/triage"
)

// Handler returns the HTTP API: /healthz, /readyz, /metrics and /api/v1/*.
func (d *Daemon) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !d.Ready() {
			http.Error(w, "not ready: no successful scrape yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ready\n")
	})
	gs := prometheus.Gatherers{d.stats.reg}
	gs = append(gs, d.opts.Gatherers...)
	mux.Handle("GET /metrics", promhttp.HandlerFor(gs, promhttp.HandlerOpts{}))
	for pattern, h := range d.opts.Routes {
		mux.Handle(pattern, h)
	}
	api := http.NewServeMux()
	api.HandleFunc("GET /api/v1/incidents", d.handleIncidents)
	api.HandleFunc("GET /api/v1/verdict", d.handleVerdict)
	api.HandleFunc("POST /api/v1/triage", d.handleTriage)
	api.HandleFunc("POST /api/v1/alerts", d.handleAlerts)
	for pattern, h := range d.opts.APIRoutes {
		api.Handle(pattern, h)
	}
	mux.Handle("/api/", d.authorize(api))
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
	return mux
}

// authorize requires the configured bearer token, compared in constant time.
func (d *Daemon) authorize(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token := d.Config().API.Token
		if token != "" {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			want := sha256.Sum256([]byte(token))
			have := sha256.Sum256([]byte(got))
			if !ok || subtle.ConstantTimeCompare(want[:], have[:]) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="whyslow"`)
				writeError(w, http.StatusUnauthorized, errors.New("missing or wrong bearer token"))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

// readBody reads a size-limited request body; it writes 413 or 400 itself
// and returns ok false then.
func (d *Daemon) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	limit := d.Config().API.MaxBodyBytes
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Errorf("request body larger than %d bytes", limit))
			return nil, false
		}
		writeError(w, http.StatusBadRequest, fmt.Errorf("read body: %w", err))
		return nil, false
	}
	return body, true
}

func (d *Daemon) handleIncidents(w http.ResponseWriter, r *http.Request) {
	status := r.URL.Query().Get("status")
	if status != "" && status != "open" && status != "resolved" {
		writeError(w, http.StatusBadRequest, fmt.Errorf("status: %q (want open or resolved)", status))
		return
	}
	out := []triage.Incident{}
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

func (d *Daemon) handleVerdict(w http.ResponseWriter, r *http.Request) {
	scope, ok := r.URL.Query()["scope"]
	if !ok || len(scope) != 1 {
		writeError(w, http.StatusBadRequest, errors.New("scope: give exactly one scope selector, e.g. scope=model_name=\"llama\""))
		return
	}
	if scope[0] != "" {
		if _, err := parseMatchers(strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(scope[0]), "{"), "}")); err != nil {
			writeError(w, http.StatusBadRequest, fmt.Errorf("scope: %w", err))
			return
		}
	}
	v, ok := d.Verdict(scope[0])
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Errorf("no verdict for scope %q yet", scope[0]))
		return
	}
	writeJSON(w, http.StatusOK, render.Normalize(v))
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
	req := TriageRequest{Selector: b.Selector, At: now, Window: cfg.Triage.Window, Baseline: cfg.Triage.Baseline, Engine: cfg.Engine}
	if req.Selector == "" {
		req.Selector = cfg.Detect.Selector
	}
	var errs []error
	if req.Selector != "" {
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
	req, err := ParseTriageBody(body, d.Config(), d.opts.Now())
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	v, err := d.runTriage(r.Context(), "api", req)
	if err != nil {
		writeError(w, http.StatusInternalServerError, fmt.Errorf("triage: %w", err))
		return
	}
	writeJSON(w, http.StatusOK, render.Normalize(v))
}

// AlertsResult is the response to an Alertmanager webhook.
type AlertsResult struct {
	Processed  int      `json:"processed"`
	Duplicates int      `json:"duplicates"`
	Incidents  []string `json:"incidents"`
}

func (d *Daemon) handleAlerts(w http.ResponseWriter, r *http.Request) {
	body, ok := d.readBody(w, r)
	if !ok {
		return
	}
	p, err := ParseAlertmanager(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	res := d.IngestAlerts(r.Context(), p, d.opts.Now())
	writeJSON(w, http.StatusOK, res)
}

// IngestAlerts applies a validated Alertmanager payload at time at: firing
// alerts open or join the incident of their scope, which is triaged once;
// resolved ones detach and may close it. Deliveries seen before (same
// fingerprint, status and start) are skipped.
func (d *Daemon) IngestAlerts(ctx context.Context, p *AlertmanagerPayload, at time.Time) AlertsResult {
	d.work.Lock()
	defer d.work.Unlock()
	cfg := d.Config()
	res := AlertsResult{Incidents: []string{}}
	var events []triage.Event
	toTriage := map[string]triage.Scope{}
	touched := map[string]bool{}
	for _, a := range p.Alerts {
		if d.tracker.SeenAlert(a.Fingerprint, a.Status, a.StartsAt, at) {
			res.Duplicates++
			d.stats.alerts.WithLabelValues(a.Status, "duplicate").Inc()
			continue
		}
		res.Processed++
		d.stats.alerts.WithLabelValues(a.Status, "processed").Inc()
		key, scope := AlertScope(a.Labels, cfg.Alerts.ScopeLabels, cfg.Detect.Selector)
		touched[key] = true
		if a.Status == alertFiring {
			d.tracker.AlertFiring(key, scope, triage.AlertRef{
				Fingerprint: a.Fingerprint, Name: a.Labels["alertname"], StartsAt: a.StartsAt, Labels: a.Labels,
			}, alertSeverity(a.Labels), at)
			toTriage[key] = scope
			continue
		}
		events = append(events, d.tracker.AlertResolved(key, a.Fingerprint, at)...)
		delete(toTriage, key)
	}
	keys := make([]string, 0, len(toTriage))
	for k := range toTriage {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, key := range keys {
		if !d.tracker.Open(key) {
			continue
		}
		v, err := d.runTriage(ctx, "alert", TriageRequest{
			Selector: toTriage[key].Selector, At: at, Window: cfg.Triage.Window, Baseline: cfg.Triage.Baseline, Engine: cfg.Engine,
		})
		if err != nil {
			continue
		}
		events = append(events, d.tracker.Record(key, v, at)...)
	}
	for key := range touched {
		if in, ok := d.tracker.Get(key); ok {
			res.Incidents = append(res.Incidents, in.ID)
		}
	}
	sort.Strings(res.Incidents)
	d.enqueue(events, at)
	d.persist()
	d.publish()
	return res
}

// TriageNow runs an ad-hoc triage of scope (PromQL matchers; "" for the
// detector's selector) over the last window, now. The baseline offset is the
// configured one, or the window when that is longer (so the windows never
// overlap). The slash command uses it; source labels the metrics.
func (d *Daemon) TriageNow(ctx context.Context, source, scope string, window time.Duration) (*triage.Verdict, error) {
	cfg := d.Config()
	if scope == "" {
		scope = cfg.Detect.Selector
	}
	if window <= 0 {
		window = cfg.Triage.Window
	}
	return d.runTriage(ctx, source, TriageRequest{
		Selector: scope, At: d.opts.Now(), Window: window, Baseline: max(cfg.Triage.Baseline, window), Engine: cfg.Engine,
	})
}
