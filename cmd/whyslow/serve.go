package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/whyslow/whyslow/daemon"
	"github.com/whyslow/whyslow/internal/memlimit"
	"github.com/whyslow/whyslow/internal/redact"
)

func init() {
	register(command{name: "serve", summary: "run the daemon (a sidecar scraping engines, or with --prometheus the fleet): detect, triage, notify, serve the API", run: runServe})
}

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// serveFlags are the command-line overrides of the config file.
type serveFlags struct {
	config         string
	prometheus     string
	engineURLs     stringList
	listen         string
	dataDir        string
	scrapeInterval time.Duration
	otlpHTTP       string
	otlpGRPC       string
	gpu            bool
	logLevel       string
	set            map[string]bool
}

// errPrinted is an error already written to stderr.
type errPrinted struct{ error }

func (e errPrinted) Unwrap() error { return e.error }

func parseServeFlags(args []string, stderr io.Writer) (*serveFlags, error) {
	f := &serveFlags{set: map[string]bool{}}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.config, "config", "", "YAML config file (see whyslow.example.yml)")
	fs.StringVar(&f.prometheus, "prometheus", "", "fleet mode: read every engine from this Prometheus-compatible query API `URL` (source.prometheus.url) instead of scraping")
	fs.Var(&f.engineURLs, "engine-url", "engine /metrics URL, repeatable (default "+daemon.DefaultEngineURL+")")
	fs.StringVar(&f.listen, "listen", "", "HTTP API address (default "+daemon.DefaultListen+")")
	fs.StringVar(&f.dataDir, "data-dir", "", "directory for the TSDB, incident state and outbox (default: in memory)")
	fs.DurationVar(&f.scrapeInterval, "scrape-interval", 0, "scrape and detection interval (default 5s; 15s with --prometheus)")
	fs.StringVar(&f.otlpHTTP, "otlp-http", daemon.DefaultOTLPHTTP, "OTLP/HTTP trace receiver address; empty disables")
	fs.StringVar(&f.otlpGRPC, "otlp-grpc", daemon.DefaultOTLPGRPC, "OTLP/gRPC trace receiver address; empty disables")
	fs.BoolVar(&f.gpu, "gpu", true, "read GPU counters through NVML (without a driver: logged once, reported as a data gap)")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	if err := parseQuiet(fs, args); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			err = errPrinted{err} // the flag package said it already
		}
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("serve: unexpected argument %q", fs.Arg(0))
	}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	return f, nil
}

// load reads the config file (if any) and applies the flags over it.
func (f *serveFlags) load() (daemon.Config, error) {
	var cfg daemon.Config
	if f.config != "" {
		c, err := loadConfigFile(f.config)
		if err != nil {
			return cfg, err
		}
		cfg = c
	}
	if f.set["engine-url"] {
		cfg.EngineURLs = append([]string(nil), f.engineURLs...)
	}
	if f.set["prometheus"] {
		if cfg.Source.Prometheus == nil {
			cfg.Source.Prometheus = &daemon.PrometheusSource{}
		}
		cfg.Source.Prometheus.URL = f.prometheus
	}
	if f.set["listen"] {
		cfg.Listen = f.listen
	}
	if f.set["data-dir"] {
		cfg.DataDir = f.dataDir
	}
	if f.set["otlp-http"] {
		v := f.otlpHTTP
		cfg.OTLP.HTTP = &v
	}
	if f.set["otlp-grpc"] {
		v := f.otlpGRPC
		cfg.OTLP.GRPC = &v
	}
	if f.set["gpu"] {
		v := f.gpu
		cfg.GPU.Enabled = &v
	}
	if f.set["scrape-interval"] {
		cfg.ScrapeInterval = f.scrapeInterval
		cfg.ScrapeTimeout = 0
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("flags: %w", err)
	}
	return cfg, nil
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, err := parseServeFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		if !errors.As(err, new(errPrinted)) {
			fmt.Fprintln(stderr, err)
		}
		return exitFailed
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		fmt.Fprintf(stderr, "serve: --log-level: %v\n", err)
		return exitFailed
	}
	cfg, err := f.load()
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitFailed
	}
	// Every log line goes through the redaction layer with the config's
	// secrets; reloads add theirs to the same set.
	secrets := daemon.ConfigSecrets(cfg)
	logger := slog.New(redact.Handler(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}), secrets))
	// Before the stack, so its receivers size themselves to the Ps it runs
	// on and its allocations are not sampled.
	rt := serveRuntime(cfg, os.Getenv)
	defer applyRuntime(rt)()
	logger.Info("Go runtime (the GOMAXPROCS, GOGC and GODEBUG=memprofilerate variables override the daemon's choice)",
		"gomaxprocs", runtime.GOMAXPROCS(0), "gogc", rt.gogc(os.Getenv), "heap_sampling", heapSampling())
	stack, err := daemon.NewStack(daemon.StackOptions{Config: cfg, LogWriter: stdout, Logger: logger, Secrets: secrets})
	if err != nil {
		fmt.Fprintf(stderr, "serve: %v\n", secrets.Scrub(err.Error()))
		return exitFailed
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		fmt.Fprintf(stderr, "serve: listen: %v\n", err)
		_ = stack.Close(context.Background())
		return exitFailed
	}
	srv, sln := stack.HTTPServer(ln)
	go func() {
		if err := srv.Serve(sln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("HTTP server failed", "err", err)
		}
	}()
	engines := make([]string, len(cfg.EngineURLs))
	for i, u := range cfg.EngineURLs {
		engines[i] = redact.URL(u)
	}
	mode, warning := daemon.APIAuth(cfg)
	if cfg.Fleet() {
		logger.Info("Serving the fleet", "listen", ln.Addr().String(), "prometheus", redact.URL(cfg.Source.Prometheus.URL),
			"group_by", strings.Join(cfg.Detect.GroupBy, ","), "interval", cfg.ScrapeInterval, "api_auth", mode)
	} else {
		logger.Info("Serving", "listen", ln.Addr().String(), "engines", strings.Join(engines, ","), "data_dir", cfg.DataDir, "api_auth", mode)
	}
	if warning != "" {
		logger.Warn("API authentication", "api_auth", mode, "warning", warning)
	}
	if stack.OTLP != nil {
		logger.Info("Receiving traces", "otlp_http", stack.OTLP.HTTPAddr(), "otlp_grpc", stack.OTLP.GRPCAddr(), "require_token", cfg.OTLP.RequireToken)
		if w := daemon.OTLPAuthWarning(cfg); w != "" {
			logger.Warn("OTLP authentication", "warning", w)
		}
	}

	if stack.Spans != nil && !memlimit.UserSet() {
		// otlp settings need a restart, so the bound is fixed for the
		// process's life.
		lim := &memlimit.Limiter{Bound: stack.Daemon.Config().OTLP.MaxBytes, Held: stack.Spans.Bytes}
		go lim.Run(ctx)
		logger.Info("Go memory limit follows the span store's bound (set GOMEMLIMIT to override)",
			"span_max_bytes", lim.Bound, "headroom_floor", memlimit.DefaultFloor)
	}

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	runDone := make(chan struct{})
	go func() { _ = stack.Daemon.Run(ctx); close(runDone) }()
	for loop := true; loop; {
		select {
		case <-ctx.Done():
			loop = false
		case <-hup:
			if err := reload(f, stack); err != nil {
				logger.Error("Reload failed; keeping the running configuration", "err", err)
			}
		}
	}
	<-runDone
	logger.Info("Shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownFlush)
	defer cancel()
	_ = srv.Shutdown(sctx)
	if err := stack.Close(sctx); err != nil {
		logger.Error("Shutdown incomplete", "err", err)
		return exitFailed
	}
	return exitOK
}

// reload re-reads the config and applies it all-or-nothing. Settings bound
// at start (listen, data_dir, retention, receivers, slack_command, gpu other
// than its class, otlp, rulesets) need a restart: a change to them rejects
// the whole reload.
func reload(f *serveFlags, stack *daemon.Stack) error {
	cfg, err := f.load()
	if err != nil {
		return err
	}
	cur := stack.Daemon.Config()
	var fixed []string
	if cfg.Listen != cur.Listen {
		fixed = append(fixed, "listen")
	}
	if cfg.DataDir != cur.DataDir {
		fixed = append(fixed, "data_dir")
	}
	if !reflect.DeepEqual(cfg.Source, cur.Source) {
		fixed = append(fixed, "source")
	}
	if cfg.Retention != cur.Retention {
		fixed = append(fixed, "retention")
	}
	if !reflect.DeepEqual(cfg.Receivers, cur.Receivers) {
		fixed = append(fixed, "receivers")
	}
	if !reflect.DeepEqual(cfg.SlackCommand, cur.SlackCommand) {
		fixed = append(fixed, "slack_command")
	}
	// The GPU class is a triage fact read at each triage; the collector's
	// settings are bound at start.
	newGPU, curGPU := cfg.GPU, cur.GPU
	newGPU.Class, curGPU.Class = "", ""
	if !reflect.DeepEqual(newGPU, curGPU) {
		fixed = append(fixed, "gpu")
	}
	if !reflect.DeepEqual(cfg.OTLP, cur.OTLP) {
		fixed = append(fixed, "otlp")
	}
	if !slices.Equal(cfg.Rulesets, cur.Rulesets) {
		// The triage, the detector and the chart hold the maps read at start.
		fixed = append(fixed, "rulesets")
	}
	if len(fixed) > 0 {
		return fmt.Errorf("reload: %s cannot change without a restart", strings.Join(fixed, ", "))
	}
	if err := stack.Daemon.CheckReload(cfg); err != nil {
		return err
	}
	var scraper daemon.Scraper
	if !reflect.DeepEqual(cfg.EngineURLs, cur.EngineURLs) || cfg.ScrapeTimeout != cur.ScrapeTimeout {
		es, err := stack.ReplaceScraper(cfg, nil)
		if err != nil {
			return err
		}
		scraper = es
	}
	return stack.Daemon.Reload(cfg, scraper, nil)
}
