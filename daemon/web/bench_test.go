package web_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/whyslow/whyslow/daemon"
)

// BenchmarkIncidentPage4Replicas is GET /incidents/{id} served by a daemon
// whose engine model runs four replicas through a KV-cache-pressure
// incident: the page's range queries for the four charts (over both
// windows and their lead-ins) and its rendering. The setup (an hour of
// simulated traffic) is outside the measured loop.
func BenchmarkIncidentPage4Replicas(b *testing.B) {
	cfg := daemon.Config{Listen: "127.0.0.1:9109", ScrapeInterval: 15 * time.Second}
	env, in := playIncident(b, "kv_pressure", 4, cfg, newHook(b))
	if n := len(env.EngineURLs()); n != 4 {
		b.Fatalf("%d engine replicas, want 4", n)
	}
	h := env.Stack.Handler()
	path := "/incidents/" + url.PathEscape(in.ID)
	var size int
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `class="line line-incident"`) {
			b.Fatalf("GET %s: %d", path, rec.Code)
		}
		size = rec.Body.Len()
	}
	b.ReportMetric(float64(size), "bytes/page")
}
