package spanstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/whyslow/whyslow/span"
)

var t0 = time.Unix(1700000000, 0)

// batch builds n spans the way the OTLP converter does: fresh strings and
// attribute slices per span, one shared resource slice.
func batch(first, n, spansPerTrace int) []span.Span {
	res := span.Attrs{
		span.StringAttr(strings.Clone("service.name"), strings.Clone("vllm")),
		span.StringAttr(strings.Clone("k8s.pod.name"), fmt.Sprintf("vllm-%d", first%3)),
	}
	out := make([]span.Span, 0, n)
	for i := first; i < first+n; i++ {
		var s span.Span
		binary.BigEndian.PutUint64(s.TraceID[8:], uint64(i/spansPerTrace)+1)
		binary.BigEndian.PutUint64(s.SpanID[:], uint64(i)+1)
		s.Name = strings.Clone("llm_request")
		s.Kind = span.SpanKindServer
		s.StartUnixNano = t0.Add(time.Duration(i) * 10 * time.Millisecond).UnixNano()
		s.EndUnixNano = s.StartUnixNano + int64(1500*time.Millisecond)
		s.Attrs = span.Attrs{
			span.StringAttr(strings.Clone("gen_ai.request.id"), fmt.Sprintf("chatcmpl-%08d", i)),
			span.IntAttr(strings.Clone("gen_ai.usage.prompt_tokens"), 1000),
			span.IntAttr(strings.Clone("gen_ai.usage.completion_tokens"), 200),
			span.FloatAttr(strings.Clone("gen_ai.latency.time_in_queue"), 0.05),
			span.FloatAttr(strings.Clone("gen_ai.latency.time_to_first_token"), 0.2),
			span.FloatAttr(strings.Clone("gen_ai.latency.time_in_model_prefill"), 0.15),
			span.FloatAttr(strings.Clone("gen_ai.latency.time_in_model_decode"), 1.3),
			span.FloatAttr(strings.Clone("gen_ai.latency.e2e"), 1.5),
		}
		s.Resource = res
		out = append(out, s)
	}
	return out
}

func TestQueries(t *testing.T) {
	ctx := context.Background()
	s, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Append(batch(0, 300, 4))
	var id span.TraceID
	binary.BigEndian.PutUint64(id[8:], 3) // spans 8..11
	spans, err := s.Trace(ctx, id)
	if err != nil || len(spans) != 4 || spans[0].Attrs.String("gen_ai.request.id") != "chatcmpl-00000008" {
		t.Fatalf("Trace = %d spans, %v", len(spans), err)
	}
	if _, err := s.Trace(ctx, span.TraceID{9}); !errors.Is(err, span.ErrTraceNotFound) {
		t.Errorf("missing trace: err = %v", err)
	}
	if spans, _ := s.ByRequestID(ctx, "chatcmpl-00000042"); len(spans) != 1 || spans[0].SpanID[7] != 43 {
		t.Errorf("ByRequestID = %+v", spans)
	}
	cases := []struct {
		name       string
		start, end time.Time
		limit      int
		want       int
	}{
		{"all", t0, t0.Add(time.Hour), 0, 300},
		{"within one second", t0.Add(100 * time.Millisecond), t0.Add(200 * time.Millisecond), 0, 10},
		{"across buckets", t0.Add(950 * time.Millisecond), t0.Add(1050 * time.Millisecond), 0, 10},
		{"limit", t0, t0.Add(time.Hour), 7, 7},
		{"wide range", time.Unix(0, 0), t0.Add(1000 * time.Hour), 0, 300},
		{"empty", t0.Add(-time.Hour), t0, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := s.SpansBetween(ctx, c.start, c.end, c.limit)
			if err != nil || len(got) != c.want {
				t.Fatalf("got %d spans (%v), want %d", len(got), err, c.want)
			}
			for i := 1; i < len(got); i++ {
				if got[i].StartUnixNano < got[i-1].StartUnixNano {
					t.Fatal("not sorted by start")
				}
			}
		})
	}
}

func TestEviction(t *testing.T) {
	ctx := context.Background()
	t.Run("count", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		s, err := New(Options{MaxSpans: 10, Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		s.Append(batch(0, 25, 1))
		if s.Len() != 10 || s.Evicted() != 15 {
			t.Fatalf("len %d evicted %d", s.Len(), s.Evicted())
		}
		if spans, _ := s.ByRequestID(ctx, "chatcmpl-00000014"); len(spans) != 0 {
			t.Error("evicted span still indexed by request id")
		}
		if spans, _ := s.ByRequestID(ctx, "chatcmpl-00000015"); len(spans) != 1 {
			t.Error("kept span not indexed")
		}
		all, _ := s.SpansBetween(ctx, t0, t0.Add(time.Hour), 0)
		if len(all) != 10 {
			t.Errorf("time index holds %d spans", len(all))
		}
		if v := testutil.ToFloat64(prometheus.Collector(mustGet(t, reg, "whyslow_spanstore_evicted_total"))); v != 15 {
			t.Errorf("evicted metric %v", v)
		}
	})
	t.Run("bytes", func(t *testing.T) {
		s, _ := New(Options{MaxBytes: 8 << 10})
		s.Append(batch(0, 1000, 10))
		if s.Bytes() > 8<<10 || s.Len() == 0 || s.Len() == 1000 {
			t.Fatalf("bytes %d len %d", s.Bytes(), s.Len())
		}
		// A trace whose older spans were evicted keeps its newer ones.
		var id span.TraceID
		binary.BigEndian.PutUint64(id[8:], 100) // spans 990..999
		if spans, err := s.Trace(ctx, id); err != nil || len(spans) != 10 {
			t.Errorf("newest trace: %d spans, %v", len(spans), err)
		}
	})
	t.Run("oversized span dropped", func(t *testing.T) {
		s, _ := New(Options{MaxBytes: 100})
		s.Append(batch(0, 3, 1))
		if s.Len() != 0 || s.Evicted() != 3 || s.Bytes() != 0 {
			t.Errorf("len %d evicted %d bytes %d", s.Len(), s.Evicted(), s.Bytes())
		}
	})
}

func mustGet(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	return collectorFunc(func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				return mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
		t.Fatalf("metric %s not registered", name)
		return 0
	})
}

// collectorFunc adapts a value to a Collector for testutil.ToFloat64.
type collectorFunc func() float64

func (f collectorFunc) Describe(ch chan<- *prometheus.Desc) {
	prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "x", Help: "x"}, f).Describe(ch)
}

func (f collectorFunc) Collect(ch chan<- prometheus.Metric) {
	prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "x", Help: "x"}, f).Collect(ch)
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestFloodStaysBounded pushes far more spans than the store may hold
// (bounded in count and time) with distinct traces, request ids and
// attribute keys, and checks the accounted bytes never pass the bound and
// the heap does not grow much past it.
func TestFloodStaysBounded(t *testing.T) {
	const maxBytes = 2 << 20
	before := heapInUse()
	s, _ := New(Options{MaxBytes: maxBytes})
	// The count bounds the flood; the deadline only guards against a hang,
	// so a busy machine still floods past the bound.
	deadline := time.Now().Add(2 * time.Minute)
	n := 0
	for ; n < 300_000 && time.Now().Before(deadline); n += 500 {
		b := batch(n, 500, 3)
		for i := range b {
			b[i].Attrs = append(b[i].Attrs, span.StringAttr(fmt.Sprintf("flood.key.%d", n+i), "v"))
		}
		s.Append(b)
		if s.Bytes() > maxBytes {
			t.Fatalf("after %d spans: %d bytes held, bound %d", n+500, s.Bytes(), maxBytes)
		}
	}
	grown := int64(heapInUse()) - int64(before)
	t.Logf("flooded %d spans: held %d spans, %d accounted bytes, heap grew %d bytes, evicted %d", n, s.Len(), s.Bytes(), grown, s.Evicted())
	if s.Evicted() == 0 {
		t.Fatal("flood never reached the bound")
	}
	// Slack: the intern table (full: the flood's keys), partly filled
	// chunks of slots, index map load (Options.MaxBytes).
	if limit := int64(3*maxBytes + 4<<20); grown > limit {
		t.Errorf("heap grew %d bytes, want under %d", grown, limit)
	}
	runtime.KeepAlive(s)
}

// TestBytesPerSpan measures the heap held per stored span against the
// store's estimate.
func TestBytesPerSpan(t *testing.T) {
	const n = 50_000
	before := heapInUse()
	s, _ := New(Options{})
	for i := 0; i < n; i += 512 {
		s.Append(batch(i, 512, 4))
	}
	held := float64(int64(heapInUse())-int64(before)) / float64(s.Len())
	est := float64(s.Bytes()) / float64(s.Len())
	t.Logf("heap per stored span %.0f bytes, estimate %.0f bytes", held, est)
	if held > 2*est {
		t.Errorf("estimate %.0f is far below the measured %.0f bytes/span", est, held)
	}
	runtime.KeepAlive(s)
}

// TestHugeSpanDoesNotEvictTheStore is finding 1 of issue 14 (its last
// part): one 15 MB span evicted about 9000 ordinary spans. A span is now
// bounded: its long attribute values are cut to fit.
func TestHugeSpanDoesNotEvictTheStore(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, err := New(Options{MaxBytes: 16 << 20, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; s.Bytes() < 12<<20; i += 1000 {
		s.Append(batch(i, 1000, 1))
	}
	held, evicted := s.Len(), s.Evicted()
	huge := batch(10_000_000, 1, 1)
	huge[0].Attrs = append(huge[0].Attrs, span.StringAttr("gen_ai.prompt", strings.Repeat("é", 15<<20/2)))
	s.Append(huge)
	if s.Len() != held+1 || s.Evicted() != evicted {
		t.Fatalf("one huge span: %d spans held (was %d), %d evicted (was %d)", s.Len(), held, s.Evicted(), evicted)
	}
	spans, err := s.ByRequestID(context.Background(), "chatcmpl-10000000")
	if err != nil || len(spans) != 1 {
		t.Fatalf("huge span not kept: %v", err)
	}
	p := spans[0].Attrs.String("gen_ai.prompt")
	if int64(len(p)) > DefaultMaxSpanBytes(16<<20) || !strings.HasSuffix(p, "…") || !utf8.ValidString(p) {
		t.Errorf("prompt kept at %d bytes, valid UTF-8 %v", len(p), utf8.ValidString(p))
	}
	if got := counterValue(t, reg, "whyslow_spanstore_oversized_total"); got != 1 {
		t.Errorf("oversized = %v", got)
	}
	// A huge resource is cut too; a flood of keys that cannot be cut is dropped.
	res := batch(10_000_001, 2, 1)
	res[0].Resource[1].Str = strings.Repeat("x", 1<<20)
	var many span.Attrs
	for i := 0; i < 5000; i++ {
		many = append(many, span.IntAttr(fmt.Sprintf("k%05d-%s", i, strings.Repeat("y", 20)), 1))
	}
	res[1].Attrs = many
	s.Append(res)
	if got := s.Oversized(); got != 4 {
		t.Errorf("oversized = %d, want 4 (the huge span, two sharing a huge resource, a key flood)", got)
	}
	if spans, _ := s.ByRequestID(context.Background(), "chatcmpl-10000001"); len(spans) != 1 || len(spans[0].Resource[1].Str) > 16<<10 {
		t.Errorf("span with a huge resource: %d spans", len(spans))
	}
	if s.Bytes() > 16<<20 {
		t.Errorf("store holds %d bytes", s.Bytes())
	}
}

// counterValue reads a counter as reg exports it.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestUnboundedQueryIsCapped: a triage asks for every span of its window;
// a flooded store answers with the newest MaxQuerySpans, not all of them.
func TestUnboundedQueryIsCapped(t *testing.T) {
	s, err := New(Options{MaxQuerySpans: 1000})
	if err != nil {
		t.Fatal(err)
	}
	s.Append(batch(0, 5000, 1)) // 10 ms apart: 50 s of spans
	spans, err := s.SpansBetween(context.Background(), t0, t0.Add(time.Hour), 0)
	if err != nil || len(spans) != 1000 {
		t.Fatalf("got %d spans, %v", len(spans), err)
	}
	if want := t0.Add(4000 * 10 * time.Millisecond).UnixNano(); spans[0].StartUnixNano != want {
		t.Errorf("oldest kept starts at %d, want the newest 1000 (from %d)", spans[0].StartUnixNano, want)
	}
	if spans, _ := s.SpansBetween(context.Background(), t0, t0.Add(time.Hour), 3000); len(spans) != 3000 || spans[0].StartUnixNano != t0.UnixNano() {
		t.Errorf("an explicit limit keeps the oldest: %d spans", len(spans))
	}
}

// TestChunksAndMapsShrink: the slots of evicted spans are freed chunk by
// chunk, and an index map that lost most of its entries is rebuilt, so the
// heap follows what the store holds.
func TestChunksAndMapsShrink(t *testing.T) {
	ctx := context.Background()
	s, _ := New(Options{MaxSpans: 5000})
	for i := 0; i < 20_000; i += 500 {
		s.Append(batch(i, 500, 1)) // one span per trace
	}
	if got := len(s.chunks); got > 5000/chunkLen+2 {
		t.Errorf("%d chunks for 5000 spans", got)
	}
	if len(s.traces) != 5000 || s.peakTraces < 5000 {
		t.Fatalf("traces index %d (peak %d)", len(s.traces), s.peakTraces)
	}
	for i := 100_000; i < 110_000; i += 500 {
		s.Append(batch(i, 500, 100)) // 100 spans per trace
	}
	if len(s.traces) > 51 || s.peakTraces >= 1024 {
		t.Errorf("traces index %d, peak %d: not rebuilt", len(s.traces), s.peakTraces)
	}
	var id span.TraceID
	binary.BigEndian.PutUint64(id[8:], 109_999/100+1)
	if spans, err := s.Trace(ctx, id); err != nil || len(spans) != 100 {
		t.Errorf("newest trace: %d spans, %v", len(spans), err)
	}
	if spans, _ := s.ByRequestID(ctx, fmt.Sprintf("chatcmpl-%08d", 104_999)); len(spans) != 0 {
		t.Error("evicted span still indexed")
	}
	if all, _ := s.SpansBetween(ctx, time.Unix(0, 0), t0.Add(1000*time.Hour), 100_000); len(all) != 5000 {
		t.Errorf("time index holds %d spans", len(all))
	}
	if s.Len() != 5000 {
		t.Errorf("len %d", s.Len())
	}
}
