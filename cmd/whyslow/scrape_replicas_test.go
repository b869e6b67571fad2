package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/whyslow/whyslow/testbed/sim"
)

// TestWhyScrapeReplicasOnOneServer samples two replicas that one server
// exposes on /replica/1/metrics and /replica/2/metrics, as `whyslow sim
// serve` does: they share host:port (the instance label) but are two
// targets, so their samples must not collide in the store ("duplicate
// sample for timestamp", exit 2).
func TestWhyScrapeReplicasOnOneServer(t *testing.T) {
	if testing.Short() {
		t.Skip("samples for 3 s; skipped with -short")
	}
	live, err := sim.NewLive(sim.Options{Scenario: "healthy", Seed: 3, Replicas: 2})
	if err != nil {
		t.Fatal(err)
	}
	live.Advance(time.Hour)
	// The model's two replicas on the paths sim serve gives replicas
	// (without the process start time it adds: a 3 s sample of a model that
	// ran an hour is then judged on lifetime ratios, as in TestWhyScrape).
	mux := http.NewServeMux()
	for i := range live.Replicas() {
		mux.Handle(fmt.Sprintf("GET /replica/%d/metrics", i+1), live.Handler(i))
	}
	// Replica 2 answers a little later, so that replica 1's samples are
	// always stored first: without a target label replica 2's then collide
	// with them on every scrape, not only when the two happen to interleave.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/replica/2/") {
			select {
			case <-time.After(200 * time.Millisecond):
			case <-r.Context().Done():
				return
			}
		}
		mux.ServeHTTP(w, r)
	}))
	defer srv.Close()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				live.Advance(100 * time.Millisecond)
			}
		}
	}()
	r := runCLI(t, "why", "--scrape", srv.URL+"/replica/1/metrics,"+srv.URL+"/replica/2/metrics", "--sample", "3s", "--output", "json")
	cancel()
	<-done
	if r.code != exitOK && r.code != exitCause {
		t.Fatalf("exit %d, want 0 or 1: %s", r.code, r.stderr)
	}
	if strings.Contains(r.stderr, "duplicate sample") {
		t.Errorf("replicas collided: %s", r.stderr)
	}
	decodeVerdict(t, r.stdout)
}
