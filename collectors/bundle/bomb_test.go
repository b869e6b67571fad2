package bundle

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/whyslow/whyslow/internal/decompress"
)

// TestMetricsGzipBomb is finding 8 of issue 14 (metrics): a 1 MB
// metrics.om.gz holding 1 GiB of zeros made `why --bundle` use 5.5 GB and
// 18 s. The read stops at the documented ratio instead: the test checks
// the refusal and the bytes allocated, not the time taken.
func TestMetricsGzipBomb(t *testing.T) {
	dir := t.TempDir()
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	zeros := make([]byte, 1<<20)
	for i := 0; i < 256; i++ { // 256 MiB of zeros, about 250 KB of gzip
		zw.Write(zeros)
	}
	zw.Close()
	if err := os.WriteFile(filepath.Join(dir, MetricsGzFile), buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute) // hang guard
	defer cancel()
	_, err = b.LoadMetrics(ctx, openStore(t))
	runtime.ReadMemStats(&after)
	// Refused by the ratio bound, not by the 4 GiB size bound or the clock.
	var le *decompress.LimitError
	if !errors.Is(err, decompress.ErrTooLarge) || !errors.As(err, &le) || !le.Ratio {
		t.Fatalf("err = %v, want the ratio bound's refusal", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 128<<20 {
		t.Errorf("allocated %d MiB on a 250 KB bomb", grew>>20)
	}
}
