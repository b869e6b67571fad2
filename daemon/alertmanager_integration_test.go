package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/whyslow/whyslow/incident"
	"github.com/whyslow/whyslow/testbed/amtest"
)

// TestAlertmanagerIntegration starts a real Alertmanager that routes to the
// daemon's /api/v1/alerts: a pushed alert is triaged into an incident, and
// its resolve closes the incident.
func TestAlertmanagerIntegration(t *testing.T) {
	amtest.SkipUnlessAvailable(t)
	cfg := testConfig()
	cfg.API.Token = "am-token"
	h := newHarness(t, cfg)
	h.ticks(t, 2)
	h.tri.cause = "prefill_contention"

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	amURL := amtest.Start(ctx, t, fmt.Sprintf(`route:
  receiver: whyslow
  group_by: [alertname, model_name]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: whyslow
    webhook_configs:
      - url: %s/api/v1/alerts
        send_resolved: true
        http_config:
          authorization:
            credentials: am-token
`, h.srv.URL))

	push := func(endsAt time.Time) {
		t.Helper()
		body, _ := json.Marshal([]map[string]any{{
			"labels":      map[string]string{"alertname": "VLLMHighTTFT", "model_name": "m", "severity": "warning"},
			"annotations": map[string]string{"summary": "TTFT p95 above SLO"},
			"startsAt":    startsAt.Format(time.RFC3339),
			"endsAt":      endsAt.Format(time.RFC3339),
		}})
		resp, err := http.Post(amURL+"/api/v2/alerts", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("push alert: status %d", resp.StatusCode)
		}
	}
	push(time.Now().Add(time.Hour))
	var in incident.Incident
	waitFor(t, 2*time.Minute, "incident opened from the alert", func() bool {
		incs := h.d.Incidents()
		if len(incs) == 1 && incs[0].Status == incident.IncidentOpen && incs[0].Verdict != nil {
			in = incs[0]
			return true
		}
		return false
	})
	if in.Key != `model_name="m"` || in.TopCause != "prefill_contention" || len(in.Alerts) != 1 {
		t.Fatalf("incident = %+v", in)
	}
	push(time.Now().Add(-time.Second))
	waitFor(t, 2*time.Minute, "incident resolved by the alert's resolve", func() bool {
		incs := h.d.Incidents()
		return len(incs) == 1 && incs[0].Status == incident.IncidentResolved
	})
	if got := h.ob.kinds(); got != "open:prefill_contention resolve:prefill_contention" {
		t.Errorf("notifications: %s", got)
	}
	if body := h.get(t, "/metrics", "", http.StatusOK); !strings.Contains(body, `whyslow_alertmanager_alerts_total{result="processed",status="resolved"} 1`) {
		t.Errorf("alert metrics missing")
	}
}

var startsAt = time.Now().Add(-time.Minute).UTC().Truncate(time.Second)

func waitFor(t *testing.T, limit time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if ok() {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}
