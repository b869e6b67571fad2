package otlp

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/whyslow/whyslow/internal/httplimit"
)

// stall opens a connection to addr that sends the headers of a 100 kB
// POST and 10 bytes of its body, then nothing.
func stall(t *testing.T, addr string) net.Conn {
	t.Helper()
	return stallFrom(t, "127.0.0.1", addr)
}

func export(t *testing.T, addr string, body []byte, hdr map[string]string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+TracesPath, bytes.NewReader(body))
	req.Header.Set("Content-Type", contentProtobuf)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	c := &http.Client{Timeout: 2 * time.Minute} // hang guard
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("export: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestStalledUploadsDoNotBlockExports is finding 1 of issue 14: uploads
// that send a few bytes of their body and stop held every decoding slot,
// so valid exports got 503 for as long as the sockets stayed open.
func TestStalledUploadsDoNotBlockExports(t *testing.T) {
	r, rec := startReceiver(t, Options{MaxInFlight: 2})
	for i := 0; i < 8; i++ {
		stall(t, r.HTTPAddr())
	}
	// Let the server take them in: each holds a chunk of the body budget once
	// its first bytes are read (or, were they to hold decoding slots, some
	// are refused as overloaded). The deadline only guards against a hang.
	taken := func() bool {
		return r.budget.Used() >= 8*32<<10 || testutil.ToFloat64(r.failed.WithLabelValues("http", "overloaded")) > 0
	}
	for deadline := time.Now().Add(2 * time.Minute); !taken() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	body, _ := proto.Marshal(testRequest(1, 3))
	for i := 0; i < 5; i++ {
		if code := export(t, r.HTTPAddr(), body, nil); code != http.StatusOK {
			t.Fatalf("export %d behind 8 stalled uploads: status %d", i, code)
		}
	}
	if n := len(rec.all()); n != 15 {
		t.Errorf("stored %d spans, want 15", n)
	}
}

// TestStalledUploadTimesOut: the body must arrive within the read timeout;
// a stalled upload loses its connection and its budget. What is checked is
// that the server itself gave up on the upload (a 408, the close, and the
// "timeout" refusal counted), not how quickly: the client's read deadline
// only guards against a hang.
func TestStalledUploadTimesOut(t *testing.T) {
	r, _ := startReceiver(t, Options{HTTP: httplimit.Limits{ReadTimeout: 300 * time.Millisecond}})
	c := stall(t, r.HTTPAddr())
	c.SetReadDeadline(time.Now().Add(2 * time.Minute)) // hang guard
	b, err := io.ReadAll(c)                            // the server answers 408 and closes
	if err != nil {
		t.Fatalf("the server did not close the stalled upload: %v (read %q)", err, b)
	}
	if !strings.Contains(string(b), "408") {
		t.Errorf("response %q, want 408", b)
	}
	if got := testutil.ToFloat64(r.failed.WithLabelValues("http", "timeout")); got != 1 {
		t.Errorf("requests refused for timeout = %v, want 1", got)
	}
	deadline := time.Now().Add(2 * time.Minute) // hang guard
	for r.budget.Used() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if r.budget.Used() != 0 {
		t.Errorf("budget holds %d bytes", r.budget.Used())
	}
}

// TestConnectionsBounded: open connections beyond MaxConns are closed on
// accept and counted, so 1000 stalled uploads cannot take 1000 files.
func TestConnectionsBounded(t *testing.T) {
	r, _, reg := newTestReceiver(t, Options{HTTP: httplimit.Limits{MaxConns: 4}})
	r.opts.HTTPAddr, r.opts.GRPCAddr = "127.0.0.1:0", ""
	if err := r.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
		cancel()
		<-done
	}()
	for i := 0; i < 10; i++ {
		conns = append(conns, stall(t, r.HTTPAddr()))
	}
	// Stalled connections close each other (issue 26): the oldest goes.
	deadline := time.Now().Add(2 * time.Minute) // hang guard
	for testutil.ToFloat64(r.connsLost.WithLabelValues("http", "evicted")) < 6 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := testutil.ToFloat64(r.connsLost.WithLabelValues("http", "evicted")); got != 6 {
		t.Errorf("closed connections = %v, want 6", got)
	}
	if n, _ := testutil.GatherAndCount(reg, "whyslow_otlp_connections_rejected_total"); n != 6 {
		t.Errorf("series = %d, want 2 transports × 3 reasons", n)
	}
}

// TestInvalidUTF8JSONIs400 is finding 10: a JSON export with invalid UTF-8
// inside a string made the error status unencodable, and the receiver
// answered 500.
func TestInvalidUTF8JSONIs400(t *testing.T) {
	r, _, _ := newTestReceiver(t, Options{})
	for _, body := range []string{
		"{\"resourceSpans\":[{\"scopeSpans\":[{\"spans\":[{\"startTimeUnixNano\":\"\xff\"}]}]}]}",
		"{\"resourceSpans\":[{\"scopeSpans\":[{\"spans\":[{\"kind\":\"\xfe\"}]}]}]}",
		"{\"resourceSpans\":[], \"x\":\"\xc3\"}",
	} {
		w := post(t, r.Handler(), contentJSON, "", []byte(body))
		if w.Code != http.StatusBadRequest {
			t.Errorf("%q: status %d: %s", body, w.Code, w.Body)
		}
	}
	if _, err := DecodeJSON([]byte("{\"a\":\"ok\xff\"}"), IDHex); err == nil || !strings.Contains(err.Error(), "offset 8") {
		t.Errorf("DecodeJSON error = %v", err)
	}
}

// TestBearerToken: with a token the receivers refuse exports without it
// (401 / UNAUTHENTICATED) and take the scheme in any case.
func TestBearerToken(t *testing.T) {
	tok := "otlp-token-123"
	r, rec := startReceiver(t, Options{Token: func() string { return tok }})
	body, _ := proto.Marshal(testRequest(1, 1))
	if code := export(t, r.HTTPAddr(), body, nil); code != http.StatusUnauthorized {
		t.Errorf("no token: status %d", code)
	}
	if code := export(t, r.HTTPAddr(), body, map[string]string{"Authorization": "Bearer wrong"}); code != http.StatusUnauthorized {
		t.Errorf("wrong token: status %d", code)
	}
	if code := export(t, r.HTTPAddr(), body, map[string]string{"Authorization": "bearer " + tok}); code != http.StatusOK {
		t.Errorf("token: status %d", code)
	}
	conn, err := grpc.NewClient(r.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cl := coltracepb.NewTraceServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // hang guard
	defer cancel()
	if _, err := cl.Export(ctx, testRequest(1, 1)); status.Code(err) != codes.Unauthenticated {
		t.Errorf("grpc without token: %v", err)
	}
	actx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
	if _, err := cl.Export(actx, testRequest(1, 1)); err != nil {
		t.Errorf("grpc with token: %v", err)
	}
	if n := len(rec.all()); n != 2 {
		t.Errorf("stored %d spans, want 2", n)
	}
}

// TestGzipRatioBound: a gzip body that expands more than the documented
// ratio is refused before it is all inflated.
func TestGzipRatioBound(t *testing.T) {
	r, _, _ := newTestReceiver(t, Options{})
	w := post(t, r.Handler(), contentProtobuf, "gzip", gz(make([]byte, 15<<20)))
	if w.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	if !strings.Contains(w.Body.String(), "compressed size") {
		t.Errorf("body %q", w.Body)
	}
}
