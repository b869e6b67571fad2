// Package scrape scrapes engine /metrics endpoints into the embedded store,
// as Prometheus would: Prometheus text or OpenMetrics (chosen by the
// response Content-Type; the Accept header asks for OpenMetrics first),
// gzip, a timeout and a body size limit, and target labels job, instance
// (host:port) and target (the URL's path) on every series. Each scrape also writes Prometheus's own
// per-target series, up, scrape_duration_seconds and scrape_samples_scraped,
// and sets whyslow's metrics whyslow_scrape_duration_seconds{target},
// whyslow_scrape_success{target} and whyslow_scrape_samples{target} on the
// registerer it is given. A failing target is an error for that target only.
//
// # Bare-engine mode (why --scrape)
//
// Loop.Sample scrapes every target every Interval (1-2 s) for a while
// (--sample, 20 s by default) and stores each sample at its real scrape
// time. The store then answers both sides of the comparison in plain
// PromQL, with no helper needed:
//
//   - the sample window, with rate() over it, e.g. at the last scrape
//     rate(x_sum[20s]) / rate(x_count[20s]) for a histogram x, or
//     histogram_quantile(0.95, sum by (le) (rate(x_bucket[20s])));
//   - the engine's lifetime, from the cumulative counters themselves (they
//     count since the engine started): x_sum / x_count is the lifetime mean,
//     histogram_quantile(0.95, sum by (le) (x_bucket)) the lifetime p95, and
//     x_total / (time() - process_start_time_seconds) a lifetime rate where
//     the engine exposes its start time.
//
// rate() needs at least two scrapes in its range: with a 1 s interval a
// 20 s sample gives about 20. A counter reset (engine restart) during the
// sample makes the lifetime figures cover only the time since the restart.
// No staleness markers are written when a series disappears.
//
// # Target identity
//
// A target is its whole URL, as Prometheus keeps __metrics_path__ apart
// from the address: instance is host:port only, so replicas served by one
// process on different paths (whyslow sim serve's /replica/N/metrics, a
// multi-engine pod) would share every series and collide ("duplicate
// sample for timestamp"). The series of targets that share a host:port
// (Options.Targets) therefore also get the label target, the URL's path
// ("/metrics", "/replica/1/metrics"); a target alone on its host:port gets
// exactly the labels Prometheus gives it (job, instance), so queries read
// the embedded store and a Prometheus alike. The query string is left out,
// since it may hold a credential: targets that differ only in their query
// still collide. Group by instance and target to tell such replicas apart.
package scrape

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"

	"github.com/whyslow/whyslow/internal/decompress"
	"github.com/whyslow/whyslow/internal/redact"
)

// Defaults for zero Options fields.
const (
	DefaultTimeout      = 10 * time.Second
	DefaultMaxBodyBytes = 64 << 20
	DefaultJob          = "engine"
)

// TargetLabel is the label, set on every scraped series, that tells apart
// targets sharing a host:port: the URL's path (see "Target identity").
const TargetLabel = "target"

// AcceptHeader is sent with every scrape: OpenMetrics preferred, classic
// text accepted, as Prometheus asks.
const AcceptHeader = "application/openmetrics-text;version=1.0.0;q=0.6," +
	"application/openmetrics-text;version=0.0.1;q=0.5," +
	"text/plain;version=0.0.4;q=0.4,*/*;q=0.1"

// Options configures a Scraper. Zero values get defaults.
type Options struct {
	// Client does the requests; nil uses a plain http.Client.
	Client *http.Client
	// Timeout bounds one scrape (default 10s).
	Timeout time.Duration
	// MaxBodyBytes bounds a (decompressed) response body (default 64 MiB).
	MaxBodyBytes int64
	// Job is the job label of every scraped series (default "engine").
	Job string
	// Registerer receives whyslow_scrape_* metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Logger logs failed scrapes at debug level; nil discards.
	Logger *slog.Logger
	// Targets are the URLs this scraper will scrape: those that share a
	// host:port get the target label (see the package doc).
	Targets []string
}

// ErrStore is wrapped by a scrape error when the target answered but its
// samples could not be written (a full disk, a closed store): the target is
// not down, whyslow is.
var ErrStore = errors.New("store write failed")

// Scraper scrapes targets into a storage.Appendable (the embedded store).
// It is safe for concurrent use.
type Scraper struct {
	app     storage.Appendable
	client  *http.Client
	timeout time.Duration
	maxBody int64
	job     string
	logger  *slog.Logger
	shared  map[string]bool // instances more than one target shares

	duration *prometheus.GaugeVec
	success  *prometheus.GaugeVec
	samples  *prometheus.GaugeVec

	// spareMu guards what the last scrape left for the next: a sidecar
	// scrapes one engine every few seconds, and a read buffer regrown
	// from nothing each time allocated about twice the page per scrape
	// (a gzip reader another ~45 KB of inflate state). Concurrent scrapes
	// find none and make their own.
	spareMu  sync.Mutex
	spareBuf *bytes.Buffer
	spareGz  *decompress.Reader
}

// maxSpareBuffer bounds the read buffer kept between scrapes: a page
// larger than this (a misbehaving target) is not held for the process's
// life.
const maxSpareBuffer = 4 << 20

// New returns a Scraper writing into app.
func New(app storage.Appendable, opts Options) (*Scraper, error) {
	if app == nil {
		return nil, errors.New("scrape: no storage")
	}
	s := &Scraper{
		app:     app,
		client:  opts.Client,
		timeout: opts.Timeout,
		maxBody: opts.MaxBodyBytes,
		job:     opts.Job,
		logger:  opts.Logger,
		shared:  sharedInstances(opts.Targets),
	}
	if s.client == nil {
		s.client = &http.Client{}
	}
	if s.timeout <= 0 {
		s.timeout = DefaultTimeout
	}
	if s.maxBody <= 0 {
		s.maxBody = DefaultMaxBodyBytes
	}
	if s.job == "" {
		s.job = DefaultJob
	}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	s.logger = s.logger.With("component", "scrape")
	s.duration = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "whyslow_scrape_duration_seconds",
		Help: "Duration of the last scrape of the target.",
	}, []string{"target"})
	s.success = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "whyslow_scrape_success",
		Help: "Whether the last scrape of the target succeeded (1) or not (0).",
	}, []string{"target"})
	s.samples = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "whyslow_scrape_samples",
		Help: "Samples stored by the last scrape of the target.",
	}, []string{"target"})
	if opts.Registerer != nil {
		for _, c := range []prometheus.Collector{s.duration, s.success, s.samples} {
			if err := opts.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("scrape: register metrics: %w", err)
			}
		}
	}
	return s, nil
}

// Scrape fetches target once, stores its samples (timestamped at, unless
// the exposition has its own timestamps) with job, instance and target labels, plus
// up, scrape_duration_seconds and scrape_samples_scraped, and returns the
// number of exposed samples stored. A down or malformed target is an error
// (and up 0).
func (s *Scraper) Scrape(ctx context.Context, target string, at time.Time) (int, error) {
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return 0, fmt.Errorf("scrape %s: not an http(s) URL", redact.URL(target))
	}
	name := redact.URL(target)
	inst := instanceOf(u.Scheme, u.Host)
	tl := labels.FromStrings("instance", inst, "job", s.job)
	if s.shared[inst] {
		tl = labels.FromStrings("instance", inst, "job", s.job, TargetLabel, targetOf(u))
	}

	start := time.Now()
	samples, scrapeErr := s.scrape(ctx, u, name, at, tl)
	dur := time.Since(start)

	if scrapeErr != nil && ctx.Err() != nil {
		// Cancelled by the caller: not the target's fault, record nothing.
		return 0, scrapeErr
	}
	up := 1.0
	if scrapeErr != nil {
		up, samples = 0, nil
	}
	atMs := at.UnixMilli()
	report := func(metric string, v float64) Sample {
		b := labels.NewBuilder(tl)
		b.Set(labels.MetricName, metric)
		return Sample{Labels: b.Labels(), T: atMs, V: v}
	}
	all := append(samples,
		report("up", up),
		report("scrape_duration_seconds", dur.Seconds()),
		report("scrape_samples_scraped", float64(len(samples))),
	)
	if err := s.store(ctx, all); err != nil && scrapeErr == nil {
		scrapeErr = fmt.Errorf("scrape %s: %w: %w", name, ErrStore, err)
		samples = nil
	}

	s.duration.WithLabelValues(name).Set(dur.Seconds())
	s.samples.WithLabelValues(name).Set(float64(len(samples)))
	if scrapeErr != nil {
		s.success.WithLabelValues(name).Set(0)
		s.logger.Debug("Scrape failed", "target", name, "err", scrapeErr)
		return 0, scrapeErr
	}
	s.success.WithLabelValues(name).Set(1)
	return len(samples), nil
}

func (s *Scraper) scrape(ctx context.Context, u *url.URL, name string, at time.Time, tl labels.Labels) ([]Sample, error) {
	buf := s.takeBuffer()
	// Parse copies what it keeps (textparse copies each series' text
	// before making labels of it), so the buffer is free once it returns.
	defer s.putBuffer(buf)
	body, ctype, err := s.fetch(ctx, u, buf)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", name, err)
	}
	samples, err := Parse(name, body, ctype, at, tl)
	if err != nil {
		return nil, fmt.Errorf("scrape: %w", err)
	}
	return samples, nil
}

// takeBuffer returns the buffer the last scrape left, or a new one.
func (s *Scraper) takeBuffer() *bytes.Buffer {
	s.spareMu.Lock()
	defer s.spareMu.Unlock()
	buf := s.spareBuf
	s.spareBuf = nil
	if buf == nil {
		buf = new(bytes.Buffer)
	}
	return buf
}

// putBuffer keeps buf for the next scrape unless it grew past
// maxSpareBuffer.
func (s *Scraper) putBuffer(buf *bytes.Buffer) {
	if buf.Cap() > maxSpareBuffer {
		return
	}
	buf.Reset()
	s.spareMu.Lock()
	defer s.spareMu.Unlock()
	s.spareBuf = buf
}

// gunzip returns a bounded gzip reader of r, reusing the one the last
// scrape left; give it back with putGzip.
func (s *Scraper) gunzip(r io.Reader) (*decompress.Reader, error) {
	s.spareMu.Lock()
	zr := s.spareGz
	s.spareGz = nil
	s.spareMu.Unlock()
	l := decompress.Limits{MaxBytes: s.maxBody}
	if zr == nil {
		return decompress.NewGzip(r, l)
	}
	if err := zr.Reset(r, l); err != nil {
		return nil, err
	}
	return zr, nil
}

func (s *Scraper) putGzip(zr *decompress.Reader) {
	_ = zr.Close() // only checks the stream's end; the body is closed apart
	s.spareMu.Lock()
	defer s.spareMu.Unlock()
	s.spareGz = zr
}

// fetch does the request and returns the (decompressed) body, read into
// buf, and its Content-Type.
func (s *Scraper) fetch(ctx context.Context, u *url.URL, buf *bytes.Buffer) ([]byte, string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, "", err
	}
	req.Header.Set("Accept", AcceptHeader)
	req.Header.Set("Accept-Encoding", "gzip")
	req.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", fmt.Sprintf("%g", s.timeout.Seconds()))
	req.Header.Set("User-Agent", "whyslow")
	resp, err := s.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is already in the message, redacted
		}
		if ctx.Err() != nil {
			return nil, "", fmt.Errorf("unreachable: timed out after %s", s.timeout)
		}
		return nil, "", fmt.Errorf("unreachable: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return nil, "", fmt.Errorf("server returned HTTP status %s", resp.Status)
	}
	var r io.Reader = resp.Body
	if resp.Header.Get("Content-Encoding") == "gzip" {
		zr, err := s.gunzip(resp.Body)
		if err != nil {
			return nil, "", fmt.Errorf("gzip body: %w", err)
		}
		defer s.putGzip(zr)
		r = zr
	}
	n, err := buf.ReadFrom(io.LimitReader(r, s.maxBody+1))
	if err != nil {
		if ctx.Err() != nil {
			return nil, "", fmt.Errorf("read body: timed out after %s", s.timeout)
		}
		var le *decompress.LimitError
		if errors.As(err, &le) {
			return nil, "", fmt.Errorf("read body: %w", le)
		}
		return nil, "", fmt.Errorf("read body: %w", err)
	}
	if n > s.maxBody {
		return nil, "", fmt.Errorf("body larger than %d bytes", s.maxBody)
	}
	return buf.Bytes(), resp.Header.Get("Content-Type"), nil
}

// store appends samples in one transaction.
func (s *Scraper) store(ctx context.Context, samples []Sample) error {
	app := s.app.Appender(ctx)
	for _, smp := range samples {
		if _, err := app.Append(0, smp.Labels, smp.T, smp.V); err != nil {
			_ = app.Rollback()
			return fmt.Errorf("append %s: %w", smp.Labels, err)
		}
	}
	return app.Commit()
}

// Loop scrapes a set of targets at a fixed interval.
type Loop struct {
	// Scraper does the scrapes.
	Scraper *Scraper
	// Targets are the /metrics URLs.
	Targets []string
	// Interval is the time between scrapes of a target (default 1s).
	Interval time.Duration
	// Now returns the scrape timestamp; nil means time.Now.
	Now func() time.Time
}

// TargetStatus summarises a target's scrapes over a Loop run.
type TargetStatus struct {
	// Target is the URL, password redacted.
	Target string
	// OK and Failed count scrapes.
	OK, Failed int
	// LastErr is the last scrape error, if any.
	LastErr error
}

// Run scrapes every target once per Interval, all targets concurrently,
// until ctx is done. The first round starts at once. It returns the
// per-target status in Targets order.
func (l *Loop) Run(ctx context.Context) []TargetStatus {
	interval := l.Interval
	if interval <= 0 {
		interval = time.Second
	}
	now := l.Now
	if now == nil {
		now = time.Now
	}
	st := make([]TargetStatus, len(l.Targets))
	for i, t := range l.Targets {
		st[i].Target = redact.URL(t)
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		at := now()
		var wg sync.WaitGroup
		for i, t := range l.Targets {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := l.Scraper.Scrape(ctx, t, at); err != nil {
					if ctx.Err() != nil {
						return // cut short by the end of the run
					}
					st[i].Failed++
					st[i].LastErr = err
				} else {
					st[i].OK++
				}
			}()
		}
		wg.Wait()
		select {
		case <-ctx.Done():
			return st
		case <-ticker.C:
		}
	}
}

// Sample runs the loop for d (the bare-engine sample window). It fails only
// if some target never answered; the status tells per target.
func (l *Loop) Sample(ctx context.Context, d time.Duration) ([]TargetStatus, error) {
	runCtx, cancel := context.WithTimeout(ctx, d)
	st := l.Run(runCtx)
	cancel()
	if err := ctx.Err(); err != nil {
		return st, fmt.Errorf("sample: %w", err)
	}
	var errs []error
	for i := range st {
		if st[i].OK == 0 {
			err := st[i].LastErr
			if err == nil {
				err = fmt.Errorf("scrape %s: no scrape completed in %s", st[i].Target, d)
			}
			errs = append(errs, err)
		}
	}
	return st, errors.Join(errs...)
}

// sharedInstances returns the host:ports that more than one of the URLs
// names.
func sharedInstances(targets []string) map[string]bool {
	n := map[string]int{}
	for _, t := range targets {
		if u, err := url.Parse(t); err == nil {
			n[instanceOf(u.Scheme, u.Host)]++
		}
	}
	out := map[string]bool{}
	for inst, c := range n {
		if c > 1 {
			out[inst] = true
		}
	}
	return out
}
