package decompress

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

func gz(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

func TestRatioStopsABomb(t *testing.T) {
	bomb := gz(t, make([]byte, 64<<20)) // 64 MiB of zeros in ~64 KiB
	z, err := NewGzip(bytes.NewReader(bomb), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, z)
	var le *LimitError
	if !errors.Is(err, ErrTooLarge) || !errors.As(err, &le) || !le.Ratio {
		t.Fatalf("err = %v", err)
	}
	if max := int64(DefaultMaxRatio)*int64(len(bomb)) + 1<<20; n > max {
		t.Errorf("read %d bytes before stopping, want at most %d", n, max)
	}
}

func TestSizeBound(t *testing.T) {
	data := make([]byte, 3<<20)
	rand.Read(data) // incompressible: only the size bound applies
	z, _ := NewGzip(bytes.NewReader(gz(t, data)), Limits{MaxBytes: 2 << 20})
	_, err := io.Copy(io.Discard, z)
	var le *LimitError
	if !errors.As(err, &le) || le.Ratio || !strings.Contains(err.Error(), "2097152") {
		t.Fatalf("err = %v", err)
	}
}

func TestRealisticDataReads(t *testing.T) {
	var text strings.Builder
	for i := 0; text.Len() < 8<<20; i++ {
		// Like a recorded bundle: counters grow, timestamps step.
		fmt.Fprintf(&text, "vllm:time_to_first_token_seconds_bucket{le=\"0.1\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\",pod=\"vllm-%d\"} %d %d.%03d\n",
			i%4, i*37+i%11, 1700000000+i/40, (i*7)%1000)
	}
	z, _ := NewGzip(bytes.NewReader(gz(t, []byte(text.String()))), Limits{MaxBytes: 64 << 20})
	got, err := io.ReadAll(z)
	if err != nil || len(got) != text.Len() {
		t.Fatalf("read %d of %d: %v", len(got), text.Len(), err)
	}
	// Reset reuses the reader.
	if err := z.Reset(bytes.NewReader(gz(t, []byte("small"))), Limits{}); err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(z); err != nil || string(b) != "small" {
		t.Fatalf("after reset: %q %v", b, err)
	}
}
