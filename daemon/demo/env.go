// Package demo runs the whole sidecar loop against the engine model on
// simulated time: the model serves /metrics on loopback, the daemon scrapes,
// detects, triages and notifies on a SimClock. `whyslow demo --live` uses
// Play; the end-to-end tests use Env. It lives apart from package daemon so
// that the production daemon never imports the engine model.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/whyslow/whyslow/daemon"
	"github.com/whyslow/whyslow/testbed/sim"
)

// EnvOptions configure an Env.
type EnvOptions struct {
	Scenario string
	Seed     int64
	// Replicas overrides the scenario's drawn number of engine replicas
	// (0: the drawn one).
	Replicas int
	// Config is the daemon configuration; EngineURLs are set by the Env.
	Config daemon.Config
	// LogWriter receives log-receiver output.
	LogWriter io.Writer
	Logger    *slog.Logger
	// SidecarAfter starts the daemon this long after the engine model (a
	// sidecar deployed next to a running engine: the store holds nothing
	// of what came before). Zero starts both together.
	SidecarAfter time.Duration
	// Extra holds further stack options (Retry, HTTPClient); its Config,
	// Clock, LogWriter and Logger are set by the Env.
	Extra daemon.StackOptions
}

// Env is the engine model served on loopback plus a daemon watching it.
type Env struct {
	Clock  *daemon.SimClock
	Stack  *daemon.Stack
	Step   time.Duration
	live   atomic.Pointer[sim.Live]
	srvs   []*http.Server
	urls   []string
	onset  time.Time
	ticks  int
	closed bool
}

// NewEnv starts the model and the daemon. The daemon's scrape interval is
// the simulation step.
func NewEnv(o EnvOptions) (*Env, error) {
	live, err := sim.NewLive(sim.Options{Scenario: o.Scenario, Seed: o.Seed, Replicas: o.Replicas, ScrapeInterval: o.Config.WithDefaults().ScrapeInterval})
	if err != nil {
		return nil, err
	}
	if o.SidecarAfter > 0 {
		live.Advance(o.SidecarAfter)
	}
	e := &Env{Clock: daemon.NewSimClock(live.Now()), Step: o.Config.WithDefaults().ScrapeInterval, onset: live.Onset()}
	e.live.Store(live)
	// One listener per replica, as each engine pod has its own address:
	// the scraper tells targets apart by instance (host:port).
	for i := 0; i < live.Replicas(); i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			e.closeServers()
			return nil, fmt.Errorf("demo engine: %w", err)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
			e.live.Load().Handler(i).ServeHTTP(w, r)
		})
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		e.srvs = append(e.srvs, srv)
		e.urls = append(e.urls, fmt.Sprintf("http://%s/metrics", ln.Addr()))
		go func() { _ = srv.Serve(ln) }()
	}
	cfg := o.Config
	if cfg.OTLP.HTTP == nil && cfg.OTLP.GRPC == nil {
		// Tests and the demo run several daemons: no fixed trace ports.
		cfg.OTLP = daemon.OTLPDisabled()
	}
	cfg.EngineURLs = append([]string(nil), e.urls...)
	so := o.Extra
	so.Config, so.Clock, so.LogWriter, so.Logger = cfg, e.Clock, o.LogWriter, o.Logger
	e.Stack, err = daemon.NewStack(so)
	if err != nil {
		e.closeServers()
		return nil, err
	}
	return e, nil
}

// Onset is when the scenario's cause starts.
func (e *Env) Onset() time.Time { return e.onset }

// Now is the simulated time.
func (e *Env) Now() time.Time { return e.Clock.Now() }

// Ticks is how many daemon cycles ran.
func (e *Env) Ticks() int { return e.ticks }

// Tick advances the model one step and runs one daemon cycle.
func (e *Env) Tick(ctx context.Context) error {
	l := e.live.Load()
	l.Advance(e.Step)
	e.Clock.Set(l.Now())
	e.ticks++
	return e.Stack.Daemon.Tick(ctx, e.Clock.Now())
}

// Fix replaces the engine by a healthy one started now, like a restart with
// the fix applied: the incident's signal ends.
func (e *Env) Fix(seed int64) error {
	old := e.live.Load()
	l, err := sim.NewLive(sim.Options{Scenario: "healthy", Seed: seed, Replicas: old.Replicas(), Start: e.Clock.Now(), ScrapeInterval: e.Step})
	if err != nil {
		return err
	}
	e.live.Store(l)
	return nil
}

// Close stops the daemon (flushing the outbox until ctx ends) and the model.
func (e *Env) Close(ctx context.Context) error {
	if e.closed {
		return nil
	}
	e.closed = true
	err := e.Stack.Close(ctx)
	return errors.Join(err, e.closeServers())
}

// EngineURLs are the replicas' /metrics URLs.
func (e *Env) EngineURLs() []string { return append([]string(nil), e.urls...) }

func (e *Env) closeServers() error {
	var errs []error
	for _, srv := range e.srvs {
		errs = append(errs, srv.Close())
	}
	return errors.Join(errs...)
}
