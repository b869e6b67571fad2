package scrape

import (
	"bytes"
	"compress/gzip"
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// commentPage is an exposition of size bytes that is almost all comment
// lines, so what a scrape allocates beyond reading it is small.
func commentPage(size int) []byte {
	var b bytes.Buffer
	b.WriteString("# TYPE up_total counter\nup_total 1\n")
	line := "# " + strings.Repeat("x", 97) + "\n"
	for b.Len() < size {
		b.WriteString(line)
	}
	return b.Bytes()
}

// bytesPerScrape scrapes srv n times after a warm-up and returns the bytes
// the process allocated per scrape (the test server's included).
func bytesPerScrape(t *testing.T, srv *httptest.Server, n int) uint64 {
	t.Helper()
	s, err := New(newStore(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	target := srv.URL + "/metrics"
	at := t0
	scrape := func() {
		at = at.Add(5 * time.Second)
		if _, err := s.Scrape(context.Background(), target, at); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		scrape()
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		scrape()
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / uint64(n)
}

// A scrape reads the page into the buffer the last scrape left: regrown
// from nothing, a 256 KB page allocated about 512 KB each time.
func TestScrapeReusesReadBuffer(t *testing.T) {
	page := commentPage(256 << 10)
	for _, zipped := range []bool{false, true} {
		name := "plain"
		if zipped {
			name = "gzip"
		}
		t.Run(name, func(t *testing.T) {
			body := page
			if zipped {
				var zb bytes.Buffer
				zw := gzip.NewWriter(&zb)
				_, _ = zw.Write(page)
				_ = zw.Close()
				body = zb.Bytes()
			}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "text/plain; version=0.0.4")
				if zipped {
					w.Header().Set("Content-Encoding", "gzip")
				}
				_, _ = w.Write(body)
			}))
			defer srv.Close()
			got := bytesPerScrape(t, srv, 20)
			t.Logf("%d bytes allocated per scrape of a %d-byte page", got, len(page))
			if limit := uint64(len(page) / 4); got > limit {
				t.Errorf("%d bytes allocated per scrape of a %d-byte page, want at most %d", got, len(page), limit)
			}
		})
	}
}

// A small gzip page reuses the inflate state too (~45 KB each time new).
func TestScrapeReusesGzipReader(t *testing.T) {
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	_, _ = zw.Write(commentPage(1 << 10))
	_ = zw.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		w.Header().Set("Content-Encoding", "gzip")
		_, _ = w.Write(zb.Bytes())
	}))
	defer srv.Close()
	got := bytesPerScrape(t, srv, 20)
	t.Logf("%d bytes allocated per scrape of a 1 KB gzip page", got)
	if got > 32<<10 {
		t.Errorf("%d bytes allocated per scrape of a 1 KB gzip page, want at most %d", got, 32<<10)
	}
}

// Reusing the buffer must not reach what an earlier scrape stored: the
// second page has the same length and overwrites the first's bytes.
func TestScrapeReusedBufferKeepsStoredLabels(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		if calls.Add(1) == 1 {
			_, _ = w.Write([]byte("m{v=\"aaaa\"} 1\n"))
			return
		}
		_, _ = w.Write([]byte("m{v=\"bbbb\"} 2\n"))
	}))
	defer srv.Close()
	st := newStore(t)
	s, err := New(st, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := s.Scrape(context.Background(), srv.URL+"/metrics", t0.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	v, _, err := st.Query(context.Background(), `m{v="aaaa"}`, t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(v) != 1 || v[0].Value != 1 {
		t.Fatalf(`m{v="aaaa"} at the first scrape = %v, want 1`, v)
	}
	if got := string(v[0].Metric["v"]); got != "aaaa" {
		t.Errorf("first scrape's label v = %q after the second, want aaaa", got)
	}
}
