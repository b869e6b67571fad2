package incident

import (
	"strings"
	"testing"
	"time"

	"github.com/whyslow/whyslow/detect"
	"github.com/whyslow/whyslow/verdict"
)

var incT0 = time.Unix(1700000000, 0)

func incAt(i int) time.Time { return incT0.Add(time.Duration(i) * 5 * time.Second) }

func detection(firing bool, sev verdict.Severity) detect.Detection {
	d := detect.Detection{Key: `model_name="m"`, Scope: verdict.Scope{Selector: `model_name="m"`, Labels: map[string]string{"model_name": "m"}}, Firing: firing, Severity: verdict.SeverityNone}
	if firing {
		d.Severity = sev
		d.Triggers = []detect.TriggerResult{{Name: "ttft_p95", State: detect.TriggerFiring, Severity: sev}}
	}
	return d
}

func verdictOf(sev verdict.Severity, causes ...string) *verdict.Verdict {
	v := &verdict.Verdict{Status: verdict.StatusAnomaly, Severity: sev}
	if len(causes) == 0 {
		v.Status = verdict.StatusHealthy
	}
	for i, c := range causes {
		v.Causes = append(v.Causes, verdict.Cause{ID: c, Rank: i + 1})
	}
	return v
}

// step is one tick of a scripted
type step struct {
	firing  bool
	sev     verdict.Severity
	verdict *verdict.Verdict // nil: no triage this tick
}

func runSteps(t *testing.T, tr *Tracker, steps []step) []Event {
	t.Helper()
	var all []Event
	for i, s := range steps {
		at := incAt(i)
		all = append(all, tr.Observe(detection(s.firing, s.sev), at)...)
		if tr.Open(`model_name="m"`) && s.verdict != nil {
			all = append(all, tr.Record(`model_name="m"`, s.verdict, at)...)
		}
	}
	return all
}

// scored builds an anomaly verdict from (cause id, score) pairs, in rank order.
func scored(sev verdict.Severity, pairs ...any) *verdict.Verdict {
	v := &verdict.Verdict{Status: verdict.StatusAnomaly, Severity: sev}
	for i := 0; i+1 < len(pairs); i += 2 {
		v.Causes = append(v.Causes, verdict.Cause{ID: pairs[i].(string), Rank: i/2 + 1, Score: float64(pairs[i+1].(int))})
	}
	return v
}

func kinds(evs []Event) string {
	var ks []string
	for _, e := range evs {
		// The cause the notification names (the incident's TopCause
		// follows every verdict, see TestTrackerTopCauseFollowsVerdict).
		ks = append(ks, e.Kind.String()+":"+e.Incident.Notified.Cause)
	}
	return strings.Join(ks, " ")
}

func TestTrackerLifecycle(t *testing.T) {
	w := verdict.SeverityWarning
	kv := verdictOf(w, "kv_cache_pressure", "queue_saturation")
	q := verdictOf(w, "queue_saturation")
	repeat := func(n int, s step) []step {
		out := make([]step, n)
		for i := range out {
			out[i] = s
		}
		return out
	}
	join := func(parts ...[]step) []step {
		var out []step
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	tests := []struct {
		name  string
		cfg   IncidentConfig
		steps []step
		want  string
	}{
		{"open once, resolve once", IncidentConfig{ResolveAfter: time.Minute},
			join(repeat(2, step{}), repeat(20, step{true, w, kv}), repeat(20, step{false, "", kv})),
			"opened:kv_cache_pressure resolved:kv_cache_pressure"},
		{"flapping detector does not resolve", IncidentConfig{ResolveAfter: time.Minute},
			join(repeat(5, step{true, w, kv}), repeat(5, step{false, "", kv}), repeat(5, step{true, w, kv}), repeat(5, step{false, "", kv}), repeat(5, step{true, w, kv})),
			"opened:kv_cache_pressure"},
		{"no news while the detector is clear", IncidentConfig{ResolveAfter: time.Hour},
			join(repeat(3, step{true, w, kv}), repeat(5, step{false, "", verdictOf(verdict.SeverityCritical, "queue_saturation")})),
			"opened:kv_cache_pressure"},
		{"cause change held", IncidentConfig{UpdateInterval: time.Second},
			join(repeat(3, step{true, w, kv}), []step{{true, w, q}}, repeat(3, step{true, w, kv}), repeat(3, step{true, w, q})),
			"opened:kv_cache_pressure cause_changed:queue_saturation"},
		{"healthy verdict mid-incident is ignored", IncidentConfig{},
			join(repeat(3, step{true, w, kv}), repeat(3, step{true, w, verdictOf(w)}), repeat(3, step{true, w, kv})),
			"opened:kv_cache_pressure"},
		{"escalation", IncidentConfig{},
			join(repeat(3, step{true, w, kv}), repeat(3, step{true, verdict.SeverityCritical, kv})),
			"opened:kv_cache_pressure escalated:kv_cache_pressure"},
		{"one critical verdict is not an escalation", IncidentConfig{},
			join(repeat(3, step{true, w, kv}), []step{{true, w, verdictOf(verdict.SeverityCritical, "kv_cache_pressure")}}, repeat(3, step{true, w, kv})),
			"opened:kv_cache_pressure"},
		{"critical verdicts that hold escalate", IncidentConfig{},
			join(repeat(3, step{true, w, kv}), repeat(3, step{true, w, verdictOf(verdict.SeverityCritical, "kv_cache_pressure")})),
			"opened:kv_cache_pressure escalated:kv_cache_pressure"},
		{"alternating top cause is not a change", IncidentConfig{UpdateInterval: time.Second},
			join(repeat(2, step{true, w, scored(w, "prefill_contention", 5, "outside_engine", 3)}),
				repeat(4, step{true, w, scored(w, "kv_cache_pressure", 6, "prefill_contention", 5)}),
				repeat(2, step{true, w, scored(w, "prefill_contention", 5, "kv_cache_pressure", 2)}),
				repeat(2, step{true, w, scored(w, "outside_engine", 3, "prefill_contention", 2)}),
				repeat(3, step{true, w, scored(w, "prefill_contention", 5, "queue_saturation", 4)}),
				repeat(2, step{true, w, scored(w, "queue_saturation", 6, "prefill_contention", 2)}),
				repeat(1, step{true, w, scored(w, "prefill_contention", 5, "queue_saturation", 4)}),
				repeat(2, step{true, w, scored(w, "queue_saturation", 6, "prefill_contention", 2)})),
			"opened:prefill_contention"},
		{"confident lead that holds is a change", IncidentConfig{UpdateInterval: time.Second},
			join(repeat(2, step{true, w, scored(w, "prefill_contention", 5, "outside_engine", 3)}),
				repeat(3, step{true, w, scored(w, "queue_saturation", 6, "prefill_contention", 2)})),
			"opened:prefill_contention cause_changed:queue_saturation"},
		{"a confident change waits for the update interval", IncidentConfig{UpdateInterval: time.Minute},
			join(repeat(2, step{true, w, kv}), repeat(20, step{true, w, q})),
			"opened:kv_cache_pressure cause_changed:queue_saturation"},
		{"repeat interval", IncidentConfig{RepeatInterval: time.Minute},
			repeat(30, step{true, w, kv}),
			"opened:kv_cache_pressure repeated:kv_cache_pressure repeated:kv_cache_pressure"},
		{"first notification waits for a cause", IncidentConfig{OpenWait: 15 * time.Second},
			join(repeat(1, step{true, w, verdictOf(w)}), repeat(3, step{true, w, kv})),
			"opened:kv_cache_pressure"},
		{"no cause after the wait still notifies", IncidentConfig{OpenWait: 10 * time.Second},
			repeat(4, step{true, w, verdictOf(w)}),
			"opened:"},
		{"an unexplained blip is never notified", IncidentConfig{ResolveAfter: time.Minute},
			join(repeat(2, step{true, w, verdictOf(w)}), repeat(20, step{false, "", verdictOf(w)})),
			""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewTracker(tc.cfg)
			evs := runSteps(t, tr, tc.steps)
			if got := kinds(evs); got != tc.want {
				t.Fatalf("events %q, want %q", got, tc.want)
			}
			if tc.name == "a confident change waits for the update interval" {
				if d := evs[1].At.Sub(evs[0].At); d < time.Minute {
					t.Errorf("cause change %s after the open, want >= 1m", d)
				}
			}
			seen := map[string]bool{}
			for _, e := range evs {
				if seen[e.DedupeKey] {
					t.Errorf("duplicate dedupe key %q", e.DedupeKey)
				}
				seen[e.DedupeKey] = true
				if !strings.HasPrefix(e.DedupeKey, `model_name="m"|`) {
					t.Errorf("dedupe key %q does not start with the scope", e.DedupeKey)
				}
			}
		})
	}
}

func TestTrackerConditionTransitionTime(t *testing.T) {
	tr := NewTracker(IncidentConfig{ResolveAfter: time.Hour})
	kv := verdictOf(verdict.SeverityWarning, "kv_cache_pressure")
	key := `model_name="m"`
	tr.Observe(detection(true, verdict.SeverityWarning), incAt(0))
	tr.Record(key, kv, incAt(0))
	first := mustGet(t, tr, key).Condition.TransitionTime
	for i := 1; i < 10; i++ {
		tr.Observe(detection(i%2 == 0, verdict.SeverityWarning), incAt(i))
		tr.Record(key, kv, incAt(i))
	}
	in := mustGet(t, tr, key)
	if !in.Condition.TransitionTime.Equal(first) || in.Condition.Reason != "kv_cache_pressure" || !in.Condition.Status {
		t.Fatalf("condition moved while status and reason held: %+v (first %v)", in.Condition, first)
	}
}

func mustGet(t *testing.T, tr *Tracker, key string) Incident {
	t.Helper()
	in, ok := tr.Get(key)
	if !ok {
		t.Fatalf("no incident for %s", key)
	}
	return in
}

func TestTrackerAlerts(t *testing.T) {
	tr := NewTracker(IncidentConfig{})
	key := `model_name="m"`
	scope := verdict.Scope{Selector: key}
	a := AlertRef{Fingerprint: "abc", Name: "HighTTFT", StartsAt: incT0}
	if tr.SeenAlert("abc", "firing", incT0, incAt(0)) {
		t.Fatal("first delivery seen")
	}
	if !tr.SeenAlert("abc", "firing", incT0, incAt(1)) {
		t.Fatal("repeat delivery not deduped")
	}
	tr.AlertFiring(key, scope, a, verdict.SeverityCritical, incAt(0))
	evs := tr.Record(key, verdictOf(verdict.SeverityWarning, "queue_saturation"), incAt(0))
	if kinds(evs) != "opened:queue_saturation" {
		t.Fatalf("events %q", kinds(evs))
	}
	if got := mustGet(t, tr, key).Severity; got != verdict.SeverityCritical {
		t.Errorf("severity %s", got)
	}
	if evs := tr.AlertResolved(key, "other", incAt(2)); len(evs) != 0 || !tr.Open(key) {
		t.Fatalf("unknown fingerprint changed the incident: %v", evs)
	}
	evs = tr.AlertResolved(key, "abc", incAt(3))
	if kinds(evs) != "resolved:queue_saturation" || tr.Open(key) {
		t.Fatalf("resolve: %q open=%v", kinds(evs), tr.Open(key))
	}
	if got := mustGet(t, tr, key); got.Status != IncidentResolved || got.Condition.Status {
		t.Fatalf("resolved incident: %+v", got)
	}
}

func TestTrackerSnapshotRoundTrip(t *testing.T) {
	tr := NewTracker(IncidentConfig{})
	key := `model_name="m"`
	tr.Observe(detection(true, verdict.SeverityWarning), incAt(0))
	tr.Record(key, verdictOf(verdict.SeverityWarning, "kv_cache_pressure"), incAt(0))
	tr.SeenAlert("fp", "firing", incT0, incAt(0))
	b, err := tr.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	tr2, err := LoadTracker(IncidentConfig{}, b)
	if err != nil {
		t.Fatal(err)
	}
	if !tr2.Open(key) || !tr2.SeenAlert("fp", "firing", incT0, incAt(1)) {
		t.Fatal("state lost in round trip")
	}
	// The restored incident does not notify "opened" again.
	if evs := tr2.Record(key, verdictOf(verdict.SeverityWarning, "kv_cache_pressure"), incAt(1)); len(evs) != 0 {
		t.Fatalf("restored tracker re-notified: %q", kinds(evs))
	}
	for _, bad := range []string{`{`, `{"version":2}`, `{"version":1,"open":[{}]}`} {
		if _, err := LoadTracker(IncidentConfig{}, []byte(bad)); err == nil {
			t.Errorf("LoadTracker(%s) succeeded", bad)
		}
	}
}

func TestTrackerKeepResolved(t *testing.T) {
	tr := NewTracker(IncidentConfig{KeepResolved: 2, ResolveAfter: 5 * time.Second})
	i := 0
	for n := 0; n < 5; n++ {
		tr.Observe(detection(true, verdict.SeverityWarning), incAt(i))
		tr.Record(`model_name="m"`, verdictOf(verdict.SeverityWarning, "kv_cache_pressure"), incAt(i))
		i++
		tr.Observe(detection(false, ""), incAt(i))
		i++
		tr.Observe(detection(false, ""), incAt(i))
		i++
	}
	if got := len(tr.Incidents()); got != 2 {
		t.Fatalf("kept %d incidents, want 2", got)
	}
}

func TestIncidentEnumsString(t *testing.T) {
	if IncidentOpen.String() != "open" || IncidentResolved.String() != "resolved" || EventCauseChanged.String() != "cause_changed" {
		t.Fatal("enum names")
	}
	var s IncidentStatus
	if err := s.UnmarshalText([]byte("bogus")); err == nil {
		t.Fatal("bogus status accepted")
	}
}

func TestTrackerPendingKeepsOpenIncidentFiring(t *testing.T) {
	pending := func() detect.Detection {
		d := detection(false, verdict.SeverityNone)
		d.Triggers = []detect.TriggerResult{{Name: "tpot_p95", State: detect.TriggerPending, Severity: verdict.SeverityWarning}}
		return d
	}
	tr := NewTracker(IncidentConfig{ResolveAfter: time.Minute})
	// A pending trigger alone does not open an
	if evs := tr.Observe(pending(), incAt(0)); len(evs) != 0 || tr.Open(`model_name="m"`) {
		t.Fatalf("pending opened an incident: %v", evs)
	}
	tr.Observe(detection(true, verdict.SeverityWarning), incAt(1))
	if evs := tr.Record(`model_name="m"`, verdictOf(verdict.SeverityWarning, "memory_bandwidth_saturation"), incAt(1)); kinds(evs) != "opened:memory_bandwidth_saturation" {
		t.Fatalf("events %s", kinds(evs))
	}
	// Inside the incident the condition dips (clear), then holds again
	// (pending, the hold not yet over) for longer than resolve_after: the
	// incident stays open and firing.
	tr.Observe(detection(false, verdict.SeverityNone), incAt(2))
	for i := 3; i < 40; i++ {
		if evs := tr.Observe(pending(), incAt(i)); len(evs) != 0 {
			t.Fatalf("step %d: events %s", i, kinds(evs))
		}
	}
	in := mustGet(t, tr, `model_name="m"`)
	if in.Status != IncidentOpen || !in.Firing || !in.ClearSince.IsZero() || strings.Join(in.Triggers, ",") != "tpot_p95" {
		t.Errorf("incident = %+v", in)
	}
	// Clear for resolve_after: resolved.
	var evs []Event
	for i := 40; i <= 53; i++ {
		evs = append(evs, tr.Observe(detection(false, verdict.SeverityNone), incAt(i))...)
	}
	if kinds(evs) != "resolved:memory_bandwidth_saturation" {
		t.Errorf("events %s, want resolved", kinds(evs))
	}
}

// TestTrackerTopCauseFollowsVerdict: the incident's top cause is the latest
// verdict's, also when that verdict dropped the first cause, while the
// notifications keep to their policy (one open, no cause change).
func TestTrackerTopCauseFollowsVerdict(t *testing.T) {
	tr := NewTracker(IncidentConfig{ResolveAfter: time.Minute})
	key := `model_name="m"`
	at := incAt(0)
	tr.Observe(detection(true, verdict.SeverityWarning), at)
	evs := tr.Record(key, verdictOf(verdict.SeverityWarning, "kv_cache_pressure"), at)
	if kinds(evs) != "opened:kv_cache_pressure" {
		t.Fatalf("events %s", kinds(evs))
	}
	at = incAt(1)
	tr.Observe(detection(true, verdict.SeverityWarning), at)
	evs = append(evs, tr.Record(key, verdictOf(verdict.SeverityWarning, "queue_saturation"), at)...)
	if in, _ := tr.Get(key); in.TopCause != "queue_saturation" || in.Notified.Cause != "kv_cache_pressure" {
		t.Errorf("after a new ranking: top_cause %q, notified %q", in.TopCause, in.Notified.Cause)
	}
	at = incAt(2)
	tr.Observe(detection(true, verdict.SeverityWarning), at)
	evs = append(evs, tr.Record(key, verdictOf(verdict.SeverityWarning), at)...)
	in, _ := tr.Get(key)
	if in.TopCause != "" {
		t.Errorf("a verdict without a cause left top_cause %q", in.TopCause)
	}
	// An insufficient verdict does not replace the diagnosis.
	at = incAt(3)
	tr.Observe(detection(true, verdict.SeverityWarning), at)
	tr.Record(key, verdictOf(verdict.SeverityWarning, "prefill_contention"), at)
	tr.Record(key, &verdict.Verdict{Status: verdict.StatusInsufficientData}, incAt(4))
	if in, _ := tr.Get(key); in.TopCause != "prefill_contention" {
		t.Errorf("after insufficient data: top_cause %q", in.TopCause)
	}
	if kinds(evs) != "opened:kv_cache_pressure" {
		t.Errorf("events %s", kinds(evs))
	}
}

// TestTrackerGoneResolvesWithReason: an incident whose scope lost its data
// resolves after ResolveAfter with the reason, and a firing detection
// before that cancels it.
func TestTrackerGoneResolvesWithReason(t *testing.T) {
	tr := NewTracker(IncidentConfig{ResolveAfter: time.Minute})
	key := `model_name="m"`
	tr.Observe(detection(true, verdict.SeverityWarning), incAt(0))
	tr.Record(key, verdictOf(verdict.SeverityWarning, "kv_cache_pressure"), incAt(0))
	const reason = "no data for the scope: engine target a down"
	if evs := tr.Gone(key, reason, incAt(1)); len(evs) != 0 {
		t.Fatalf("resolved at once: %s", kinds(evs))
	}
	tr.Observe(detection(true, verdict.SeverityWarning), incAt(2))
	if in, _ := tr.Get(key); in.ResolveReason != "" || !in.Firing {
		t.Fatalf("firing again kept reason %q", in.ResolveReason)
	}
	var evs []Event
	for i := 3; i <= 20 && len(evs) == 0; i++ {
		evs = tr.Gone(key, reason, incAt(i))
	}
	if kinds(evs) != "resolved:kv_cache_pressure" {
		t.Fatalf("events %s", kinds(evs))
	}
	in := evs[0].Incident
	if in.ResolveReason != reason || in.Condition.Reason != "DataGone" || in.Condition.Message != reason || in.Condition.Status {
		t.Errorf("resolved incident: reason %q, condition %+v", in.ResolveReason, in.Condition)
	}
	if got := evs[0].At.Sub(incAt(3)); got < time.Minute {
		t.Errorf("resolved %s after the data went, want >= resolve_after", got)
	}
}
