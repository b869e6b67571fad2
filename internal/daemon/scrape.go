package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"
	"github.com/prometheus/prometheus/storage"
)

// Appendable gives appenders into the store (*store.Store implements it).
type Appendable interface {
	Appender(ctx context.Context) storage.Appender
}

// maxScrapeBytes bounds one scrape body (a vLLM /metrics is ~100 KiB).
const maxScrapeBytes = 32 << 20

// HTTPScraper scrapes Prometheus/OpenMetrics text endpoints into a store.
// Each sample gets the target labels job and instance (unless the engine set
// them), and every scrape appends up{job, instance} = 1 or 0, as Prometheus
// does, so a down engine shows in the data as well as in the daemon's own
// metrics.
type HTTPScraper struct {
	Targets []string
	Job     string
	Timeout time.Duration
	Client  *http.Client
	Store   Appendable
}

// Scrape fetches every target concurrently and appends its samples at time at.
func (s *HTTPScraper) Scrape(ctx context.Context, at time.Time) []ScrapeResult {
	out := make([]ScrapeResult, len(s.Targets))
	var wg sync.WaitGroup
	for i, target := range s.Targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			n, err := s.scrapeOne(ctx, target, at)
			out[i] = ScrapeResult{Target: target, Duration: time.Since(start), Samples: n, Err: err}
		}()
	}
	wg.Wait()
	return out
}

func (s *HTTPScraper) scrapeOne(ctx context.Context, target string, at time.Time) (int, error) {
	job := s.Job
	if job == "" {
		job = "engine"
	}
	instance := target
	if u, err := url.Parse(target); err == nil && u.Host != "" {
		instance = u.Host
	}
	body, ctype, ferr := s.fetch(ctx, target)
	app := s.Store.Appender(ctx)
	up := 1.0
	n := 0
	var err error
	if ferr != nil {
		up, err = 0, ferr
	} else if n, err = appendExposition(app, body, ctype, job, instance, at); err != nil {
		up = 0
	}
	if _, aerr := app.Append(0, labels.FromStrings("__name__", "up", "job", job, "instance", instance), at.UnixMilli(), up); aerr != nil {
		err = errors.Join(err, aerr)
	}
	if cerr := app.Commit(); cerr != nil {
		return n, fmt.Errorf("scrape %s: commit: %w", target, cerr)
	}
	if err != nil {
		return n, fmt.Errorf("scrape %s: %w", target, err)
	}
	return n, nil
}

func (s *HTTPScraper) fetch(ctx context.Context, target string) ([]byte, string, error) {
	if s.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.Timeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, "", err
	}
	req.Header.Set("Accept", "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.4,*/*;q=0.1")
	client := s.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return nil, "", fmt.Errorf("status %d", resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxScrapeBytes+1))
	if err != nil {
		return nil, "", err
	}
	if len(b) > maxScrapeBytes {
		return nil, "", fmt.Errorf("body larger than %d bytes", maxScrapeBytes)
	}
	return b, resp.Header.Get("Content-Type"), nil
}

// appendExposition parses an exposition and appends its float samples at
// time at (sample timestamps in the body are ignored, as a scrape does).
func appendExposition(app storage.Appender, body []byte, contentType, job, instance string, at time.Time) (int, error) {
	p, err := textparse.New(body, contentType, labels.NewSymbolTable(), textparse.ParserOptions{FallbackContentType: "text/plain", IgnoreNativeHistograms: true})
	if p == nil {
		return 0, fmt.Errorf("parse: %w", err)
	}
	ts := at.UnixMilli()
	n := 0
	var lset labels.Labels
	b := labels.NewBuilder(labels.EmptyLabels())
	for {
		e, err := p.Next()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("parse: %w", err)
		}
		if e != textparse.EntrySeries {
			continue
		}
		_, _, v := p.Series()
		p.Labels(&lset)
		b.Reset(lset)
		if b.Get("job") == "" {
			b.Set("job", job)
		}
		if b.Get("instance") == "" {
			b.Set("instance", instance)
		}
		if _, err := app.Append(0, b.Labels(), ts, v); err != nil {
			return n, fmt.Errorf("append: %w", err)
		}
		n++
	}
}
