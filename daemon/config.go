package daemon

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/common/model"

	"github.com/whyslow/whyslow/collectors/remote"
	"github.com/whyslow/whyslow/collectors/spanstore"
	"github.com/whyslow/whyslow/detect"
	"github.com/whyslow/whyslow/diagnose"
	"github.com/whyslow/whyslow/incident"
	"github.com/whyslow/whyslow/internal/redact"
	"github.com/whyslow/whyslow/notifiers/alertmanager"
	"github.com/whyslow/whyslow/notifiers/logsink"
	"github.com/whyslow/whyslow/notifiers/slack"
	"github.com/whyslow/whyslow/notifiers/webhook"
	"github.com/whyslow/whyslow/rules"
	"github.com/whyslow/whyslow/rulesets"
)

// Defaults for Config fields left zero.
const (
	DefaultEngineURL      = "http://127.0.0.1:8000/metrics"
	DefaultScrapeInterval = 5 * time.Second
	DefaultRetention      = 6 * time.Hour
	DefaultListen         = ":9109"
	DefaultMaxBodyBytes   = 1 << 20
	DefaultTriageWindow   = 5 * time.Minute
	DefaultTriageBaseline = time.Hour
	DefaultShutdownFlush  = 10 * time.Second
	DefaultEngine         = "vllm"
	// DefaultFleetInterval is a fleet daemon's cycle: Prometheus's usual
	// scrape interval (a shorter one would re-read the same samples).
	DefaultFleetInterval = 15 * time.Second
	// DefaultTriageConcurrency bounds the detector's triages in one cycle.
	DefaultTriageConcurrency = 4
	DefaultOTLPHTTP          = ":4318"
	DefaultOTLPGRPC          = ":4317"
	// DefaultSpanBytes bounds the span store of a sidecar (the spanstore
	// package's own default, 256 MiB, suits a fleet daemon).
	DefaultSpanBytes = 64 << 20
	// DefaultTriageTimeout bounds one ad-hoc or Alertmanager triage.
	DefaultTriageTimeout = 30 * time.Second
	// DefaultMaxConcurrentTriages bounds the ad-hoc, Alertmanager and Slack
	// triages that run at once (the detector's own run in its loop).
	DefaultMaxConcurrentTriages = 2
	// DefaultMaxSelectorBytes bounds a triage request's selector.
	DefaultMaxSelectorBytes = 4 << 10
	// DefaultMaxAlerts bounds the alerts of one Alertmanager webhook.
	DefaultMaxAlerts = 256
	// DefaultMaxLabelBytes bounds one alert label value.
	DefaultMaxLabelBytes = 1 << 10
	// DefaultMaxOpenAlertIncidents bounds the incidents Alertmanager alerts
	// keep open at once.
	DefaultMaxOpenAlertIncidents = 64
)

// DefaultScopeLabels maps Alertmanager alert labels to scope labels when
// Config.Alerts.ScopeLabels is empty: an alert's model_name, namespace and
// pod become the triage selector.
var DefaultScopeLabels = map[string]string{"model_name": "model_name", "namespace": "namespace", "pod": "pod"}

// Config is the daemon's whole configuration: the shape of `whyslow serve
// --config FILE`. Zero values get defaults (WithDefaults).
type Config struct {
	// Engine is the engine kind triage assumes: a shipped map's (vllm,
	// sglang, trtllm, tgi), one of Rulesets', or auto.
	Engine string `yaml:"engine,omitempty" json:"engine,omitempty"`
	// Rulesets are engine maps of the user's (files with `engine:`, as
	// `whyslow why --ruleset` takes them), read beside the shipped maps by
	// the triage, the detector, the chart and the pages. One for a shipped
	// engine takes its place. A relative path is read from the config
	// file's directory. Bound at start: a change needs a restart.
	Rulesets []string `yaml:"rulesets,omitempty" json:"rulesets,omitempty"`
	// Scheduler is the engine's scheduler settings, as incident.yaml's
	// `scheduler:` block; empty leaves them unknown (the ruleset's engine
	// defaults for the GPU apply).
	Scheduler SchedulerConfig `yaml:"scheduler,omitempty" json:"scheduler,omitempty"`
	// Source picks the mode: empty (the sidecar: whyslow scrapes
	// EngineURLs into its own store) or prometheus (the fleet daemon: it
	// reads every engine the Prometheus holds).
	Source SourceConfig `yaml:"source,omitempty" json:"source,omitempty"`
	// EngineURLs are the /metrics endpoints scraped (default vLLM's local
	// port); not used with a Prometheus source.
	EngineURLs []string `yaml:"engine_urls,omitempty" json:"engine_urls,omitempty"`
	// ScrapeInterval is the collect → detect → triage period (default 5s;
	// 15s with a Prometheus source, its usual scrape interval).
	ScrapeInterval time.Duration `yaml:"scrape_interval,omitempty" json:"scrape_interval,omitempty"`
	// ScrapeTimeout bounds one scrape (default: the interval minus 10%).
	ScrapeTimeout time.Duration `yaml:"scrape_timeout,omitempty" json:"scrape_timeout,omitempty"`
	// Retention is how long samples are kept (default 6h).
	Retention time.Duration `yaml:"retention,omitempty" json:"retention,omitempty"`
	// DataDir holds the TSDB, the incident state and the outbox; empty keeps
	// everything in memory.
	DataDir string `yaml:"data_dir,omitempty" json:"data_dir,omitempty"`
	// Listen is the HTTP API address (default :9109).
	Listen string `yaml:"listen,omitempty" json:"listen,omitempty"`
	// API configures the HTTP API.
	API APIConfig `yaml:"api,omitempty" json:"api,omitempty"`
	// Triage sets the windows of the triage the daemon runs.
	Triage TriageConfig `yaml:"triage,omitempty" json:"triage,omitempty"`
	// Detect configures the triggers.
	Detect detect.DetectConfig `yaml:"detect,omitempty" json:"detect,omitempty"`
	// Incidents sets the noise controls.
	Incidents incident.IncidentConfig `yaml:"incidents,omitempty" json:"incidents,omitempty"`
	// Alerts configures the Alertmanager webhook intake.
	Alerts AlertsConfig `yaml:"alerts,omitempty" json:"alerts,omitempty"`
	// Receivers are where notifications go.
	Receivers []ReceiverConfig `yaml:"receivers,omitempty" json:"receivers,omitempty"`
	// SlackCommand enables the /whyslow slash command at POST /slack/commands.
	SlackCommand *slack.CommandConfig `yaml:"slack_command,omitempty" json:"slack_command,omitempty"`
	// GPU configures the NVML collector.
	GPU GPUConfig `yaml:"gpu,omitempty" json:"gpu,omitempty"`
	// OTLP configures the trace receivers and the span store.
	OTLP OTLPConfig `yaml:"otlp,omitempty" json:"otlp,omitempty"`
	// ShutdownFlush bounds the outbox flush on SIGTERM (default 10s).
	ShutdownFlush time.Duration `yaml:"shutdown_flush,omitempty" json:"shutdown_flush,omitempty"`
}

// SourceConfig says where the daemon's metrics come from.
type SourceConfig struct {
	// Prometheus, when set, makes the daemon a fleet daemon over a
	// Prometheus-compatible query API (Prometheus, Thanos, Mimir,
	// VictoriaMetrics): no scraping, scopes are discovered from
	// detect.group_by, each triaged with its own engine's ruleset.
	Prometheus *PrometheusSource `yaml:"prometheus,omitempty" json:"prometheus,omitempty"`
}

// PrometheusSource is the query API a fleet daemon reads.
type PrometheusSource struct {
	// URL is the API's base URL, e.g. http://prometheus:9090 or
	// https://mimir/prometheus.
	URL string `yaml:"url" json:"url"`
	// BearerToken is sent as "Authorization: Bearer ...".
	BearerToken string `yaml:"bearer_token,omitempty" json:"-"`
	// BasicAuth is sent as basic auth (exclusive with BearerToken).
	BasicAuth *BasicAuth `yaml:"basic_auth,omitempty" json:"basic_auth,omitempty"`
	// Headers are added to every query (e.g. X-Scope-OrgID for Mimir).
	Headers map[string]string `yaml:"headers,omitempty" json:"-"`
	// Timeout bounds one query (default 30s).
	Timeout time.Duration `yaml:"timeout,omitempty" json:"timeout,omitempty"`
}

// BasicAuth is a user and password.
type BasicAuth struct {
	Username string `yaml:"username" json:"username"`
	Password string `yaml:"password,omitempty" json:"-"`
}

// Fleet reports whether the daemon reads a Prometheus source.
func (c Config) Fleet() bool { return c.Source.Prometheus != nil }

// APIConfig configures the HTTP API.
type APIConfig struct {
	// Token, when set, is required as "Authorization: Bearer TOKEN" on /api/*
	// (and /debug/pprof/). Without one, /api/* answers only on a loopback
	// listen address: on any other it refuses every request (403) unless
	// Insecure is set. /metrics, /healthz and /readyz are always open.
	Token string `yaml:"token,omitempty" json:"-"`
	// Insecure serves /api/* without a token on a non-loopback address.
	Insecure bool `yaml:"insecure,omitempty" json:"insecure,omitempty"`
	// TriageTimeout bounds one ad-hoc or Alertmanager triage (default 30s);
	// POST /api/v1/triage answers 503 with Retry-After past it.
	TriageTimeout time.Duration `yaml:"triage_timeout,omitempty" json:"triage_timeout,omitempty"`
	// MaxConcurrentTriages bounds the ad-hoc, Alertmanager and Slack
	// triages running at once (default 2); POST /api/v1/triage answers 429
	// with Retry-After beyond it.
	MaxConcurrentTriages int `yaml:"max_concurrent_triages,omitempty" json:"max_concurrent_triages,omitempty"`
	// MaxBodyBytes limits request bodies (default 1 MiB); larger ones get 413.
	MaxBodyBytes int64 `yaml:"max_body_bytes,omitempty" json:"max_body_bytes,omitempty"`
	// ExternalURL is how people reach this daemon; notifications link to
	// ExternalURL/verdict?scope=… (the verdict page) when set.
	ExternalURL string `yaml:"external_url,omitempty" json:"external_url,omitempty"`
	// TrustedProxies are the addresses (IPs or CIDRs) of the reverse
	// proxies whose X-Forwarded-Proto: https is believed: the session
	// cookie is then Secure. Anyone else could claim it.
	TrustedProxies []string `yaml:"trusted_proxies,omitempty" json:"trusted_proxies,omitempty"`
	// Pprof serves Go's profiles at /debug/pprof/ (behind the token when
	// one is set), to see where the daemon's memory and CPU go.
	Pprof bool `yaml:"pprof,omitempty" json:"pprof,omitempty"`
}

// TriageConfig sets the windows of daemon-run triage.
type TriageConfig struct {
	// Window is the incident window ending at the triage time (default 5m)
	// of ad-hoc and alert triages. An incident the detector opened is
	// triaged over the detector's short window plus its age so far, up to
	// this.
	Window time.Duration `yaml:"window,omitempty" json:"window,omitempty"`
	// Baseline is the offset of the baseline window (default 1h).
	Baseline time.Duration `yaml:"baseline,omitempty" json:"baseline,omitempty"`
	// Concurrency bounds the detector's triages of open incidents that run
	// at once in one cycle (default 4).
	Concurrency int `yaml:"concurrency,omitempty" json:"concurrency,omitempty"`
	// CycleBudget bounds one cycle's triages (default: the interval): the
	// incidents not triaged within it are triaged first next cycle, so a
	// fleet with many open incidents keeps its interval.
	CycleBudget time.Duration `yaml:"cycle_budget,omitempty" json:"cycle_budget,omitempty"`
	// SLO bounds on the incident window ("ttft_p95 > 2s", "success_rate <
	// 99%"): a breach makes a triage's verdict an anomaly on its own.
	SLO []string `yaml:"slo,omitempty" json:"slo,omitempty"`
}

// SchedulerConfig is what the engine was started with (vLLM's
// --enable-chunked-prefill, --max-num-batched-tokens, --max-num-seqs).
// Triage needs the token budget to name chunked_prefill_mismatch without
// GPU counters. All unset means unknown.
type SchedulerConfig struct {
	ChunkedPrefill      *bool `yaml:"chunked_prefill,omitempty" json:"chunked_prefill,omitempty"`
	MaxNumBatchedTokens int   `yaml:"max_num_batched_tokens,omitempty" json:"max_num_batched_tokens,omitempty"`
	MaxNumSeqs          int   `yaml:"max_num_seqs,omitempty" json:"max_num_seqs,omitempty"`
}

// Known reports whether any setting is given.
func (s SchedulerConfig) Known() bool {
	return s.ChunkedPrefill != nil || s.MaxNumBatchedTokens != 0 || s.MaxNumSeqs != 0
}

// Rules converts the settings to the rules' view (Source "config"); unset
// settings give rules.Scheduler{} (unknown), as `whyslow why` does for an
// incident.yaml without a scheduler block.
func (s SchedulerConfig) Rules() rules.Scheduler {
	if !s.Known() {
		return rules.Scheduler{}
	}
	out := rules.Scheduler{Known: true, MaxNumBatchedTokens: s.MaxNumBatchedTokens, MaxNumSeqs: s.MaxNumSeqs, Source: "config"}
	if s.ChunkedPrefill != nil {
		out.ChunkedPrefill = *s.ChunkedPrefill
	}
	return out
}

// AlertsConfig configures the Alertmanager intake.
type AlertsConfig struct {
	// ScopeLabels maps alert label names to selector label names (default
	// model_name, namespace, pod to themselves). Alert labels not listed are
	// ignored for the scope.
	ScopeLabels map[string]string `yaml:"scope_labels,omitempty" json:"scope_labels,omitempty"`
	// MaxAlerts bounds the alerts of one webhook (default 256): a larger
	// one is refused whole with 413.
	MaxAlerts int `yaml:"max_alerts,omitempty" json:"max_alerts,omitempty"`
	// MaxLabelBytes bounds an alert label value (default 1024): a webhook
	// with a longer one is refused whole with 422.
	MaxLabelBytes int `yaml:"max_label_bytes,omitempty" json:"max_label_bytes,omitempty"`
	// MaxOpenIncidents bounds the incidents Alertmanager alerts keep open
	// (default 64): alerts that would open more are refused (429) and not
	// remembered, so a later delivery opens them once there is room.
	MaxOpenIncidents int `yaml:"max_open_incidents,omitempty" json:"max_open_incidents,omitempty"`
}

// ReceiverConfig is one notification receiver. Exactly one of Webhook,
// Slack, Log and Alertmanager is set; their fields are the receivers' own
// configuration. Alertmanager is not fed notifications: it gets every open
// incident as an alert, re-sent while open (notifiers/alertmanager).
type ReceiverConfig struct {
	Name         string               `yaml:"name" json:"name"`
	Webhook      *webhook.Config      `yaml:"webhook,omitempty" json:"webhook,omitempty"`
	Slack        *slack.Config        `yaml:"slack,omitempty" json:"slack,omitempty"`
	Log          *logsink.Config      `yaml:"log,omitempty" json:"log,omitempty"`
	Alertmanager *alertmanager.Config `yaml:"alertmanager,omitempty" json:"alertmanager,omitempty"`
}

// GPUConfig configures the NVML collector. Without an NVIDIA driver it logs
// once, and verdicts list "no GPU counters" as a data gap.
type GPUConfig struct {
	// Enabled turns the collector on (default true).
	Enabled *bool `yaml:"enabled,omitempty" json:"enabled,omitempty"`
	// Class is the GPU class triage assumes (e.g. H100, A100-40GB). Empty:
	// inferred from the GPU counters' model label, else unknown. Applies
	// on reload (the collector settings need a restart).
	Class string `yaml:"class,omitempty" json:"class,omitempty"`
	// VisibleDevices narrows the GPUs read, in CUDA_VISIBLE_DEVICES style
	// (indices, UUIDs or UUID prefixes, comma-separated); empty reads all.
	VisibleDevices string `yaml:"visible_devices,omitempty" json:"visible_devices,omitempty"`
	// Labels are added to every whyslow_gpu_* series, e.g. pod: ${POD_NAME}.
	// A daemon watching exactly one engine already labels them with that
	// engine's instance and pod (as the rulesets' pod join needs); Labels
	// win over those.
	Labels map[string]string `yaml:"labels,omitempty" json:"labels,omitempty"`
}

// On reports whether the GPU collector runs.
func (g GPUConfig) On() bool { return g.Enabled == nil || *g.Enabled }

// OTLPConfig configures the OTLP trace receivers and the span store they
// fill (which triage reads for its per-request step).
type OTLPConfig struct {
	// HTTP is the OTLP/HTTP listen address (default :4318; "" disables).
	HTTP *string `yaml:"http,omitempty" json:"http,omitempty"`
	// GRPC is the OTLP/gRPC listen address (default :4317; "" disables).
	GRPC *string `yaml:"grpc,omitempty" json:"grpc,omitempty"`
	// MaxSpans bounds the spans held (default 1,000,000).
	MaxSpans int `yaml:"max_spans,omitempty" json:"max_spans,omitempty"`
	// MaxBytes bounds the estimated bytes the spans hold (default 64 MiB).
	MaxBytes int64 `yaml:"max_bytes,omitempty" json:"max_bytes,omitempty"`
	// MaxSpanBytes bounds one span (default max_bytes/1024, 16 KiB to 1
	// MiB): longer attribute values are cut to fit, so one huge span cannot
	// evict the others.
	MaxSpanBytes int64 `yaml:"max_span_bytes,omitempty" json:"max_span_bytes,omitempty"`
	// MaxTriageSpans bounds the spans one triage reads (default 10000, the
	// newest of its window): a triage's cost grows with them (about 5 kB
	// and 6 µs each), and a flood of spans must not make every triage slow.
	MaxTriageSpans int `yaml:"max_triage_spans,omitempty" json:"max_triage_spans,omitempty"`
	// RequireToken makes the receivers require api.token as
	// "Authorization: Bearer TOKEN" on every export (the header OTel
	// exporters send with OTEL_EXPORTER_OTLP_HEADERS).
	RequireToken bool `yaml:"require_token,omitempty" json:"require_token,omitempty"`
}

// OTLPDisabled returns an OTLPConfig with both receivers off.
func OTLPDisabled() OTLPConfig {
	off := ""
	return OTLPConfig{HTTP: &off, GRPC: &off}
}

// Enabled reports whether any receiver listens.
func (o OTLPConfig) Enabled() bool {
	return (o.HTTP != nil && *o.HTTP != "") || (o.GRPC != nil && *o.GRPC != "")
}

func strPtr(s string) *string { return &s }

// WithDefaults returns c with zero values replaced by defaults.
func (c Config) WithDefaults() Config {
	switch {
	case c.Engine != "":
	case c.Fleet():
		c.Engine = "auto" // each scope is read with its own engine's ruleset
	default:
		c.Engine = DefaultEngine
	}
	if len(c.EngineURLs) == 0 && !c.Fleet() {
		c.EngineURLs = []string{DefaultEngineURL}
	}
	if c.ScrapeInterval == 0 {
		c.ScrapeInterval = DefaultScrapeInterval
		if c.Fleet() {
			c.ScrapeInterval = DefaultFleetInterval
		}
	}
	if c.Fleet() && c.GPU.Enabled == nil {
		// A fleet daemon runs away from the GPUs; their counters come
		// from Prometheus (dcgm-exporter).
		c.GPU.Enabled = new(bool)
	}
	if c.Fleet() && c.Source.Prometheus.Timeout == 0 {
		c.Source.Prometheus.Timeout = remote.DefaultTimeout
	}
	if c.Triage.Concurrency == 0 {
		c.Triage.Concurrency = DefaultTriageConcurrency
	}
	if c.Triage.CycleBudget == 0 {
		c.Triage.CycleBudget = c.ScrapeInterval
	}
	if c.ScrapeTimeout == 0 {
		c.ScrapeTimeout = c.ScrapeInterval - c.ScrapeInterval/10
	}
	if c.Retention == 0 {
		c.Retention = DefaultRetention
	}
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.API.MaxBodyBytes == 0 {
		c.API.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.API.TriageTimeout == 0 {
		c.API.TriageTimeout = DefaultTriageTimeout
	}
	if c.API.MaxConcurrentTriages == 0 {
		c.API.MaxConcurrentTriages = DefaultMaxConcurrentTriages
	}
	if c.Alerts.MaxAlerts == 0 {
		c.Alerts.MaxAlerts = DefaultMaxAlerts
	}
	if c.Alerts.MaxLabelBytes == 0 {
		c.Alerts.MaxLabelBytes = DefaultMaxLabelBytes
	}
	if c.Alerts.MaxOpenIncidents == 0 {
		c.Alerts.MaxOpenIncidents = DefaultMaxOpenAlertIncidents
	}
	if c.Triage.Window == 0 {
		c.Triage.Window = DefaultTriageWindow
	}
	if c.Triage.Baseline == 0 {
		c.Triage.Baseline = DefaultTriageBaseline
	}
	if len(c.Alerts.ScopeLabels) == 0 {
		c.Alerts.ScopeLabels = DefaultScopeLabels
	}
	if c.ShutdownFlush == 0 {
		c.ShutdownFlush = DefaultShutdownFlush
	}
	if c.OTLP.HTTP == nil {
		c.OTLP.HTTP = strPtr(DefaultOTLPHTTP)
	}
	if c.OTLP.GRPC == nil {
		c.OTLP.GRPC = strPtr(DefaultOTLPGRPC)
	}
	if c.OTLP.MaxSpans == 0 {
		c.OTLP.MaxSpans = spanstore.DefaultMaxSpans
	}
	if c.OTLP.MaxBytes == 0 {
		c.OTLP.MaxBytes = DefaultSpanBytes
	}
	c.Detect = c.Detect.WithDefaults()
	c.Incidents = c.Incidents.WithDefaults()
	return c
}

// Validate returns every problem with c (after defaults), joined; each names
// the key it is about.
func (c Config) Validate() error {
	c = c.WithDefaults()
	var p problems
	c.validateSource(&p)
	c.validateCollection(&p)
	c.validateIntake(&p)
	c.validateTriage(&p)
	if c.SlackCommand != nil {
		if err := c.SlackCommand.Validate(); err != nil {
			p = append(p, err) // its messages start with "slack_command: "
		}
	}
	c.validateModel(&p)
	if c.OTLP.MaxSpans < 0 || c.OTLP.MaxBytes < 0 || c.OTLP.MaxSpanBytes < 0 || c.OTLP.MaxTriageSpans < 0 {
		p.add("otlp", "max_spans, max_bytes, max_span_bytes and max_triage_spans must not be negative")
	}
	names := map[string]bool{}
	for i, r := range c.Receivers {
		validateReceiver(&p, fmt.Sprintf("receivers[%d]", i), r, names)
	}
	return errors.Join(p...)
}

// Maps returns the engine maps the daemon reads: the shipped ones and
// Rulesets'.
func (c Config) Maps() (*rulesets.Maps, error) {
	maps, errs := c.loadMaps()
	return maps, errors.Join(errs...)
}

// loadMaps reads Rulesets beside the shipped maps; each problem names its
// entry (rulesets[i]) and its place in the map file (file:line:col). The
// maps returned hold the entries that load.
func (c Config) loadMaps() (*rulesets.Maps, []error) {
	var (
		user []*rules.Ruleset
		errs []error
		by   = map[string]int{}
	)
	for i, path := range c.Rulesets {
		key := fmt.Sprintf("rulesets[%d]", i)
		rs, err := rulesets.LoadMap(path)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", key, err))
			continue
		}
		if j, dup := by[rs.Engine]; dup {
			errs = append(errs, fmt.Errorf("%s: %s maps engine %q as rulesets[%d] (%s) does: one map an engine", key, path, rs.Engine, j, c.Rulesets[j]))
			continue
		}
		by[rs.Engine] = i
		user = append(user, rs)
	}
	return rulesets.Shipped().WithUser(user...), errs
}

// problems collects Validate's errors in the order the checks run.
type problems []error

func (p *problems) add(key, format string, args ...any) {
	*p = append(*p, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
}

func (p *problems) wrap(key string, err error) {
	*p = append(*p, fmt.Errorf("%s: %w", key, err))
}

// validateSource checks the user's engine maps, the engine (one a map
// names) and, for a fleet daemon, its Prometheus and the keys a fleet
// daemon has no use for.
func (c Config) validateSource(p *problems) {
	maps, errs := c.loadMaps()
	*p = append(*p, errs...)
	if c.Engine != "auto" && !maps.Knows(c.Engine) {
		hint := ""
		if len(c.Rulesets) == 0 {
			hint = "; a map for another engine is listed under rulesets:"
		}
		p.add("engine", "unknown engine %q (want %s)%s", c.Engine, rulesets.OneOf(append([]string{"auto"}, maps.Engines()...)...), hint)
	}
	prom := c.Source.Prometheus
	if prom == nil {
		return
	}
	if u, err := url.Parse(prom.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		p.add("source.prometheus.url", "%q is not an http(s) URL", redact.URL(prom.URL))
	}
	if prom.BearerToken != "" && prom.BasicAuth != nil {
		p.add("source.prometheus", "bearer_token and basic_auth are exclusive")
	}
	if prom.BasicAuth != nil && prom.BasicAuth.Username == "" {
		p.add("source.prometheus.basic_auth.username", "missing")
	}
	for name := range prom.Headers {
		if name == "" || strings.ContainsAny(name, " :\r\n") {
			p.add("source.prometheus.headers", "invalid header name %q", name)
		}
	}
	if prom.Timeout < 0 {
		p.add("source.prometheus.timeout", "must not be negative")
	}
	if len(c.EngineURLs) > 0 {
		p.add("engine_urls", "not used with source.prometheus (a fleet daemon reads the engines from Prometheus)")
	}
	if c.GPU.On() {
		p.add("gpu.enabled", "not available with source.prometheus (the GPU counters come from Prometheus: dcgm-exporter)")
	}
}

// validateCollection checks the cycle's limits, the scrape targets and
// timing, and the retention.
func (c Config) validateCollection(p *problems) {
	if c.Triage.Concurrency < 0 || c.Triage.CycleBudget < 0 {
		p.add("triage", "concurrency and cycle_budget must not be negative")
	}
	for i, u := range c.EngineURLs {
		pu, err := url.Parse(u)
		if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
			p.add(fmt.Sprintf("engine_urls[%d]", i), "%q is not an http(s) URL", u)
		}
	}
	if c.ScrapeInterval < time.Second {
		p.add("scrape_interval", "%s is below 1s", c.ScrapeInterval)
	}
	if c.ScrapeTimeout <= 0 || c.ScrapeTimeout > c.ScrapeInterval {
		p.add("scrape_timeout", "%s must be positive and at most scrape_interval %s", c.ScrapeTimeout, c.ScrapeInterval)
	}
	if c.Retention < time.Hour {
		p.add("retention", "%s is below 1h (the baseline needs history)", c.Retention)
	}
}

// validateIntake checks what the HTTP side takes in: the API, the
// Alertmanager webhook and the OTLP receivers' token.
func (c Config) validateIntake(p *problems) {
	if c.API.MaxBodyBytes < 0 {
		p.add("api.max_body_bytes", "must not be negative")
	}
	if c.API.TriageTimeout < 0 || c.API.MaxConcurrentTriages < 0 {
		p.add("api", "triage_timeout and max_concurrent_triages must not be negative")
	}
	if c.Alerts.MaxAlerts < 0 || c.Alerts.MaxLabelBytes < 0 || c.Alerts.MaxOpenIncidents < 0 {
		p.add("alerts", "max_alerts, max_label_bytes and max_open_incidents must not be negative")
	}
	if c.OTLP.RequireToken && c.API.Token == "" {
		p.add("otlp.require_token", "needs api.token (the receivers require the same token)")
	}
	if c.API.ExternalURL != "" {
		if pu, err := url.Parse(c.API.ExternalURL); err != nil || pu.Host == "" {
			p.add("api.external_url", "%q is not a URL", c.API.ExternalURL)
		}
	}
	for i, s := range c.API.TrustedProxies {
		if _, ok := parseProxy(s); !ok {
			p.add(fmt.Sprintf("api.trusted_proxies[%d]", i), "%q is not an IP address or CIDR (e.g. 10.0.0.7 or 10.0.0.0/8)", s)
		}
	}
}

// validateTriage checks the triage windows and SLO bounds, the shutdown
// flush, detection, incident tracking and the alerts' scope labels.
func (c Config) validateTriage(p *problems) {
	for i, s := range c.Triage.SLO {
		if _, err := diagnose.ParseSLO(s); err != nil {
			p.add(fmt.Sprintf("triage.slo[%d]", i), "%v", err)
		}
	}
	if c.Triage.Window < 0 || c.Triage.Baseline < 0 {
		p.add("triage", "window and baseline must not be negative")
	}
	if c.Triage.Baseline > 0 && c.Triage.Baseline < c.Triage.Window {
		p.add("triage.baseline", "%s is shorter than the window %s", c.Triage.Baseline, c.Triage.Window)
	}
	if c.ShutdownFlush < 0 {
		p.add("shutdown_flush", "must not be negative")
	}
	if err := c.Detect.Validate(); err != nil {
		p.wrap("detect", err)
	}
	if err := c.Incidents.Validate(); err != nil {
		p.wrap("incidents", err)
	}
	for from, to := range c.Alerts.ScopeLabels {
		if !model.LabelName(from).IsValidLegacy() || !model.LabelName(to).IsValidLegacy() || to == model.MetricNameLabel {
			p.add("alerts.scope_labels", "invalid label name in %q: %q", from, to)
		}
	}
}

// validateModel checks what describes the deployment: the scheduler's
// limits and the GPU class and labels.
func (c Config) validateModel(p *problems) {
	if c.Scheduler.MaxNumBatchedTokens < 0 {
		p.add("scheduler.max_num_batched_tokens", "must not be negative")
	}
	if c.Scheduler.MaxNumSeqs < 0 {
		p.add("scheduler.max_num_seqs", "must not be negative")
	}
	if c.GPU.Class != "" && diagnose.GPUMemoryGiB(c.GPU.Class) == 0 {
		p.add("gpu.class", "unknown GPU class %q (want e.g. H100, H200, A100, A100-40GB, L40S)", c.GPU.Class)
	}
	for name := range c.GPU.Labels {
		if !model.LabelName(name).IsValidLegacy() || name == "__name__" {
			p.add("gpu.labels", "invalid label name %q", name)
		}
	}
}

// validateReceiver checks one receiver under key; names holds the names
// seen so far.
func validateReceiver(p *problems, key string, r ReceiverConfig, names map[string]bool) {
	if r.Name == "" {
		p.add(key+".name", "missing")
	} else if names[r.Name] {
		p.add(key+".name", "duplicate receiver %q", r.Name)
	}
	names[r.Name] = true
	kinds := 0
	for _, set := range []bool{r.Webhook != nil, r.Slack != nil, r.Log != nil, r.Alertmanager != nil} {
		if set {
			kinds++
		}
	}
	switch {
	case kinds == 0:
		p.add(key, "set one of webhook, slack, log or alertmanager")
	case kinds > 1:
		p.add(key, "webhook, slack, log and alertmanager are exclusive")
	case r.Alertmanager != nil:
		if err := r.Alertmanager.WithDefaults().Validate(); err != nil {
			p.wrap(key, err) // its messages start with "alertmanager: "
		}
	case r.Slack != nil:
		if err := r.Slack.Validate(); err != nil {
			p.wrap(key+".slack", err)
		}
	case r.Webhook != nil:
		if err := r.Webhook.WithDefaults().Validate(); err != nil {
			p.wrap(key+".webhook", err)
		}
	case r.Log != nil:
		lc := *r.Log
		if lc.Format == "" {
			lc.Format = logsink.DefaultConfig().Format
		}
		if err := lc.Validate(); err != nil {
			p.wrap(key+".log", err)
		}
	}
}
