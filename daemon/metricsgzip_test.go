package daemon

import (
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
)

// TestMetricsScrapeAllocatesNoCompressor: a scrape of /metrics that offers
// gzip (as Prometheus's does) is answered uncompressed, and answering it
// allocates a fraction of what a gzip compressor takes (~0.8 MB: its pool
// is emptied by the collections between two scrapes, so every scrape of a
// sidecar made a new one).
func TestMetricsScrapeAllocatesNoCompressor(t *testing.T) {
	h := newHarness(t, testConfig())
	h.ticks(t, 2)
	handler := h.d.Handler()
	scrape := func() *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		req.Header.Set("Accept-Encoding", "gzip")
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		return rec
	}
	rec := scrape()
	if rec.Code != http.StatusOK {
		t.Fatalf("/metrics = %d", rec.Code)
	}
	if enc := rec.Header().Get("Content-Encoding"); enc != "" {
		t.Errorf("/metrics answered with Content-Encoding %q, want none", enc)
	}
	// Two collections empty a sync.Pool (its victim cache survives one), as
	// the collections between two real scrapes do.
	runtime.GC()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	rec = scrape()
	runtime.ReadMemStats(&after)
	const limit = 256 << 10
	if got := after.TotalAlloc - before.TotalAlloc; got > limit {
		t.Errorf("one /metrics scrape allocated %d bytes for a %d-byte page, want at most %d", got, rec.Body.Len(), limit)
	}
}
