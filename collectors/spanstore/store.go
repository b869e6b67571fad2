// Package spanstore keeps recent spans in memory, bounded by span count and
// by bytes, indexed by trace id, by gen_ai.request.id and by start time. It
// implements triage.Traces for the daemon.
package spanstore

import (
	"context"
	"sync"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/whyslow/whyslow/triage"
)

// Defaults for a zero Options.
const (
	DefaultMaxSpans = 1_000_000
	DefaultMaxBytes = 256 << 20
)

// RequestIDKey is the span attribute indexed for ByRequestID.
const RequestIDKey = "gen_ai.request.id"

const (
	bucketWidth = int64(time.Second)
	// indexOverhead is charged per span for its share of the three index
	// maps (measured: see TestBytesPerSpan).
	indexOverhead = 64
	// Strings up to internMaxLen bytes that repeat (attribute keys, span
	// names, resource values) are shared; the table is capped so that a
	// flood of distinct keys cannot grow it without bound.
	internMaxLen     = 128
	internMaxEntries = 8192
)

// Options configures a Store; zero values get defaults.
type Options struct {
	// MaxSpans bounds the number of spans held (default DefaultMaxSpans).
	MaxSpans int
	// MaxBytes bounds the estimated bytes held (default DefaultMaxBytes). The
	// estimate counts the span struct, its attributes, their strings, its
	// share of the resource attributes and of the indexes.
	MaxBytes int64
	// Registerer receives whyslow_spanstore_spans, whyslow_spanstore_bytes
	// and whyslow_spanstore_evicted_total; nil registers nothing.
	Registerer prometheus.Registerer
}

type slot struct {
	span triage.Span
	// next* hold seq+1 of the next span on the same chain, 0 at the end.
	nextTrace, nextReq, nextBucket uint64
	bytes                          int64
}

// chain is a linked list of slots through next*, in seq+1 form.
type chain struct{ first, last uint64 }

// Store is a bounded in-memory span store. It is safe for concurrent use.
// Oldest spans (in arrival order) are evicted first.
type Store struct {
	maxSpans int
	maxBytes int64

	mu      sync.RWMutex
	buf     []slot
	head    int    // index in buf of the oldest span
	n       int    // spans held
	headSeq uint64 // sequence number of the oldest span
	bytes   int64
	evicted uint64
	traces  map[triage.TraceID]chain
	reqs    map[string]chain
	buckets map[int64]chain
	intern  map[string]string
}

// New returns an empty store and registers its metrics.
func New(opts Options) (*Store, error) {
	if opts.MaxSpans <= 0 {
		opts.MaxSpans = DefaultMaxSpans
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	s := &Store{
		maxSpans: opts.MaxSpans,
		maxBytes: opts.MaxBytes,
		traces:   map[triage.TraceID]chain{},
		reqs:     map[string]chain{},
		buckets:  map[int64]chain{},
		intern:   map[string]string{},
	}
	if opts.Registerer != nil {
		cs := []prometheus.Collector{
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "whyslow_spanstore_spans", Help: "Spans held in the span store."},
				func() float64 { return float64(s.Len()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "whyslow_spanstore_bytes", Help: "Estimated bytes held by the span store."},
				func() float64 { return float64(s.Bytes()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "whyslow_spanstore_evicted_total", Help: "Spans evicted (or dropped on arrival) to keep the span store within its bounds."},
				func() float64 { return float64(s.Evicted()) }),
		}
		for _, c := range cs {
			if err := opts.Registerer.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return s, nil
}

// Len returns the number of spans held.
func (s *Store) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.n
}

// Bytes returns the estimated bytes held; never above Options.MaxBytes.
func (s *Store) Bytes() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.bytes
}

// Evicted returns how many spans were evicted or dropped so far.
func (s *Store) Evicted() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.evicted
}

var (
	slotSize = int64(unsafe.Sizeof(slot{}))
	attrSize = int64(unsafe.Sizeof(triage.Attr{}))
)

// Append adds spans, evicting the oldest as needed to stay within bounds. The
// store takes ownership of each span's Attrs and Resource slices (it may
// rewrite their strings to shared copies); callers must not modify them
// afterwards.
func (s *Store) Append(spans []triage.Span) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := 0; i < len(spans); {
		// Spans decoded from one resource share its slice: intern and charge
		// it once, split over the group.
		j := i + 1
		for j < len(spans) && sameSlice(spans[j].Resource, spans[i].Resource) {
			j++
		}
		res := spans[i].Resource
		resBytes := s.internAttrs(res, true)
		share := (resBytes + int64(j-i) - 1) / int64(j-i)
		for k := i; k < j; k++ {
			sp := spans[k]
			sp.Resource = res
			b := slotSize + indexOverhead + share + s.internAttrs(sp.Attrs, false)
			sp.Name, b = s.internString(sp.Name, b)
			s.insert(&sp, b)
		}
		i = j
	}
}

func sameSlice(a, b triage.Attrs) bool {
	if len(a) != len(b) {
		return false
	}
	return len(a) == 0 || &a[0] == &b[0]
}

// internAttrs shares repeated keys (and, for resources, values) and returns
// the bytes charged for the slice and its unshared strings.
func (s *Store) internAttrs(as triage.Attrs, values bool) int64 {
	b := int64(len(as)) * attrSize
	for i := range as {
		as[i].Key, b = s.internString(as[i].Key, b)
		if values {
			as[i].Str, b = s.internString(as[i].Str, b)
		} else {
			b += int64(len(as[i].Str))
		}
	}
	return b
}

// internString returns the shared copy of str and b plus the bytes charged:
// zero for a shared string, its length otherwise.
func (s *Store) internString(str string, b int64) (string, int64) {
	if str == "" {
		return str, b
	}
	if v, ok := s.intern[str]; ok {
		return v, b
	}
	if len(str) <= internMaxLen && len(s.intern) < internMaxEntries {
		s.intern[str] = str
	}
	return str, b + int64(len(str))
}

func (s *Store) index(seq uint64) int {
	return (s.head + int(seq-s.headSeq)) % len(s.buf)
}

func (s *Store) insert(sp *triage.Span, b int64) {
	if b > s.maxBytes {
		s.evicted++
		return
	}
	for s.n > 0 && (s.n >= s.maxSpans || s.bytes+b > s.maxBytes) {
		s.evictOldest()
	}
	if s.n == len(s.buf) {
		s.grow()
	}
	seq := s.headSeq + uint64(s.n)
	i := s.index(seq)
	s.buf[i] = slot{span: *sp, bytes: b}
	s.n++
	s.bytes += b
	s.traces[sp.TraceID] = s.link(s.traces[sp.TraceID], seq, func(sl *slot) *uint64 { return &sl.nextTrace })
	if id := sp.Attrs.String(RequestIDKey); id != "" {
		s.reqs[id] = s.link(s.reqs[id], seq, func(sl *slot) *uint64 { return &sl.nextReq })
	}
	bk := bucketOf(sp.StartUnixNano)
	s.buckets[bk] = s.link(s.buckets[bk], seq, func(sl *slot) *uint64 { return &sl.nextBucket })
}

func bucketOf(ns int64) int64 {
	b := ns / bucketWidth
	if ns < 0 && ns%bucketWidth != 0 {
		b--
	}
	return b
}

func (s *Store) link(c chain, seq uint64, next func(*slot) *uint64) chain {
	if c.first == 0 {
		return chain{first: seq + 1, last: seq + 1}
	}
	*next(&s.buf[s.index(c.last-1)]) = seq + 1
	c.last = seq + 1
	return c
}

// unlinkHead removes the oldest span (seq, which heads every chain it is on).
func unlinkHead[K comparable](m map[K]chain, k K, next uint64) {
	c := m[k]
	if next == 0 {
		delete(m, k)
		return
	}
	c.first = next
	m[k] = c
}

func (s *Store) evictOldest() {
	sl := &s.buf[s.head]
	sp := &sl.span
	unlinkHead(s.traces, sp.TraceID, sl.nextTrace)
	if id := sp.Attrs.String(RequestIDKey); id != "" {
		unlinkHead(s.reqs, id, sl.nextReq)
	}
	unlinkHead(s.buckets, bucketOf(sp.StartUnixNano), sl.nextBucket)
	s.bytes -= sl.bytes
	*sl = slot{}
	s.head = (s.head + 1) % len(s.buf)
	s.headSeq++
	s.n--
	s.evicted++
}

func (s *Store) grow() {
	size := max(1024, 2*len(s.buf))
	size = min(size, s.maxSpans)
	nb := make([]slot, size)
	for k := 0; k < s.n; k++ {
		nb[k] = s.buf[(s.head+k)%len(s.buf)]
	}
	s.buf = nb
	s.head = 0
}

// walk appends the spans on a chain to dst.
func (s *Store) walk(dst []triage.Span, c chain, next func(*slot) uint64) []triage.Span {
	for p := c.first; p != 0; {
		sl := &s.buf[s.index(p-1)]
		dst = append(dst, sl.span)
		p = next(sl)
	}
	return dst
}

// SpansBetween implements triage.Traces. The returned spans share their
// attribute slices with the store: treat them as read-only.
func (s *Store) SpansBetween(ctx context.Context, start, end time.Time, limit int) ([]triage.Span, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	lo, hi := start.UnixNano(), end.UnixNano()
	if hi <= lo {
		return nil, nil
	}
	s.mu.RLock()
	var out []triage.Span
	collect := func(c chain) {
		for p := c.first; p != 0; {
			sl := &s.buf[s.index(p-1)]
			if t := sl.span.StartUnixNano; t >= lo && t < hi {
				out = append(out, sl.span)
			}
			p = sl.nextBucket
		}
	}
	first, last := bucketOf(lo), bucketOf(hi-1)
	if uint64(last-first) < uint64(len(s.buckets)) {
		for b := first; b <= last; b++ {
			if c, ok := s.buckets[b]; ok {
				collect(c)
			}
		}
	} else {
		for b, c := range s.buckets {
			if b >= first && b <= last {
				collect(c)
			}
		}
	}
	s.mu.RUnlock()
	triage.SortByStart(out)
	if limit > 0 && len(out) > limit {
		out = out[:limit:limit]
	}
	return out, nil
}

// Trace implements triage.Traces.
func (s *Store) Trace(ctx context.Context, id triage.TraceID) ([]triage.Span, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	c, ok := s.traces[id]
	var out []triage.Span
	if ok {
		out = s.walk(nil, c, func(sl *slot) uint64 { return sl.nextTrace })
	}
	s.mu.RUnlock()
	if !ok {
		return nil, triage.ErrTraceNotFound
	}
	triage.SortByStart(out)
	return out, nil
}

// ByRequestID implements triage.Traces.
func (s *Store) ByRequestID(ctx context.Context, id string) ([]triage.Span, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	out := s.walk(nil, s.reqs[id], func(sl *slot) uint64 { return sl.nextReq })
	s.mu.RUnlock()
	triage.SortByStart(out)
	return out, nil
}

var _ triage.Traces = (*Store)(nil)
