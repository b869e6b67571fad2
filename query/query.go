// Package query holds the one read path for metrics: Metrics (PromQL at a
// time) and SharedQueries, the cache that runs each distinct query of a
// daemon cycle once.
package query

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/common/model"
)

// Metrics answers PromQL. The embedded store and a remote Prometheus both
// implement it, so a ruleset behaves the same on a bundle and in production.
type Metrics interface {
	// Query runs an instant query at the given time. Warnings are returned
	// alongside a result and surface in the verdict.
	Query(ctx context.Context, expr string, at time.Time) (model.Vector, []string, error)
	// QueryRange runs a range query over [start, end] at the given step.
	QueryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) (model.Matrix, []string, error)
}

// Unwrapper is a Metrics that wraps another (a query counter, a cache):
// As looks through it for what the source it wraps can do.
type Unwrapper interface {
	Unwrap() Metrics
}

// As returns the first of m and the sources it wraps (Unwrapper) that is
// a T: a wrapper that counts or caches queries leaves its source's
// optional interfaces (diagnose.DataSpanner, ExactSteps) in sight.
func As[T any](m Metrics) (T, bool) {
	for m != nil {
		if t, ok := m.(T); ok {
			return t, true
		}
		u, ok := m.(Unwrapper)
		if !ok {
			break
		}
		m = u.Unwrap()
	}
	var none T
	return none, false
}

// ExactSteps is implemented by a source whose range query evaluates each
// step exactly as an instant query at that time does (the embedded store),
// so the same expression at evenly spaced times may be asked as one range
// query. A remote Prometheus is no such source: a query frontend may align
// a range query's start to its step (Thanos's does by default) or split it.
type ExactSteps interface {
	ExactSteps() bool
}

// SharedQueries is a Metrics that runs each distinct query once (same
// expression and time, or same range and step) and gives every later
// caller that answer. The daemon hands one to the triages of a cycle
// (diagnose.Options.Shared): the queries of a diagnosis that read every scope's
// series then run once per cycle, not once per scope. Safe for concurrent
// use; callers must not modify the samples.
type SharedQueries struct {
	m       Metrics
	mu      sync.Mutex
	answers map[sharedKey]*sharedAnswer
}

type sharedKey struct {
	expr             string
	start, end, step int64 // unix ns; an instant query has start == end, step 0
	rangeQuery       bool
}

type sharedAnswer struct {
	done  chan struct{}
	vec   model.Vector
	mat   model.Matrix
	warns []string
	err   error
	// dropped says the caller that ran it had its context end: its answer
	// is nobody else's, so a waiter runs the query itself.
	dropped bool
}

// NewSharedQueries wraps m.
func NewSharedQueries(m Metrics) *SharedQueries {
	return &SharedQueries{m: m, answers: map[sharedKey]*sharedAnswer{}}
}

// Unwrap returns the source s wraps.
func (s *SharedQueries) Unwrap() Metrics { return s.m }

// Query implements Metrics.
func (s *SharedQueries) Query(ctx context.Context, expr string, at time.Time) (model.Vector, []string, error) {
	a := s.answer(ctx, sharedKey{expr: expr, start: at.UnixNano(), end: at.UnixNano()}, func(a *sharedAnswer) {
		a.vec, a.warns, a.err = s.m.Query(ctx, expr, at)
	})
	if a == nil {
		return nil, nil, ctx.Err()
	}
	return slices.Clone(a.vec), a.warns, a.err
}

// QueryRange implements Metrics.
func (s *SharedQueries) QueryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) (model.Matrix, []string, error) {
	k := sharedKey{expr: expr, start: start.UnixNano(), end: end.UnixNano(), step: int64(step), rangeQuery: true}
	a := s.answer(ctx, k, func(a *sharedAnswer) {
		a.mat, a.warns, a.err = s.m.QueryRange(ctx, expr, start, end, step)
	})
	if a == nil {
		return nil, nil, ctx.Err()
	}
	return slices.Clone(a.mat), a.warns, a.err
}

// answer returns k's answer, running it when no other caller has (or is);
// nil when ctx ends while waiting for another caller's.
func (s *SharedQueries) answer(ctx context.Context, k sharedKey, run func(*sharedAnswer)) *sharedAnswer {
	for {
		s.mu.Lock()
		a, ok := s.answers[k]
		if !ok {
			a = &sharedAnswer{done: make(chan struct{})}
			s.answers[k] = a
			s.mu.Unlock()
			run(a)
			if ctx.Err() != nil {
				s.mu.Lock()
				delete(s.answers, k)
				s.mu.Unlock()
				a.dropped = true
			}
			close(a.done)
			return a
		}
		s.mu.Unlock()
		select {
		case <-a.done:
		case <-ctx.Done():
			return nil
		}
		if !a.dropped {
			return a
		}
	}
}
