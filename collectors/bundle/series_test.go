package bundle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"

	"github.com/whyslow/whyslow/collectors/store"
)

// seriesStream is an OpenMetrics text of n series, one sample each,
// produced as it is read: a million-series bundle without a million lines
// in memory. read counts the series handed out.
type seriesStream struct {
	n, read int
	buf     []byte
	done    bool
}

func (s *seriesStream) Read(p []byte) (int, error) {
	for len(s.buf) < len(p) && !s.done {
		if s.read == s.n {
			s.buf = append(s.buf, "# EOF\n"...)
			s.done = true
			break
		}
		s.buf = fmt.Appendf(s.buf, "vllm:num_requests_running{pod=\"vllm-%d\",model_name=\"llama\"} 1 1700000000\n", s.read)
		s.read++
	}
	if len(s.buf) == 0 {
		return 0, io.EOF
	}
	n := copy(p, s.buf)
	s.buf = s.buf[n:]
	return n, nil
}

// TestSeriesLimit is finding 2 of issue 26: a bundle of a million series
// (104 MB, 3 MB gzipped: within the ratio bound) took 4.1 GB in `why
// --bundle`. The load stops at the first series past the limit, having read
// little more than that many.
func TestSeriesLimit(t *testing.T) {
	st, err := store.Open(store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	src := &seriesStream{n: 1_000_000}
	_, err = ReadMetricsFrom(context.Background(), "metrics.om", src, st, LoadOptions{Format: FormatOpenMetrics, MaxSeries: 1000})
	var le *SeriesLimitError
	if !errors.As(err, &le) || le.Limit != 1000 {
		t.Fatalf("got %v, want a *SeriesLimitError at 1000", err)
	}
	if !strings.HasPrefix(err.Error(), "metrics.om:1001:1: series vllm:num_requests_running{pod=\"vllm-1000\"") ||
		!strings.Contains(err.Error(), "more than 1000 series") {
		t.Errorf("error %q does not say where and which limit", err)
	}
	// The parser reads a block of lines ahead; far from the million.
	if src.read > 20_000 {
		t.Errorf("read %d series before refusing", src.read)
	}
	// The default applies when none is given.
	src = &seriesStream{n: DefaultMaxSeries + 1}
	var app countingAppendable
	if _, err := ReadMetricsFrom(context.Background(), "metrics.om", src, discard{&app}, LoadOptions{Format: FormatOpenMetrics}); !errors.As(err, &le) || le.Limit != DefaultMaxSeries {
		t.Errorf("default: got %v", err)
	}
	// A negative limit is none.
	src = &seriesStream{n: 5000}
	if st, err := ReadMetricsFrom(context.Background(), "metrics.om", src, discard{&app}, LoadOptions{Format: FormatOpenMetrics, MaxSeries: -1}); err != nil || st.Series != 5000 {
		t.Errorf("no limit: %d series, %v", st.Series, err)
	}
}

// discard is a storage.Appendable that keeps nothing (countingAppendable
// would hold every sample).
type discard struct{ *countingAppendable }

func (d discard) Appender(ctx context.Context) storage.Appender {
	return &discardAppender{countingAppender{c: d.countingAppendable}}
}

type discardAppender struct{ countingAppender }

func (a *discardAppender) Append(ref storage.SeriesRef, _ labels.Labels, _ int64, _ float64) (storage.SeriesRef, error) {
	return ref + 1, nil
}
func (a *discardAppender) Commit() error { return nil }

// TestSeriesLimitMemory measures the heap a loaded series costs (the store's
// head and the loader's cache), which DefaultMaxSeries is derived from, and
// that a refused bundle holds no more than its limit's worth.
func TestSeriesLimitMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("loads 20k series")
	}
	const n = 20_000
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse
	}
	st, err := store.Open(store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	before := heap()
	var after uint64
	func() {
		_, err = ReadMetricsFrom(context.Background(), "metrics.om", &seriesStream{n: 10 * n}, st, LoadOptions{Format: FormatOpenMetrics, MaxSeries: n})
		after = heap()
	}()
	var le *SeriesLimitError
	if !errors.As(err, &le) {
		t.Fatalf("got %v, want the limit", err)
	}
	per := float64(after-min(after, before)) / n
	t.Logf("%.0f bytes of heap per series held (%d series)", per, n)
	// DefaultMaxSeries assumes about 1 KiB before the samples (measured
	// 1055 bytes); twice that is a regression.
	if per > 2<<10 {
		t.Errorf("%.0f bytes per series, more than the 2 KiB DefaultMaxSeries allows for", per)
	}
}
