package scrape

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"

	"github.com/whyslow/whyslow/internal/decompress"
)

// failingStore refuses every commit, as a store on a full disk does.
type failingStore struct{}

type failingAppender struct{ storage.Appender }

func (failingStore) Appender(context.Context) storage.Appender { return failingAppender{} }

func (failingAppender) Append(storage.SeriesRef, labels.Labels, int64, float64) (storage.SeriesRef, error) {
	return 0, nil
}
func (failingAppender) Commit() error   { return errors.New("write wal: no space left on device") }
func (failingAppender) Rollback() error { return nil }

// TestStoreFailureIsNotTargetDown is part of finding 3 of issue 14: a full
// disk was reported as "engine down". The error now says the store failed
// (ErrStore), so the daemon can tell the two apart.
func TestStoreFailureIsNotTargetDown(t *testing.T) {
	srv := httptest.NewServer(&engine{})
	defer srv.Close()
	s, err := New(failingStore{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Scrape(context.Background(), srv.URL, time.Unix(1700000000, 0))
	if !errors.Is(err, ErrStore) || !strings.Contains(err.Error(), "no space left") {
		t.Fatalf("err = %v", err)
	}
	// A target that is down is not a store failure.
	srv.Close()
	if _, err := s.Scrape(context.Background(), srv.URL, time.Unix(1700000005, 0)); err == nil || errors.Is(err, ErrStore) {
		t.Fatalf("down target: err = %v", err)
	}
}

// TestGzipResponseBounded: a gzip scrape response is bounded by the body
// limit and the decompression ratio.
func TestGzipResponseBounded(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		zw.Write(make([]byte, 32<<20))
		zw.Close()
		w.Write(buf.Bytes())
	}))
	defer srv.Close()
	s, _ := New(newStore(t), Options{})
	_, err := s.Scrape(context.Background(), srv.URL, time.Unix(1700000000, 0))
	if !errors.Is(err, decompress.ErrTooLarge) {
		t.Fatalf("err = %v", err)
	}
}

// FuzzParse: any exposition either parses into samples that all carry the
// target labels, or fails; it never panics.
func FuzzParse(f *testing.F) {
	f.Add([]byte("# TYPE a counter\na_total{x=\"1\"} 3\n"), "text/plain; version=0.0.4")
	f.Add([]byte("# TYPE a counter\na_total{x=\"1\"} 3 1700000000.5\n# EOF\n"), "application/openmetrics-text; version=1.0.0")
	f.Add([]byte("a{instance=\"x\",job=\"y\"} 1\n"), "")
	tl := labels.FromStrings("instance", "h:80", "job", "engine")
	f.Fuzz(func(t *testing.T, body []byte, ctype string) {
		samples, err := Parse("http://h/metrics", body, ctype, time.Unix(1700000000, 0), tl)
		if err != nil {
			return
		}
		for _, s := range samples {
			if s.Labels.Get("instance") != "h:80" || s.Labels.Get("job") != "engine" {
				t.Fatalf("sample %s lacks the target labels", s.Labels)
			}
		}
	})
}
