// Package spanstore keeps recent spans in memory, bounded by span count and
// by bytes, indexed by trace id, by gen_ai.request.id and by start time. It
// serves diagnose.Traces for the daemon.
package spanstore

import (
	"context"
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/whyslow/whyslow/span"
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
	// entryBytes is charged per entry of the index by trace id: a 16-byte
	// key and a 16-byte chain in a Go swiss table whose load varies between
	// 7/16 and 7/8, and whose deleted slots linger until it rehashes:
	// measured at 52 to 105 bytes an entry (5k to 200k entries, filled,
	// then churned as a store that evicts churns them). 70 keeps both
	// freshly filled and churned stores within 10% (TestHeapMatchesEstimate);
	// at 78, the middle, fresh ones held 10% less than estimated once the
	// spans themselves became small.
	entryBytes = 70
	// smallEntryBytes is charged per entry of the indexes by request id hash
	// and by second: 8-byte keys, so slots of 25 bytes where those are 33.
	smallEntryBytes = entryBytes * 25 / 33
	// chunkLen is how many slots one chunk of the span buffer holds. Chunks
	// are allocated as spans arrive and freed as they are evicted, so the
	// slots that exist but hold no span are at most about three chunks
	// (the oldest's, the newest's and a spare): about 120 KiB.
	chunkLen = 256
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
	// MaxBytes bounds the bytes held (default DefaultMaxBytes), as the Go
	// heap counts them: each span's slot, its packed name and attributes
	// (packed.go), its share of its resource's attributes, all rounded up
	// to the allocator's size classes, and the entries of the indexes by
	// trace id, request id and second. Outside the bound, and independent of
	// it, are a constant overhead of at most about 2 MiB (the table of
	// shared strings: at most 8192 strings of at most 128 bytes, and up to
	// three partly filled chunks of slots) and the index maps' load factor
	// swings (about ±30% of their 53 to 70 bytes an entry, several
	// percent of the total). The live heap the store holds is within 10% of Bytes().
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

// slot holds one span: its ids, times and kind as they are, its name and
// attributes packed (packed.go), its resource's attributes shared.
type slot struct {
	traceID          span.TraceID
	spanID, parentID span.SpanID
	start, end       int64
	kind             span.SpanKind
	isError          bool
	hasReq           bool
	reqHash          uint64 // of the gen_ai.request.id, the key of the reqs index
	packed           string
	res              span.Attrs
	// next* hold seq+1 of the next span on the same chain, 0 at the end.
	nextTrace, nextReq, nextBucket uint64
	bytes                          int64
}

// span returns the span sl holds; its strings are the store's.
func (s *Store) span(sl *slot) span.Span {
	sp := span.Span{TraceID: sl.traceID, SpanID: sl.spanID, ParentID: sl.parentID, Kind: sl.kind, Error: sl.isError,
		StartUnixNano: sl.start, EndUnixNano: sl.end, Resource: sl.res}
	sp.Name, sp.Attrs = s.unpack(sl.packed)
	return sp
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

	mu sync.RWMutex
	// chunks hold the slots of sequence numbers base.. in chunkLen blocks;
	// spare is an emptied chunk kept for the next.
	chunks    []*[chunkLen]slot
	spare     *[chunkLen]slot
	base      uint64 // sequence number of chunks[0][0], a multiple of chunkLen
	n         int    // spans held
	headSeq   uint64 // sequence number of the oldest span
	bytes     int64  // the spans' bytes and the index entries'
	evicted   uint64
	oversized uint64
	traces    map[span.TraceID]chain
	reqs      map[uint64]chain // by hash of the request id
	reqSeed   maphash.Seed
	buckets   map[int64]chain
	// strs are the shared strings (attribute keys, span names, resource
	// values), strID their index.
	strs    []string
	strID   map[string]uint32
	packBuf []byte
	// peak* are the index maps' sizes when last rebuilt or larger: Go maps
	// do not shrink, so a map that has lost half its entries is rebuilt.
	peakTraces, peakReqs int
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
		traces:       map[span.TraceID]chain{},
		reqs:         map[uint64]chain{},
		reqSeed:      maphash.MakeSeed(),
		buckets:      map[int64]chain{},
		strID:        map[string]uint32{},
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
	attrSize = int64(unsafe.Sizeof(span.Attr{}))
	// slotBytes is one slot's share of its chunk's allocation.
	slotBytes = allocBytes(int64(unsafe.Sizeof([chunkLen]slot{})), true) / chunkLen
)

// Append adds spans, evicting the oldest as needed to stay within bounds. The
// store copies each span's name and attributes (so they may be reused once
// Append returns) and keeps its Resource slice, which callers must not
// modify afterwards (the store may rewrite its strings to shared copies).
// Long values of both may be cut.
func (s *Store) Append(spans []span.Span) {
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
			cutTo(res, 0, s.maxSpanBytes/2)
		}
		resBytes := s.internAttrs(res)
		share := (resBytes + int64(j-i) - 1) / int64(j-i)
		for k := i; k < j; k++ {
			sp := spans[k]
			sp.Resource = res
			if own := slotBytes + rawBytes(sp.Attrs) + strBytes(len(sp.Name)); own+share > s.maxSpanBytes {
				s.oversized++
				if !cutTo(sp.Attrs, slotBytes+strBytes(len(sp.Name))+share, s.maxSpanBytes) {
					s.evicted++ // still too big (a flood of keys): drop it
					continue
				}
			}
			var charged int64
			s.packBuf, charged = s.pack(s.packBuf[:0], sp.Name, sp.Attrs)
			packed := string(s.packBuf)
			s.insert(&sp, packed, slotBytes+share+charged+strBytes(len(packed)))
		}
		i = j
	}
}

// rawBytes is what as costs before interning.
func rawBytes(as span.Attrs) int64 {
	b := sliceBytes(as)
	for i := range as {
		b += strBytes(len(as[i].Key)) + strBytes(len(as[i].Str))
	}
	return b
}

// sliceBytes is the allocation behind as (its capacity, not its length).
func sliceBytes(as span.Attrs) int64 {
	if cap(as) == 0 {
		return 0
	}
	return allocBytes(int64(cap(as))*attrSize, true)
}

// strBytes is the heap a string of n bytes of its own takes. Below 16 bytes
// strings share 16-byte blocks (the tiny allocator): they cost about n.
func strBytes(n int) int64 {
	if n < 16 {
		return int64(n)
	}
	return allocBytes(int64(n), false)
}

// sizeClasses are the Go allocator's small object sizes
// (internal/runtime/gc/sizeclasses.go; TestAllocBytes checks them).
var sizeClasses = [...]int64{8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256, 288, 320, 352, 384, 416, 448, 480, 512, 576, 640, 704, 768, 896, 1024, 1152, 1280, 1408, 1536, 1792, 2048, 2304, 2688, 3072, 3200, 3456, 4096, 4864, 5376, 6144, 6528, 6784, 6912, 8192, 9472, 9728, 10240, 10880, 12288, 13568, 14336, 16384, 18432, 19072, 20480, 21760, 24576, 27264, 28672, 32768}

// allocBytes is the heap one allocation of n bytes takes: objects with
// pointers above 512 bytes carry an 8-byte header, small objects are
// rounded up to a size class, large ones to 8 KiB pages.
func allocBytes(n int64, pointers bool) int64 {
	const maxSmall, header, page = 32768, 8, 8192
	if pointers && n > 512 && n <= maxSmall-header {
		n += header
	}
	if n > maxSmall {
		return (n + page - 1) / page * page
	}
	i, _ := slices.BinarySearch(sizeClasses[:], n)
	return sizeClasses[i]
}

// cutTo cuts as until other+rawBytes(as) is at most limit, and reports
// whether it fits. Cutting is by length and the allocator rounds up, so a
// cut can fall a little short: it is repeated.
func cutTo(as span.Attrs, other, limit int64) bool {
	for range 8 {
		excess := other + rawBytes(as) - limit
		if excess <= 0 {
			return true
		}
		if !cut(as, excess) {
			return false
		}
	}
	return other+rawBytes(as) <= limit
}

// cut shortens the longest string values of as by at least excess bytes in
// total, none below minAttrLen, each cut at a rune boundary and ending in
// "…", and reports whether it cut any.
func cut(as span.Attrs, excess int64) bool {
	did := false
	for excess > 0 {
		longest := -1
		for i := range as {
			if len(as[i].Str) > minAttrLen+len("…") && (longest < 0 || len(as[i].Str) > len(as[longest].Str)) {
				longest = i
			}
		}
		if longest < 0 {
			return did
		}
		v := as[longest].Str
		keep := max(int64(minAttrLen), int64(len(v))-excess-int64(len("…")))
		for keep > 0 && !utf8.RuneStart(v[keep]) {
			keep--
		}
		excess -= int64(len(v)) - keep - int64(len("…"))
		as[longest].Str = strings.Clone(v[:keep]) + "…"
		did = true
	}
	return did
}

func sameSlice(a, b span.Attrs) bool {
	if len(a) != len(b) {
		return false
	}
	return len(a) == 0 || &a[0] == &b[0]
}

// internAttrs shares a resource's repeated keys and values and returns the
// bytes charged for the slice and its unshared strings.
func (s *Store) internAttrs(as span.Attrs) int64 {
	b := sliceBytes(as)
	for i := range as {
		as[i].Key, b = s.internString(as[i].Key, b)
		as[i].Str, b = s.internString(as[i].Str, b)
	}
	return b
}

// internString returns the shared copy of str and b plus the bytes charged:
// zero for a shared string, its allocation otherwise. A string that enters
// the table is charged once, to the span that brought it; the table outlives
// that span (the constant overhead of Options.MaxBytes).
func (s *Store) internString(str string, b int64) (string, int64) {
	if str == "" {
		return str, b
	}
	id, ok, added := s.share(str)
	if !ok || added {
		b += strBytes(len(str))
	}
	if ok {
		return s.strs[id], b
	}
	return str, b
}

// share returns the table index of str, adding it when it is short and the
// table has room; ok says it is in the table, added that it just entered.
func (s *Store) share(str string) (id uint32, ok, added bool) {
	if id, ok := s.strID[str]; ok {
		return id, true, false
	}
	if len(str) > internMaxLen || len(s.strs) >= internMaxEntries {
		return 0, false, false
	}
	id = uint32(len(s.strs))
	str = strings.Clone(str) // the table outlives the span that brought it
	s.strs = append(s.strs, str)
	s.strID[str] = id
	return id, true, true
}

// slotAt returns the slot of sequence number seq (held or next).
func (s *Store) slotAt(seq uint64) *slot {
	return &s.chunks[(seq-s.base)/chunkLen][seq%chunkLen]
}

// requestID returns the span's request id, as text.
func requestID(sp *span.Span) string {
	a, ok := sp.Attrs.Get(RequestIDKey)
	if !ok {
		return ""
	}
	return a.Text()
}

// insert stores sp, with its name and attributes packed, charged b bytes.
func (s *Store) insert(sp *span.Span, packed string, b int64) {
	// The span may bring up to three index entries.
	id := requestID(sp)
	need := b + entryBytes + 2*smallEntryBytes
	if need > s.maxBytes {
		s.evicted++
		return
	}
	for s.n > 0 && (s.n >= s.maxSpans || s.bytes+need > s.maxBytes) {
		s.evictOldest()
	}
	seq := s.headSeq + uint64(s.n)
	if seq-s.base == uint64(len(s.chunks))*chunkLen {
		c := s.spare
		if c == nil {
			c = new([chunkLen]slot)
		}
		s.spare = nil
		s.chunks = append(s.chunks, c)
	}
	sl := s.slotAt(seq)
	*sl = slot{traceID: sp.TraceID, spanID: sp.SpanID, parentID: sp.ParentID, start: sp.StartUnixNano, end: sp.EndUnixNano,
		kind: sp.Kind, isError: sp.Error, packed: packed, res: sp.Resource, bytes: b}
	if id != "" {
		sl.hasReq, sl.reqHash = true, maphash.String(s.reqSeed, id)
	}
	s.n++
	s.bytes += b
	if link(s, s.traces, sp.TraceID, seq, func(sl *slot) *uint64 { return &sl.nextTrace }) {
		s.bytes += entryBytes
		s.peakTraces = max(s.peakTraces, len(s.traces))
	}
	if sl.hasReq && link(s, s.reqs, sl.reqHash, seq, func(sl *slot) *uint64 { return &sl.nextReq }) {
		s.bytes += smallEntryBytes
		s.peakReqs = max(s.peakReqs, len(s.reqs))
	}
	if link(s, s.buckets, bucketOf(sp.StartUnixNano), seq, func(sl *slot) *uint64 { return &sl.nextBucket }) {
		s.bytes += smallEntryBytes
	}
}

func bucketOf(ns int64) int64 {
	b := ns / bucketWidth
	if ns < 0 && ns%bucketWidth != 0 {
		b--
	}
	return b
}

// link appends seq to the chain of k and reports whether k is new to m.
func link[K comparable](s *Store, m map[K]chain, k K, seq uint64, next func(*slot) *uint64) bool {
	c, ok := m[k]
	if !ok {
		m[k] = chain{first: seq + 1, last: seq + 1}
		return true
	}
	*next(s.slotAt(c.last - 1)) = seq + 1
	c.last = seq + 1
	m[k] = c
	return false
}

// unlinkHead removes the oldest span (seq, which heads every chain it is on)
// and reports whether that removed k from m.
func unlinkHead[K comparable](m map[K]chain, k K, next uint64) bool {
	if next == 0 {
		delete(m, k)
		return true
	}
	c := m[k]
	c.first = next
	m[k] = c
	return false
}

// rebuilt returns m, or a copy of it sized to its entries when it holds
// under half of its peak (Go maps keep their largest size).
func rebuilt[K comparable](m map[K]chain, peak *int) map[K]chain {
	if *peak < 1024 || len(m) >= *peak/2 {
		return m
	}
	nm := make(map[K]chain, len(m))
	for k, c := range m {
		nm[k] = c
	}
	*peak = len(nm)
	return nm
}

func (s *Store) evictOldest() {
	sl := s.slotAt(s.headSeq)
	if unlinkHead(s.traces, sl.traceID, sl.nextTrace) {
		s.bytes -= entryBytes
	}
	if sl.hasReq && unlinkHead(s.reqs, sl.reqHash, sl.nextReq) {
		s.bytes -= smallEntryBytes
	}
	if unlinkHead(s.buckets, bucketOf(sl.start), sl.nextBucket) {
		s.bytes -= smallEntryBytes
	}
	s.bytes -= sl.bytes
	*sl = slot{}
	s.headSeq++
	s.n--
	s.evicted++
	if s.headSeq%chunkLen == 0 {
		// The oldest chunk is empty: keep it as the spare.
		s.spare = s.chunks[0]
		s.chunks[0] = nil
		s.chunks = s.chunks[1:]
		s.base += chunkLen
	}
	s.traces = rebuilt(s.traces, &s.peakTraces)
	s.reqs = rebuilt(s.reqs, &s.peakReqs)
}

// walk appends the spans on a chain to dst.
func (s *Store) walk(dst []span.Span, c chain, next func(*slot) uint64) []span.Span {
	for p := c.first; p != 0; {
		sl := s.slotAt(p - 1)
		dst = append(dst, s.span(sl))
		p = next(sl)
	}
	return dst
}

// SpansBetween serves diagnose.Traces. The returned spans share their
// resource slices with the store: treat them as read-only. Without a limit
// at most MaxQuerySpans are returned, the newest of the range.
func (s *Store) SpansBetween(ctx context.Context, start, end time.Time, limit int) ([]span.Span, error) {
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
	var out []span.Span
	collect := func(c chain) {
		for p := c.first; p != 0; {
			sl := s.slotAt(p - 1)
			if t := sl.start; t >= lo && t < hi {
				out = append(out, s.span(sl))
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
	span.SortByStart(out)
	if newest > 0 && len(out) > newest {
		out = out[len(out)-newest:]
	}
	if limit > 0 && len(out) > limit {
		out = out[:limit:limit]
	}
	return out, nil
}

// Trace serves diagnose.Traces.
func (s *Store) Trace(ctx context.Context, id span.TraceID) ([]span.Span, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	c, ok := s.traces[id]
	var out []span.Span
	if ok {
		out = s.walk(nil, c, func(sl *slot) uint64 { return sl.nextTrace })
	}
	s.mu.RUnlock()
	if !ok {
		return nil, span.ErrTraceNotFound
	}
	span.SortByStart(out)
	return out, nil
}

// ByRequestID serves diagnose.Traces.
func (s *Store) ByRequestID(ctx context.Context, id string) ([]span.Span, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	out := s.walk(nil, s.reqs[maphash.String(s.reqSeed, id)], func(sl *slot) uint64 { return sl.nextReq })
	s.mu.RUnlock()
	// Ids that share a hash share a chain.
	out = slices.DeleteFunc(out, func(sp span.Span) bool { return requestID(&sp) != id })
	span.SortByStart(out)
	return out, nil
}
