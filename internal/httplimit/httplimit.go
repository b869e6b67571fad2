// Package httplimit is the one set of bounds every HTTP server of the daemon
// runs with (the API, OTLP/HTTP), so that no client can hold the daemon up:
//
//   - timeouts: a request's headers must arrive within ReadHeaderTimeout and
//     the whole request, body included, within ReadTimeout, so a client that
//     sends 10 bytes of a body and stops loses its connection;
//   - header size: MaxHeaderBytes;
//   - connections: at most MaxConns open at once; more are closed as they
//     are accepted (and counted), so open files stay bounded;
//   - body bytes: ReadBody reads a body within a size limit and charges a
//     Budget shared by the server's requests as bytes arrive, so many
//     uploads together hold at most the budget in memory. Decoding slots are
//     taken after the body is read: a slow upload holds only its bytes.
package httplimit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults for zero Limits fields.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultMaxHeaderBytes    = 64 << 10
	DefaultMaxConns          = 1024
)

// Limits bound one server. Zero values get defaults; WriteTimeout zero
// means none.
type Limits struct {
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading the whole request, body included.
	ReadTimeout time.Duration
	// WriteTimeout bounds the handler plus writing the response.
	WriteTimeout   time.Duration
	IdleTimeout    time.Duration
	MaxHeaderBytes int
	// MaxConns bounds the open connections.
	MaxConns int
}

// WithDefaults returns l with zero fields set.
func (l Limits) WithDefaults() Limits {
	if l.ReadHeaderTimeout <= 0 {
		l.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if l.ReadTimeout <= 0 {
		l.ReadTimeout = DefaultReadTimeout
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = DefaultIdleTimeout
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if l.MaxConns <= 0 {
		l.MaxConns = DefaultMaxConns
	}
	return l
}

// Server returns an http.Server for h with l's timeouts and header limit.
// Serve it on Listener(ln, l.MaxConns, ...) for the connection bound.
func Server(h http.Handler, l Limits) *http.Server {
	l = l.WithDefaults()
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		WriteTimeout:      l.WriteTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
	}
}

// Listener returns ln bounded to max open connections: a connection
// accepted beyond that is closed at once and onReject (optional) is called.
func Listener(ln net.Listener, max int, onReject func()) net.Listener {
	return ListenerWith(ln, ListenerOptions{MaxConns: max, OnReject: func(string) {
		if onReject != nil {
			onReject()
		}
	}})
}

// Reasons a ListenerWith passes to OnReject.
const (
	// RejectFull: the listener had its most connections open and none it
	// could close to make room; the new one was closed.
	RejectFull = "full"
	// RejectPerClient: the client (remote IP) had its most open.
	RejectPerClient = "per_client"
	// RejectEvicted: an older connection that had not shown it is
	// trusted and was not making progress was closed for a new one.
	RejectEvicted = "evicted"
)

// ListenerOptions bound a listener's connections.
type ListenerOptions struct {
	// MaxConns bounds the open connections (default DefaultMaxConns).
	MaxConns int
	// MaxPerClient bounds the open connections of one remote IP, so one
	// client cannot take every slot; 0 is no bound.
	MaxPerClient int
	// Evict, when the listener is full, closes a connection that is not
	// serving a request (MarkBusy) to admit the new one: a connection not
	// yet trusted (MarkTrusted) first, then the one whose last byte
	// arrived longest ago. Stalled connections thus cannot lock the
	// listener; only when every one is busy is the new one refused.
	Evict bool
	// OnReject (optional) is called with the reason of each connection
	// closed by the bounds.
	OnReject func(reason string)
}

// ListenerWith returns ln bounded by o.
func ListenerWith(ln net.Listener, o ListenerOptions) net.Listener {
	if o.MaxConns <= 0 {
		o.MaxConns = DefaultMaxConns
	}
	if o.OnReject == nil {
		o.OnReject = func(string) {}
	}
	return &limitListener{Listener: ln, o: o, conns: map[*limitConn]struct{}{}, byAddr: map[string]*limitConn{}, perClient: map[string]int{}}
}

type limitListener struct {
	net.Listener
	o    ListenerOptions
	tick atomic.Int64 // orders the connections' progress without a clock

	mu        sync.Mutex
	conns     map[*limitConn]struct{}
	byAddr    map[string]*limitConn // remote address → connection (MarkAddr)
	perClient map[string]int
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		client := remoteIP(c)
		l.mu.Lock()
		if l.o.MaxPerClient > 0 && l.perClient[client] >= l.o.MaxPerClient {
			l.mu.Unlock()
			c.Close()
			l.o.OnReject(RejectPerClient)
			continue
		}
		var victim *limitConn
		if len(l.conns) >= l.o.MaxConns {
			if l.o.Evict {
				victim = l.victimLocked()
			}
			if victim == nil {
				l.mu.Unlock()
				c.Close()
				l.o.OnReject(RejectFull)
				continue
			}
			l.removeLocked(victim)
		}
		lc := &limitConn{Conn: c, l: l, client: client}
		lc.progress.Store(l.tick.Add(1))
		l.conns[lc] = struct{}{}
		if a := c.RemoteAddr(); a != nil {
			l.byAddr[a.String()] = lc
		}
		l.perClient[client]++
		l.mu.Unlock()
		if victim != nil {
			victim.Conn.Close()
			l.o.OnReject(RejectEvicted)
		}
		return lc, nil
	}
}

// victimLocked picks the connection to close for a new one: not busy,
// untrusted before trusted, least recent progress first; nil when all
// are busy.
func (l *limitListener) victimLocked() *limitConn {
	var best *limitConn
	for c := range l.conns {
		if c.busy.Load() > 0 {
			continue
		}
		if best == nil || worse(c, best) {
			best = c
		}
	}
	return best
}

// worse reports whether a is a better victim than b.
func worse(a, b *limitConn) bool {
	at, bt := a.trusted.Load(), b.trusted.Load()
	if at != bt {
		return !at
	}
	return a.progress.Load() < b.progress.Load()
}

func (l *limitListener) removeLocked(c *limitConn) {
	if _, ok := l.conns[c]; !ok {
		return
	}
	delete(l.conns, c)
	if a := c.RemoteAddr(); a != nil && l.byAddr[a.String()] == c {
		delete(l.byAddr, a.String())
	}
	if l.perClient[c.client]--; l.perClient[c.client] <= 0 {
		delete(l.perClient, c.client)
	}
}

func remoteIP(c net.Conn) string {
	a := c.RemoteAddr()
	if a == nil {
		return ""
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// Open returns the number of open connections of a Listener (0 for
// another listener).
func Open(ln net.Listener) int {
	if l, ok := ln.(*limitListener); ok {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.conns)
	}
	return 0
}

type limitConn struct {
	net.Conn
	l        *limitListener
	client   string
	progress atomic.Int64 // the listener's tick at the last byte read
	busy     atomic.Int32 // requests being served (MarkBusy)
	trusted  atomic.Bool  // a request on it passed authentication
	once     sync.Once
}

func (c *limitConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.progress.Store(c.l.tick.Add(1))
	}
	return n, err
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.removeLocked(c)
		c.l.mu.Unlock()
	})
	return err
}

// connKey is the context key ConnContext stores a connection under.
type connKey struct{}

// ConnContext is an http.Server ConnContext that lets a handler reach its
// connection (MarkBusy, MarkTrusted).
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// MarkBusy says the request of ctx is being served on its connection,
// which a full listener then does not close; call the returned function
// when it is done. Outside a ListenerWith connection it does nothing.
func MarkBusy(ctx context.Context) func() {
	c, ok := ctx.Value(connKey{}).(*limitConn)
	if !ok {
		return func() {}
	}
	c.busy.Add(1)
	return func() { c.busy.Add(-1) }
}

// MarkTrusted says a request on ctx's connection passed authentication: a
// full listener closes untrusted connections first.
func MarkTrusted(ctx context.Context) {
	if c, ok := ctx.Value(connKey{}).(*limitConn); ok {
		c.trusted.Store(true)
	}
}

// MarkAddr is MarkTrusted and MarkBusy for a server that does not hand its
// connections to handlers (gRPC): the connection of ln (a ListenerWith)
// from remote address addr is trusted, and busy until done is called.
func MarkAddr(ln net.Listener, addr net.Addr) (done func()) {
	l, ok := ln.(*limitListener)
	if !ok || addr == nil {
		return func() {}
	}
	l.mu.Lock()
	c := l.byAddr[addr.String()]
	l.mu.Unlock()
	if c == nil {
		return func() {}
	}
	c.trusted.Store(true)
	c.busy.Add(1)
	return func() { c.busy.Add(-1) }
}

// Budget bounds the body bytes that the requests of a server hold in memory
// at once. A nil *Budget is unbounded.
type Budget struct {
	max  int64
	used atomic.Int64
}

// NewBudget returns a budget of max bytes.
func NewBudget(max int64) *Budget { return &Budget{max: max} }

// Used returns the bytes held now.
func (b *Budget) Used() int64 {
	if b == nil {
		return 0
	}
	return b.used.Load()
}

func (b *Budget) acquire(n int64) bool {
	if b == nil {
		return true
	}
	if b.used.Add(n) > b.max {
		b.used.Add(-n)
		return false
	}
	return true
}

func (b *Budget) release(n int64) {
	if b != nil && n > 0 {
		b.used.Add(-n)
	}
}

// Errors of ReadBody. Each maps to a status: ErrTooLarge 413, ErrBusy 503
// (retry later), ErrTimeout 408.
var (
	ErrTooLarge = errors.New("request body too large")
	ErrBusy     = errors.New("too many request bytes in flight")
	ErrTimeout  = errors.New("request body not received in time")
)

// Status returns the HTTP status for a ReadBody error (400 for others).
func Status(err error) int {
	switch {
	case errors.Is(err, ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, ErrBusy):
		return http.StatusServiceUnavailable
	case errors.Is(err, ErrTimeout):
		return http.StatusRequestTimeout
	}
	return http.StatusBadRequest
}

// chunk is how many bytes ReadBody reserves from the budget at a time.
const chunk = 32 << 10

// ReadBody reads r to its end, at most limit bytes, charging b as it grows.
// It returns the body and a release function that returns its bytes to b
// (call it once the body is no longer needed; safe to call on error too).
// Errors wrap ErrTooLarge, ErrBusy or ErrTimeout where those apply.
func ReadBody(r io.Reader, limit int64, b *Budget) ([]byte, func(), error) {
	var held int64
	release := func() { b.release(held); held = 0 }
	var buf bytes.Buffer
	tmp := make([]byte, chunk)
	for {
		n, err := r.Read(tmp[:min(chunk, limit+1-int64(buf.Len()))])
		if need := int64(buf.Len()+n) - held; need > 0 {
			need = (need + chunk - 1) / chunk * chunk
			if !b.acquire(need) {
				release()
				return nil, func() {}, ErrBusy
			}
			held += need
		}
		buf.Write(tmp[:n])
		if int64(buf.Len()) > limit {
			release()
			return nil, func() {}, fmt.Errorf("%w: over %d bytes", ErrTooLarge, limit)
		}
		if errors.Is(err, io.EOF) {
			return buf.Bytes(), release, nil
		}
		if err != nil {
			release()
			var mbe *http.MaxBytesError
			var ne net.Error
			switch {
			case errors.As(err, &mbe):
				return nil, func() {}, fmt.Errorf("%w: over %d bytes", ErrTooLarge, mbe.Limit)
			case errors.Is(err, ErrTooLarge):
				return nil, func() {}, err
			case errors.As(err, &ne) && ne.Timeout():
				return nil, func() {}, ErrTimeout
			}
			return nil, func() {}, fmt.Errorf("read body: %w", err)
		}
	}
}

// BearerToken returns the token of an "Authorization: Bearer TOKEN" header
// value. The scheme is case-insensitive (RFC 9110); ok is false for another
// scheme or an empty token.
func BearerToken(header string) (token string, ok bool) {
	scheme, tok, found := strings.Cut(strings.TrimSpace(header), " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// BearerOK reports whether header carries want as its bearer token,
// compared in constant time. An empty want never matches.
func BearerOK(header, want string) bool {
	got, ok := BearerToken(header)
	if !ok || want == "" {
		return false
	}
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1
}
