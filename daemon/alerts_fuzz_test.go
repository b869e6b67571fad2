package daemon

import (
	"testing"
	"time"
)

// FuzzParseAlertmanager: any body either parses into a valid payload or
// gives an error; it never panics.
func FuzzParseAlertmanager(f *testing.F) {
	f.Add([]byte(alertBody("firing", "fp1", map[string]string{"alertname": "A", "model_name": "m"})))
	f.Add([]byte(`{"version":"4","status":"resolved","alerts":[{"status":"resolved","labels":{"a":"b"},"startsAt":"2023-11-14T22:13:20Z","fingerprint":"x"}]}`))
	f.Add([]byte(`{"version":4}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := ParseAlertmanager(body)
		if err != nil {
			return
		}
		for _, a := range p.Alerts {
			if a.Fingerprint == "" || a.StartsAt.IsZero() || len(a.Labels) == 0 {
				t.Fatalf("accepted an invalid alert: %+v", a)
			}
			AlertScope(a.Labels, DefaultScopeLabels, "")
		}
	})
}

// FuzzParseTriageBody never panics and never accepts a window longer than the baseline.
func FuzzParseTriageBody(f *testing.F) {
	f.Add([]byte(`{"selector":"model_name=\"m\"","at":"2023-11-14T22:13:20Z","window":"5m","baseline":"1h"}`))
	f.Add([]byte(`{"window":"2h"}`))
	f.Add([]byte(``))
	cfg := Config{}.WithDefaults()
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := ParseTriageBody(body, cfg, time.Unix(1700000000, 0))
		if err == nil && req.Baseline < req.Window {
			t.Fatalf("accepted baseline %s < window %s", req.Baseline, req.Window)
		}
	})
}
