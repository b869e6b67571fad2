package daemon

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/whyslow/whyslow/detect"
	"github.com/whyslow/whyslow/incident"
	"github.com/whyslow/whyslow/notifiers/alertmanager"
	"github.com/whyslow/whyslow/testbed/amtest"
	"github.com/whyslow/whyslow/testbed/fleettest"
	"github.com/whyslow/whyslow/testbed/promtest"
	"github.com/whyslow/whyslow/testbed/sim"
	"github.com/whyslow/whyslow/verdict"
)

// TestFleetAlertmanagerHA runs two fleet daemons (replicas) against one
// real Prometheus holding an engine-model incident and one real
// Alertmanager, the way Prometheus is run for high availability: the
// replicas detect the same incident and both send it; Alertmanager's
// webhook gets exactly one firing notification, a cause change updates the
// same alert (fingerprint) without a notification, and the resolve arrives
// once.
//
// Detection, the Prometheus queries and the Alertmanager path are the real
// ones; the triage is scripted (cause A, then B after a time) to force a
// cause change, which a real incident does not do on demand. The engine
// model's clock is anchored to the wall clock (Alertmanager judges
// startsAt and endsAt by it): the incident opens about ten minutes ago and
// its data ends about two minutes ago, so the replicas' whole cycle runs
// in the past; resend_interval 5m keeps an open alert's endsAt (4 × the
// interval after the cycle) in the future.
func TestFleetAlertmanagerHA(t *testing.T) {
	fleettest.SkipUnlessAvailable(t)
	amtest.SkipUnlessAvailable(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	now := time.Now().UTC().Truncate(time.Minute)
	onset, prom := recentIncident(ctx, t, now.Add(-11*time.Minute))
	rcv := amtest.NewReceiver(t)
	am := amtest.Start(ctx, t, amtest.WebhookConfig(rcv.URL, "alertname", "namespace"))

	changeAt := onset.Add(4 * time.Minute)
	scripted := func(ctx context.Context, req TriageRequest) (*verdict.Verdict, error) {
		cause := "kv_cache_pressure"
		if !req.At.Before(changeAt) {
			cause = "queue_saturation"
		}
		return &verdict.Verdict{SchemaVersion: verdict.SchemaVersion, Status: verdict.StatusAnomaly, Severity: verdict.SeverityWarning,
			Phase: verdict.PhasePrefill, Scope: verdict.Scope{Selector: req.Selector}, At: req.At,
			Causes: []verdict.Cause{{ID: cause, Rank: 1, Score: 0.9, Confidence: 0.8, Title: cause}}}, nil
	}
	cfg := Config{Source: SourceConfig{Prometheus: &PrometheusSource{URL: prom}}, Listen: "127.0.0.1:0", OTLP: OTLPDisabled(),
		Detect:    detect.DetectConfig{GroupBy: []string{"namespace", "model_name"}},
		Incidents: incident.IncidentConfig{ResolveAfter: 30 * time.Second, CauseHold: 1}}
	type replica struct {
		d      *Daemon
		sender *alertmanager.Sender
	}
	var replicas []replica
	for i := 0; i < 2; i++ {
		rc, err := RemoteClient(cfg.Source.Prometheus)
		if err != nil {
			t.Fatal(err)
		}
		s, err := alertmanager.NewSender("am", alertmanager.Config{URL: am, ResendInterval: 5 * time.Minute}, nil, prometheus.NewRegistry(), quietLogger())
		if err != nil {
			t.Fatal(err)
		}
		m := CountQueries(rc)
		d, err := New(Options{Config: cfg, Metrics: m, Scraper: &PrometheusProbe{Metrics: m, Name: "prometheus"}, Triage: scripted,
			Outbox: &memOutbox{}, AlertSenders: []AlertSender{s}, OwnHistory: true, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		replicas = append(replicas, replica{d, s})
	}
	// tickUntil runs both replicas' cycles every 15 s up to end (the
	// replicas concurrently, as two pods would), each followed by its
	// Alertmanager send.
	at := onset.Add(-time.Minute)
	tickUntil := func(end time.Time) {
		t.Helper()
		for ; !at.After(end); at = at.Add(15 * time.Second) {
			var wg sync.WaitGroup
			errs := make([]error, len(replicas))
			for i, r := range replicas {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if errs[i] = r.d.Tick(ctx, at); errs[i] == nil {
						errs[i] = r.sender.Flush(ctx)
					}
				}()
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					t.Fatalf("cycle at %s: %v", at.Format(time.RFC3339), err)
				}
			}
		}
	}
	open := func(r replica) []incident.Incident {
		var out []incident.Incident
		for _, in := range r.d.Incidents() {
			if in.Status == incident.IncidentOpen {
				out = append(out, in)
			}
		}
		return out
	}

	tickUntil(changeAt.Add(-15 * time.Second))
	for i, r := range replicas {
		if n := len(open(r)); n != 1 {
			t.Fatalf("replica %d has %d open incidents before the cause change, want 1", i, n)
		}
	}
	notes := rcv.WaitNotifications(t, 1, 20*time.Second)
	first := notes[0]
	if first.Status != "firing" || len(first.Alerts) != 1 || first.Alerts[0].Annotations["cause"] != "kv_cache_pressure" ||
		first.Alerts[0].Labels["namespace"] != "chat" || first.Alerts[0].Labels["alertname"] != alertmanager.AlertName {
		t.Fatalf("first notification: %s", amtest.Dump(first))
	}
	fp := first.Alerts[0].Fingerprint

	tickUntil(changeAt.Add(time.Minute))
	amtest.WaitFor(t, 10*time.Second, "the new cause on the same alert", func() bool {
		got := amtest.Alerts(t, am)
		if len(got) != 1 {
			t.Fatalf("alertmanager holds %d alerts after the cause change, want 1: %s", len(got), amtest.Dump(got))
		}
		return got[0].Fingerprint == fp && got[0].Annotations["cause"] == "queue_saturation"
	})
	rcv.Quiet(t, 1, 3*time.Second) // three group intervals: a notification would have come

	// The data ends 8 minutes after the onset; the scope's series go,
	// and both replicas resolve the incident.
	tickUntil(now.Add(-time.Minute))
	for i, r := range replicas {
		if n := len(open(r)); n != 0 {
			t.Fatalf("replica %d still has %d open incidents at the end: %s", i, n, amtest.Dump(open(r)))
		}
	}
	notes = rcv.WaitNotifications(t, 2, 20*time.Second)
	if n := notes[1]; n.Status != "resolved" || len(n.Alerts) != 1 || n.Alerts[0].Fingerprint != fp {
		t.Fatalf("second notification: %s", amtest.Dump(n))
	}
	rcv.Quiet(t, 2, 3*time.Second)
}

// TestFleetStack wires a fleet daemon the way `whyslow serve --prometheus`
// does (NewStack with a Prometheus source and an Alertmanager receiver)
// against a real Prometheus holding one engine-model incident and a real
// Alertmanager: the stack probes and reads the Prometheus, opens the
// incident, serves its metrics, and the alert reaches Alertmanager.
func TestFleetStack(t *testing.T) {
	fleettest.SkipUnlessAvailable(t)
	amtest.SkipUnlessAvailable(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	onset, prom := recentIncident(ctx, t, time.Now().UTC().Truncate(time.Minute).Add(-5*time.Minute))
	rcv := amtest.NewReceiver(t)
	am := amtest.Start(ctx, t, amtest.WebhookConfig(rcv.URL, "alertname", "namespace"))

	cfg := Config{Source: SourceConfig{Prometheus: &PrometheusSource{URL: prom}}, Listen: "127.0.0.1:0", OTLP: OTLPDisabled(),
		Detect:    detect.DetectConfig{GroupBy: []string{"namespace", "model_name"}},
		Receivers: []ReceiverConfig{{Name: "am", Alertmanager: &alertmanager.Config{URL: am}}}}
	stack, err := NewStack(StackOptions{Config: cfg, Logger: quietLogger(), LogWriter: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	defer stack.Close(context.Background())
	srv := httptest.NewServer(stack.Handler())
	defer srv.Close()
	for at := onset.Add(-time.Minute); !at.After(onset.Add(3 * time.Minute)); at = at.Add(15 * time.Second) {
		if err := stack.Daemon.Tick(ctx, at); err != nil {
			t.Fatal(err)
		}
	}
	var open []incident.Incident
	for _, in := range stack.Daemon.Incidents() {
		if in.Status == incident.IncidentOpen {
			open = append(open, in)
		}
	}
	if len(open) != 1 || open[0].Scope.Labels["namespace"] != "chat" || open[0].TopCause != "kv_cache_pressure" {
		t.Fatalf("open incidents: %s", amtest.Dump(open))
	}
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"whyslow_fleet_scopes 1", `whyslow_incident_open{cause="kv_cache_pressure",incident_id=`, `model_name="`, "whyslow_cycle_queries"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if resp, err := http.Get(srv.URL + "/readyz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("readyz: %v %v", resp, err)
	}
	// The senders run on their own goroutine; the alert arrives.
	notes := rcv.WaitNotifications(t, 1, 30*time.Second)
	if a := notes[0].Alerts; len(a) != 1 || a[0].Annotations["cause"] != "kv_cache_pressure" || a[0].Labels["namespace"] != "chat" {
		t.Errorf("notification: %s", amtest.Dump(notes[0]))
	}
}

// recentIncident backfills a real Prometheus with an engine-model
// kv_pressure incident (namespace chat, one replica) whose onset is at
// onset, on the wall clock, and returns the onset and the Prometheus.
func recentIncident(ctx context.Context, t *testing.T, onset time.Time) (time.Time, string) {
	t.Helper()
	// sim's onset is 75 minutes after its start; its data ends 8 after.
	fleet, err := fleettest.Build(ctx, t.TempDir(), []fleettest.Scope{{Namespace: "chat",
		Options: sim.Options{Scenario: "kv_pressure", Seed: 1, Start: onset.Add(-75 * time.Minute), Replicas: 1, GPUSeries: "none"}}})
	if err != nil {
		t.Fatal(err)
	}
	return fleet.Scopes[0].Truth.Onset, promtest.StartWithData(ctx, t, fleet.DataDir)
}
