package otlp_test

import (
	"net/http"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/whyslow/whyslow/collectors/otlp"
	"github.com/whyslow/whyslow/collectors/spanstore"
)

// benchBodies returns n protobuf export bodies of resources×spansPer spans,
// with distinct trace ids per body so that the store indexes new traces.
func benchBodies(n, resources, spansPer int) [][]byte {
	bodies := make([][]byte, n)
	for i := range bodies {
		req := otlp.TestRequest(resources, spansPer)
		for _, rs := range req.ResourceSpans {
			for _, sp := range rs.ScopeSpans[0].Spans {
				sp.TraceId[0] = byte(i)
			}
		}
		bodies[i], _ = proto.Marshal(req)
	}
	return bodies
}

// benchHandler returns a span store of maxSpans and the OTLP/HTTP handler
// that fills it.
func benchHandler(b *testing.B, maxSpans int) (*spanstore.Store, http.Handler) {
	store, err := spanstore.New(spanstore.Options{MaxSpans: maxSpans})
	if err != nil {
		b.Fatal(err)
	}
	r, err := otlp.New(otlp.Options{Sink: store})
	if err != nil {
		b.Fatal(err)
	}
	return store, r.Handler()
}

// BenchmarkIngestVsDecode measures, in one run and on one goroutine, the full
// OTLP/HTTP protobuf ingest (handler: read, decode, convert, index into the
// span store) and a bare proto.Unmarshal of the same payloads, and reports
// spans per second for both and their ratio (target: ratio ≤ 2.5).
func BenchmarkIngestVsDecode(b *testing.B) {
	const payloads, resources, spansPer = 8, 4, 128
	bodies := benchBodies(payloads, resources, spansPer)
	spansPerBody := resources * spansPer
	store, h := benchHandler(b, 200_000)
	var ingest, decode time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		body := bodies[i%payloads]
		t0 := time.Now()
		if w := otlp.Post(b, h, otlp.ContentProtobuf, "", body); w.Code != http.StatusOK {
			b.Fatalf("status %d", w.Code)
		}
		t1 := time.Now()
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			b.Fatal(err)
		}
		ingest += t1.Sub(t0)
		decode += time.Since(t1)
	}
	spans := float64(b.N * spansPerBody)
	ingestRate := spans / ingest.Seconds()
	decodeRate := spans / decode.Seconds()
	b.ReportMetric(ingestRate, "ingest_spans/s")
	b.ReportMetric(decodeRate, "decode_spans/s")
	b.ReportMetric(decodeRate/ingestRate, "ingest/decode")
	b.ReportMetric(float64(store.Bytes())/float64(max(store.Len(), 1)), "est_bytes/span")
}

// BenchmarkIngestHTTP measures the OTLP/HTTP protobuf handler alone (read,
// decode, index into a span store kept full) on 512-span bodies, for its
// bytes and allocations per export.
func BenchmarkIngestHTTP(b *testing.B) {
	const payloads = 8
	bodies := benchBodies(payloads, 4, 128)
	_, h := benchHandler(b, 20_000)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if w := otlp.Post(b, h, otlp.ContentProtobuf, "", bodies[i%payloads]); w.Code != http.StatusOK {
			b.Fatalf("status %d", w.Code)
		}
		i++
	}
	b.ReportMetric(float64(512*b.N)/b.Elapsed().Seconds(), "spans/s")
}

// BenchmarkDecodeJSON measures the OTLP/JSON decoder (hex ids) on a
// 512-span payload.
func BenchmarkDecodeJSON(b *testing.B) {
	body, _ := otlp.EncodeJSON(otlp.TestRequest(4, 128))
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := otlp.DecodeJSON(body, otlp.IDHex); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(512*b.N)/b.Elapsed().Seconds(), "spans/s")
}
