package daemon

import (
	"errors"
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// Reasons of whyslow_api_refused_total.
const (
	refusedHost        = "host"
	refusedOrigin      = "origin"
	refusedContentType = "content_type"
	refusedSignInRate  = "sign_in_rate"
)

// openPaths answer whatever the Host: read-only, unauthenticated anyway,
// and the kubelet or Prometheus may name the daemon by a DNS name.
var openPaths = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true}

// guardSite refuses what another site can make a browser send:
//
//   - while the API answers without a token (loopback or api.insecure), a
//     Host that is not this daemon's (DNS rebinding: evil.example resolved to
//     127.0.0.1 would read and write everything) is a 421, on every path
//     but /healthz, /readyz and /metrics. With a token the check is not
//     needed (the browser holds no credential for a foreign name) and would
//     only break Service and ingress names;
//   - a write (any method but GET, HEAD, OPTIONS) from another site
//     (originAllowed) is a 403: cross-site form posts; curl and
//     Alertmanager send no Origin.
func (d *Daemon) guardSite(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cfg := d.Config()
		if mode, _ := APIAuth(cfg); (mode == AuthLoopback || mode == AuthInsecure) && !openPaths[r.URL.Path] && !hostAllowed(cfg, r.Host) {
			d.stats.apiRefused.WithLabelValues(refusedHost).Inc()
			d.writeError(w, http.StatusMisdirectedRequest, fmt.Errorf("host %q is not this daemon's: without api.token only an IP address, "+
				"localhost, the listen host or the host of api.external_url is answered (a defence against DNS rebinding)", truncate(r.Host, 256)))
			return
		}
		if !safeMethod(r.Method) && !originAllowed(cfg, r) {
			d.stats.apiRefused.WithLabelValues(refusedOrigin).Inc()
			d.writeError(w, http.StatusForbidden, fmt.Errorf("origin %q (Sec-Fetch-Site %q) is another site: writes are taken from this site, "+
				"api.external_url or clients that send no Origin", truncate(r.Header.Get("Origin"), 256), truncate(r.Header.Get("Sec-Fetch-Site"), 32)))
			return
		}
		h.ServeHTTP(w, r)
	})
}

func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// hostAllowed reports whether a Host header names this daemon: an IP
// address (a browser sends one only when the page's own URL has it),
// localhost, the listen address's host or api.external_url's host.
func hostAllowed(cfg Config, host string) bool {
	name := hostName(host)
	if name == "" {
		return false
	}
	if net.ParseIP(name) != nil || name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return true
	}
	if lh, _, err := net.SplitHostPort(cfg.Listen); err == nil && strings.EqualFold(strings.TrimSuffix(lh, "."), name) {
		return true
	}
	if u, err := url.Parse(cfg.API.ExternalURL); err == nil && cfg.API.ExternalURL != "" && hostName(u.Host) == name {
		return true
	}
	return false
}

// hostName is host without port, brackets or trailing dot, lower case.
func hostName(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
}

// originAllowed reports whether a write r comes from this site. A browser
// says so in Sec-Fetch-Site (same-origin; none: typed or bookmarked);
// one too old for it, in Origin: the request's own Host or
// api.external_url's scheme and host. Neither header: not a browser
// (curl, Alertmanager). The pages send no referrer, so their own forms
// carry Origin: null, which only Sec-Fetch-Site can vouch for.
func originAllowed(cfg Config, r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		return site == "same-origin" || site == "none"
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	o, err := url.Parse(origin)
	if err != nil || o.Host == "" {
		return false // "null": a sandboxed frame, a data: URL
	}
	if strings.EqualFold(o.Host, r.Host) {
		return true
	}
	u, err := url.Parse(cfg.API.ExternalURL)
	return err == nil && cfg.API.ExternalURL != "" && strings.EqualFold(u.Scheme, o.Scheme) && strings.EqualFold(u.Host, o.Host)
}

var errNotJSON = errors.New("content type must be application/json (a browser's cross-site form can send text/plain, never JSON)")

// requireJSON refuses an API write whose body is not declared JSON: 415.
// Another site's form or fetch without a preflight can only send
// text/plain, form-urlencoded or multipart.
func (d *Daemon) requireJSON(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !safeMethod(r.Method) {
			mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
			if err != nil || mt != "application/json" {
				d.stats.apiRefused.WithLabelValues(refusedContentType).Inc()
				d.writeError(w, http.StatusUnsupportedMediaType, errNotJSON)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}
