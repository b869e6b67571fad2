package store

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

// TestAppendWhileQuerying runs a scraper-like writer against queries (the
// daemon's detector) on a live store; under -race it checks that a query
// reads the open chunk only through its copy.
func TestAppendWhileQuerying(t *testing.T) {
	s, err := Open(Options{Live: true, Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	series := []labels.Labels{
		labels.FromStrings("__name__", "requests_total", "pod", "a"),
		labels.FromStrings("__name__", "requests_total", "pod", "b"),
	}
	const scrapes = 400
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range scrapes {
			app := s.Appender(context.Background())
			for _, ls := range series {
				if _, err := app.Append(0, ls, t0.Add(time.Duration(i)*5*time.Second).UnixMilli(), float64(i)); err != nil {
					t.Error(err)
					return
				}
			}
			if err := app.Commit(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for i := 0; i < 200; i++ {
		if _, _, err := s.Query(context.Background(), `sum(rate(requests_total[1m]))`, t0.Add(time.Duration(i)*10*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	v, _, err := s.Query(context.Background(), `count_over_time(requests_total[1h])`, t0.Add(scrapes*5*time.Second))
	if err != nil || len(v) != 2 || v[0].Value != scrapes {
		t.Errorf("count_over_time = %v %v, want every scrape of each series", v, err)
	}
}

// TestMatchingUsesEveryMatcher checks that selecting through the label
// index returns what filtering every series by the matchers returns, in
// label order, for each kind of matcher and after a purge rebuilt the
// index.
func TestMatchingUsesEveryMatcher(t *testing.T) {
	s, err := Open(Options{Live: true, Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var all []labels.Labels
	for _, ns := range []string{"a", "b", "c"} {
		for _, pod := range []string{"vllm-0", "vllm-1"} {
			all = append(all,
				labels.FromStrings("__name__", "requests_total", "namespace", ns, "pod", pod),
				labels.FromStrings("__name__", "queue", "namespace", ns, "pod", pod),
				labels.FromStrings("__name__", "gpu_util", "exported_namespace", ns, "pod", pod))
		}
	}
	// The old series stop two hours in: the purge at the retention drops them.
	old := labels.FromStrings("__name__", "requests_total", "namespace", "a", "pod", "vllm-old")
	ctx := context.Background()
	for i := 0; i < 4*60; i++ {
		app := s.Appender(ctx)
		ts := t0.Add(time.Duration(i) * time.Minute).UnixMilli()
		for _, ls := range all {
			if _, err := app.Append(0, ls, ts, float64(i)); err != nil {
				t.Fatal(err)
			}
		}
		if i < 2*60 {
			if _, err := app.Append(0, old, ts, float64(i)); err != nil {
				t.Fatal(err)
			}
		}
		if err := app.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	selectors := []string{
		`requests_total`,
		`{namespace="a"}`,
		`requests_total{namespace="a"}`,
		`requests_total{namespace="a",pod="vllm-1"}`,
		`{namespace="a",pod=~"vllm-.*"}`,
		`requests_total{namespace=""}`,
		`{exported_namespace="",pod="vllm-0"}`,
		`{__name__=~"requests_total|queue",namespace!="b"}`,
		`{namespace="missing"}`,
		`requests_total{pod="vllm-old"}`,
	}
	h := s.head
	for _, sel := range selectors {
		ms, err := parser.NewParser(parser.Options{}).ParseMetricSelector(sel)
		if err != nil {
			t.Fatal(err)
		}
		var matched []labels.Labels
		for _, sr := range h.byRef {
			ok := true
			for _, m := range ms {
				ok = ok && m.Matches(sr.lset.Get(m.Name))
			}
			if ok {
				matched = append(matched, sr.lset)
			}
		}
		slices.SortFunc(matched, labels.Compare)
		var want []string
		for _, ls := range matched {
			want = append(want, ls.String())
		}
		h.mu.RLock()
		var got []string
		for _, sr := range (&querier{h: h}).matching(ms) {
			got = append(got, sr.lset.String())
		}
		h.mu.RUnlock()
		if !slices.Equal(got, want) {
			t.Errorf("%s selected %v, want %v", sel, got, want)
		}
	}
	if h.lookup(old) != nil {
		t.Error("the stopped series outlived the retention: the purge path went untested")
	}
}

// TestFullChunkKeepsNoSpareBytes: a full chunk stays for the retention, so
// it must not keep the spare capacity its appends grew (a sixth to a
// third of its bytes), and moving it into pages must keep every sample.
func TestFullChunkKeepsNoSpareBytes(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	type sample struct {
		t int64
		v float64
	}
	patterns := map[string]func(prev float64) float64{
		"constant":      func(prev float64) float64 { return prev },
		"integer count": func(prev float64) float64 { return prev + float64(r.IntN(40)) },
		"float sum":     func(prev float64) float64 { return prev + 3*r.Float64() },
		"gauge":         func(float64) float64 { return 50 * r.Float64() },
	}
	var pages chunkPages
	for name, next := range patterns {
		s := &series{}
		var want []sample
		ts, v := t0.UnixMilli(), 100.0
		// Five full chunks and an open one; scrape times a few ms off the
		// interval, as a ticker's are.
		for range 5*samplesPerChunk + 7 {
			ts += 5000 + int64(r.IntN(7)) - 3
			v = next(v)
			s.add(ts, v, &pages)
			want = append(want, sample{ts, v})
		}
		var got []sample
		for i, c := range s.chunks {
			b := c.xor.Bytes()
			full := i < len(s.chunks)-1
			if full && cap(b) != len(b) {
				t.Errorf("%s: full chunk %d keeps %d bytes for its %d", name, i, cap(b), len(b))
			}
			it := c.xor.Iterator(nil)
			for it.Next() != chunkenc.ValNone {
				at, val := it.At()
				got = append(got, sample{at, val})
			}
			if err := it.Err(); err != nil {
				t.Fatalf("%s: chunk %d: %v", name, i, err)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: read back %d samples, not the %d appended", name, len(got), len(want))
		}
	}
}

// TestChunkPagesPack: full chunks' bytes lie one after another in a page
// (no object of their own to round up or to strand among garbage); a new
// page starts when one is full, and a chunk too large for pages is copied
// on its own.
func TestChunkPagesPack(t *testing.T) {
	var p chunkPages
	a := p.keep([]byte("first chunk"))
	b := p.keep([]byte("second"))
	if !adjacent(a, b) {
		t.Error("the second chunk is not packed right after the first")
	}
	if string(a) != "first chunk" || string(b) != "second" || cap(a) != len(a) || cap(b) != len(b) {
		t.Errorf("kept %q (cap %d) and %q (cap %d)", a, cap(a), b, cap(b))
	}
	large := p.keep(make([]byte, chunkPageSize/4+1))
	if c := p.keep([]byte("third")); !adjacent(b, c) {
		t.Error("a chunk copied on its own moved the page on")
	}
	if len(large) != chunkPageSize/4+1 {
		t.Errorf("large chunk kept %d bytes", len(large))
	}
	// Fill the page to 3 bytes short of its end.
	for room := cap(p.page) - len(p.page); room > 3; room = cap(p.page) - len(p.page) {
		p.keep(make([]byte, min(room-3, chunkPageSize/4)))
	}
	if d := p.keep([]byte("fourth")); string(d) != "fourth" || unsafe.SliceData(d) != unsafe.SliceData(p.page) {
		t.Error("a chunk that does not fit the page does not start a new one")
	}
	if string(a) != "first chunk" || string(b) != "second" {
		t.Errorf("later chunks overwrote earlier ones: %q, %q", a, b)
	}
	var none *chunkPages
	if e := none.keep([]byte("alone")); string(e) != "alone" || cap(e) != len(e) {
		t.Errorf("without pages: %q (cap %d)", e, cap(e))
	}
}

// adjacent reports whether b starts where a ends, in one array.
func adjacent(a, b []byte) bool {
	return unsafe.Pointer(unsafe.SliceData(b)) == unsafe.Add(unsafe.Pointer(unsafe.SliceData(a)), len(a))
}
