package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"

	"github.com/whyslow/whyslow/collectors/scrape"
)

// EngineScraper scrapes the engine targets with collectors/scrape: job and
// instance target labels, up, scrape_duration_seconds and
// scrape_samples_scraped in the store, whyslow_scrape_* per target on
// /metrics. Targets are scraped concurrently; one failing target never stops
// the others.
type EngineScraper struct {
	scraper *scrape.Scraper
	targets []string
	watch   *targetWatch
}

// ScraperOptions configure NewEngineScraper.
type ScraperOptions struct {
	Targets []string
	Timeout time.Duration
	Client  *http.Client
	// Registerer receives whyslow_scrape_*; nil registers nothing.
	Registerer prometheus.Registerer
}

// NewEngineScraper returns a scraper appending into app.
func NewEngineScraper(app storage.Appendable, o ScraperOptions) (*EngineScraper, error) {
	w := &targetWatch{app: app, pods: map[string]string{}}
	s, err := scrape.New(w, scrape.Options{Client: o.Client, Timeout: o.Timeout, Registerer: o.Registerer, Targets: o.Targets})
	if err != nil {
		return nil, err
	}
	return &EngineScraper{scraper: s, targets: append([]string(nil), o.Targets...), watch: w}, nil
}

// Scrape scrapes every target once at time at.
func (e *EngineScraper) Scrape(ctx context.Context, at time.Time) []ScrapeResult {
	out := make([]ScrapeResult, len(e.targets))
	var wg sync.WaitGroup
	for i, target := range e.targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			n, err := e.scraper.Scrape(ctx, target, at)
			out[i] = ScrapeResult{Target: redactURL(target), Duration: time.Since(start), Samples: n, Err: err}
		}()
	}
	wg.Wait()
	return out
}

// TargetLabels returns, for a daemon watching exactly one engine target,
// the labels that identify it in the store: instance (host:port, as the
// scraper sets it) and pod when the engine's series carry one. With several
// targets nothing can be attributed and it returns nil.
func (e *EngineScraper) TargetLabels() map[string]string {
	if len(e.targets) != 1 {
		return nil
	}
	u, err := url.Parse(e.targets[0])
	if err != nil || u.Host == "" {
		return nil
	}
	inst := u.Host
	if u.Port() == "" {
		inst = u.Host + ":80"
		if u.Scheme == "https" {
			inst = u.Host + ":443"
		}
	}
	out := map[string]string{"instance": inst}
	if pod := e.watch.pod(inst); pod != "" {
		out["pod"] = pod
	}
	return out
}

// targetWatch passes appends through to the store and remembers the pod
// label each instance's series carry, so that GPU series can be labelled
// like the engine they belong to.
type targetWatch struct {
	app  storage.Appendable
	mu   sync.Mutex
	pods map[string]string // instance → pod
}

func (w *targetWatch) Appender(ctx context.Context) storage.Appender {
	return &watchAppender{Appender: w.app.Appender(ctx), w: w}
}

func (w *targetWatch) pod(instance string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pods[instance]
}

type watchAppender struct {
	storage.Appender
	w        *targetWatch
	instance string
	pod      string
}

func (a *watchAppender) Append(ref storage.SeriesRef, ls labels.Labels, t int64, v float64) (storage.SeriesRef, error) {
	if a.pod == "" {
		if p := ls.Get("pod"); p != "" {
			a.pod, a.instance = p, ls.Get("instance")
		}
	}
	return a.Appender.Append(ref, ls, t, v)
}

func (a *watchAppender) Commit() error {
	if a.pod != "" && a.instance != "" {
		a.w.mu.Lock()
		a.w.pods[a.instance] = a.pod
		a.w.mu.Unlock()
	}
	return a.Appender.Commit()
}

// swapRegisterer registers collectors on a registry and remembers them, so
// that a reload can replace the scraper (whose metrics have fixed names)
// without a duplicate-registration error.
type swapRegisterer struct {
	reg *prometheus.Registry
	cs  []prometheus.Collector
}

func (s *swapRegisterer) Register(c prometheus.Collector) error {
	if err := s.reg.Register(c); err != nil {
		return err
	}
	s.cs = append(s.cs, c)
	return nil
}

func (s *swapRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := s.Register(c); err != nil {
			panic(err)
		}
	}
}

func (s *swapRegisterer) Unregister(c prometheus.Collector) bool { return s.reg.Unregister(c) }

// unregisterAll takes every remembered collector off the registry (they
// stay remembered for reregister).
func (s *swapRegisterer) unregisterAll() {
	for _, c := range s.cs {
		s.reg.Unregister(c)
	}
}

func (s *swapRegisterer) reregister() error {
	var errs []error
	for _, c := range s.cs {
		if err := s.reg.Register(c); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// redactURL hides a password in a URL for logs and metrics.
func redactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	return "<unparseable URL>"
}

// ReplaceScraper builds a scraper for new targets (reload). Its metrics
// replace the current scraper's on the stack's registry; on failure the
// current ones stay.
func (s *Stack) ReplaceScraper(cfg Config, client *http.Client) (*EngineScraper, error) {
	cfg = cfg.WithDefaults()
	old := s.scrapeReg
	old.unregisterAll()
	next := &swapRegisterer{reg: s.Registry}
	es, err := NewEngineScraper(s.Store, ScraperOptions{Targets: cfg.EngineURLs, Timeout: cfg.ScrapeTimeout, Client: client, Registerer: next})
	if err != nil {
		next.unregisterAll()
		_ = old.reregister()
		return nil, fmt.Errorf("replace scraper: %w", err)
	}
	s.scrapeReg = next
	s.scraper = es
	return es, nil
}
