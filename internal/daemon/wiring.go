package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/whyslow/whyslow/collectors/store"
	"github.com/whyslow/whyslow/notifiers"
	"github.com/whyslow/whyslow/notifiers/logsink"
	"github.com/whyslow/whyslow/notifiers/outbox"
	"github.com/whyslow/whyslow/notifiers/webhook"
	"github.com/whyslow/whyslow/rules"
	"github.com/whyslow/whyslow/rulesets"
	"github.com/whyslow/whyslow/triage"
)

// TriageWith returns a TriageFunc running the real walk (triage.Run) over m
// with the shipped rulesets.
func TriageWith(m triage.Metrics) (TriageFunc, error) {
	var all []*rules.Ruleset
	var errs []error
	for _, e := range rulesets.Engines {
		rs, err := rulesets.Default(e)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		all = append(all, rs)
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("load rulesets: %w", errors.Join(errs...))
	}
	return func(ctx context.Context, req TriageRequest) (*triage.Verdict, error) {
		return triage.Run(ctx, triage.Options{
			Metrics: m, Rulesets: all, At: req.At, Window: req.Window, Baseline: req.Baseline,
			Selector: req.Selector, Engine: req.Engine, Scheduler: rules.Scheduler{},
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
	// HTTPClient scrapes and posts webhooks (default: http.DefaultClient for
	// scrapes, the webhook's own client for posts).
	HTTPClient *http.Client
	// Scraper replaces the HTTP scraper (tests).
	Scraper Scraper
	// Retry overrides the retry stage's options (Clock, Metrics and Logger are set here).
	Retry  notifiers.RetryOptions
	Logger *slog.Logger
}

// Stack is a daemon wired to the embedded store, the HTTP scraper, the real
// triage, and the durable outbox with its dispatcher and receivers.
type Stack struct {
	Daemon     *Daemon
	Store      *store.Store
	Outbox     *outbox.Outbox
	Dispatcher *outbox.Dispatcher
	Registry   *prometheus.Registry
	tmpOutbox  string
}

// NewStack builds everything Config describes. With no receivers configured
// a log receiver is used, so a verdict is never silently dropped.
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
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s := &Stack{Registry: reg}
	fail := func(err error) (*Stack, error) {
		s.Close(context.Background())
		return nil, err
	}
	stOpts := store.Options{Retention: cfg.Retention, Logger: o.Logger.With("component", "store")}
	obDir := ""
	if cfg.DataDir != "" {
		stOpts.Dir = filepath.Join(cfg.DataDir, "tsdb")
		obDir = filepath.Join(cfg.DataDir, "outbox")
	}
	st, err := store.Open(stOpts)
	if err != nil {
		return fail(err)
	}
	s.Store = st
	if obDir == "" {
		dir, err := mkTemp()
		if err != nil {
			return fail(err)
		}
		obDir, s.tmpOutbox = dir, dir
	}
	s.Outbox, err = outbox.Open(obDir, outbox.Options{Clock: o.Clock, Logger: o.Logger, Registerer: reg})
	if err != nil {
		return fail(err)
	}
	receivers, names, err := BuildReceivers(cfg.Receivers, o)
	if err != nil {
		return fail(err)
	}
	m, err := notifiers.NewMetrics(reg)
	if err != nil {
		return fail(err)
	}
	ro := o.Retry
	ro.Clock, ro.Metrics, ro.Logger = o.Clock, m, o.Logger
	s.Dispatcher, err = outbox.NewDispatcher(s.Outbox, outbox.DispatcherOptions{
		Receivers: receivers, Retrier: notifiers.NewRetrier(ro), Logger: o.Logger,
	})
	if err != nil {
		return fail(err)
	}
	tri, err := TriageWith(st)
	if err != nil {
		return fail(err)
	}
	scraper := o.Scraper
	if scraper == nil {
		scraper = &HTTPScraper{Targets: cfg.EngineURLs, Timeout: cfg.ScrapeTimeout, Client: o.HTTPClient, Store: st}
	}
	s.Daemon, err = New(Options{
		Config: cfg, Metrics: st, Scraper: scraper, Triage: tri, Outbox: s.Outbox, Receivers: names,
		Flush: s.Dispatcher.Shutdown, Registry: reg, Now: o.Clock.Now, Logger: o.Logger,
	})
	if err != nil {
		return fail(err)
	}
	s.Dispatcher.Start()
	return s, nil
}

// BuildReceivers constructs the configured receivers (a log receiver when
// none is configured) and returns them with their names in config order.
func BuildReceivers(rcs []ReceiverConfig, o StackOptions) (map[string]notifiers.Notifier, []string, error) {
	if len(rcs) == 0 {
		lc := logsink.DefaultConfig()
		rcs = []ReceiverConfig{{Name: "log", Log: &lc}}
	}
	out := map[string]notifiers.Notifier{}
	names := make([]string, 0, len(rcs))
	for _, rc := range rcs {
		var n notifiers.Notifier
		var err error
		switch {
		case rc.Webhook != nil:
			n, err = webhook.New(*rc.Webhook, webhook.Options{Client: o.HTTPClient, Clock: o.Clock, Logger: o.Logger})
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
	if s.Daemon != nil {
		errs = append(errs, s.Daemon.Shutdown(ctx))
	} else if s.Dispatcher != nil {
		errs = append(errs, s.Dispatcher.Shutdown(ctx))
	}
	if s.Outbox != nil {
		errs = append(errs, s.Outbox.Close())
	}
	if s.Store != nil {
		errs = append(errs, s.Store.Close())
	}
	if s.tmpOutbox != "" {
		errs = append(errs, removeAll(s.tmpOutbox))
	}
	return errors.Join(errs...)
}

// ShutdownTimeout is Config.ShutdownFlush with defaults.
func (s *Stack) ShutdownTimeout() time.Duration { return s.Daemon.Config().ShutdownFlush }

func mkTemp() (string, error) { return os.MkdirTemp("", "whyslow-outbox-") }

func removeAll(dir string) error { return os.RemoveAll(dir) }
