package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	wcollectors "github.com/whyslow/whyslow/collectors"
	"github.com/whyslow/whyslow/collectors/gpu"
	"github.com/whyslow/whyslow/collectors/otlp"
	"github.com/whyslow/whyslow/collectors/spanstore"
	"github.com/whyslow/whyslow/collectors/store"
	"github.com/whyslow/whyslow/detect"
	"github.com/whyslow/whyslow/diagnose"
	"github.com/whyslow/whyslow/internal/redact"
	"github.com/whyslow/whyslow/notifiers"
	"github.com/whyslow/whyslow/notifiers/alertmanager"
	"github.com/whyslow/whyslow/notifiers/chart"
	"github.com/whyslow/whyslow/notifiers/logsink"
	"github.com/whyslow/whyslow/notifiers/outbox"
	"github.com/whyslow/whyslow/notifiers/slack"
	"github.com/whyslow/whyslow/notifiers/webhook"
	"github.com/whyslow/whyslow/query"
	"github.com/whyslow/whyslow/rules"
	"github.com/whyslow/whyslow/rulesets"
	"github.com/whyslow/whyslow/verdict"
)

// TriageWith returns a TriageFunc running the real walk (diagnose.Run) over m
// with the maps' rulesets (nil: the shipped maps, Config.Maps); traces, when
// not nil, adds the per-request step. Each request reads only the rulesets
// its engine needs (every map's for auto), a shipped one compiled once per
// process on first use. An engine no map names fails now; engine's shipped
// rulesets are not compiled until a triage reads them: an idle sidecar
// would otherwise hold a compiled ruleset it has not used (vllm's is ~1.7 MB
// of live heap; over an idle sidecar's first 18 minutes its anonymous
// memory was 13–17 MB with it, 9–11 MB without: README, Cost).
func TriageWith(m query.Metrics, traces diagnose.Traces, maps *rulesets.Maps, engine string) (TriageFunc, error) {
	if maps == nil {
		maps = rulesets.Shipped()
	}
	if err := maps.Check(engine); err != nil {
		return nil, fmt.Errorf("load rulesets: %w", err)
	}
	return func(ctx context.Context, req TriageRequest) (*verdict.Verdict, error) {
		rss, err := maps.For(req.Engine)
		if err != nil {
			return nil, err
		}
		var slos []verdict.SLO
		for _, line := range strings.Split(req.SLOs, "\n") {
			if slo, err := diagnose.ParseSLO(line); err == nil {
				slos = append(slos, slo) // Config.Validate refused the others
			}
		}
		var learning *verdict.Learning
		if req.Learning.Message != "" {
			learning = &req.Learning
		}
		var others func() []*rules.Ruleset
		if req.Engine != "auto" && req.Engine != "" {
			others = func() []*rules.Ruleset { return maps.Others(req.Engine) }
		}
		return diagnose.Run(ctx, diagnose.Options{
			Metrics: m, Rulesets: rss, OtherEngines: others, At: req.At, Window: req.Window, Baseline: req.Baseline,
			Selector: req.Selector, Engine: req.Engine, Scheduler: req.Scheduler, GPU: req.GPU, GPUSource: req.GPUSource,
			Traces: traces, Shared: req.Shared, SLOs: slos, Daemon: true, Learning: learning,
		})
	}, nil
}

// StackOptions are the dependencies of a fully wired daemon.
type StackOptions struct {
	Config Config
	// Clock drives the outbox, retry stage and webhook (default the wall clock);
	// the demo and tests pass a *SimClock.
	Clock notifiers.Clock
	// LogWriter receives the log receivers' rendered notifications (default stdout).
	LogWriter io.Writer
	// HTTPClient scrapes and posts webhooks and Slack calls (default: each
	// component's own client).
	HTTPClient *http.Client
	// Scraper replaces the engine scraper (tests).
	Scraper Scraper
	// GPULib replaces NVML (tests; default gpu.NewNVML()).
	GPULib gpu.Lib
	// SlackResponseURL decides which slash-command response_url may be
	// posted to (tests; default https on slack.com).
	SlackResponseURL func(u *url.URL) bool
	// Retry overrides the retry stage's options (Clock, Metrics and Logger are set here).
	Retry notifiers.RetryOptions
	// Secrets are scrubbed from API errors (default ConfigSecrets(Config));
	// pass the set the Logger's redact.Handler uses, so reloads update both.
	Secrets *redact.Secrets
	Logger  *slog.Logger
}

// Stack is a daemon wired to the embedded store, the engine scraper, the GPU
// collector, the OTLP receivers and span store, the real triage, and the
// durable outbox with its dispatcher and receivers (webhook, Slack, log),
// plus the Slack slash command.
type Stack struct {
	Daemon     *Daemon
	Store      *store.Store
	Outbox     *outbox.Outbox
	Dispatcher *outbox.Dispatcher
	Registry   *prometheus.Registry
	// Spans holds the spans the OTLP receivers got (nil when both are off).
	Spans *spanstore.Store
	// OTLP is the trace receiver (nil when both addresses are empty).
	OTLP *otlp.Receiver
	// GPU is the NVML collector (nil when disabled).
	GPU *gpu.Collector

	scraper      *EngineScraper
	scrapeReg    *swapRegisterer
	alertSenders []*alertmanager.Sender
	command      *slack.CommandHandler
	cancel       context.CancelFunc
	otlpDone     chan error
	tmpOutbox    string
}

// NewStack builds everything Config describes and binds the OTLP listeners
// (so a taken port fails here). With no receivers configured a log receiver
// is used, so a verdict is never silently dropped.
func NewStack(o StackOptions) (*Stack, error) {
	cfg := o.Config.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if o.Clock == nil {
		o.Clock = notifiers.RealClock
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Secrets == nil {
		o.Secrets = ConfigSecrets(cfg)
	}
	// Receivers, outbox and collectors log through the redaction layer too.
	o.Logger = slog.New(redact.Handler(o.Logger.Handler(), o.Secrets))
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s := &Stack{Registry: reg}
	if err := s.build(cfg, o); err != nil {
		s.Close(context.Background())
		return nil, err
	}
	s.start()
	return s, nil
}

// build wires the parts in dependency order; on error the caller closes
// what was built so far.
func (s *Stack) build(cfg Config, o StackOptions) error {
	maps, err := cfg.Maps()
	if err != nil {
		return err
	}
	// The daemon's triages compile the shipped rulesets they read into
	// maps of their own, released when no incident is open (Tick).
	maps = maps.Releasable()
	source, err := s.openSource(cfg, o)
	if err != nil {
		return err
	}
	metrics := CountQueries(source)
	names, err := s.openDelivery(cfg, o, metrics, maps)
	if err != nil {
		return err
	}
	traces, err := s.openOTLP(cfg, o)
	if err != nil {
		return err
	}
	tri, err := TriageWith(metrics, traces, maps, cfg.Engine)
	if err != nil {
		return err
	}
	scraper, err := s.pickScraper(cfg, o, metrics)
	if err != nil {
		return err
	}
	sources, gatherers, err := s.openGPU(cfg, o)
	if err != nil {
		return err
	}
	routes, apiRoutes, err := s.routes(cfg, o)
	if err != nil {
		return err
	}
	senders, err := s.openAlertSenders(cfg, o)
	if err != nil {
		return err
	}
	var spansSeen func() uint64
	if s.Spans != nil {
		// Every span taken in is held or counted as evicted.
		spansSeen = func() uint64 { return uint64(s.Spans.Len()) + s.Spans.Evicted() }
	}
	s.Daemon, err = New(Options{
		AlertSenders: senders,
		Config:       cfg, Maps: maps, Metrics: metrics, Scraper: scraper, Triage: tri, OwnHistory: cfg.Fleet(), Outbox: s.Outbox, Receivers: names,
		Sources: sources, Gatherers: gatherers, Routes: routes, APIRoutes: apiRoutes,
		Flush: s.Dispatcher.Shutdown, Registry: s.Registry, Now: o.Clock.Now, Secrets: o.Secrets, Logger: o.Logger,
		SpansSeen: spansSeen,
	})
	return err
}

// openSource opens what triage reads: a fleet daemon its Prometheus, a
// sidecar its own store.
func (s *Stack) openSource(cfg Config, o StackOptions) (query.Metrics, error) {
	if cfg.Fleet() {
		return RemoteClient(cfg.Source.Prometheus)
	}
	// Without a data dir the store is a live in-memory one: bounded by the
	// retention like the on-disk mode, without a snapshot. (Versions that
	// embedded Prometheus's TSDB kept it in data_dir/tsdb; it is not read.)
	stOpts := store.Options{Retention: cfg.Retention, Live: true, Logger: o.Logger.With("component", "store")}
	if cfg.DataDir != "" {
		stOpts.Dir = filepath.Join(cfg.DataDir, "store")
	}
	st, err := store.Open(stOpts)
	if err != nil {
		return nil, err
	}
	s.Store = st
	return st, nil
}

// openDelivery opens the outbox, the receivers and the dispatcher between
// them, and returns the receivers' names in config order.
func (s *Stack) openDelivery(cfg Config, o StackOptions, metrics query.Metrics, maps *rulesets.Maps) ([]string, error) {
	obDir := ""
	if cfg.DataDir != "" {
		obDir = filepath.Join(cfg.DataDir, "outbox")
	} else {
		dir, err := mkTemp()
		if err != nil {
			return nil, err
		}
		obDir, s.tmpOutbox = dir, dir
	}
	var err error
	s.Outbox, err = outbox.Open(obDir, outbox.Options{Clock: o.Clock, Logger: o.Logger, Registerer: s.Registry})
	if err != nil {
		return nil, err
	}
	receivers, names, err := BuildReceivers(cfg.Receivers, o, metrics, maps)
	if err != nil {
		return nil, err
	}
	m, err := notifiers.NewMetrics(s.Registry)
	if err != nil {
		return nil, err
	}
	ro := o.Retry
	ro.Clock, ro.Metrics, ro.Logger = o.Clock, m, o.Logger
	s.Dispatcher, err = outbox.NewDispatcher(s.Outbox, outbox.DispatcherOptions{
		Receivers: receivers, Retrier: notifiers.NewRetrier(ro), Logger: o.Logger,
	})
	if err != nil {
		return nil, err
	}
	return names, nil
}

// openOTLP opens the span store and binds the OTLP receivers when either
// address is set; the traces are nil otherwise.
func (s *Stack) openOTLP(cfg Config, o StackOptions) (diagnose.Traces, error) {
	if !cfg.OTLP.Enabled() {
		return nil, nil
	}
	var err error
	s.Spans, err = spanstore.New(spanstore.Options{MaxSpans: cfg.OTLP.MaxSpans, MaxBytes: cfg.OTLP.MaxBytes,
		MaxSpanBytes: cfg.OTLP.MaxSpanBytes, MaxQuerySpans: cfg.OTLP.MaxTriageSpans, Registerer: s.Registry})
	if err != nil {
		return nil, fmt.Errorf("span store: %w", err)
	}
	oo := otlp.Options{HTTPAddr: *cfg.OTLP.HTTP, GRPCAddr: *cfg.OTLP.GRPC, Sink: s.Spans, Registerer: s.Registry, Logger: o.Logger}
	if cfg.OTLP.RequireToken {
		// The token of the running configuration (a reload may change it).
		oo.Token = func() string { return s.Daemon.Config().API.Token }
	}
	s.OTLP, err = otlp.New(oo)
	if err != nil {
		return nil, err
	}
	if err := s.OTLP.Listen(); err != nil {
		s.OTLP = nil
		return nil, fmt.Errorf("%w (set otlp.http / otlp.grpc, or --otlp-http= --otlp-grpc=, to another address or empty to disable)", err)
	}
	return s.Spans, nil
}

// pickScraper returns the test's scraper, a probe of the fleet's
// Prometheus, or the engine scraper into the store.
func (s *Stack) pickScraper(cfg Config, o StackOptions, metrics query.Metrics) (Scraper, error) {
	switch {
	case o.Scraper != nil:
		return o.Scraper, nil
	case cfg.Fleet():
		return &PrometheusProbe{Metrics: metrics, Name: redact.URL(cfg.Source.Prometheus.URL)}, nil
	}
	s.scrapeReg = &swapRegisterer{reg: s.Registry}
	var err error
	s.scraper, err = NewEngineScraper(s.Store, ScraperOptions{Targets: cfg.EngineURLs, Timeout: cfg.ScrapeTimeout, Client: o.HTTPClient, Registerer: s.scrapeReg})
	if err != nil {
		return nil, err
	}
	return s.scraper, nil
}

// openGPU opens the NVML collector as a source of the tick when enabled.
func (s *Stack) openGPU(cfg Config, o StackOptions) ([]Source, []prometheus.Gatherer, error) {
	if !cfg.GPU.On() {
		return nil, nil, nil
	}
	var err error
	s.GPU, err = gpu.New(gpu.Options{Lib: o.GPULib, Visible: cfg.GPU.VisibleDevices, Logger: o.Logger})
	if err != nil {
		return nil, nil, fmt.Errorf("gpu: %w", err)
	}
	creg := wcollectors.NewRegistry(wcollectors.RegistryOptions{Timeout: cfg.ScrapeTimeout, Logger: o.Logger})
	if err := creg.Register("gpu", s.GPU); err != nil {
		return nil, nil, err
	}
	src := NewCollectorSource(creg, s.Store, SourceOptions{Labels: cfg.GPU.Labels, Logger: o.Logger})
	return []Source{src}, []prometheus.Gatherer{src}, nil
}

// routes returns the extra HTTP handlers: the span queries inside /api/ and
// the Slack slash command outside it.
func (s *Stack) routes(cfg Config, o StackOptions) (routes, apiRoutes map[string]http.Handler, err error) {
	apiRoutes = map[string]http.Handler{}
	if s.Spans != nil {
		// `whyslow why --traces whyslow:URL` reads spans back through these.
		h := s.Spans.QueryHandler(o.Clock.Now)
		apiRoutes["GET /api/traces/{id}"] = h
		apiRoutes["GET /api/search"] = h
	}
	routes = map[string]http.Handler{}
	if cfg.SlackCommand == nil {
		return routes, apiRoutes, nil
	}
	s.command, err = slack.NewCommandHandler(*cfg.SlackCommand, slack.CommandOptions{
		Triager: slack.TriagerFunc(func(ctx context.Context, scope string, window time.Duration) (*verdict.Verdict, error) {
			return s.Daemon.TriageNow(ctx, "slack", scope, window)
		}),
		Logger: o.Logger, HTTPClient: o.HTTPClient, Now: o.Clock.Now, AllowResponseURL: o.SlackResponseURL,
		VerdictURL: func(v *verdict.Verdict) string {
			return verdictURL(s.Daemon.Config().API.ExternalURL, v.Scope.Selector)
		},
	})
	if err != nil {
		return nil, nil, err
	}
	routes["POST "+SlackCommandPath] = s.command
	return routes, apiRoutes, nil
}

// openAlertSenders builds one sender per Alertmanager receiver, in config
// order.
func (s *Stack) openAlertSenders(cfg Config, o StackOptions) ([]AlertSender, error) {
	var senders []AlertSender
	for _, rc := range cfg.Receivers {
		if rc.Alertmanager == nil {
			continue
		}
		as, err := alertmanager.NewSender(rc.Name, *rc.Alertmanager, o.HTTPClient, s.Registry, o.Logger)
		if err != nil {
			return nil, fmt.Errorf("receiver %s: %w", rc.Name, err)
		}
		s.alertSenders = append(s.alertSenders, as)
		senders = append(senders, as)
	}
	return senders, nil
}

// start runs the OTLP receivers, the dispatcher and the alert senders.
func (s *Stack) start() {
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	if s.OTLP != nil {
		s.otlpDone = make(chan error, 1)
		go func() { s.otlpDone <- s.OTLP.Run(ctx) }()
	}
	s.Dispatcher.Start()
	for _, as := range s.alertSenders {
		go as.Run(ctx)
	}
}

// SlackCommandPath is where the Slack slash command is served.
const SlackCommandPath = "/slack/commands"

// verdictURL links a scope's verdict page (pages.go: its latest verdict,
// with its incident's timeline a click away), or "" without an external
// URL.
func verdictURL(external, selector string) string {
	if external == "" {
		return ""
	}
	return strings.TrimSuffix(external, "/") + pathVerdict + "?scope=" + url.QueryEscape(selector)
}

// BuildReceivers constructs the configured notification receivers (a log
// receiver when none but Alertmanager ones are configured) and returns them
// with their names in config order.
// metrics feeds the Slack receivers' charts (nil: no chart), drawn from
// the maps' panels (nil: the shipped maps').
func BuildReceivers(rcs []ReceiverConfig, o StackOptions, metrics query.Metrics, maps *rulesets.Maps) (map[string]notifiers.Notifier, []string, error) {
	var notified []ReceiverConfig
	for _, rc := range rcs {
		if rc.Alertmanager == nil { // fed incidents, not notifications (NewStack's AlertSenders)
			notified = append(notified, rc)
		}
	}
	if len(notified) == 0 {
		// Nothing else takes notifications: they are logged, so a
		// transition is never silently dropped (and an Alertmanager-only
		// fleet daemon logs what it sends).
		lc := logsink.DefaultConfig()
		notified = []ReceiverConfig{{Name: "log", Log: &lc}}
	}
	rcs = notified
	out := map[string]notifiers.Notifier{}
	names := make([]string, 0, len(rcs))
	for _, rc := range rcs {
		var n notifiers.Notifier
		var err error
		switch {
		case rc.Webhook != nil:
			n, err = webhook.New(*rc.Webhook, webhook.Options{Client: o.HTTPClient, Clock: o.Clock, Logger: o.Logger})
		case rc.Slack != nil:
			so := slack.Options{Name: rc.Name, Logger: o.Logger, HTTPClient: o.HTTPClient}
			if metrics != nil {
				so.Chart = chart.PNGFunc(metrics, chart.Options{Engine: o.Config.WithDefaults().Engine, Maps: maps})
			}
			n, err = slack.New(*rc.Slack, so)
		case rc.Log != nil:
			lc := *rc.Log
			if lc.Format == "" {
				lc.Format = logsink.DefaultConfig().Format
			}
			n, err = logsink.New(lc, o.LogWriter, o.Logger)
		default:
			err = errors.New("no receiver type")
		}
		if err != nil {
			return nil, nil, fmt.Errorf("receiver %s: %w", rc.Name, err)
		}
		out[rc.Name] = n
		names = append(names, rc.Name)
	}
	return out, names, nil
}

// Close shuts the daemon down (finishing a running tick and flushing the
// outbox until ctx ends), then closes the outbox and the store.
func (s *Stack) Close(ctx context.Context) error {
	var errs []error
	if s.command != nil {
		s.command.Close()
	}
	if s.cancel != nil {
		s.cancel()
	}
	if s.otlpDone != nil {
		errs = append(errs, <-s.otlpDone)
	} else if s.OTLP != nil {
		// Bound but never served: Run with a done context releases the ports.
		dctx, dcancel := context.WithCancel(context.Background())
		dcancel()
		errs = append(errs, s.OTLP.Run(dctx))
	}
	if s.Daemon != nil {
		errs = append(errs, s.Daemon.Shutdown(ctx))
	} else if s.Dispatcher != nil {
		errs = append(errs, s.Dispatcher.Shutdown(ctx))
	}
	for _, as := range s.alertSenders {
		// The last cycle's alerts (a resolve, say) reach Alertmanager.
		errs = append(errs, as.Flush(ctx))
	}
	if s.Outbox != nil {
		errs = append(errs, s.Outbox.Close())
	}
	if s.GPU != nil {
		errs = append(errs, s.GPU.Close())
	}
	if s.Store != nil {
		errs = append(errs, s.Store.Close())
	}
	if s.tmpOutbox != "" {
		errs = append(errs, removeAll(s.tmpOutbox))
	}
	return errors.Join(errs...)
}

// Handler is the daemon's HTTP API (with the Slack command when configured).
func (s *Stack) Handler() http.Handler { return s.Daemon.Handler() }

// ShutdownTimeout is Config.ShutdownFlush with defaults.
func (s *Stack) ShutdownTimeout() time.Duration { return s.Daemon.Config().ShutdownFlush }

func mkTemp() (string, error) { return os.MkdirTemp("", "whyslow-outbox-") }

func removeAll(dir string) error { return os.RemoveAll(dir) }

// newDetector is a detector whose built-in signals read the engine maps.
func newDetector(cfg detect.DetectConfig, maps *rulesets.Maps) (*detect.Detector, error) {
	engines, err := detect.ReadEngines(maps.Files())
	if err != nil {
		return nil, err
	}
	return detect.NewDetector(cfg, engines)
}
