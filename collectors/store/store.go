// Package store is whyslow's embedded metrics store: a Prometheus TSDB
// queried by the real PromQL engine.
//
// A Store is filled through the ordinary Prometheus write path
// (storage.Appender, from Appender) by the bundle loader and the scraper, and
// read through PromQL (Query, QueryRange), so the same ruleset expression gives
// the same answer here and on a remote Prometheus.
//
// Two modes:
//
//   - In memory (Options.Dir empty): the TSDB lives in a private temporary
//     directory (head chunks are memory-mapped there; the WAL is off) that
//     Close removes. Compaction is disabled and the head accepts samples
//     anywhere in a very wide window (InMemoryWindow), in any order across
//     series and out of order within a series, so an incident bundle written
//     series by series over hours loads without sorting.
//   - Live in memory (Options.Dir empty, Options.Live set): for a daemon
//     that scrapes in time order. Like the in-memory mode (temporary
//     directory, no WAL) but with 2h blocks, compaction and
//     Options.Retention, so memory stays bounded however long it runs, and
//     out-of-order samples accepted only within LiveOutOfOrderWindow. A
//     store that is never compacted keeps every chunk of every series in
//     the head: memory grows without bound and each query walks longer
//     chunk lists.
//   - On disk (Options.Dir set): a normal TSDB with a WAL, 2h blocks and
//     Options.Retention (default 6h). Out-of-order samples are accepted
//     within the retention, so a bundle can also be loaded into it.
//
// Only float samples are supported (classic histograms are plain series).
package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunks"
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
	// still accepts samples (its head block range is twice this).
	InMemoryWindow = 90 * 24 * time.Hour
	// LiveOutOfOrderWindow is how far behind the newest sample a live
	// in-memory store accepts samples (expositions with their own, slightly
	// older timestamps).
	LiveOutOfOrderWindow = 10 * time.Minute
	// SmallStripeSize is the series hash-map stripe count of live and
	// on-disk stores: a sidecar holds thousands of series, not millions,
	// and TSDB's default of 16384 stripes costs megabytes up front.
	SmallStripeSize = 1024
	// maxWarnings caps the PromQL warnings returned with one result.
	maxWarnings = 10
)

// Options configures a Store. Zero values get the defaults above.
type Options struct {
	// Dir is the TSDB directory. Empty means in memory (a temporary
	// directory removed on Close).
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
	// Logger receives TSDB and engine logs; nil discards them.
	Logger *slog.Logger
	// Registerer, if set, receives the TSDB and PromQL engine metrics.
	Registerer prometheus.Registerer
}

// Store is an embedded Prometheus TSDB with a PromQL engine. It is safe for
// concurrent use.
type Store struct {
	db      *tsdb.DB
	engine  *promql.Engine
	parser  parser.Parser
	tempDir string // removed on Close; empty when on disk
}

// Open opens a store as described by opts.
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

	topts := tsdb.DefaultOptions()
	// The head writes full chunks to its chunks_head files through one
	// buffer, 4 MiB by default and held from the first chunk on: 30% of a
	// sidecar's heap. A sidecar cuts ~450 chunks of ~200 B per 10 minutes;
	// the smallest buffer tsdb allows still batches hundreds per write.
	topts.HeadChunksWriteBufferSize = chunks.MinWriteBufferSize
	dir, tempDir := opts.Dir, ""
	if dir == "" {
		d, err := os.MkdirTemp("", "whyslow-store-")
		if err != nil {
			return nil, fmt.Errorf("open store: %w", err)
		}
		dir, tempDir = d, d
		topts.WALSegmentSize = -1 // no WAL: nothing survives Close anyway
		topts.NoLockfile = true
		if opts.Live {
			topts.RetentionDuration = opts.Retention.Milliseconds()
			topts.OutOfOrderTimeWindow = LiveOutOfOrderWindow.Milliseconds()
			topts.StripeSize = SmallStripeSize
		} else {
			window := InMemoryWindow.Milliseconds()
			topts.MinBlockDuration = 2 * window
			topts.MaxBlockDuration = 2 * window
			topts.RetentionDuration = 0
			topts.OutOfOrderTimeWindow = window
		}
	} else {
		topts.RetentionDuration = opts.Retention.Milliseconds()
		topts.OutOfOrderTimeWindow = opts.Retention.Milliseconds()
		topts.StripeSize = SmallStripeSize
	}

	db, err := tsdb.Open(dir, slog.New(quietInfo{logger.Handler()}).With("component", "tsdb"), opts.Registerer, topts, nil)
	if err != nil {
		if tempDir != "" {
			_ = os.RemoveAll(tempDir)
		}
		return nil, fmt.Errorf("open store %s: %w", dir, err)
	}
	if tempDir != "" && !opts.Live {
		// Everything stays in the head: compacting a temporary store to
		// blocks would only cost time.
		db.DisableCompactions()
	}

	p := newParseCache(parser.NewParser(parser.Options{}))
	engine := promql.NewEngine(promql.EngineOpts{
		Logger:               logger.With("component", "promql"),
		Reg:                  opts.Registerer,
		MaxSamples:           opts.MaxSamples,
		Timeout:              opts.Timeout,
		LookbackDelta:        opts.LookbackDelta,
		EnableAtModifier:     true,
		EnableNegativeOffset: true,
		Parser:               p,
	})
	return &Store{db: db, engine: engine, parser: p, tempDir: tempDir}, nil
}

// quietInfo logs the TSDB's info records at debug: its WAL replay (about
// six lines on every start of a daemon with a data_dir), block writes and
// head truncations are housekeeping, not news for whoever reads whyslow's
// log. Warnings and errors pass unchanged.
type quietInfo struct{ h slog.Handler }

func (q quietInfo) Enabled(ctx context.Context, l slog.Level) bool {
	return q.h.Enabled(ctx, demote(l))
}

func (q quietInfo) Handle(ctx context.Context, r slog.Record) error {
	r.Level = demote(r.Level)
	return q.h.Handle(ctx, r)
}

func (q quietInfo) WithAttrs(as []slog.Attr) slog.Handler { return quietInfo{q.h.WithAttrs(as)} }
func (q quietInfo) WithGroup(name string) slog.Handler    { return quietInfo{q.h.WithGroup(name)} }

func demote(l slog.Level) slog.Level {
	if l >= slog.LevelInfo && l < slog.LevelWarn {
		return slog.LevelDebug
	}
	return l
}

// Close closes the TSDB and, for an in-memory store, removes its directory.
func (s *Store) Close() error {
	err := s.db.Close()
	if s.tempDir != "" {
		err = errors.Join(err, os.RemoveAll(s.tempDir))
	}
	if err != nil {
		return fmt.Errorf("close store: %w", err)
	}
	return nil
}

// Appender returns a TSDB appender. Samples become visible to queries on
// Commit; commit every few thousand samples to keep memory flat.
func (s *Store) Appender(ctx context.Context) storage.Appender {
	return s.db.Appender(ctx)
}

// Querier returns a querier over [mint, maxt] (milliseconds, inclusive), so
// a Store is a storage.Queryable for code that reads raw series.
func (s *Store) Querier(mint, maxt int64) (storage.Querier, error) {
	return s.db.Querier(mint, maxt)
}

// DB returns the underlying TSDB, for callers (benchmarks) that run the
// PromQL engine directly.
func (s *Store) DB() *tsdb.DB { return s.db }

// Engine returns the PromQL engine the store queries with.
func (s *Store) Engine() *promql.Engine { return s.engine }

// Stats describes what a store holds.
type Stats struct {
	// Series is the number of series in the head.
	Series uint64
	// MinTime and MaxTime bound the stored samples; both are zero when the
	// store is empty.
	MinTime, MaxTime time.Time
}

// Stats reports the series count and time range of the store.
func (s *Store) Stats() Stats {
	st := Stats{Series: s.db.Head().NumSeries()}
	minT, maxT := s.db.Head().MinTime(), s.db.Head().MaxTime()
	for _, b := range s.db.Blocks() {
		m := b.Meta()
		minT = min(minT, m.MinTime)
		maxT = max(maxT, m.MaxTime-1) // block MaxTime is exclusive
		st.Series += b.Meta().Stats.NumSeries
	}
	if minT <= maxT {
		st.MinTime, st.MaxTime = time.UnixMilli(minT).UTC(), time.UnixMilli(maxT).UTC()
	}
	return st
}

// Query runs an instant PromQL query at the given time. A scalar result is
// returned as one sample without labels; a string result or a range vector
// is an error. Warnings are PromQL's warning annotations.
func (s *Store) Query(ctx context.Context, expr string, at time.Time) (model.Vector, []string, error) {
	q, err := s.engine.NewInstantQuery(ctx, s.db, nil, expr, at)
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
	q, err := s.engine.NewRangeQuery(ctx, s.db, nil, expr, start, end, step)
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
