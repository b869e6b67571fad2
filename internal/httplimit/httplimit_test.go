package httplimit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestReadBody(t *testing.T) {
	b := NewBudget(1 << 20)
	body, release, err := ReadBody(strings.NewReader(strings.Repeat("x", 100_000)), 200_000, b)
	if err != nil || len(body) != 100_000 {
		t.Fatalf("ReadBody = %d bytes, %v", len(body), err)
	}
	if b.Used() == 0 || b.Used() > 200_000 {
		t.Errorf("budget holds %d bytes for a 100 kB body", b.Used())
	}
	release()
	release() // twice is harmless
	if b.Used() != 0 {
		t.Errorf("budget holds %d bytes after release", b.Used())
	}
	if _, _, err := ReadBody(strings.NewReader(strings.Repeat("x", 1001)), 1000, b); !errors.Is(err, ErrTooLarge) || Status(err) != 413 {
		t.Errorf("over the limit: %v", err)
	}
	small := NewBudget(64 << 10)
	_, rel, err := ReadBody(strings.NewReader(strings.Repeat("x", 40_000)), 1<<20, small)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadBody(strings.NewReader(strings.Repeat("x", 40_000)), 1<<20, small); !errors.Is(err, ErrBusy) || Status(err) != 503 {
		t.Errorf("over the budget: %v", err)
	}
	rel()
	if small.Used() != 0 {
		t.Errorf("budget leaked %d bytes", small.Used())
	}
	if body, _, err := ReadBody(strings.NewReader(""), 10, nil); err != nil || len(body) != 0 {
		t.Errorf("empty body: %q %v", body, err)
	}
}

// TestStalledUploadIsCutOff: a client that sends part of a body and stops
// loses its connection after ReadTimeout, and its bytes leave the budget.
func TestStalledUploadIsCutOff(t *testing.T) {
	b := NewBudget(1 << 20)
	var got atomic.Value
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, release, err := ReadBody(r.Body, 1<<20, b)
		release()
		got.Store(fmt.Sprint(err))
		http.Error(w, fmt.Sprint(err), Status(err))
	})
	srv := Server(h, Limits{ReadTimeout: 300 * time.Millisecond})
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go srv.Serve(Listener(ln, 8, nil))
	defer srv.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n0123456789")
	start := time.Now()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err == nil {
		io.Copy(io.Discard, resp.Body)
	}
	if time.Since(start) > 3*time.Second {
		t.Fatalf("stalled upload held the connection %s", time.Since(start))
	}
	deadline := time.Now().Add(2 * time.Second)
	for got.Load() == nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if s, _ := got.Load().(string); s != ErrTimeout.Error() {
		t.Errorf("handler saw %q, want a timeout", s)
	}
	if b.Used() != 0 {
		t.Errorf("budget holds %d bytes after the timeout", b.Used())
	}
}

func TestListenerBoundsConnections(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	var rejected atomic.Int32
	lim := Listener(ln, 2, func() { rejected.Add(1) })
	srv := Server(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }), Limits{})
	go srv.Serve(lim)
	defer srv.Close()
	var conns []net.Conn
	for i := 0; i < 2; i++ {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	deadline := time.Now().Add(2 * time.Second)
	for Open(lim) < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	c, _ := net.Dial("tcp", ln.Addr().String())
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("a third connection was kept open")
	}
	c.Close()
	for rejected.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if rejected.Load() != 1 {
		t.Errorf("rejected = %d", rejected.Load())
	}
	for _, c := range conns {
		c.Close()
	}
	for Open(lim) > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	resp, err := http.Post("http://"+ln.Addr().String(), "text/plain", bytes.NewReader(nil))
	if err != nil {
		t.Fatalf("after closing, a new connection fails: %v", err)
	}
	resp.Body.Close()
}

func TestBearerOK(t *testing.T) {
	for _, h := range []string{"Bearer tok-1", "bearer tok-1", "BEARER  tok-1 ", " Bearer tok-1"} {
		if !BearerOK(h, "tok-1") {
			t.Errorf("%q refused", h)
		}
	}
	for _, h := range []string{"", "Bearer", "Bearer ", "Basic tok-1", "Bearertok-1", "Bearer tok-2"} {
		if BearerOK(h, "tok-1") {
			t.Errorf("%q accepted", h)
		}
	}
	if BearerOK("Bearer x", "") {
		t.Error("an empty token matched")
	}
}
