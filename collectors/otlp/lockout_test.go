package otlp

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/whyslow/whyslow/internal/httplimit"
)

// dialFrom connects to addr from source address ip (127.0.0.0/8 is all
// local on Linux, so each address is another client).
func dialFrom(t *testing.T, ip, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 2 * time.Minute}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// stallFrom is stall from source address ip.
func stallFrom(t *testing.T, ip, addr string) net.Conn {
	t.Helper()
	c := dialFrom(t, ip, addr)
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\nContent-Length: 100000\r\n\r\n0123456789", TracesPath)
	return c
}

// stallGRPC opens a connection from ip that sends the HTTP/2 preface and
// then nothing: a gRPC connection stalled in its handshake.
func stallGRPC(t *testing.T, ip, addr string) net.Conn {
	t.Helper()
	c := dialFrom(t, ip, addr)
	fmt.Fprint(c, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	return c
}

// syncTracer is a tracer that exports each span through exp as it ends
// (the exporter's error, err, fails the test).
func syncTracer(t *testing.T, exp sdktrace.SpanExporter, err error) trace.Tracer {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return tp.Tracer("test")
}

// emit ends one span named name, exported at once.
func emit(tr trace.Tracer, name string) {
	_, s := tr.Start(context.Background(), name, trace.WithTimestamp(t0))
	s.End(trace.WithTimestamp(t0.Add(time.Second)))
}

// waitFor polls until lost's reason reaches n (hang guard: minutes).
func waitFor(t *testing.T, r *Receiver, reason string, n float64) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for testutil.ToFloat64(r.connsLost.WithLabelValues("http", reason)) < n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := testutil.ToFloat64(r.connsLost.WithLabelValues("http", reason)); got != n {
		t.Fatalf("connections closed for %s = %v, want %v", reason, got, n)
	}
}

// TestOneClientCannotLockOut is finding 3 of issue 26: one client holding
// stalled connections (1024, the receiver's bound) kept every exporter
// out. Now one address holds at most MaxConnsPerClient, and a full
// receiver closes unauthenticated stalled connections for new ones, so
// the OpenTelemetry SDK exporter of another client keeps getting 200.
func TestOneClientCannotLockOut(t *testing.T) {
	const token = "otlp-t0ken"
	r, rec := startReceiver(t, Options{HTTP: httplimit.Limits{MaxConns: 64}, MaxConnsPerClient: 16,
		Token: func() string { return token }})
	addr := r.HTTPAddr()
	// One client: 300 stalled uploads, 16 of them held.
	for range 300 {
		stallFrom(t, "127.0.0.3", addr)
	}
	waitFor(t, r, httplimit.RejectPerClient, 300-16)
	// Five more clients fill the receiver (16 + 80 > 64): the oldest stalled
	// connections make room.
	for i := range 5 {
		for range 16 {
			stallFrom(t, fmt.Sprintf("127.0.0.%d", 4+i), addr)
		}
	}
	waitFor(t, r, httplimit.RejectEvicted, 16+80-64)

	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: 2 * time.Minute}
	client := &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}, Timeout: 2 * time.Minute}
	ctx := context.Background()
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(addr), otlptracehttp.WithInsecure(), otlptracehttp.WithHTTPClient(client),
		otlptracehttp.WithHeaders(map[string]string{"Authorization": "Bearer " + token}), otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: false}))
	tr := syncTracer(t, exp, err)
	for i := range 3 {
		// Each export through a full receiver of stalled connections.
		for range 8 {
			stallFrom(t, fmt.Sprintf("127.0.0.%d", 10+i), addr)
		}
		emit(tr, fmt.Sprintf("llm_request-%d", i))
	}
	if got := len(rec.all()); got != 3 {
		t.Errorf("%d spans received, want 3 (the exports failed)", got)
	}
	if open := testutil.ToFloat64(r.connsLost.WithLabelValues("http", httplimit.RejectFull)); open != 0 {
		t.Errorf("%v connections refused as full: the stalled ones should have made room", open)
	}
}

// TestGRPCExporterKeptWhenFull: an authenticated gRPC exporter's connection
// is not the one a full receiver closes for stalled newcomers (it would be
// the least recently active between batches), so it exports on one
// connection throughout.
func TestGRPCExporterKeptWhenFull(t *testing.T) {
	const token = "otlp-t0ken"
	r, rec := startReceiver(t, Options{HTTP: httplimit.Limits{MaxConns: 8}, MaxConnsPerClient: 4,
		Token: func() string { return token }})
	addr := r.GRPCAddr()
	var dials atomic.Int32
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: 2 * time.Minute}
	ctx := context.Background()
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(addr), otlptracegrpc.WithInsecure(),
		otlptracegrpc.WithHeaders(map[string]string{"authorization": "Bearer " + token}),
		otlptracegrpc.WithDialOption(grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			dials.Add(1)
			return dialer.DialContext(ctx, "tcp", a)
		})))
	tr := syncTracer(t, exp, err)
	for i := range 3 {
		emit(tr, fmt.Sprintf("llm_request-%d", i))
		// Then stalled connections from two addresses fill the receiver.
		for j := range 8 {
			stallGRPC(t, fmt.Sprintf("127.0.0.%d", 10+2*i+j%2), addr)
		}
		deadline := time.Now().Add(2 * time.Minute) // hang guard
		want := float64(8*(i+1) - 7)
		for testutil.ToFloat64(r.connsLost.WithLabelValues("grpc", httplimit.RejectEvicted)) < want && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	emit(tr, "llm_request-last")
	if got := len(rec.all()); got != 4 {
		t.Errorf("%d spans received, want 4", got)
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("the exporter dialled %d times: its connection was closed for stalled ones", n)
	}
}
