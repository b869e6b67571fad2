// Package querytest answers PromQL over series written in promqltest's load
// notation (`load 5s` / `metric{l="v"} 0+10x60`), for the tests of packages
// that read query.Metrics.
package querytest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"
)

// Metrics answers instant queries over a promqltest storage; range queries
// fail (Range adds them).
type Metrics struct {
	engine *promql.Engine
	store  storage.Queryable
}

// New loads the series of input (see load) into memory.
func New(t testing.TB, input string) *Metrics {
	t.Helper()
	st, err := load(input)
	if err != nil {
		t.Fatalf("querytest: %v", err)
	}
	eng := promql.NewEngine(promql.EngineOpts{MaxSamples: 50_000_000, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
	return &Metrics{engine: eng, store: st}
}

// Query implements query.Metrics.
func (m *Metrics) Query(ctx context.Context, expr string, at time.Time) (model.Vector, []string, error) {
	q, err := m.engine.NewInstantQuery(ctx, m.store, nil, expr, at)
	if err != nil {
		return nil, nil, err
	}
	defer q.Close()
	res := q.Exec(ctx)
	if res.Err != nil {
		return nil, nil, res.Err
	}
	v, err := res.Vector()
	if err != nil {
		return nil, nil, err
	}
	out := make(model.Vector, 0, len(v))
	for _, s := range v {
		out = append(out, &model.Sample{Metric: toModelMetric(s.Metric), Value: model.SampleValue(s.F), Timestamp: model.TimeFromUnixNano(at.UnixNano())})
	}
	return out, nil, nil
}

// QueryRange fails: Metrics answers instant queries only.
func (m *Metrics) QueryRange(context.Context, string, time.Time, time.Time, time.Duration) (model.Matrix, []string, error) {
	return nil, nil, fmt.Errorf("not used")
}

// Range is Metrics with range queries.
type Range struct{ *Metrics }

// QueryRange implements query.Metrics.
func (m Range) QueryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) (model.Matrix, []string, error) {
	q, err := m.engine.NewRangeQuery(ctx, m.store, nil, expr, start, end, step)
	if err != nil {
		return nil, nil, err
	}
	defer q.Close()
	res := q.Exec(ctx)
	if res.Err != nil {
		return nil, nil, res.Err
	}
	mat, err := res.Matrix()
	if err != nil {
		return nil, nil, err
	}
	out := make(model.Matrix, 0, len(mat))
	for _, s := range mat {
		ss := &model.SampleStream{Metric: toModelMetric(s.Metric)}
		for _, p := range s.Floats {
			ss.Values = append(ss.Values, model.SamplePair{Timestamp: model.Time(p.T), Value: model.SampleValue(p.F)})
		}
		out = append(out, ss)
	}
	return out, nil, nil
}

func toModelMetric(ls labels.Labels) model.Metric {
	met := model.Metric{}
	ls.Range(func(l labels.Label) { met[model.LabelName(l.Name)] = model.LabelValue(l.Value) })
	return met
}
