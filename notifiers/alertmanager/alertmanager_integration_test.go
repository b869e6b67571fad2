package alertmanager

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/whyslow/whyslow/incident"
	"github.com/whyslow/whyslow/testbed/amtest"
)

// TestAlertmanagerIntegration sends an incident's life to a real
// Alertmanager routing to a webhook: one firing notification when it opens,
// a cause change that updates the same alert (annotations) without a
// notification, and exactly one resolved notification.
func TestAlertmanagerIntegration(t *testing.T) {
	amtest.SkipUnlessAvailable(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rcv := amtest.NewReceiver(t)
	base := amtest.Start(ctx, t, amtest.WebhookConfig(rcv.URL, "alertname", "model_name"))

	// resend_interval 1s: a later Sync re-sends even an unchanged set.
	reg := prometheus.NewRegistry()
	s, err := NewSender("am", Config{URL: base, ResendInterval: time.Second}, nil, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	syncAt := func(in incident.Incident, at time.Time) {
		t.Helper()
		s.Sync([]incident.Incident{in}, at, verdictLink)
		if err := s.Flush(ctx); err != nil {
			t.Fatalf("send to alertmanager: %v", err)
		}
	}
	sync := func(in incident.Incident) { t.Helper(); syncAt(in, time.Now()) }
	in := openIncident()
	in.OpenedAt = time.Now().Add(-time.Minute).Truncate(time.Second)
	fp := Alerts([]incident.Incident{in}, time.Now(), nil, Config{})[0].Fingerprint()

	sync(in)
	notes := rcv.WaitNotifications(t, 1, 20*time.Second)
	if n := notes[0]; n.Status != "firing" || len(n.Alerts) != 1 || n.Alerts[0].Fingerprint != fp ||
		n.Alerts[0].Labels["alertname"] != AlertName || n.Alerts[0].Labels["severity"] != "critical" ||
		n.Alerts[0].Annotations["cause"] != "queue_saturation" || !n.Alerts[0].StartsAt.Equal(in.OpenedAt) {
		t.Fatalf("first notification = %s", amtest.Dump(n))
	}

	// A new top cause: the same alert (fingerprint) with new annotations.
	in.TopCause = in.Verdict.Causes[1].ID
	sync(in)
	amtest.WaitFor(t, 10*time.Second, "the cause change in GET /api/v2/alerts", func() bool {
		got := amtest.Alerts(t, base)
		if len(got) > 1 {
			t.Fatalf("alertmanager holds %d alerts after a cause change, want 1: %s", len(got), amtest.Dump(got))
		}
		return len(got) == 1 && got[0].Fingerprint == fp && got[0].Annotations["cause"] == "chunked_prefill_mismatch" &&
			got[0].Annotations["confidence"] == "0.31"
	})
	// Let three group intervals (1 s) flush the changed alert; a
	// notification for it would come within them.
	rcv.Quiet(t, 1, 3*time.Second)

	in.Status, in.ResolvedAt = incident.IncidentResolved, time.Now()
	sync(in)
	notes = rcv.WaitNotifications(t, 2, 20*time.Second)
	if n := notes[1]; n.Status != "resolved" || len(n.Alerts) != 1 || n.Alerts[0].Fingerprint != fp ||
		n.Alerts[0].Annotations["cause"] != "chunked_prefill_mismatch" {
		t.Fatalf("second notification = %s", amtest.Dump(n))
	}
	if got := amtest.Alerts(t, base); len(got) != 0 {
		t.Errorf("alertmanager still holds %s", amtest.Dump(got))
	}
	// The resolved alert keeps going out (resolved_retention): a Sync one
	// resend_interval on re-sends it, and Alertmanager does not notify it
	// again.
	sent := testutil.ToFloat64(s.m.sends.WithLabelValues("am", resultSuccess))
	syncAt(in, time.Now().Add(time.Second))
	if got := testutil.ToFloat64(s.m.sends.WithLabelValues("am", resultSuccess)); got != sent+1 {
		t.Fatalf("successful sends %v, want %v: the resolved alert was not re-sent", got, sent+1)
	}
	rcv.Quiet(t, 2, 3*time.Second)
}
