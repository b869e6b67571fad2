package tracequery

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/whyslow/whyslow/internal/decompress"
	"github.com/whyslow/whyslow/span"
	"github.com/whyslow/whyslow/testbed/secrettest"
)

type bearer struct{ tok string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.tok)
	return http.DefaultTransport.RoundTrip(r)
}

// TestErrorsHideEchoedCredentials is finding 6 of issue 14 (the Tempo
// part): a Tempo that echoes the request's Authorization header in its
// error page put the token into the error, and from there into the
// verdict's data gaps.
func TestErrorsHideEchoedCredentials(t *testing.T) {
	tok, pw := secrettest.Secret("tempo-token"), secrettest.Secret("tempo-pw")
	sc := secrettest.New(t, tok, "alice:"+pw)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
		fmt.Fprintf(w, "upstream refused request %s with headers %v", r.URL, r.Header)
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	u.User = url.UserPassword("alice", pw)
	withUser := u.String()
	for _, tc := range []struct {
		name string
		src  interface {
			Trace(context.Context, span.TraceID) ([]span.Span, error)
			SpansBetween(ctx context.Context, start, end time.Time, limit int) ([]span.Span, error)
		}
	}{
		{"tempo bearer", &Tempo{BaseURL: srv.URL, Client: &http.Client{Transport: bearer{tok}}}},
		{"tempo basic in URL", &Tempo{BaseURL: withUser}},
		{"jaeger basic in URL", &Jaeger{BaseURL: withUser, Service: "vllm"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.src.Trace(context.Background(), span.TraceID{1})
			if err == nil || !strings.Contains(err.Error(), "502") {
				t.Fatalf("err = %v", err)
			}
			sc.Error(tc.name, err)
			_, err = tc.src.SpansBetween(context.Background(), t0, t0.Add(time.Minute), 10)
			sc.Error(tc.name+" search", err)
		})
	}
	// Unreachable: the transport error names the URL, redacted.
	_, err := (&Tempo{BaseURL: "http://alice:" + pw + "@127.0.0.1:1"}).Trace(context.Background(), span.TraceID{1})
	if err == nil {
		t.Fatal("no error from a closed port")
	}
	sc.Error("unreachable", err)
}

func gzFile(t *testing.T, path string, data []byte) {
	t.Helper()
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	zw.Write(data)
	zw.Close()
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestJSONLGzipBomb is finding 8 of issue 14 (traces): a 1 MB
// traces.jsonl.gz of zeros took 2.1 GB. Decompression is bounded by a
// ratio, so it fails fast and small.
func TestJSONLGzipBomb(t *testing.T) {
	path := filepath.Join(t.TempDir(), "traces.jsonl.gz")
	gzFile(t, path, make([]byte, 256<<20)) // 256 MiB of zeros, ~250 KiB of gzip
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := OpenJSONL(path)
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if !errors.Is(err, decompress.ErrTooLarge) || !strings.Contains(err.Error(), "traces.jsonl.gz") {
		t.Fatalf("err = %v", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 160<<20 {
		t.Errorf("allocated %d MiB reading a gzip bomb", grew>>20)
	}
	// A real file still reads.
	ok := filepath.Join(t.TempDir(), "traces.jsonl.gz")
	gzFile(t, ok, []byte(strings.Repeat(jsonlLine+"\n", 50)))
	if f, err := OpenJSONL(ok); err != nil || f.Spans != 50 {
		t.Fatalf("OpenJSONL = %+v, %v", f, err)
	}
}

const jsonlLine = `{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"vllm"}}]},"scopeSpans":[{"spans":[{"traceId":"` + traceHex + `","spanId":"eee19b7ec3c1b174","name":"llm_request","kind":2,"startTimeUnixNano":"1700000000500000000","endTimeUnixNano":"1700000002500000000","attributes":[{"key":"gen_ai.request.id","value":{"stringValue":"chatcmpl-1"}}]}]}]}]}`
