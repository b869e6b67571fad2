package daemon

import (
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/whyslow/whyslow/internal/httplimit"
)

// APILimits bound the daemon's HTTP API server (see internal/httplimit): a
// request's headers within 10s, the whole request within 30s, the answer
// (a triage included) within the triage timeout plus a margin, at most 256
// open connections, 64 KiB of headers.
func APILimits(cfg Config) httplimit.Limits {
	cfg = cfg.WithDefaults()
	return httplimit.Limits{
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      cfg.API.TriageTimeout + 30*time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		MaxConns:          256,
	}
}

// HTTPServer returns the API server for ln with the daemon's bounds, and the
// bounded listener to serve it on.
func (s *Stack) HTTPServer(ln net.Listener) (*http.Server, net.Listener) {
	l := APILimits(s.Daemon.Config())
	rejected := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "whyslow_api_connections_rejected_total", Help: "API connections closed on accept because the most allowed were open.",
	})
	_ = s.Registry.Register(rejected)
	return httplimit.Server(s.Handler(), l), httplimit.Listener(ln, l.MaxConns, rejected.Inc)
}
