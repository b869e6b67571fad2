package web_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/whyslow/whyslow/daemon"
	"github.com/whyslow/whyslow/daemon/demo"
	"github.com/whyslow/whyslow/incident"
	"github.com/whyslow/whyslow/notifiers"
	"github.com/whyslow/whyslow/notifiers/logsink"
	"github.com/whyslow/whyslow/notifiers/webhook"
)

// hook is a webhook receiver on loopback that keeps the payloads.
type hook struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []webhook.Payload
}

func newHook(tb testing.TB) *hook {
	h := &hook{}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p webhook.Payload
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &p); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		h.mu.Lock()
		h.got = append(h.got, p)
		h.mu.Unlock()
	}))
	tb.Cleanup(h.srv.Close)
	return h
}

func (h *hook) payloads() []webhook.Payload {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]webhook.Payload(nil), h.got...)
}

// playIncident starts the engine model's scenario with a daemon (the
// webhook and a log receiver, no NVML) and ticks until the daemon has
// notified an incident and the outbox has delivered it.
func playIncident(tb testing.TB, scenario string, replicas int, cfg daemon.Config, hk *hook) (*demo.Env, incident.Incident) {
	tb.Helper()
	off := false
	cfg.GPU.Enabled = &off
	logs := logsink.DefaultConfig()
	cfg.Receivers = []daemon.ReceiverConfig{
		{Name: "hook", Webhook: &webhook.Config{URL: notifiers.Secret(hk.srv.URL), MaxAttempts: 2}},
		{Name: "log", Log: &logs},
	}
	env, err := demo.NewEnv(demo.EnvOptions{Scenario: scenario, Seed: 1, Replicas: replicas, Config: cfg,
		Logger: slog.New(slog.DiscardHandler), LogWriter: io.Discard, Extra: daemon.StackOptions{Retry: notifiers.RetryOptions{Jitter: -1}}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = env.Close(ctx)
	})
	ctx := context.Background()
	deadline := env.Onset().Add(20 * time.Minute)
	for env.Now().Before(deadline) {
		if err := env.Tick(ctx); err != nil {
			tb.Fatal(err)
		}
		incs := env.Stack.Daemon.Incidents()
		if len(incs) > 0 && incs[0].Notified.Count > 0 && incs[0].Verdict != nil && len(incs[0].Verdict.Causes) > 0 {
			// Let the dispatcher deliver (it waits on the simulated clock).
			for i := 0; i < 500 && env.Stack.Outbox.Depth() > 0; i++ {
				time.Sleep(10 * time.Millisecond)
			}
			return env, env.Stack.Daemon.Incidents()[0]
		}
	}
	tb.Fatalf("no incident notified by %s (scenario %s)", deadline.Format(time.RFC3339), scenario)
	return nil, incident.Incident{}
}
