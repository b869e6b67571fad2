// Package spanstore keeps recent spans in memory, bounded by span count and
// by bytes, indexed by trace id, by gen_ai.request.id and by start time. It
// implements triage.Traces for the daemon.
package spanstore

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/whyslow/whyslow/triage"
)

// Defaults for a zero Options.
const (
	DefaultMaxSpans = 1_000_000
	DefaultMaxBytes = 256 << 20
	// DefaultMaxQuerySpans bounds what a SpansBetween without a limit
	// returns: a triage copies and indexes every span it gets (about 5 kB
	// and 6 µs each), so a store flooded with spans must not make each
	// triage hold all of them. 10 000 is about a minute of a busy engine.
	DefaultMaxQuerySpans = 10_000
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
	// MaxQuerySpans bounds the spans one SpansBetween returns when its
	// caller sets no limit (default DefaultMaxQuerySpans): the newest of the
	// range are kept.
	MaxQuerySpans int
	// MaxSpanBytes bounds one span (its attributes and its resource's), so
	// that one huge span cannot evict thousands of ordinary ones (default
	// MaxBytes/1024, between 16 KiB and 1 MiB). A larger span has its
	// longest string attribute values cut (ending in "…") until it fits, and
	// is dropped when that is not enough.
	MaxSpanBytes int64
	// Registerer receives whyslow_spanstore_spans, whyslow_spanstore_bytes,
	// whyslow_spanstore_evicted_total and whyslow_spanstore_oversized_total;
	// nil registers nothing.
	Registerer prometheus.Registerer
}

// DefaultMaxSpanBytes returns the per-span bound for a store of maxBytes.
func DefaultMaxSpanBytes(maxBytes int64) int64 {
	return min(max(maxBytes/1024, 16<<10), 1<<20)
}

// minAttrLen is the shortest a cut attribute value gets.
const minAttrLen = 256

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
	maxSpans     int
	maxBytes     int64
	maxSpanBytes int64
	maxQuery     int

	mu        sync.RWMutex
	buf       []slot
	head      int    // index in buf of the oldest span
	n         int    // spans held
	headSeq   uint64 // sequence number of the oldest span
	bytes     int64
	evicted   uint64
	oversized uint64
	traces    map[triage.TraceID]chain
	reqs      map[string]chain
	buckets   map[int64]chain
	intern    map[string]string
}

// New returns an empty store and registers its metrics.
func New(opts Options) (*Store, error) {
	if opts.MaxSpans <= 0 {
		opts.MaxSpans = DefaultMaxSpans
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.MaxSpanBytes <= 0 {
		opts.MaxSpanBytes = DefaultMaxSpanBytes(opts.MaxBytes)
	}
	if opts.MaxQuerySpans <= 0 {
		opts.MaxQuerySpans = DefaultMaxQuerySpans
	}
	s := &Store{
		maxSpans:     opts.MaxSpans,
		maxBytes:     opts.MaxBytes,
		maxSpanBytes: min(opts.MaxSpanBytes, opts.MaxBytes),
		maxQuery:     opts.MaxQuerySpans,
		traces:       map[triage.TraceID]chain{},
		reqs:         map[string]chain{},
		buckets:      map[int64]chain{},
		intern:       map[string]string{},
	}
	if opts.Registerer != nil {
		cs := []prometheus.Collector{
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "whyslow_spanstore_spans", Help: "Spans held in the span store."},
				func() float64 { return float64(s.Len()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "whyslow_spanstore_bytes", Help: "Estimated bytes held by the span store."},
				func() float64 { return float64(s.Bytes()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "whyslow_spanstore_evicted_total", Help: "Spans evicted (or dropped on arrival) to keep the span store within its bounds."},
				func() float64 { return float64(s.Evicted()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "whyslow_spanstore_oversized_total", Help: "Spans over the per-span bound, cut to fit or dropped."},
				func() float64 { return float64(s.Oversized()) }),
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

// Oversized returns how many spans were over the per-span bound.
func (s *Store) Oversized() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.oversized
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
		if rawBytes(res) > s.maxSpanBytes/2 {
			s.oversized += uint64(j - i)
			cut(res, rawBytes(res)-s.maxSpanBytes/2)
		}
		resBytes := s.internAttrs(res, true)
		share := (resBytes + int64(j-i) - 1) / int64(j-i)
		for k := i; k < j; k++ {
			sp := spans[k]
			sp.Resource = res
			if own := slotSize + indexOverhead + rawBytes(sp.Attrs) + int64(len(sp.Name)); own+share > s.maxSpanBytes {
				s.oversized++
				cut(sp.Attrs, own+share-s.maxSpanBytes)
				if slotSize+indexOverhead+rawBytes(sp.Attrs)+int64(len(sp.Name))+share > s.maxSpanBytes {
					s.evicted++ // still too big (a flood of keys): drop it
					continue
				}
			}
			b := slotSize + indexOverhead + share + s.internAttrs(sp.Attrs, false)
			sp.Name, b = s.internString(sp.Name, b)
			s.insert(&sp, b)
		}
		i = j
	}
}

// rawBytes is what as costs before interning.
func rawBytes(as triage.Attrs) int64 {
	b := int64(len(as)) * attrSize
	for i := range as {
		b += int64(len(as[i].Key) + len(as[i].Str))
	}
	return b
}

// cut shortens the longest string values of as by at least excess bytes in
// total, none below minAttrLen, each cut at a rune boundary and ending in "…".
func cut(as triage.Attrs, excess int64) {
	for excess > 0 {
		longest := -1
		for i := range as {
			if len(as[i].Str) > minAttrLen+len("…") && (longest < 0 || len(as[i].Str) > len(as[longest].Str)) {
				longest = i
			}
		}
		if longest < 0 {
			return
		}
		v := as[longest].Str
		keep := max(int64(minAttrLen), int64(len(v))-excess-int64(len("…")))
		for keep > 0 && !utf8.RuneStart(v[keep]) {
			keep--
		}
		excess -= int64(len(v)) - keep - int64(len("…"))
		as[longest].Str = strings.Clone(v[:keep]) + "…"
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
// attribute slices with the store: treat them as read-only. Without a limit
// at most MaxQuerySpans are returned, the newest of the range.
func (s *Store) SpansBetween(ctx context.Context, start, end time.Time, limit int) ([]triage.Span, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	lo, hi := start.UnixNano(), end.UnixNano()
	if hi <= lo {
		return nil, nil
	}
	newest := 0
	if limit <= 0 {
		newest = s.maxQuery
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
	var bks []int64
	if uint64(last-first) < uint64(len(s.buckets)) {
		for b := first; b <= last; b++ {
			if _, ok := s.buckets[b]; ok {
				bks = append(bks, b)
			}
		}
	} else {
		for b := range s.buckets {
			if b >= first && b <= last {
				bks = append(bks, b)
			}
		}
		slices.Sort(bks)
	}
	// Newest buckets first, so that a bounded query stops early.
	for i := len(bks) - 1; i >= 0; i-- {
		collect(s.buckets[bks[i]])
		if newest > 0 && len(out) >= newest {
			break
		}
	}
	s.mu.RUnlock()
	triage.SortByStart(out)
	if newest > 0 && len(out) > newest {
		out = out[len(out)-newest:]
	}
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
