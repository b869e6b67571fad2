package scrape

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
)

// Querier is the slice of the embedded store WriteLifetimeBaseline reads from.
type Querier interface {
	Query(ctx context.Context, expr string, at time.Time) (model.Vector, []string, error)
}

// LifetimeBaseline reports what WriteLifetimeBaseline wrote.
type LifetimeBaseline struct {
	// Series is the number of cumulative series given a baseline window.
	Series int
	// Lifetime is the longest engine lifetime found (first scrape minus start).
	Lifetime time.Duration
	// StartKnown is false when no target exposed its start time
	// (process_start_time_seconds or *_created); rates then assume
	// AssumedLifetime and only ratios, quantiles and means are exact.
	StartKnown bool
}

// AssumedLifetime is the engine lifetime assumed when no start time is exposed.
const AssumedLifetime = time.Hour

// cumulativeSelector matches the series that count since the engine started.
const cumulativeSelector = `{__name__=~".+(_total|_count|_sum|_bucket)"}`

// WriteLifetimeBaseline turns a bare engine's cumulative counters into a
// baseline window that the triage can compare with the sample window.
//
// Counters and histograms count since the engine started, so their values at
// the first scrape hold the engine's lifetime. For each such series it writes
// two synthetic samples into [end-window, end]: zero, then the first scrape's
// value scaled by window/lifetime. Over that window rate() then gives the
// lifetime average rate, and ratios of rates (means, quantiles, hit rates) are
// the lifetime ones. end must lie before the first scrape minus the lookback
// of any rate(), so the synthetic and real samples never share a window.
// Gauges have no history and get no baseline.
func WriteLifetimeBaseline(ctx context.Context, q Querier, app storage.Appendable, first, end time.Time, window time.Duration) (LifetimeBaseline, error) {
	var out LifetimeBaseline
	if !end.Before(first) {
		return out, fmt.Errorf("lifetime baseline: window end %s is not before the first scrape %s", end, first)
	}
	vec, _, err := q.Query(ctx, cumulativeSelector, first)
	if err != nil {
		return out, fmt.Errorf("lifetime baseline: %w", err)
	}
	starts, err := startTimes(ctx, q, first)
	if err != nil {
		return out, err
	}
	a := app.Appender(ctx)
	zeroAt := end.Add(-window).Add(time.Millisecond).UnixMilli() // range selectors are left-open
	endAt := end.UnixMilli()
	for _, s := range vec {
		name := string(s.Metric[model.MetricNameLabel])
		if strings.HasSuffix(name, "_created") {
			continue
		}
		lifetime, known := lifetimeOf(s.Metric, starts, first)
		if known {
			out.StartKnown = true
		}
		out.Lifetime = max(out.Lifetime, lifetime)
		scale := float64(window) / float64(lifetime)
		v := float64(s.Value) * scale
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		ls := toLabels(s.Metric)
		if _, err := a.Append(0, ls, zeroAt, 0); err != nil {
			_ = a.Rollback()
			return out, fmt.Errorf("lifetime baseline: append %s: %w", ls, err)
		}
		if _, err := a.Append(0, ls, endAt, v); err != nil {
			_ = a.Rollback()
			return out, fmt.Errorf("lifetime baseline: append %s: %w", ls, err)
		}
		out.Series++
	}
	if err := a.Commit(); err != nil {
		return out, fmt.Errorf("lifetime baseline: commit: %w", err)
	}
	return out, nil
}

// startTimes maps a target (instance and target labels: replicas may share
// an instance) to its engine's start time, from process_start_time_seconds
// or, failing that, the earliest *_created sample.
func startTimes(ctx context.Context, q Querier, at time.Time) (map[string]time.Time, error) {
	out := map[string]time.Time{}
	for _, expr := range []string{
		`min by (instance, target) (process_start_time_seconds)`,
		`min by (instance, target) ({__name__=~".+_created"})`,
	} {
		vec, _, err := q.Query(ctx, expr, at)
		if err != nil {
			return nil, fmt.Errorf("lifetime baseline: %w", err)
		}
		for _, s := range vec {
			key := targetKey(s.Metric)
			if _, ok := out[key]; ok || float64(s.Value) <= 0 {
				continue
			}
			out[key] = time.UnixMilli(int64(float64(s.Value) * 1000))
		}
	}
	return out, nil
}

func lifetimeOf(m model.Metric, starts map[string]time.Time, first time.Time) (time.Duration, bool) {
	if st, ok := starts[targetKey(m)]; ok && st.Before(first) {
		return first.Sub(st), true
	}
	return AssumedLifetime, false
}

// targetKey identifies the target a series was scraped from.
func targetKey(m model.Metric) string {
	return string(m["instance"]) + "\xff" + string(m[TargetLabel])
}

func toLabels(m model.Metric) labels.Labels {
	b := labels.NewScratchBuilder(len(m))
	for k, v := range m {
		b.Add(string(k), string(v))
	}
	b.Sort()
	return b.Labels()
}
