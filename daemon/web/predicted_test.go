package web_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/whyslow/whyslow/daemon"
	"github.com/whyslow/whyslow/daemon/demo"
	"github.com/whyslow/whyslow/incident"
)

// getPredicted polls GET /api/v1/predicted for the incident id at base
// until its prediction for the current verdict is ready.
func getPredicted(t *testing.T, c *http.Client, base, id string) daemon.PredictedAnswer {
	t.Helper()
	for i := 0; i < 1200; i++ {
		resp, err := c.Get(base + "/api/v1/predicted?incident=" + url.QueryEscape(id))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var a daemon.PredictedAnswer
		if err := json.Unmarshal(b, &a); err != nil {
			t.Fatalf("GET /api/v1/predicted: %d %s: %v", resp.StatusCode, b, err)
		}
		if resp.StatusCode == http.StatusOK && a.State == "ready" {
			return a
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("the prediction never finished")
	return daemon.PredictedAnswer{}
}

// ageIncident ticks the engine model until the incident's triage window
// is the configured one, as long as the step-time fit wants (a young
// incident's windows hold too few one-minute sub-windows), and returns
// the incident as it is then.
func ageIncident(tb testing.TB, env *demo.Env, in incident.Incident) incident.Incident {
	tb.Helper()
	cfg := env.Stack.Daemon.Config()
	for env.Now().Before(in.OpenedAt.Add(cfg.Triage.Window)) {
		if err := env.Tick(context.Background()); err != nil {
			tb.Fatal(err)
		}
	}
	for _, got := range env.Stack.Daemon.Incidents() {
		if got.ID == in.ID {
			return got
		}
	}
	tb.Fatalf("incident %s is gone", in.ID)
	return in
}

// TestIncidentPagePredictions: a daemon watching the engine model through
// a KV-cache-pressure incident predicts its fixes when the incident page
// asks (the cycle computed none), and the page then shows a row per fix
// with its TTFT and inter-token bars.
func TestIncidentPagePredictions(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the engine model in -short mode")
	}
	// Loopback: the pages and the API answer without a token.
	env, in := playIncident(t, "kv_pressure", 0, daemon.Config{ScrapeInterval: 15 * time.Second, Listen: "127.0.0.1:0"}, newHook(t))
	in = ageIncident(t, env, in)
	srv := httptest.NewServer(env.Stack.Daemon.Handler())
	defer srv.Close()
	page := srv.URL + "/incidents/" + url.PathEscape(in.ID)
	get := func() string {
		t.Helper()
		resp, err := srv.Client().Get(page)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if body := get(); !strings.Contains(body, "Computing the predictions") {
		t.Fatalf("first view does not say the predictions are computing:\n%s", body)
	}
	a := getPredicted(t, srv.Client(), srv.URL, in.ID)
	p := a.Predicted
	if p == nil || p.Missing != "" || len(p.Fixes) == 0 {
		t.Fatalf("prediction %+v", p)
	}
	t.Logf("calibration %s; first fix %s: TTFT p95 %.3g s (model incident %.3g s)", p.Calibration, p.Fixes[0].Fix, p.Fixes[0].TTFTP95.Median, p.Incident.TTFTP95)
	body := get()
	if n := strings.Count(body, `<tr class="fix-row">`); n != len(p.Fixes) {
		t.Errorf("%d fix rows on the page, want %d", n, len(p.Fixes))
	}
	if n := strings.Count(body, `<svg class="whatif-bar"`); n != 2*len(p.Fixes) {
		t.Errorf("%d predicted bars, want %d", n, 2*len(p.Fixes))
	}
	if !strings.Contains(body, "<code>"+p.Fixes[0].Fix+"</code>") {
		t.Errorf("page lacks the first fix %q", p.Fixes[0].Fix)
	}
}
