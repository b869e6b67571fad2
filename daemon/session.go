package daemon

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Bounds of the sign-in state, all in memory (a restart signs everyone
// out, which a day-long session makes cheap).
const (
	// maxSessions bounds the signed-in browsers remembered; past it the
	// oldest session ends.
	maxSessions = 1024
	// signInFailures wrong tokens from one client within signInWindow
	// make it wait out the window (429 with Retry-After).
	signInFailures = 10
	signInWindow   = time.Minute
	// maxLimited bounds the clients the limiter remembers; when full,
	// the failures of new clients count together under one key.
	maxLimited = 4096
)

// sessions are the signed-in browsers: a random id per sign-in, held with
// the token's MAC it was made under, so signing out revokes that browser
// alone and a new token revokes all.
type sessions struct {
	mu    sync.Mutex
	byID  map[string]session
	order []string // ids, oldest first
	key   []byte   // signs the sign-out form's CSRF value
}

type session struct {
	tokenMAC string
	created  time.Time
}

func newSessions() *sessions {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	return &sessions{byID: map[string]session{}, key: key}
}

// tokenMAC ties a session to the token it was made with.
func tokenMAC(token string) string {
	mac := hmac.New(sha256.New, []byte(token))
	mac.Write([]byte(sessionLabel))
	return hex.EncodeToString(mac.Sum(nil))
}

// start makes a session for token at now and returns its id.
func (s *sessions) start(token string, now time.Time) string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.order) >= maxSessions {
		delete(s.byID, s.order[0])
		s.order = s.order[1:]
	}
	s.byID[id] = session{tokenMAC: tokenMAC(token), created: now}
	s.order = append(s.order, id)
	return id
}

// valid reports whether id is a live session of token at now.
func (s *sessions) valid(id, token string, now time.Time) bool {
	if id == "" || token == "" {
		return false
	}
	s.mu.Lock()
	se, ok := s.byID[id]
	s.mu.Unlock()
	return ok && hmac.Equal([]byte(se.tokenMAC), []byte(tokenMAC(token))) && now.Sub(se.created) < sessionMaxAge
}

// end revokes id.
func (s *sessions) end(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.byID[id]; !ok {
		return
	}
	delete(s.byID, id)
	for i, o := range s.order {
		if o == id {
			s.order = append(s.order[:i], s.order[i+1:]...)
			break
		}
	}
}

// csrf is the sign-out form's value for session id: only a page of this
// daemon, rendered for that browser, has it.
func (s *sessions) csrf(id string) string {
	if id == "" {
		return ""
	}
	mac := hmac.New(sha256.New, s.key)
	mac.Write([]byte("logout\x00" + id))
	return hex.EncodeToString(mac.Sum(nil))
}

// sessionID is the id r's session cookie holds ("" without one).
func sessionID(r *http.Request) string {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return ""
	}
	return c.Value
}

// sessionOK reports whether r carries a live session of the current token.
func (d *Daemon) sessionOK(r *http.Request, token string) bool {
	return d.sessions.valid(sessionID(r), token, d.opts.Now())
}

// limiter counts wrong tokens per client and makes one that guesses wait.
type limiter struct {
	mu      sync.Mutex
	clients map[string]*failures
}

type failures struct {
	n     int
	since time.Time
}

func newLimiter() *limiter { return &limiter{clients: map[string]*failures{}} }

// wait returns how long client must wait before its next token is
// checked (0: now).
func (l *limiter) wait(client string, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	f, ok := l.clients[l.key(client)]
	if !ok || now.Sub(f.since) >= signInWindow {
		return 0
	}
	if f.n < signInFailures {
		return 0
	}
	return f.since.Add(signInWindow).Sub(now)
}

// fail counts a wrong token from client.
func (l *limiter) fail(client string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.key(client)
	f, ok := l.clients[k]
	if !ok || now.Sub(f.since) >= signInWindow {
		if !ok && len(l.clients) >= maxLimited {
			l.prune(now)
			k = l.key(client)
		}
		f = &failures{since: now}
		l.clients[k] = f
	}
	f.n++
}

// key is client, or "" (everyone new together) when the map is full.
func (l *limiter) key(client string) string {
	if _, ok := l.clients[client]; ok || len(l.clients) < maxLimited {
		return client
	}
	return ""
}

// prune forgets the clients whose window has passed.
func (l *limiter) prune(now time.Time) {
	for k, f := range l.clients {
		if now.Sub(f.since) >= signInWindow {
			delete(l.clients, k)
		}
	}
}

// clientIP is r's remote address without its port.
func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// tokenThrottled answers 429 with Retry-After when r's client has given too
// many wrong tokens lately, and reports whether it did.
func (d *Daemon) tokenThrottled(w http.ResponseWriter, r *http.Request) bool {
	wait := d.limiter.wait(limitKey(d.Config(), r), d.opts.Now())
	if wait <= 0 {
		return false
	}
	d.stats.apiRefused.WithLabelValues(refusedSignInRate).Inc()
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int((wait+time.Second-1)/time.Second))))
	d.writeError(w, http.StatusTooManyRequests, errTooManyWrong)
	return true
}

var errTooManyWrong = errors.New("too many wrong tokens from this address; retry after the time Retry-After gives")

// tokenFailed counts a wrong token from r's client.
func (d *Daemon) tokenFailed(r *http.Request) {
	d.stats.authFailures.WithLabelValues("token").Inc()
	d.limiter.fail(limitKey(d.Config(), r), d.opts.Now())
}

// limitKey is the client the limiter counts r against: its address, or,
// from a proxy in api.trusted_proxies, the last address the proxy put in
// X-Forwarded-For (one guesser behind the proxy must not hold everyone).
func limitKey(cfg Config, r *http.Request) string {
	ip := clientIP(r)
	if !trustedProxy(cfg, ip) {
		return ip
	}
	xff := r.Header.Values("X-Forwarded-For")
	if len(xff) == 0 {
		return ip
	}
	parts := strings.Split(xff[len(xff)-1], ",")
	if last := strings.TrimSpace(parts[len(parts)-1]); net.ParseIP(last) != nil {
		return last
	}
	return ip
}

// trustedProxy reports whether address ip is in api.trusted_proxies.
func trustedProxy(cfg Config, ip string) bool {
	addr := net.ParseIP(ip)
	if addr == nil {
		return false
	}
	for _, p := range cfg.API.TrustedProxies {
		if n, ok := parseProxy(p); ok && n.Contains(addr) {
			return true
		}
	}
	return false
}

// secureRequest reports whether r reached the daemon over HTTPS: TLS here,
// or X-Forwarded-Proto: https from a proxy in api.trusted_proxies (anyone
// else could claim it), or an https api.external_url.
func secureRequest(cfg Config, r *http.Request) bool {
	if r.TLS != nil || strings.HasPrefix(strings.ToLower(cfg.API.ExternalURL), "https:") {
		return true
	}
	return strings.EqualFold(strings.TrimSpace(r.Header.Get("X-Forwarded-Proto")), "https") && trustedProxy(cfg, clientIP(r))
}

// parseProxy reads an api.trusted_proxies entry: an IP address or a CIDR.
func parseProxy(s string) (*net.IPNet, bool) {
	if _, n, err := net.ParseCIDR(s); err == nil {
		return n, true
	}
	ip := net.ParseIP(s)
	if ip == nil {
		return nil, false
	}
	bits := 8 * len(ip.To16())
	if ip.To4() != nil {
		ip, bits = ip.To4(), 32
	}
	return &net.IPNet{IP: ip, Mask: net.CIDRMask(bits, bits)}, true
}
