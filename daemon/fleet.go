package daemon

import (
	"context"
	"fmt"
	"sort"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"

	"github.com/whyslow/whyslow/collectors/remote"
	"github.com/whyslow/whyslow/detect"
	"github.com/whyslow/whyslow/incident"
	"github.com/whyslow/whyslow/query"
)

// QueryCounter counts the queries that go through it, for the cycle's
// whyslow_cycle_queries. It is safe for concurrent use.
type QueryCounter struct {
	m query.Metrics
	n atomic.Int64
}

// CountQueries wraps m.
func CountQueries(m query.Metrics) *QueryCounter { return &QueryCounter{m: m} }

// Unwrap returns the source c counts the queries of: what it can do (say
// where its data lies, diagnose.DataSpanner) stays in sight through the
// counter (query.As).
func (c *QueryCounter) Unwrap() query.Metrics { return c.m }

// Query implements query.Metrics.
func (c *QueryCounter) Query(ctx context.Context, expr string, at time.Time) (model.Vector, []string, error) {
	c.n.Add(1)
	return c.m.Query(ctx, expr, at)
}

// QueryRange implements query.Metrics.
func (c *QueryCounter) QueryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) (model.Matrix, []string, error) {
	c.n.Add(1)
	return c.m.QueryRange(ctx, expr, start, end, step)
}

// Queries is the number of queries so far.
func (c *QueryCounter) Queries() int64 { return c.n.Load() }

// queries is the number of queries the daemon's metrics have run, when
// they count them (a QueryCounter); else 0.
func (d *Daemon) queries() int64 {
	if c, ok := d.metrics.(interface{ Queries() int64 }); ok {
		return c.Queries()
	}
	return 0
}

// PrometheusProbe is a fleet daemon's Scraper: it scrapes nothing (the
// Prometheus does) and reports whether the query API answers, so the
// daemon's readiness and its "targets down" gaps mean the same as a
// sidecar's.
type PrometheusProbe struct {
	Metrics query.Metrics
	// Name is the source as logs and metrics show it (a redacted URL).
	Name string
}

// Scrape runs one trivial query at at.
func (p *PrometheusProbe) Scrape(ctx context.Context, at time.Time) []ScrapeResult {
	start := time.Now()
	_, _, err := p.Metrics.Query(ctx, "vector(1)", at)
	return []ScrapeResult{{Target: p.Name, Duration: time.Since(start), Err: err, Prometheus: true}}
}

// RemoteClient builds the query client of a Prometheus source.
func RemoteClient(p *PrometheusSource) (*remote.Client, error) {
	o := remote.Options{URL: p.URL, Timeout: p.Timeout, BearerToken: p.BearerToken, Headers: p.Headers}
	if p.BasicAuth != nil {
		o.BasicAuthUser, o.BasicAuthPassword = p.BasicAuth.Username, p.BasicAuth.Password
	}
	c, err := remote.New(o)
	if err != nil {
		return nil, fmt.Errorf("source.prometheus: %w", err)
	}
	return c, nil
}

// fleetStats are the cycle's and the scopes' own metrics.
type fleetStats struct {
	scopes    prometheus.Gauge
	violating prometheus.Gauge
	cycle     prometheus.Histogram
	queries   prometheus.Gauge
	open      *openIncidents
}

func newFleetStats() *fleetStats {
	return &fleetStats{
		scopes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "whyslow_fleet_scopes", Help: "Scopes (detect.group_by label sets) the last detection saw (about, when detect.max_scopes made it judge them in turn).",
		}),
		violating: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "whyslow_fleet_scopes_violating", Help: "Scopes with a trigger firing at the last detection.",
		}),
		cycle: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "whyslow_cycle_duration_seconds", Help: "Duration of one cycle: scrape or probe, detection, the open incidents' triages, notifications.",
			Buckets: []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30},
		}),
		queries: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "whyslow_cycle_queries", Help: "PromQL queries the last cycle ran (detection and triage).",
		}),
		open: &openIncidents{},
	}
}

func (f *fleetStats) collectors() []prometheus.Collector {
	return []prometheus.Collector{f.scopes, f.violating, f.cycle, f.queries, f.open}
}

// observeCycle records one finished cycle.
func (s *stats) observeCycle(dets []detect.Detection, bounds detect.CycleStats, took time.Duration, queries int64) {
	firing := 0
	for _, d := range dets {
		if d.Firing {
			firing++
		}
	}
	s.fleet.scopes.Set(float64(max(len(dets), bounds.Scopes)))
	s.fleet.violating.Set(float64(firing))
	s.fleet.cycle.Observe(took.Seconds())
	s.fleet.queries.Set(float64(queries))
}

// openIncidents exports whyslow_incident_open: 1 per open incident,
// labelled with its scope's labels (detect.group_by, so a dashboard
// matches them to the engines' series), its top cause and severity, its
// id (the /incidents/{id} page) and, with api.external_url, verdict_url:
// the verdict page link the notifications carry, by scope, so any replica
// answers it and a dashboard links each incident to its verdict. The
// scope labels vary with the configuration, so the metric is unchecked.
type openIncidents struct {
	incs atomic.Pointer[openSet]
}

type openSet struct {
	incs     []incident.Incident
	external string // api.external_url when published
}

var openIncidentHelp = "1 per open incident, labelled with the scope's labels, the top cause id (unknown before a verdict names one), the severity, the incident id and (with api.external_url) the verdict page's URL."

// ownLabels are the labels whyslow_incident_open sets itself; a scope
// label of the same name is left out.
var ownLabels = map[string]bool{"cause": true, "severity": true, "incident_id": true, "verdict_url": true}

func (o *openIncidents) set(incs []incident.Incident, external string) {
	var open []incident.Incident
	for _, in := range incs {
		if in.Status == incident.IncidentOpen {
			open = append(open, in)
		}
	}
	o.incs.Store(&openSet{incs: open, external: external})
}

// Describe sends nothing: the label names follow the scopes.
func (o *openIncidents) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector.
func (o *openIncidents) Collect(ch chan<- prometheus.Metric) {
	p := o.incs.Load()
	if p == nil {
		return
	}
	for _, in := range p.incs {
		names := make([]string, 0, len(in.Scope.Labels)+4)
		for k := range in.Scope.Labels {
			if !ownLabels[k] && model.LabelName(k).IsValidLegacy() {
				names = append(names, k)
			}
		}
		sort.Strings(names)
		values := make([]string, 0, len(names)+4)
		for _, k := range names {
			values = append(values, in.Scope.Labels[k])
		}
		cause := in.TopCause
		if cause == "" {
			cause = "unknown"
		}
		names = append(names, "cause", "severity", "incident_id")
		values = append(values, cause, string(in.Severity), in.ID)
		if u := verdictURL(p.external, in.Scope.Selector); u != "" {
			names = append(names, "verdict_url")
			values = append(values, u)
		}
		desc := prometheus.NewDesc("whyslow_incident_open", openIncidentHelp, names, nil)
		m, err := prometheus.NewConstMetric(desc, prometheus.GaugeValue, 1, values...)
		if err != nil {
			continue
		}
		ch <- m
	}
}
