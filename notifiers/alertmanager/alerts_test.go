package alertmanager

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/whyslow/whyslow/incident"
	"github.com/whyslow/whyslow/notifiers/notifytest"
	"github.com/whyslow/whyslow/notifiers/render"
	"github.com/whyslow/whyslow/verdict"
)

var t0 = time.Unix(1700000000, 0).UTC()

// openIncident is an open incident of the sample anomaly's scope, opened
// 10 minutes before t0, triaged with the sample verdict.
func openIncident() incident.Incident {
	v := notifytest.Anomaly()
	return incident.Incident{
		ID:       `model_name="m",namespace="inference"@1699999400`,
		Key:      `model_name="m",namespace="inference"`,
		Scope:    verdict.Scope{Selector: `model_name="m",namespace="inference"`, Labels: map[string]string{"model_name": "m", "namespace": "inference"}},
		Status:   incident.IncidentOpen,
		Severity: verdict.SeverityCritical,
		TopCause: v.Causes[0].ID,
		OpenedAt: t0.Add(-10 * time.Minute),
		Verdict:  v,
	}
}

func verdictLink(in incident.Incident) string { return "http://whyslow.example/incidents/" + in.Key }

func TestAlertsPayload(t *testing.T) {
	in := openIncident()
	cfg := Config{URL: "http://am:9093", Labels: map[string]string{"cluster": "prod", "namespace": "overridden"}}
	got := Alerts([]incident.Incident{in}, t0, verdictLink, cfg)
	if len(got) != 1 {
		t.Fatalf("alerts = %d, want 1", len(got))
	}
	a := got[0]
	wantLabels := map[string]string{
		"alertname": "WhyslowVerdict", "severity": "critical", "cluster": "prod",
		// The scope's own labels win over configured ones.
		"namespace": "inference", "model_name": "m",
	}
	if !reflect.DeepEqual(a.Labels, wantLabels) {
		t.Errorf("labels = %v, want %v", a.Labels, wantLabels)
	}
	c := in.Verdict.Causes[0]
	want := map[string]string{
		"cause":       "queue_saturation",
		"confidence":  "0.83",
		"summary":     render.Summary(in.Verdict),
		"description": c.Title + "\n" + render.ChainText(c) + "\n- " + c.Evidence[0].Text + "\n- " + c.Evidence[1].Text,
		"fix":         c.Remediation[0] + "\n" + c.Remediation[1],
		"phase":       "prefill",
		"verdict_url": verdictLink(in),
		"incident_id": in.ID,
	}
	if !reflect.DeepEqual(a.Annotations, want) {
		t.Errorf("annotations:\n got %q\nwant %q", a.Annotations, want)
	}
	if strings.Contains(a.Annotations["summary"], "\n") {
		t.Errorf("summary is not one line: %q", a.Annotations["summary"])
	}
	if !a.StartsAt.Equal(in.OpenedAt) || !a.EndsAt.Equal(t0.Add(4*time.Minute)) || a.GeneratorURL != verdictLink(in) {
		t.Errorf("startsAt %s endsAt %s generatorURL %q", a.StartsAt, a.EndsAt, a.GeneratorURL)
	}

	// The JSON is Alertmanager's postableAlert.
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	var raw []map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range raw[0] {
		keys = append(keys, k)
	}
	if len(keys) != 5 || raw[0]["labels"] == nil || raw[0]["annotations"] == nil || raw[0]["startsAt"] == nil ||
		raw[0]["endsAt"] == nil || raw[0]["generatorURL"] == nil {
		t.Errorf("JSON keys = %v, want labels, annotations, startsAt, endsAt, generatorURL", keys)
	}
	if string(raw[0]["endsAt"]) != `"2023-11-14T22:17:20Z"` {
		t.Errorf("endsAt JSON = %s", raw[0]["endsAt"])
	}
}

func TestAlertsEndsAt(t *testing.T) {
	cfg := Config{URL: "http://am:9093", ResendInterval: 30 * time.Second, ResolvedRetention: 10 * time.Minute}
	resolved := func(ago time.Duration) incident.Incident {
		in := openIncident()
		in.Status, in.ResolvedAt = incident.IncidentResolved, t0.Add(-ago)
		return in
	}
	tests := []struct {
		name string
		in   incident.Incident
		want time.Time // zero: no alert
	}{
		{"open: four resend intervals ahead", openIncident(), t0.Add(2 * time.Minute)},
		{"resolved just now", resolved(0), t0},
		{"resolved within retention", resolved(9 * time.Minute), t0.Add(-9 * time.Minute)},
		{"resolved at the retention's edge", resolved(10 * time.Minute), t0.Add(-10 * time.Minute)},
		{"resolved past retention", resolved(10*time.Minute + time.Second), time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Alerts([]incident.Incident{tt.in}, t0, nil, cfg)
			if tt.want.IsZero() {
				if len(got) != 0 {
					t.Fatalf("alerts = %+v, want none", got)
				}
				return
			}
			if len(got) != 1 || !got[0].EndsAt.Equal(tt.want) {
				t.Fatalf("alerts = %+v, want one ending %s", got, tt.want)
			}
			if !got[0].StartsAt.Equal(tt.in.OpenedAt) {
				t.Errorf("startsAt = %s, want the open time %s", got[0].StartsAt, tt.in.OpenedAt)
			}
		})
	}
}

func TestAlertsSeverityAndEmptyFields(t *testing.T) {
	in := openIncident()
	in.Severity = verdict.SeverityNone
	in.Verdict, in.TopCause = nil, ""
	in.Triggers = []string{"ttft_p95_ratio"}
	in.Scope.Labels["pod"] = "" // an empty label is no label
	got := Alerts([]incident.Incident{in}, t0, func(incident.Incident) string { return "" }, Config{URL: "http://am"})
	a := got[0]
	if a.Labels["severity"] != "warning" {
		t.Errorf("severity = %q, want warning for none", a.Labels["severity"])
	}
	if _, ok := a.Labels["pod"]; ok {
		t.Errorf("empty scope label kept: %v", a.Labels)
	}
	for _, k := range []string{"verdict_url", "cause", "confidence", "description", "fix", "phase"} {
		if v, ok := a.Annotations[k]; ok {
			t.Errorf("annotation %s = %q, want it left out", k, v)
		}
	}
	if a.GeneratorURL != "" {
		t.Errorf("generatorURL = %q, want none", a.GeneratorURL)
	}
	if s := a.Annotations["summary"]; !strings.Contains(s, "triage pending") || !strings.Contains(s, "ttft_p95_ratio") {
		t.Errorf("summary = %q", s)
	}
}

// The cause is an annotation: a new top cause keeps the fingerprint, a new
// severity does not.
func TestAlertsIdentity(t *testing.T) {
	in := openIncident()
	before := Alerts([]incident.Incident{in}, t0, nil, Config{URL: "http://am"})[0]
	in.TopCause = in.Verdict.Causes[1].ID
	after := Alerts([]incident.Incident{in}, t0, nil, Config{URL: "http://am"})[0]
	if before.Fingerprint() != after.Fingerprint() {
		t.Errorf("cause change changed the fingerprint")
	}
	if after.Annotations["cause"] != "chunked_prefill_mismatch" || after.Annotations["confidence"] != "0.31" {
		t.Errorf("annotations after the cause change: %v", after.Annotations)
	}
	in.Severity = verdict.SeverityWarning
	if Alerts([]incident.Incident{in}, t0, nil, Config{URL: "http://am"})[0].Fingerprint() == before.Fingerprint() {
		t.Errorf("severity change kept the fingerprint")
	}
}

// A scope that resolved and opened again has two incidents with one label
// set: Alertmanager gets one alert, the open one.
func TestAlertsOneAlertPerLabelSet(t *testing.T) {
	old := openIncident()
	old.Status, old.ResolvedAt = incident.IncidentResolved, t0.Add(-2*time.Minute)
	old.OpenedAt = t0.Add(-time.Hour)
	cur := openIncident()
	cur.OpenedAt = t0.Add(-time.Minute)
	for _, order := range [][]incident.Incident{{old, cur}, {cur, old}} {
		got := Alerts(order, t0, nil, Config{URL: "http://am"})
		if len(got) != 1 || !got[0].StartsAt.Equal(cur.OpenedAt) || got[0].Resolved(t0) {
			t.Errorf("alerts = %+v, want the open one alone", got)
		}
	}
}

func TestAlertsBoundsAnnotations(t *testing.T) {
	in := openIncident()
	long := strings.Repeat("é", MaxAnnotationBytes)
	in.Verdict.Causes[0].Remediation = []string{long}
	fix := Alerts([]incident.Incident{in}, t0, nil, Config{URL: "http://am"})[0].Annotations["fix"]
	if len(fix) > MaxAnnotationBytes || !strings.HasSuffix(fix, "…") || !json.Valid([]byte(`"`+fix+`"`)) {
		t.Errorf("fix annotation: %d bytes, suffix %q", len(fix), fix[len(fix)-8:])
	}
}

func TestAlertsSorted(t *testing.T) {
	var incs []incident.Incident
	for _, m := range []string{"c", "a", "b", "d"} {
		in := openIncident()
		in.Key = m
		in.Scope.Labels = map[string]string{"model_name": m}
		incs = append(incs, in)
	}
	got := Alerts(incs, t0, nil, Config{URL: "http://am"})
	for i := 1; i < len(got); i++ {
		if got[i-1].Fingerprint() >= got[i].Fingerprint() {
			t.Fatalf("not sorted by fingerprint at %d", i)
		}
	}
}

func TestReconcileEndsVanishedAlerts(t *testing.T) {
	a := Alerts([]incident.Incident{openIncident()}, t0, nil, Config{URL: "http://am"})
	_, state := reconcile(nil, a, t0, 15*time.Minute)

	// The alert vanishes while firing: it is sent ended at once...
	at := t0.Add(time.Minute)
	got, state := reconcile(state, nil, at, 15*time.Minute)
	if len(got) != 1 || !got[0].EndsAt.Equal(at) {
		t.Fatalf("after vanishing: %+v, want one alert ended at %s", got, at)
	}
	// ...keeps its end time while retained...
	got, state = reconcile(state, nil, at.Add(15*time.Minute), 15*time.Minute)
	if len(got) != 1 || !got[0].EndsAt.Equal(at) {
		t.Fatalf("within retention: %+v", got)
	}
	// ...and is dropped after.
	if got, _ = reconcile(state, nil, at.Add(15*time.Minute+time.Second), 15*time.Minute); len(got) != 0 {
		t.Fatalf("past retention: %+v", got)
	}
}

// TestAlertsLearningState is finding 1 of issue 25: the alert of a
// learning daemon's incident was a bare warning. It carries the state
// (annotation state, the summary opening with it) and the reason.
func TestAlertsLearningState(t *testing.T) {
	in := openIncident()
	l := &verdict.Learning{HistoryMinutes: 1, BaselineMinutes: 60, Message: "learning the baseline (1 of 60 minutes); using the 1 minute there is"}
	in.Verdict = &verdict.Verdict{Status: verdict.StatusInsufficientData, Learning: l,
		InsufficientReason: &verdict.InsufficientReason{Code: verdict.InsufficientLearning, Message: l.Message + ": nothing to compare with yet"}}
	in.TopCause = ""
	a := Alerts([]incident.Incident{in}, t0, verdictLink, Config{URL: "http://am"})[0]
	if got := a.Annotations["state"]; got != "learning_baseline" {
		t.Errorf("state = %q", got)
	}
	if got := a.Annotations["summary"]; !strings.HasPrefix(got, l.Message) {
		t.Errorf("summary = %q, want the learning state first", got)
	}
	if got := a.Annotations["description"]; !strings.Contains(got, "nothing to compare with yet") {
		t.Errorf("description = %q", got)
	}
}
