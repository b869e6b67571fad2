// Package collectors gets data into whyslow: scrapes, NVML, OTLP, bundles.
//
// Every source of samples is a Collector: one small interface with one
// method. A Registry runs named collectors together, reports how long each
// took and whether it succeeded, and never lets one failing collector fail
// the whole cycle.
package collectors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ErrNoData reports that a collector has nothing to report on this machine
// (no GPU, no driver, no target). It is not a failure: the Registry logs it
// at debug level. Wrap it to say why: fmt.Errorf("%w: no NVML", ErrNoData).
var ErrNoData = errors.New("no data")

// Collector gets one kind of data in. Update sends the samples of one cycle
// on ch and returns ErrNoData (possibly wrapped) when there is nothing to
// collect here. Update must not close ch.
type Collector interface {
	Update(ctx context.Context, ch chan<- prometheus.Metric) error
}

// CollectorFunc adapts a function to a Collector.
type CollectorFunc func(ctx context.Context, ch chan<- prometheus.Metric) error

// Update calls f.
func (f CollectorFunc) Update(ctx context.Context, ch chan<- prometheus.Metric) error {
	return f(ctx, ch)
}

// RegistryOptions configures a Registry. Zero values get defaults.
type RegistryOptions struct {
	// Namespace prefixes the registry's own series; default "whyslow".
	Namespace string
	// Timeout bounds each collector's Update when positive; default none.
	Timeout time.Duration
	// Logger receives one record per failed collector; default slog.Default().
	Logger *slog.Logger
	// Now measures collector durations; default time.Now.
	Now func() time.Time
}

// Registry runs named collectors. It is itself a prometheus.Collector, so it
// can be registered with a prometheus.Registry for /metrics, and Cycle lets a
// caller with a context (the embedded store) run it and see each outcome.
type Registry struct {
	opts     RegistryOptions
	logger   *slog.Logger
	duration *prometheus.Desc
	success  *prometheus.Desc

	mu    sync.Mutex
	named map[string]Collector
}

// NewRegistry returns an empty Registry.
func NewRegistry(opts RegistryOptions) *Registry {
	if opts.Namespace == "" {
		opts.Namespace = "whyslow"
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Registry{
		opts:   opts,
		logger: opts.Logger,
		duration: prometheus.NewDesc(
			prometheus.BuildFQName(opts.Namespace, "collector", "duration_seconds"),
			"Duration of a collector's last update.",
			[]string{"collector"}, nil),
		success: prometheus.NewDesc(
			prometheus.BuildFQName(opts.Namespace, "collector", "success"),
			"Whether a collector's last update succeeded (0 also when it had no data).",
			[]string{"collector"}, nil),
		named: map[string]Collector{},
	}
}

// Register adds c under name. Names are unique and non-empty.
func (r *Registry) Register(name string, c Collector) error {
	if name == "" {
		return errors.New("register collector: empty name")
	}
	if c == nil {
		return fmt.Errorf("register collector %q: nil collector", name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.named[name]; dup {
		return fmt.Errorf("register collector %q: already registered", name)
	}
	r.named[name] = c
	return nil
}

// Names returns the registered collector names, sorted.
func (r *Registry) Names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	names := make([]string, 0, len(r.named))
	for n := range r.named {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Result is the outcome of one collector in one cycle.
type Result struct {
	Name     string
	Duration time.Duration
	// Err is nil on success; errors.Is(Err, ErrNoData) when the collector
	// had nothing to report.
	Err error
}

// NoData reports whether the collector had nothing to report.
func (r Result) NoData() bool { return errors.Is(r.Err, ErrNoData) }

// Cycle runs every collector once, concurrently, sending their samples and
// the per-collector duration and success series on ch. It returns one Result
// per collector, sorted by name. A failing collector is logged and reported
// as success 0; it never stops the others.
func (r *Registry) Cycle(ctx context.Context, ch chan<- prometheus.Metric) []Result {
	r.mu.Lock()
	named := make(map[string]Collector, len(r.named))
	for n, c := range r.named {
		named[n] = c
	}
	r.mu.Unlock()

	results := make([]Result, 0, len(named))
	var (
		wg  sync.WaitGroup
		rmu sync.Mutex
	)
	for name, c := range named {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := r.run(ctx, name, c, ch)
			rmu.Lock()
			results = append(results, res)
			rmu.Unlock()
		}()
	}
	wg.Wait()
	sort.Slice(results, func(i, j int) bool { return results[i].Name < results[j].Name })
	return results
}

// run executes one collector, recovering a panic into an error so that a
// buggy collector cannot take the daemon down.
func (r *Registry) run(ctx context.Context, name string, c Collector, ch chan<- prometheus.Metric) (res Result) {
	res.Name = name
	if r.opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.opts.Timeout)
		defer cancel()
	}
	start := r.opts.Now()
	func() {
		defer func() {
			if p := recover(); p != nil {
				res.Err = fmt.Errorf("collector %s panicked: %v", name, p)
			}
		}()
		res.Err = c.Update(ctx, ch)
	}()
	res.Duration = r.opts.Now().Sub(start)

	success := 1.0
	switch {
	case res.Err == nil:
	case errors.Is(res.Err, ErrNoData):
		success = 0
		r.logger.Debug("Collector returned no data", "collector", name, "err", res.Err)
	default:
		success = 0
		r.logger.Error("Collector failed", "collector", name, "duration_seconds", res.Duration.Seconds(), "err", res.Err)
	}
	ch <- prometheus.MustNewConstMetric(r.duration, prometheus.GaugeValue, res.Duration.Seconds(), name)
	ch <- prometheus.MustNewConstMetric(r.success, prometheus.GaugeValue, success, name)
	return res
}

// Describe sends nothing: the collectors' series are only known once they
// run, so the Registry is an unchecked prometheus.Collector.
func (r *Registry) Describe(chan<- *prometheus.Desc) {}

// Collect runs one cycle with a background context (bounded by
// RegistryOptions.Timeout per collector). It implements prometheus.Collector.
func (r *Registry) Collect(ch chan<- prometheus.Metric) {
	r.Cycle(context.Background(), ch)
}
