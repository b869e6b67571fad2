package daemon

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/whyslow/whyslow/internal/httplimit"
)

// AuthMode says how /api/* (and /debug/pprof/) is protected.
type AuthMode int

// Auth modes.
const (
	// AuthToken requires api.token as a bearer token.
	AuthToken AuthMode = iota
	// AuthLoopback serves without a token on a loopback-only address.
	AuthLoopback
	// AuthInsecure serves without a token on any address (api.insecure).
	AuthInsecure
	// AuthLocked refuses every request: no token and a non-loopback
	// address without api.insecure. Authentication fails closed.
	AuthLocked
)

// String returns the mode as the start-up line and check config say it.
func (m AuthMode) String() string {
	switch m {
	case AuthToken:
		return "bearer token"
	case AuthLoopback:
		return "none (loopback only)"
	case AuthInsecure:
		return "none (api.insecure)"
	case AuthLocked:
		return "locked (no api.token)"
	}
	return fmt.Sprintf("auth_mode(%d)", int(m))
}

// APIAuth returns how cfg protects /api/*, and a warning to show at start-up
// and in check config when it is not a token ("" otherwise).
func APIAuth(cfg Config) (AuthMode, string) {
	cfg = cfg.WithDefaults()
	switch {
	case cfg.API.Token != "":
		return AuthToken, ""
	case LoopbackOnly(cfg.Listen):
		return AuthLoopback, ""
	case cfg.API.Insecure:
		return AuthInsecure, fmt.Sprintf("api.insecure is set: /api/* on %s answers anyone who can reach it, without a token", cfg.Listen)
	}
	return AuthLocked, fmt.Sprintf("api.token is empty and listen %q is not loopback-only: /api/* refuses every request "+
		"(set api.token, listen on 127.0.0.1, or set api.insecure: true); /metrics, /healthz and /readyz stay open", cfg.Listen)
}

// OTLPAuthWarning returns a warning when an OTLP receiver listens beyond
// loopback without requiring the token ("" otherwise).
func OTLPAuthWarning(cfg Config) string {
	cfg = cfg.WithDefaults()
	if cfg.OTLP.RequireToken {
		return ""
	}
	var open []string
	for _, a := range []string{*cfg.OTLP.HTTP, *cfg.OTLP.GRPC} {
		if a != "" && !LoopbackOnly(a) {
			open = append(open, a)
		}
	}
	if len(open) == 0 {
		return ""
	}
	return fmt.Sprintf("OTLP receivers on %s accept spans from anyone who can reach them "+
		"(set otlp.require_token: true, or listen on 127.0.0.1)", strings.Join(open, " and "))
}

// LoopbackOnly reports whether a listen address binds loopback only
// (127.0.0.0/8, ::1, localhost). An empty host ("":9109") is every
// interface.
func LoopbackOnly(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

var errLocked = errors.New("no api.token is configured and the API listens beyond loopback: " +
	"every /api/* request is refused (set api.token, or api.insecure: true)")

// bearer checks r's Authorization header against api.token: ok when it
// holds the token. A wrong one counts against the client (session.go);
// a client past the limit is answered 429 here (answered true), before
// its token is looked at. No header is not ok, and not a failure.
func (d *Daemon) bearer(w http.ResponseWriter, r *http.Request, cfg Config) (ok, answered bool) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return false, false
	}
	if d.tokenThrottled(w, r) {
		return false, true
	}
	if !httplimit.BearerOK(h, cfg.API.Token) {
		d.limiter.fail(limitKey(cfg, r), d.opts.Now())
		return false, false
	}
	return true, false
}

// authorize guards next with the configured authentication (see APIAuth).
// The bearer scheme is matched case-insensitively; the token is compared
// in constant time. A browser signed in to the pages (their session
// cookie) may also read: GET and HEAD, so a page's link to the verdict
// JSON opens, while writes (triage, alerts) still need the bearer token.
func (d *Daemon) authorize(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cfg := d.Config()
		mode, _ := APIAuth(cfg)
		switch mode {
		case AuthLocked:
			d.stats.authFailures.WithLabelValues("locked").Inc()
			d.writeError(w, http.StatusForbidden, errLocked)
			return
		case AuthToken:
			read := r.Method == http.MethodGet || r.Method == http.MethodHead
			ok, answered := d.bearer(w, r, cfg)
			if answered {
				return
			}
			if !ok && !(read && d.sessionOK(r, cfg.API.Token)) {
				d.stats.authFailures.WithLabelValues("token").Inc()
				w.Header().Set("WWW-Authenticate", `Bearer realm="whyslow"`)
				d.writeError(w, http.StatusUnauthorized, errors.New("missing or wrong bearer token"))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}
