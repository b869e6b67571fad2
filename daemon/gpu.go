package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"google.golang.org/protobuf/proto"

	"github.com/whyslow/whyslow/collectors"
	"github.com/whyslow/whyslow/verdict"
)

// Source is a source of samples other than the engine scrape, run once per
// tick right after it (the GPU collector). It stores its samples at time at
// and returns the data gaps a verdict should list while it has nothing.
type Source interface {
	// Collect gathers one cycle at time at. target holds the labels of the
	// single engine target (instance, pod), nil when the daemon watches
	// several.
	Collect(ctx context.Context, at time.Time, target map[string]string) []verdict.DataGap
}

// gpuSeriesPrefix names the series that get the engine's target labels.
const gpuSeriesPrefix = "whyslow_gpu_"

// CollectorSource runs a collectors.Registry every tick: its samples (and
// the registry's whyslow_collector_* series) are appended to the store and
// served on /metrics (it is a prometheus.Gatherer of the last cycle). GPU
// series are labelled with the engine target's instance and pod plus the
// static labels, so that rulesets can join them to the engine's pod.
type CollectorSource struct {
	reg    *collectors.Registry
	app    storage.Appendable
	static map[string]string
	log    *slog.Logger

	gather *prometheus.Registry
	replay *replayCollector

	mu   sync.Mutex
	last []*dto.MetricFamily
}

// SourceOptions configure NewCollectorSource.
type SourceOptions struct {
	// Labels are added to every whyslow_gpu_* series (they win over the
	// engine target's).
	Labels map[string]string
	Logger *slog.Logger
}

// NewCollectorSource returns a source running reg and appending into app.
func NewCollectorSource(reg *collectors.Registry, app storage.Appendable, o SourceOptions) *CollectorSource {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	r := &replayCollector{}
	g := prometheus.NewRegistry()
	g.MustRegister(r)
	return &CollectorSource{reg: reg, app: app, static: o.Labels, log: o.Logger, gather: g, replay: r}
}

// replayCollector hands the metrics of one cycle to a private registry,
// which turns them into metric families (names, labels, values).
type replayCollector struct{ ms []prometheus.Metric }

func (r *replayCollector) Describe(chan<- *prometheus.Desc) {}

func (r *replayCollector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range r.ms {
		ch <- m
	}
}

// Collect runs one cycle, stores it, keeps it for /metrics and returns the
// data gaps: "no GPU counters" with the reason when the GPU collector had
// nothing (no driver) or failed.
func (c *CollectorSource) Collect(ctx context.Context, at time.Time, target map[string]string) []verdict.DataGap {
	ch := make(chan prometheus.Metric, 256)
	var results []collectors.Result
	go func() {
		results = c.reg.Cycle(ctx, ch)
		close(ch)
	}()
	var ms []prometheus.Metric
	for m := range ch {
		ms = append(ms, m)
	}
	c.replay.ms = ms
	fams, err := c.gather.Gather()
	c.replay.ms = nil
	if err != nil {
		c.log.Warn("Collector series inconsistent; keeping the valid ones", "err", err)
	}
	extra := map[string]string{}
	for k, v := range target {
		extra[k] = v
	}
	for k, v := range c.static {
		extra[k] = v
	}
	for _, f := range fams {
		if strings.HasPrefix(f.GetName(), gpuSeriesPrefix) {
			relabel(f, extra)
		}
	}
	if err := c.store(ctx, fams, at); err != nil {
		c.log.Warn("Store collector samples failed", "err", err)
	}
	c.mu.Lock()
	c.last = fams
	c.mu.Unlock()

	var gaps []verdict.DataGap
	for _, r := range results {
		if r.Err == nil {
			continue
		}
		what := r.Name
		if r.Name == "gpu" {
			what = "GPU counters"
		}
		gaps = append(gaps, verdict.DataGap{Signal: r.Name, Reason: fmt.Sprintf("no %s: %v", what, r.Err)})
	}
	return gaps
}

// relabel sets extra labels on every metric of f, keeping the pairs sorted.
func relabel(f *dto.MetricFamily, extra map[string]string) {
	if len(extra) == 0 {
		return
	}
	for _, m := range f.Metric {
		have := map[string]*dto.LabelPair{}
		for _, lp := range m.Label {
			have[lp.GetName()] = lp
		}
		for k, v := range extra {
			if lp, ok := have[k]; ok {
				lp.Value = proto.String(v)
				continue
			}
			m.Label = append(m.Label, &dto.LabelPair{Name: proto.String(k), Value: proto.String(v)})
		}
		sort.Slice(m.Label, func(i, j int) bool { return m.Label[i].GetName() < m.Label[j].GetName() })
	}
}

// store appends the gauges and counters of fams at time at.
func (c *CollectorSource) store(ctx context.Context, fams []*dto.MetricFamily, at time.Time) error {
	app := c.app.Appender(ctx)
	b := labels.NewScratchBuilder(8)
	ts := at.UnixMilli()
	for _, f := range fams {
		for _, m := range f.Metric {
			var v float64
			switch {
			case m.Gauge != nil:
				v = m.Gauge.GetValue()
			case m.Counter != nil:
				v = m.Counter.GetValue()
			case m.Untyped != nil:
				v = m.Untyped.GetValue()
			default:
				continue
			}
			b.Reset()
			b.Add(labels.MetricName, f.GetName())
			for _, lp := range m.Label {
				b.Add(lp.GetName(), lp.GetValue())
			}
			b.Sort()
			if _, err := app.Append(0, b.Labels(), ts, v); err != nil {
				_ = app.Rollback()
				return fmt.Errorf("append %s: %w", f.GetName(), err)
			}
		}
	}
	return app.Commit()
}

// Gather returns the last cycle's series, for /metrics.
func (c *CollectorSource) Gather() ([]*dto.MetricFamily, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*dto.MetricFamily, len(c.last))
	for i, f := range c.last {
		out[i] = proto.Clone(f).(*dto.MetricFamily)
	}
	return out, nil
}
