package spanstore

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"

	"github.com/whyslow/whyslow/collectors/otlp"
	"github.com/whyslow/whyslow/span"
	"github.com/whyslow/whyslow/testbed/sim"
	"github.com/whyslow/whyslow/testbed/simtrace"
)

// A heapShape builds export request number i (of spans that look like one
// source's) as the OTLP receiver gets it on the wire.
type heapShape struct {
	name string
	// requests per export: each becomes one llm_request span (and, with
	// gateway, three gateway spans).
	perExport int
	gateway   bool
	// sameTrace puts the spans of this many consecutive requests into one
	// trace (many spans per trace); 0 or 1: one trace per request.
	sameTrace int
	// extra adds attributes to each llm_request span.
	extra func(req int) []*commonpb.KeyValue
}

var heapShapes = []heapShape{
	// vLLM's llm_request span, exported in batches of 512.
	{name: "vllm", perExport: 512},
	// llm-d: the gateway's three spans and the engine's, four per trace.
	{name: "gateway", perExport: 128, gateway: true},
	// One span per export (a lightly loaded BatchSpanProcessor): the
	// resource is decoded once per span.
	{name: "single", perExport: 1},
	// Long distinct values: a prompt and a completion recorded on the span.
	{name: "long_values", perExport: 256, extra: func(req int) []*commonpb.KeyValue {
		return []*commonpb.KeyValue{
			strKV("gen_ai.prompt", fmt.Sprintf("%d:%s", req, strings.Repeat("lorem ipsum ", 100+req%97))),
			strKV("gen_ai.completion", fmt.Sprintf("%d:%s", req, strings.Repeat("dolor sit ", 20+req%31))),
		}
	}},
	// Many short attributes, with distinct values.
	{name: "many_attrs", perExport: 256, extra: func(req int) []*commonpb.KeyValue {
		kvs := make([]*commonpb.KeyValue, 0, 30)
		for k := 0; k < 30; k++ {
			kvs = append(kvs, strKV(manyKeys[k], "v"+strconv.Itoa(req*k)))
		}
		return kvs
	}},
	// Many spans per trace (an agent's loop of 64 engine calls).
	{name: "long_traces", perExport: 512, sameTrace: 64},
}

var manyKeys = func() []string {
	ks := make([]string, 30)
	for k := range ks {
		ks[k] = fmt.Sprintf("app.attr.%02d", k)
	}
	return ks
}()

func strKV(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}

// body returns export number e of the shape, protobuf-encoded.
func (sh heapShape) body(e int) []byte {
	b := simtrace.New(simtrace.Options{Seed: 1, Gateway: sh.gateway})
	for k := 0; k < sh.perExport; k++ {
		req := e*sh.perExport + k
		arr := t0.Add(time.Duration(req) * time.Millisecond)
		b.Add(sim.RequestRecord{
			ID:           fmt.Sprintf("chatcmpl-%016x", uint64(req)*0x9e3779b97f4a7c15),
			Pod:          fmt.Sprintf("vllm-llama-3-8b-%d", req%4),
			Model:        "meta-llama/Llama-3.1-8B-Instruct",
			Arrival:      arr,
			Queued:       arr.Add(time.Millisecond),
			Scheduled:    arr.Add(20 * time.Millisecond),
			FirstToken:   arr.Add(180 * time.Millisecond),
			Finished:     arr.Add(2 * time.Second),
			PromptTokens: 1000 + req%900, OutputTokens: 200 + req%300, MaxTokens: 1024,
			FinishedReason: "stop",
		})
	}
	req := b.Request()
	k := 0
	for _, rs := range req.ResourceSpans {
		for _, sp := range rs.ScopeSpans[0].Spans {
			if sh.sameTrace > 1 {
				// Trace ids of the first request of each group of sameTrace.
				n := (e*sh.perExport+k)/sh.sameTrace + 1
				for j := range sp.TraceId {
					sp.TraceId[j] = byte(n >> (8 * (j % 8)))
				}
			}
			if sh.extra != nil && sp.Name == "llm_request" {
				sp.Attributes = append(sp.Attributes, sh.extra(e*sh.perExport+k)...)
			}
			k++
		}
	}
	out, err := proto.Marshal(req)
	if err != nil {
		panic(err)
	}
	return out
}

// ingest decodes body as the OTLP receiver does and appends the spans to s.
// The decoder is dropped after each body, so the heap holds only the store.
func ingest(tb testing.TB, s *Store, body []byte) {
	var d otlp.Decoder
	spans, rej, err := d.Decode(nil, body)
	if err != nil || rej.Spans > 0 {
		tb.Fatalf("convert: %v %+v", err, rej)
	}
	s.Append(spans)
}

type heapMeasure struct {
	spans       int
	heapPerSpan float64 // live heap growth per span held
	estPerSpan  float64 // Bytes() per span held
	ratio       float64 // heap / estimate
}

// measureHeap fills a store with at least n spans of the shape and
// compares the live heap it holds (after GC, less the heap before) with
// its own estimate. With maxBytes 0 the store is unbounded; otherwise it is
// bound to maxBytes and filled until it has evicted n spans.
func measureHeap(tb testing.TB, sh heapShape, n int, maxBytes int64) heapMeasure {
	// The bodies of the fill are made before measuring and kept until after
	// (the bodies of further exports, for eviction, are garbage by then).
	spansPer := sh.perExport
	if sh.gateway {
		spansPer *= 4
	}
	bodies := make([][]byte, 0, (n+spansPer-1)/spansPer)
	for e := 0; len(bodies) < cap(bodies); e++ {
		bodies = append(bodies, sh.body(e))
	}
	opts := Options{MaxSpans: 1 << 30, MaxBytes: 1 << 40}
	if maxBytes > 0 {
		opts.MaxBytes = maxBytes
	}
	before := heapInUse()
	s, _ := New(opts)
	for e := 0; (maxBytes == 0 && s.Len() < n) || (maxBytes > 0 && s.Evicted() < uint64(n)); e++ {
		if e < len(bodies) {
			ingest(tb, s, bodies[e])
		} else {
			ingest(tb, s, sh.body(e))
		}
	}
	grown := float64(int64(heapInUse()) - int64(before))
	runtime.KeepAlive(bodies)
	m := heapMeasure{spans: s.Len()}
	m.heapPerSpan = grown / float64(s.Len())
	m.estPerSpan = float64(s.Bytes()) / float64(s.Len())
	m.ratio = grown / float64(s.Bytes())
	runtime.KeepAlive(s)
	return m
}

// TestHeapMatchesEstimate is item 3 of issue 16: with max_bytes 64 MiB the
// daemon's live heap reached 98 MB, the estimate missing slot buffer slack
// (a ring doubled in size), allocator rounding and the index maps. It fills
// stores with 50k spans of each shape, and stores bound to 16 MiB past
// their bound, and checks the live heap each holds is within 10% of Bytes().
func TestHeapMatchesEstimate(t *testing.T) {
	if testing.Short() {
		t.Skip("fills stores of 50k spans")
	}
	for _, sh := range heapShapes {
		for _, bound := range []int64{0, 16 << 20} {
			name := sh.name
			if bound > 0 {
				name += "/at_bound"
				if sh.name != "vllm" && sh.name != "single" && sh.name != "long_traces" {
					continue
				}
			}
			t.Run(name, func(t *testing.T) {
				m := measureHeap(t, sh, 50_000, bound)
				t.Logf("%d spans: heap %.0f B/span, estimate %.0f B/span, heap/estimate %.3f", m.spans, m.heapPerSpan, m.estPerSpan, m.ratio)
				if m.ratio < 0.9 || m.ratio > 1.1 {
					t.Errorf("heap/estimate = %.3f, want within [0.9, 1.1]", m.ratio)
				}
			})
		}
	}
}

// BenchmarkSpanStoreHeapVsEstimate reports, per span shape, the live heap a
// store of 50k spans holds per span, its estimate, and their ratio (target:
// within [0.9, 1.1]).
func BenchmarkSpanStoreHeapVsEstimate(b *testing.B) {
	for _, sh := range heapShapes {
		b.Run(sh.name, func(b *testing.B) {
			var m heapMeasure
			for b.Loop() {
				m = measureHeap(b, sh, 50_000, 0)
			}
			b.ReportMetric(m.heapPerSpan, "heap_B/span")
			b.ReportMetric(m.estPerSpan, "est_B/span")
			b.ReportMetric(m.ratio, "heap/estimate")
		})
	}
}

// TestAllocBytes checks allocBytes against the allocator: strings (no
// pointers) and attribute slices (pointers, with a malloc header above
// 512 bytes).
func TestAllocBytes(t *testing.T) {
	// Enough elements that what other goroutines allocate meanwhile is
	// well under a byte each.
	const k = 20000
	measure := func(alloc func() any) float64 {
		keep := make([]any, k)
		before := heapInUse()
		for i := range keep {
			keep[i] = alloc()
		}
		grown := float64(int64(heapInUse()) - int64(before))
		runtime.KeepAlive(keep)
		// Each element also boxes its value in an interface: a 16-byte
		// string header or a 24-byte slice header.
		return grown / k
	}
	for _, n := range []int{16, 17, 24, 100, 500, 1000, 5000, 20000, 40000} {
		got := measure(func() any { s := strings.Repeat("x", n); return &s })
		if want := float64(allocBytes(int64(n), false) + 16); got < want-1 || got > want+1 {
			t.Errorf("string of %d: heap %.1f bytes, allocBytes+header %.0f", n, got, want)
		}
	}
	for _, c := range []int{1, 5, 10, 11, 12, 30, 100, 700} {
		got := measure(func() any { as := make(span.Attrs, c); return &as })
		if want := float64(allocBytes(int64(c)*attrSize, true) + 24); got < want-1 || got > want+1 {
			t.Errorf("%d attrs: heap %.1f bytes, allocBytes+header %.0f", c, got, want)
		}
	}
}
