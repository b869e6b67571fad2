package store

import (
	"context"
	"errors"
	"math"
	"slices"
	"sort"
	"sync"

	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/util/annotations"
)

// samplesPerChunk is where a chunk is cut, as in Prometheus's TSDB head
// (tsdb/head_append.go, targetSamplesPerChunk): about 1.3 bytes a sample
// for scraped gauges and counters.
const samplesPerChunk = 120

// errFloatsOnly answers every non-float append: whyslow stores floats only.
var errFloatsOnly = errors.New("store: only float samples are supported")

// chunk is one XOR-compressed run of samples in time order. A chunk whose
// app is nil is full and never written again, so queries read it without a
// copy.
type chunk struct {
	mint, maxt int64
	xor        *chunkenc.XORChunk
	app        chunkenc.Appender
}

func newChunk(t int64, v float64) *chunk {
	c := &chunk{mint: t, xor: chunkenc.NewXORChunk()}
	c.app, _ = c.xor.Appender() // a new XOR chunk's appender cannot fail
	c.add(t, v, nil)            // one sample never fills it
	return c
}

// add appends a sample; a chunk it fills moves its bytes into pages.
func (c *chunk) add(t int64, v float64, pages *chunkPages) {
	c.app.Append(0, t, v)
	c.maxt = t
	if c.xor.NumSamples() >= samplesPerChunk {
		c.app = nil
		c.trim(pages)
	}
}

// trim moves a full chunk's bytes into pages, at their length. Its
// appends grew them by doubling, and a full chunk stays for the retention
// (hours): an hour of the engine model's 446 series at 5 s held 1.18 MB for
// 0.76 MB of chunk data. No query holds a chunk before it is full (frozen),
// so swapping its bytes here is safe.
func (c *chunk) trim(pages *chunkPages) {
	xc, _ := chunkenc.FromData(chunkenc.EncXOR, pages.keep(c.xor.Bytes())) // XOR data is always accepted
	c.xor = xc.(*chunkenc.XORChunk)
}

// chunkPageSize is the size of the pages full chunks' bytes are packed in.
const chunkPageSize = 64 << 10

// chunkPages packs full chunks' bytes into pages of chunkPageSize. Copied
// one by one, each would be a small object of its own, rounded up to its
// size class and left among the garbage of the queries that ran while its
// chunk filled, where it keeps a span of that garbage's size class in use
// for the retention. Chunks fill in time order, so one page holds chunks
// of about one age and the retention drops them together: the page is
// freed when its last chunk is. Guarded by the head's lock.
type chunkPages struct {
	page []byte // the page being filled
}

// keep returns a copy of b, packed into the current page; nil pages copy
// b on its own. The copy's capacity is its length: nothing appends to it.
func (p *chunkPages) keep(b []byte) []byte {
	if p == nil || len(b) > chunkPageSize/4 {
		return slices.Clip(slices.Clone(b))
	}
	if len(p.page)+len(b) > cap(p.page) {
		p.page = make([]byte, 0, chunkPageSize)
	}
	n := len(p.page)
	p.page = append(p.page, b...)
	return p.page[n:len(p.page):len(p.page)]
}

// frozen returns the chunk as a query may hold it: itself when full, else
// a copy of its bytes so far.
func (c *chunk) frozen() *chunk {
	if c.app == nil {
		return c
	}
	b := slices.Clone(c.xor.Bytes())
	xc, _ := chunkenc.FromData(chunkenc.EncXOR, b) // XOR data is always accepted
	return &chunk{mint: c.mint, maxt: c.maxt, xor: xc.(*chunkenc.XORChunk)}
}

// series is one labelled series: its in-order chunks (sorted, not
// overlapping) and the chunks of samples that arrived behind them.
type series struct {
	ref     storage.SeriesRef
	lset    labels.Labels
	chunks  []*chunk
	ooo     []*chunk
	lastV   uint64 // bits of the newest in-order sample, for duplicates
	deleted bool   // dropped by retention; appenders holding it look it up again
}

func (s *series) maxT() int64 {
	if len(s.chunks) == 0 {
		return math.MinInt64
	}
	return s.chunks[len(s.chunks)-1].maxt
}

// check says whether a sample may be appended, as TSDB's head answers
// (head_append.go appendable): a repeat of the newest sample is accepted
// and ignored, a new value at its timestamp is a duplicate.
func (s *series) check(t int64, v float64) error {
	if t == s.maxT() && math.Float64bits(v) != s.lastV {
		return storage.ErrDuplicateSampleForTimestamp
	}
	return nil
}

func (s *series) add(t int64, v float64, pages *chunkPages) {
	last := s.maxT()
	switch {
	case t > last:
		if n := len(s.chunks); n > 0 && s.chunks[n-1].app != nil {
			s.chunks[n-1].add(t, v, pages)
		} else {
			s.chunks = append(s.chunks, newChunk(t, v))
		}
		s.lastV = math.Float64bits(v)
	case t == last:
		// A repeat (or a duplicate that raced its check): the first wins.
	default:
		if n := len(s.ooo); n > 0 && s.ooo[n-1].app != nil && t > s.ooo[n-1].maxt {
			s.ooo[n-1].add(t, v, pages)
		} else {
			s.ooo = append(s.ooo, newChunk(t, v))
		}
	}
}

// head holds every series in memory. One lock guards it: appends take it
// for the length of a commit, queries for the length of a Select.
type head struct {
	mu     sync.RWMutex
	byRef  map[storage.SeriesRef]*series
	byHash map[uint64][]*series
	byName map[string][]*series
	// byLabel lists the series of each label pair but the name: a
	// selector of one scope (namespace="a") reads that scope's series,
	// not every series of the metric in the fleet.
	byLabel map[labels.Label][]*series
	nextRef storage.SeriesRef
	// minT and maxT bound the committed samples; minT > maxT when empty.
	minT, maxT int64
	// window is how far behind maxT a sample is still accepted.
	window int64
	// retention drops chunks that end this far behind maxT; 0 keeps all.
	retention int64
	pages     chunkPages // full chunks' bytes
}

func newHead(window, retention int64) *head {
	return &head{
		byRef:   map[storage.SeriesRef]*series{},
		byHash:  map[uint64][]*series{},
		byName:  map[string][]*series{},
		byLabel: map[labels.Label][]*series{},
		minT:    math.MaxInt64, maxT: math.MinInt64,
		window: window, retention: retention,
	}
}

// getOrCreate returns the series with these labels, creating it. The
// caller holds the write lock.
func (h *head) getOrCreate(lset labels.Labels) *series {
	hash := lset.Hash()
	for _, s := range h.byHash[hash] {
		if labels.Equal(s.lset, lset) {
			return s
		}
	}
	h.nextRef++
	s := &series{ref: h.nextRef, lset: lset.Copy()}
	h.byRef[s.ref] = s
	h.byHash[hash] = append(h.byHash[hash], s)
	h.index(s)
	return s
}

// index adds s to the name and label lists. The caller holds the write lock.
func (h *head) index(s *series) {
	s.lset.Range(func(l labels.Label) {
		if l.Name == labels.MetricName {
			h.byName[l.Value] = append(h.byName[l.Value], s)
			return
		}
		h.byLabel[l] = append(h.byLabel[l], s)
	})
}

func (h *head) lookup(lset labels.Labels) *series {
	for _, s := range h.byHash[lset.Hash()] {
		if labels.Equal(s.lset, lset) {
			return s
		}
	}
	return nil
}

// commit applies samples in order and then drops what fell out of the
// retention. The caller holds the write lock.
func (h *head) commit(samples []pendingSample) {
	for _, p := range samples {
		s := p.s
		if s.deleted {
			s = h.getOrCreate(s.lset)
		}
		if h.tooOld(p.t) || s.check(p.t, p.v) != nil {
			continue // became invalid behind a concurrent commit, as TSDB drops it
		}
		s.add(p.t, p.v, &h.pages)
		h.minT, h.maxT = min(h.minT, p.t), max(h.maxT, p.t)
	}
	// Purge once the oldest data is a chunk's worth (at most) past the
	// retention, not on every commit.
	if h.retention > 0 && h.maxT-h.minT > h.retention+h.retention/8 {
		h.purge(h.maxT - h.retention)
	}
}

// purge drops every chunk that ends before cutoff and every series left
// without one.
func (h *head) purge(cutoff int64) {
	keep := func(c *chunk) bool { return c.maxt >= cutoff }
	h.minT = math.MaxInt64
	for ref, s := range h.byRef {
		i := 0
		for i < len(s.chunks) && !keep(s.chunks[i]) {
			i++
		}
		if i > 0 {
			s.chunks = slices.Clone(s.chunks[i:]) // let the dropped chunks go
		}
		s.ooo = slices.DeleteFunc(s.ooo, func(c *chunk) bool { return !keep(c) })
		if len(s.chunks) == 0 && len(s.ooo) == 0 {
			s.deleted = true
			delete(h.byRef, ref)
			continue
		}
		if len(s.chunks) > 0 {
			h.minT = min(h.minT, s.chunks[0].mint)
		}
		for _, c := range s.ooo {
			h.minT = min(h.minT, c.mint)
		}
	}
	h.rebuildIndex()
}

func (h *head) rebuildIndex() {
	clear(h.byHash)
	clear(h.byName)
	clear(h.byLabel)
	for _, s := range h.byRef {
		hash := s.lset.Hash()
		h.byHash[hash] = append(h.byHash[hash], s)
		h.index(s)
	}
}

// tooOld says whether t is further behind the newest sample than the window.
func (h *head) tooOld(t int64) bool {
	return h.minT <= h.maxT && t < h.maxT-h.window
}

// numSeries counts the series held.
func (h *head) numSeries() int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return len(h.byRef)
}

// bounds returns the committed time range; ok is false when empty.
func (h *head) bounds() (minT, maxT int64, ok bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.minT, h.maxT, h.minT <= h.maxT
}

type pendingSample struct {
	s *series
	t int64
	v float64
}

// pendingPool recycles appenders' sample buffers: a scrape appends
// thousands of samples every few seconds, and growing a fresh buffer each
// time was half of a live store's allocations.
var pendingPool = sync.Pool{New: func() any { return new([]pendingSample) }}

// appender is a head transaction: samples become visible on Commit.
type appender struct {
	h       *head
	pending *[]pendingSample // from pendingPool; nil until the first Append
}

// release empties the buffer and returns it to the pool.
func (a *appender) release() {
	if a.pending != nil {
		clear(*a.pending) // drop the series pointers
		*a.pending = (*a.pending)[:0]
		pendingPool.Put(a.pending)
		a.pending = nil
	}
}

func (a *appender) Append(ref storage.SeriesRef, lset labels.Labels, t int64, v float64) (storage.SeriesRef, error) {
	a.h.mu.RLock()
	s := a.h.byRef[ref]
	if s == nil {
		s = a.h.lookup(lset)
	}
	var err error
	if s != nil {
		err = s.check(t, v)
	}
	if a.h.tooOld(t) {
		err = storage.ErrTooOldSample
	}
	a.h.mu.RUnlock()
	if err != nil {
		return 0, err
	}
	if s == nil {
		if lset.IsEmpty() {
			return 0, errors.New("store: empty label set")
		}
		a.h.mu.Lock()
		s = a.h.getOrCreate(lset)
		a.h.mu.Unlock()
	}
	if a.pending == nil {
		a.pending = pendingPool.Get().(*[]pendingSample)
	}
	*a.pending = append(*a.pending, pendingSample{s: s, t: t, v: v})
	return s.ref, nil
}

func (a *appender) Commit() error {
	if a.pending == nil {
		return nil
	}
	a.h.mu.Lock()
	a.h.commit(*a.pending)
	a.h.mu.Unlock()
	a.release()
	return nil
}

func (a *appender) Rollback() error {
	a.release()
	return nil
}

func (a *appender) SetOptions(*storage.AppendOptions) {}

// AppendExemplar keeps nothing: whyslow reads no exemplars from the store.
func (a *appender) AppendExemplar(ref storage.SeriesRef, _ labels.Labels, _ exemplar.Exemplar) (storage.SeriesRef, error) {
	return ref, nil
}

// UpdateMetadata keeps nothing: whyslow reads no metadata from the store.
func (a *appender) UpdateMetadata(ref storage.SeriesRef, _ labels.Labels, _ metadata.Metadata) (storage.SeriesRef, error) {
	return ref, nil
}

func (a *appender) AppendHistogram(storage.SeriesRef, labels.Labels, int64, *histogram.Histogram, *histogram.FloatHistogram) (storage.SeriesRef, error) {
	return 0, errFloatsOnly
}

func (a *appender) AppendHistogramSTZeroSample(storage.SeriesRef, labels.Labels, int64, int64, *histogram.Histogram, *histogram.FloatHistogram) (storage.SeriesRef, error) {
	return 0, errFloatsOnly
}

func (a *appender) AppendSTZeroSample(storage.SeriesRef, labels.Labels, int64, int64) (storage.SeriesRef, error) {
	return 0, errors.New("store: start timestamps are not stored")
}

// querier reads the head over [mint, maxt].
type querier struct {
	h          *head
	mint, maxt int64
}

// matching returns the series the matchers select, sorted by labels, as
// TSDB returns them: the shortest list an equality matcher names (by
// name, or by a label pair), filtered by every matcher; every series when
// none names one. The caller holds the read lock.
func (q *querier) matching(ms []*labels.Matcher) []*series {
	var listed []*series
	indexed := false
	for _, m := range ms {
		// name="" also matches the series without the label: no list has them.
		if m.Type != labels.MatchEqual || m.Value == "" {
			continue
		}
		var l []*series
		if m.Name == labels.MetricName {
			l = q.h.byName[m.Value]
		} else {
			l = q.h.byLabel[labels.Label{Name: m.Name, Value: m.Value}]
		}
		if !indexed || len(l) < len(listed) {
			listed, indexed = l, true
		}
	}
	var out []*series
	add := func(s *series) {
		for _, m := range ms {
			if !m.Matches(s.lset.Get(m.Name)) {
				return
			}
		}
		out = append(out, s)
	}
	if indexed {
		for _, s := range listed {
			add(s)
		}
	} else {
		for _, s := range q.h.byRef {
			add(s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return labels.Compare(out[i].lset, out[j].lset) < 0 })
	return out
}

func (q *querier) Select(_ context.Context, _ bool, _ *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	q.h.mu.RLock()
	defer q.h.mu.RUnlock()
	var set seriesSet
	for _, s := range q.matching(ms) {
		r := &seriesRead{lset: s.lset}
		for _, c := range slices.Concat(s.chunks, s.ooo) {
			if c.maxt >= q.mint && c.mint <= q.maxt {
				r.chunks = append(r.chunks, c.frozen())
			}
		}
		if len(r.chunks) > 0 {
			set.list = append(set.list, r)
		}
	}
	return &set
}

func (q *querier) labelSets(ms []*labels.Matcher) []labels.Labels {
	q.h.mu.RLock()
	defer q.h.mu.RUnlock()
	var out []labels.Labels
	for _, s := range q.matching(ms) {
		if s.maxT() >= q.mint || len(s.ooo) > 0 {
			out = append(out, s.lset)
		}
	}
	return out
}

func (q *querier) LabelValues(_ context.Context, name string, _ *storage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	var vs []string
	for _, ls := range q.labelSets(ms) {
		if v := ls.Get(name); v != "" {
			vs = append(vs, v)
		}
	}
	slices.Sort(vs)
	return slices.Compact(vs), nil, nil
}

func (q *querier) LabelNames(_ context.Context, _ *storage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	var ns []string
	for _, ls := range q.labelSets(ms) {
		ls.Range(func(l labels.Label) { ns = append(ns, l.Name) })
	}
	slices.Sort(ns)
	return slices.Compact(ns), nil, nil
}

func (q *querier) Close() error { return nil }

type seriesSet struct {
	list []*seriesRead
	cur  *seriesRead
}

func (s *seriesSet) Next() bool {
	if len(s.list) == 0 {
		return false
	}
	s.cur, s.list = s.list[0], s.list[1:]
	return true
}

func (s *seriesSet) At() storage.Series                { return s.cur }
func (s *seriesSet) Err() error                        { return nil }
func (s *seriesSet) Warnings() annotations.Annotations { return nil }

// seriesRead is one series as a query sees it: its chunks over the query's
// range (in-order and out-of-order ones alike), frozen at Select.
type seriesRead struct {
	lset   labels.Labels
	chunks []*chunk
}

func (r *seriesRead) Labels() labels.Labels { return r.lset }

// Iterator walks the series in time order, one sample per timestamp. It
// yields the whole of the first and last chunks, which may reach outside
// the query's range: the PromQL engine bounds every selector itself.
func (r *seriesRead) Iterator(it chunkenc.Iterator) chunkenc.Iterator {
	if len(r.chunks) == 1 {
		return r.chunks[0].xor.Iterator(it)
	}
	its := make([]chunkenc.Iterator, len(r.chunks))
	for i, c := range r.chunks {
		its[i] = c.xor.Iterator(nil)
	}
	return storage.ChainSampleIteratorFromIterators(it, its)
}
