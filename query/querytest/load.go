package querytest

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"
)

// The series live in memory, not in a TSDB as promqltest.LoadedStorage
// keeps them: Prometheus's tsdb package imports its config package and,
// through it, the AWS, Azure and Google SDKs of remote write, about 300
// packages every test binary of a package that reads querytest compiled
// and linked for nothing (go list -deps). The PromQL engine reads both
// through storage.Queryable; what it sees is the same: each series'
// samples in time order, series sorted by labels, those without a sample
// in the queried range left out.

// memStorage holds float series sorted by labels.
type memStorage struct {
	series []memSeries
}

// memSeries is one series: its samples' times (ms) and values, and the
// same as samples for Prometheus's list iterator.
type memSeries struct {
	lset    labels.Labels
	t       []int64
	f       []float64
	samples chunks.SampleSlice
}

// load reads promqltest's load notation: blocks of `load <interval>`
// followed by series lines (`metric{l="v"} 0+10x60`, `_` for a missing
// sample), each series starting at Unix time 0 as promqltest's do. A
// series given again in one block replaces the earlier line (as
// promqltest's load does); given in two blocks, their samples are merged.
// Lines starting with # and blank lines outside a block are skipped.
func load(input string) (*memStorage, error) {
	byKey := map[string]*memSeries{}
	p := parser.NewParser(parser.Options{})
	lines := strings.Split(input, "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		cmd, arg, _ := strings.Cut(l, " ")
		if cmd != "load" {
			return nil, fmt.Errorf("line %d: %q: only `load <interval>` blocks are read", i+1, l)
		}
		gap, err := model.ParseDuration(strings.TrimSpace(arg))
		if err != nil || gap <= 0 {
			return nil, fmt.Errorf("line %d: load interval %q: want a positive duration", i+1, arg)
		}
		block := map[string]*memSeries{}
		for i+1 < len(lines) {
			def := strings.TrimSpace(lines[i+1])
			if strings.HasPrefix(def, "#") {
				i++
				continue
			}
			if def == "" {
				break
			}
			i++
			lset, vals, err := p.ParseSeriesDesc(def)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", i+1, err)
			}
			s := &memSeries{lset: lset}
			for k, v := range vals {
				if v.Omitted {
					continue
				}
				if v.Histogram != nil {
					return nil, fmt.Errorf("line %d: native histograms are not supported", i+1)
				}
				s.t = append(s.t, int64(time.Duration(k)*time.Duration(gap)/time.Millisecond))
				s.f = append(s.f, v.Value)
			}
			block[lset.String()] = s
		}
		for key, s := range block {
			if err := merge(byKey, key, s); err != nil {
				return nil, err
			}
		}
	}
	st := &memStorage{}
	for _, s := range byKey {
		for i, t := range s.t {
			s.samples = append(s.samples, floatSample{t: t, f: s.f[i]})
		}
		st.series = append(st.series, *s)
	}
	sort.Slice(st.series, func(i, j int) bool { return labels.Compare(st.series[i].lset, st.series[j].lset) < 0 })
	return st, nil
}

// merge adds s to the series of key: two samples at one time must agree,
// as a TSDB append of a different value at a sample's time fails.
func merge(byKey map[string]*memSeries, key string, s *memSeries) error {
	old, ok := byKey[key]
	if !ok {
		byKey[key] = s
		return nil
	}
	at := map[int64]float64{}
	for i, t := range old.t {
		at[t] = old.f[i]
	}
	for i, t := range s.t {
		if v, ok := at[t]; ok && math.Float64bits(v) != math.Float64bits(s.f[i]) {
			return fmt.Errorf("series %s: two values at %d ms", key, t)
		}
		at[t] = s.f[i]
	}
	merged := &memSeries{lset: s.lset}
	for t := range at {
		merged.t = append(merged.t, t)
	}
	slices.Sort(merged.t)
	for _, t := range merged.t {
		merged.f = append(merged.f, at[t])
	}
	byKey[key] = merged
	return nil
}

// Querier implements storage.Queryable.
func (s *memStorage) Querier(mint, maxt int64) (storage.Querier, error) {
	return &memQuerier{st: s, mint: mint, maxt: maxt}, nil
}

// memQuerier reads the series with a sample in [mint, maxt] (or in the
// select hints' range, as a TSDB querier reads).
type memQuerier struct {
	st         *memStorage
	mint, maxt int64
}

// matching returns the series that match ms with a sample in [mint, maxt].
func (q *memQuerier) matching(mint, maxt int64, ms []*labels.Matcher) []storage.Series {
	var out []storage.Series
	for i := range q.st.series {
		s := &q.st.series[i]
		if !matches(s.lset, ms) {
			continue
		}
		j := sort.Search(len(s.t), func(j int) bool { return s.t[j] >= mint })
		if j == len(s.t) || s.t[j] > maxt {
			continue
		}
		out = append(out, s)
	}
	return out
}

func matches(lset labels.Labels, ms []*labels.Matcher) bool {
	for _, m := range ms {
		if !m.Matches(lset.Get(m.Name)) {
			return false
		}
	}
	return true
}

// Select implements storage.Querier; the series come sorted by labels.
func (q *memQuerier) Select(_ context.Context, _ bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	mint, maxt := q.mint, q.maxt
	if hints != nil {
		mint, maxt = hints.Start, hints.End
	}
	return &memSeriesSet{series: q.matching(mint, maxt, ms), i: -1}
}

// LabelValues implements storage.LabelQuerier.
func (q *memQuerier) LabelValues(_ context.Context, name string, _ *storage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	seen := map[string]bool{}
	for _, s := range q.matching(q.mint, q.maxt, ms) {
		if v := s.Labels().Get(name); v != "" {
			seen[v] = true
		}
	}
	return sortedKeys(seen), nil, nil
}

// LabelNames implements storage.LabelQuerier.
func (q *memQuerier) LabelNames(_ context.Context, _ *storage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	seen := map[string]bool{}
	for _, s := range q.matching(q.mint, q.maxt, ms) {
		s.Labels().Range(func(l labels.Label) { seen[l.Name] = true })
	}
	return sortedKeys(seen), nil, nil
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Close implements storage.Querier.
func (*memQuerier) Close() error { return nil }

// memSeriesSet walks a slice of series.
type memSeriesSet struct {
	series []storage.Series
	i      int
}

func (s *memSeriesSet) Next() bool                      { s.i++; return s.i < len(s.series) }
func (s *memSeriesSet) At() storage.Series              { return s.series[s.i] }
func (*memSeriesSet) Err() error                        { return nil }
func (*memSeriesSet) Warnings() annotations.Annotations { return nil }

// Labels implements storage.Series.
func (s *memSeries) Labels() labels.Labels { return s.lset }

// Iterator implements storage.Series.
func (s *memSeries) Iterator(chunkenc.Iterator) chunkenc.Iterator {
	return storage.NewListSeriesIterator(s.samples)
}

// floatSample is one sample of a float series.
type floatSample struct {
	t int64
	f float64
}

func (s floatSample) T() int64                    { return s.t }
func (floatSample) ST() int64                     { return 0 }
func (s floatSample) F() float64                  { return s.f }
func (floatSample) H() *histogram.Histogram       { return nil }
func (floatSample) FH() *histogram.FloatHistogram { return nil }
func (floatSample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
func (s floatSample) Copy() chunks.Sample         { return s }
