// Package store is whyslow's embedded metrics store: series held in memory
// as Prometheus XOR chunks (tsdb/chunkenc), queried by the real PromQL
// engine.
//
// A Store is filled through the ordinary Prometheus write path
// (storage.Appender, from Appender) by the bundle loader and the scraper, and
// read through PromQL (Query, QueryRange), so the same ruleset expression gives
// the same answer here and on a remote Prometheus.
//
// It is not Prometheus's TSDB: package tsdb imports Prometheus's config,
// which links every service-discovery and remote-write client (Kubernetes,
// AWS, Azure, Google) into the binary and runs their init on every start.
// A sidecar holds thousands of series, not millions, so a head of chunks
// with a per-name index is enough.
//
// Three modes:
//
//   - In memory (Options.Dir empty): the head accepts samples anywhere in a
//     very wide window (InMemoryWindow), in any order across series and out
//     of order within a series, so an incident bundle written series by
//     series over hours loads without sorting. Nothing is dropped.
//   - Live in memory (Options.Dir empty, Options.Live set): for a daemon
//     that scrapes in time order. Chunks that end more than
//     Options.Retention before the newest sample are dropped, so memory
//     stays bounded however long it runs, and out-of-order samples are
//     accepted only within LiveOutOfOrderWindow.
//   - On disk (Options.Dir set): live, bounded by Options.Retention (default
//     6h), with out-of-order samples accepted within the retention (so a
//     bundle can also be loaded into it), and the head written to Dir every
//     SnapshotInterval and on Close, and read back on Open.
//
// Only float samples are supported (classic histograms are plain series).
package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
)

// Defaults applied to zero Options fields.
const (
	// DefaultRetention is how long an on-disk store keeps samples.
	DefaultRetention = 6 * time.Hour
	// DefaultMaxSamples bounds the samples one query may hold in memory.
	DefaultMaxSamples = 50_000_000
	// DefaultTimeout bounds one query's run time.
	DefaultTimeout = 2 * time.Minute
	// DefaultLookbackDelta is how far back an instant selector looks for a
	// sample, as in Prometheus.
	DefaultLookbackDelta = 5 * time.Minute
	// InMemoryWindow is how far behind the newest sample an in-memory store
	// still accepts samples.
	InMemoryWindow = 90 * 24 * time.Hour
	// LiveOutOfOrderWindow is how far behind the newest sample a live
	// in-memory store accepts samples (expositions with their own, slightly
	// older timestamps).
	LiveOutOfOrderWindow = 10 * time.Minute
	// maxWarnings caps the PromQL warnings returned with one result.
	maxWarnings = 10
)

// Options configures a Store. Zero values get the defaults above.
type Options struct {
	// Dir is where an on-disk store keeps its snapshot. Empty means in
	// memory only.
	Dir string
	// Retention is how long an on-disk or live store keeps samples
	// (default 6h). Ignored by the plain in-memory mode.
	Retention time.Duration
	// Live makes an in-memory store bounded by Retention, for samples that
	// arrive in time order (live scrapes); see the package comment.
	Live bool
	// MaxSamples bounds the samples one query may load (default 50M).
	MaxSamples int
	// Timeout bounds one query (default 2m).
	Timeout time.Duration
	// LookbackDelta is the instant-selector lookback (default 5m).
	LookbackDelta time.Duration
	// Logger receives store and engine logs; nil discards them.
	Logger *slog.Logger
	// Registerer, if set, receives the PromQL engine metrics.
	Registerer prometheus.Registerer
}

// Store is an in-memory series head with a PromQL engine. It is safe for
// concurrent use.
type Store struct {
	head   *head
	engine *promql.Engine
	parser parser.Parser
	dir    string // where the snapshot lives; empty in memory
	logger *slog.Logger
	stop   chan struct{}
	done   sync.WaitGroup
	closed sync.Once
}

// Open opens a store as described by opts. An on-disk store reads back the
// snapshot its Dir holds, if any.
func Open(opts Options) (*Store, error) {
	if opts.Retention <= 0 {
		opts.Retention = DefaultRetention
	}
	if opts.MaxSamples <= 0 {
		opts.MaxSamples = DefaultMaxSamples
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.LookbackDelta <= 0 {
		opts.LookbackDelta = DefaultLookbackDelta
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}

	var h *head
	switch {
	case opts.Dir != "":
		h = newHead(opts.Retention.Milliseconds(), opts.Retention.Milliseconds())
	case opts.Live:
		h = newHead(LiveOutOfOrderWindow.Milliseconds(), opts.Retention.Milliseconds())
	default:
		h = newHead(InMemoryWindow.Milliseconds(), 0)
	}
	s := &Store{head: h, dir: opts.Dir, logger: logger, stop: make(chan struct{})}
	if s.dir != "" {
		if err := s.load(); err != nil {
			return nil, err
		}
		s.done.Add(1)
		go s.snapshotEvery(SnapshotInterval)
	}

	s.parser = newParseCache(parser.NewParser(parser.Options{}))
	s.engine = promql.NewEngine(promql.EngineOpts{
		Logger:               logger.With("component", "promql"),
		Reg:                  opts.Registerer,
		MaxSamples:           opts.MaxSamples,
		Timeout:              opts.Timeout,
		LookbackDelta:        opts.LookbackDelta,
		EnableAtModifier:     true,
		EnableNegativeOffset: true,
		Parser:               s.parser,
	})
	return s, nil
}

// load creates Dir if needed and reads its snapshot, if there is one.
func (s *Store) load() error {
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	path := filepath.Join(s.dir, snapshotFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err == nil {
		err = s.head.readSnapshot(data)
	}
	if err != nil {
		return fmt.Errorf("open store %s: %w", path, err)
	}
	// Housekeeping, not news for whoever reads whyslow's log (issue 25
	// item 9): at debug.
	s.logger.Debug("Store snapshot replayed", "series", s.head.numSeries(), "bytes", len(data))
	return nil
}

// snapshotEvery writes the snapshot on every tick until Close.
func (s *Store) snapshotEvery(every time.Duration) {
	defer s.done.Done()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
			if err := s.head.writeSnapshot(s.dir); err != nil {
				s.logger.Warn("Store snapshot failed; retrying at the next interval", "err", err)
			}
		}
	}
}

// Close stops an on-disk store's snapshots and writes a last one. Closing
// again does nothing.
func (s *Store) Close() error {
	var err error
	s.closed.Do(func() {
		if s.dir == "" {
			return
		}
		close(s.stop)
		s.done.Wait()
		if werr := s.head.writeSnapshot(s.dir); werr != nil {
			err = fmt.Errorf("close store: %w", werr)
		}
	})
	return err
}

// Appender returns an appender. Samples become visible to queries on
// Commit; commit every few thousand samples to keep memory flat.
func (s *Store) Appender(context.Context) storage.Appender {
	return &appender{h: s.head}
}

// Querier returns a querier over [mint, maxt] (milliseconds, inclusive), so
// a Store is a storage.Queryable for code that reads raw series.
func (s *Store) Querier(mint, maxt int64) (storage.Querier, error) {
	return &querier{h: s.head, mint: mint, maxt: maxt}, nil
}

// Engine returns the PromQL engine the store queries with.
func (s *Store) Engine() *promql.Engine { return s.engine }

// Stats describes what a store holds.
type Stats struct {
	// Series is the number of series held.
	Series uint64
	// MinTime and MaxTime bound the stored samples; both are zero when the
	// store is empty.
	MinTime, MaxTime time.Time
}

// Stats reports the series count and time range of the store.
func (s *Store) Stats() Stats {
	st := Stats{Series: uint64(s.head.numSeries())}
	if minT, maxT, ok := s.head.bounds(); ok {
		st.MinTime, st.MaxTime = time.UnixMilli(minT).UTC(), time.UnixMilli(maxT).UTC()
	}
	return st
}

// DataSpan returns the time range of the stored samples, zero times when
// the store is empty: all a search for where the data lies need read (an
// insufficient-data verdict's, diagnose.DataSpanner).
func (s *Store) DataSpan() (start, end time.Time) {
	st := s.Stats()
	return st.MinTime, st.MaxTime
}

// ExactSteps reports that a range query's steps are exactly the instant
// queries at their times (query.ExactSteps): the same engine evaluates
// both, and nothing between caller and store moves a step.
func (s *Store) ExactSteps() bool { return true }

// Query runs an instant PromQL query at the given time. A scalar result is
// returned as one sample without labels; a string result or a range vector
// is an error. Warnings are PromQL's warning annotations.
func (s *Store) Query(ctx context.Context, expr string, at time.Time) (model.Vector, []string, error) {
	q, err := s.engine.NewInstantQuery(ctx, s, nil, expr, at)
	if err != nil {
		return nil, nil, fmt.Errorf("query %q: %w", expr, err)
	}
	defer q.Close()
	res := q.Exec(ctx)
	if res.Err != nil {
		return nil, nil, fmt.Errorf("query %q: %w", expr, res.Err)
	}
	warnings, _ := res.Warnings.AsStrings(expr, maxWarnings, 0)
	switch v := res.Value.(type) {
	case promql.Vector:
		return toVector(v), warnings, nil
	case promql.Scalar:
		return model.Vector{{
			Metric:    model.Metric{},
			Value:     model.SampleValue(v.V),
			Timestamp: model.Time(v.T),
		}}, warnings, nil
	case promql.Matrix:
		return nil, warnings, fmt.Errorf("query %q: result is a range vector; use QueryRange or wrap it in a function", expr)
	case promql.String:
		return nil, warnings, fmt.Errorf("query %q: result is a string, not a vector", expr)
	default:
		return nil, warnings, fmt.Errorf("query %q: unexpected result type %s", expr, res.Value.Type())
	}
}

// QueryRange runs a PromQL range query over [start, end] at the given step.
func (s *Store) QueryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) (model.Matrix, []string, error) {
	if step <= 0 {
		return nil, nil, fmt.Errorf("query range %q: step must be positive, got %s", expr, step)
	}
	if end.Before(start) {
		return nil, nil, fmt.Errorf("query range %q: end %s before start %s", expr, end.Format(time.RFC3339), start.Format(time.RFC3339))
	}
	q, err := s.engine.NewRangeQuery(ctx, s, nil, expr, start, end, step)
	if err != nil {
		return nil, nil, fmt.Errorf("query range %q: %w", expr, err)
	}
	defer q.Close()
	res := q.Exec(ctx)
	if res.Err != nil {
		return nil, nil, fmt.Errorf("query range %q: %w", expr, res.Err)
	}
	warnings, _ := res.Warnings.AsStrings(expr, maxWarnings, 0)
	m, ok := res.Value.(promql.Matrix)
	if !ok {
		return nil, warnings, fmt.Errorf("query range %q: unexpected result type %s", expr, res.Value.Type())
	}
	return toMatrix(m), warnings, nil
}

// ParseExpr parses a PromQL expression with the parser the store's engine
// uses, so callers can validate expressions before running them.
func (s *Store) ParseExpr(expr string) error {
	if _, err := s.parser.ParseExpr(expr); err != nil {
		return fmt.Errorf("parse %q: %w", expr, err)
	}
	return nil
}

func toMetric(ls labels.Labels) model.Metric {
	m := make(model.Metric, ls.Len())
	ls.Range(func(l labels.Label) {
		m[model.LabelName(l.Name)] = model.LabelValue(l.Value)
	})
	return m
}

// toVector converts a PromQL vector. Native histogram samples cannot occur
// (only floats are ever appended) and are skipped.
func toVector(v promql.Vector) model.Vector {
	out := make(model.Vector, 0, len(v))
	for _, s := range v {
		if s.H != nil {
			continue
		}
		out = append(out, &model.Sample{
			Metric:    toMetric(s.Metric),
			Value:     model.SampleValue(s.F),
			Timestamp: model.Time(s.T),
		})
	}
	return out
}

func toMatrix(m promql.Matrix) model.Matrix {
	out := make(model.Matrix, 0, len(m))
	for _, s := range m {
		if len(s.Floats) == 0 {
			continue
		}
		ss := &model.SampleStream{
			Metric: toMetric(s.Metric),
			Values: make([]model.SamplePair, len(s.Floats)),
		}
		for i, p := range s.Floats {
			ss.Values[i] = model.SamplePair{Timestamp: model.Time(p.T), Value: model.SampleValue(p.F)}
		}
		out = append(out, ss)
	}
	return out
}
