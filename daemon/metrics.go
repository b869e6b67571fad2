package daemon

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/whyslow/whyslow/incident"
)

// stats are whyslow's own metrics, on a private registry served at /metrics.
type stats struct {
	reg            *prometheus.Registry
	scrapes        *prometheus.CounterVec
	lastScrape     *prometheus.GaugeVec
	triageRuns     *prometheus.CounterVec
	triageDuration *prometheus.HistogramVec
	detectErrors   prometheus.Counter
	persistErrors  prometheus.Counter
	incidentsOpen  prometheus.Gauge
	topCause       *prometheus.GaugeVec
	notifications  *prometheus.CounterVec
	alerts         *prometheus.CounterVec
	alertsRefused  *prometheus.CounterVec
	triageRefused  *prometheus.CounterVec
	authFailures   *prometheus.CounterVec
	apiRefused     *prometheus.CounterVec
	detectRefused  *prometheus.CounterVec
	cycleOverruns  prometheus.Counter
	stateCorrupt   prometheus.Counter
	pending        prometheus.Gauge
	reloads        *prometheus.CounterVec
	// engineSeries is registered at the first check (registerEngineSeries):
	// a 0 before any answer would read as "no engine".
	engineSeries     prometheus.Gauge
	engineSeriesOnce sync.Once
	fleet            *fleetStats
}

func newStats(d *Daemon, reg *prometheus.Registry) *stats {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	s := &stats{
		reg: reg,
		scrapes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "whyslow_scrapes_total", Help: "Engine scrapes by target and result (success, failure).",
		}, []string{"target", "result"}),
		lastScrape: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "whyslow_scrape_last_success_timestamp_seconds", Help: "When an engine target was last scraped successfully.",
		}, []string{"target"}),
		triageRuns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "whyslow_triage_runs_total", Help: "Triage runs by source (detector, alert, api) and result (ok, error; reused: the detector kept an open incident's last verdict, no sample of its scope being new since).",
		}, []string{"source", "result"}),
		triageDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "whyslow_triage_duration_seconds", Help: "Duration of triage runs.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		}, []string{"source"}),
		detectErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "whyslow_detect_errors_total", Help: "Detector evaluations that failed.",
		}),
		persistErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "whyslow_state_persist_errors_total", Help: "Failed writes of the incident state.",
		}),
		incidentsOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "whyslow_incidents_open", Help: "Open incidents.",
		}),
		topCause: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "whyslow_incident_top_cause", Help: "1 for the current top cause of each open incident's scope.",
		}, []string{"scope", "cause", "severity"}),
		notifications: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "whyslow_notifications_enqueued_total", Help: "Notifications handed to the outbox by receiver, kind and result (enqueued, duplicate, error: kept and retried, rejected: dropped); delivery results are whyslow_notifications_total.",
		}, []string{"receiver", "kind", "result"}),
		alerts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "whyslow_alertmanager_alerts_total", Help: "Alertmanager alerts received by status and result (processed, duplicate, own: whyslow's own WhyslowVerdict alerts, ignored).",
		}, []string{"status", "result"}),
		alertsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "whyslow_alertmanager_refused_total",
			Help: "Alertmanager alerts refused by a bound, by reason (too_many_alerts, label_too_long, open_incidents).",
		}, []string{"reason"}),
		triageRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "whyslow_triage_refused_total",
			Help: "Triages not run or cut short by a bound, by source and reason (busy, timeout, selector_too_long).",
		}, []string{"source", "reason"}),
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "whyslow_api_auth_failures_total", Help: "API requests refused by authentication, by reason (token, locked).",
		}, []string{"reason"}),
		apiRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "whyslow_api_refused_total",
			Help: "HTTP requests refused before their handler, by reason (host: not this daemon's Host, origin: another site's write, content_type: an API write not declared JSON, sign_in_rate: too many wrong tokens).",
		}, []string{"reason"}),
		detectRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "whyslow_detect_refused_total",
			Help: "What a cycle's bounds left out, by reason (max_series: series dropped from a query answer; max_scopes: scopes left for a later cycle; open_incidents: firing scopes not opened; notifications: messages folded into a grouped one).",
		}, []string{"reason"}),
		cycleOverruns: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "whyslow_cycle_overruns_total", Help: "Cycles that took longer than their interval.",
		}),
		fleet: newFleetStats(),
		stateCorrupt: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "whyslow_state_corrupt_total", Help: "Unreadable incident state files moved aside at start.",
		}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "whyslow_notifications_pending", Help: "Notifications the outbox has not taken yet (kept in the incident state, retried every cycle).",
		}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "whyslow_config_reloads_total", Help: "Configuration reloads by result.",
		}, []string{"result"}),
	}
	s.engineSeries = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "whyslow_engine_series_found",
		Help: "Series of a known engine (vLLM, SGLang, TensorRT-LLM request counts) the source held at the last check; 0 makes the daemon not ready.",
	})
	ready := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "whyslow_ready", Help: "1 when ready: a scrape succeeded, it holds series of a known engine, the state is saved, the outbox takes notifications, the store takes samples.",
	}, func() float64 {
		if d.Ready() {
			return 1
		}
		return 0
	})
	s.reg.MustRegister(s.scrapes, s.lastScrape,
		s.triageRuns, s.triageDuration, s.detectErrors, s.persistErrors, s.incidentsOpen,
		s.topCause, s.notifications, s.alerts, s.alertsRefused, s.triageRefused, s.authFailures, s.apiRefused,
		s.detectRefused, s.cycleOverruns,
		s.stateCorrupt, s.pending, s.reloads, ready)
	s.reg.MustRegister(s.fleet.collectors()...)
	for _, reason := range []string{"max_series", "max_scopes", "open_incidents", "notifications"} {
		s.detectRefused.WithLabelValues(reason) // 0 from the start, for increase()
	}
	return s
}

// setEngineSeries sets whyslow_engine_series_found, registering it first.
func (s *stats) setEngineSeries(n float64) {
	s.engineSeriesOnce.Do(func() { s.reg.MustRegister(s.engineSeries) })
	s.engineSeries.Set(n)
}

// observeScrape counts a scrape. The per-target duration, success and
// sample gauges (whyslow_scrape_*) come from collectors/scrape.
func (s *stats) observeScrape(r ScrapeResult, at time.Time) {
	if r.Err != nil {
		s.scrapes.WithLabelValues(r.Target, "failure").Inc()
		return
	}
	s.scrapes.WithLabelValues(r.Target, "success").Inc()
	s.lastScrape.WithLabelValues(r.Target).Set(float64(at.UnixNano()) / 1e9)
}

// publish sets the incident gauges from the current incidents.
func (s *stats) publish(incs []incident.Incident, external string) {
	s.topCause.Reset()
	open := 0
	for _, in := range incs {
		if in.Status != incident.IncidentOpen {
			continue
		}
		open++
		cause := in.TopCause
		if cause == "" {
			cause = "unknown"
		}
		s.topCause.WithLabelValues(in.Key, cause, string(in.Severity)).Set(1)
	}
	s.incidentsOpen.Set(float64(open))
	s.fleet.open.set(incs, external)
}
