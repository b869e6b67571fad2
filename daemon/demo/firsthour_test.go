package demo

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/whyslow/whyslow/incident"
	"github.com/whyslow/whyslow/testbed/sim"
)

// TestE2EFreshSidecar deploys the sidecar next to an engine model that has
// been running for a while, with the default 1h baselines, a little before
// the scenario's fault: the incident opens and its verdict names the cause
// against the history the store has (and says the baseline is shortened),
// (from four minutes of it on), or, with less, says the baseline is being
// learnt.
func TestE2EFreshSidecar(t *testing.T) {
	causes := map[string]string{}
	for _, s := range sim.Scenarios() {
		causes[s.Name] = s.Cause
	}
	tests := []struct {
		scenario string
		before   time.Duration // the sidecar starts this long before the onset
		note     string
		cause    bool // the verdict must name the scenario's cause
	}{
		{"prompt_shift", 15 * time.Minute, "(learning: ", true},
		{"kv_pressure", 15 * time.Minute, "(learning: ", true},
		{"arrival_surge", 3 * time.Minute, "(learning: ", true},
		{"arrival_surge", time.Minute, "learning the baseline (", false},
	}
	if testing.Short() {
		tests = tests[:1]
	}
	for _, tc := range tests {
		t.Run(tc.scenario, func(t *testing.T) {
			rcv := newReceiver(t)
			probe, err := sim.NewLive(sim.Options{Scenario: tc.scenario, Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			env := newTestEnvWith(t, rcv, EnvOptions{Scenario: tc.scenario, SidecarAfter: probe.Onset().Sub(probe.Now()) - tc.before})
			ctx := context.Background()
			var opened *incident.Incident
			for env.Now().Before(env.Onset().Add(12*time.Minute)) && env.Ticks() < 1000 {
				if err := env.Tick(ctx); err != nil {
					t.Fatal(err)
				}
				if incs := env.Stack.Daemon.Incidents(); len(incs) > 0 && incs[0].Notified.Count > 0 {
					opened = &incs[0]
					break
				}
			}
			if opened == nil {
				t.Fatalf("no incident opened within 12 minutes of the onset (sidecar %s old)", env.Now().Sub(env.Onset())+tc.before)
			}
			v := opened.Verdict
			t.Logf("opened %s after the onset by %v: status %s, top cause %q, warnings %q",
				env.Now().Sub(env.Onset()), opened.Triggers, v.Status, opened.TopCause, v.Warnings)
			if !strings.Contains(strings.Join(v.Warnings, "\n"), tc.note) {
				t.Errorf("verdict warnings %q lack %q", v.Warnings, tc.note)
			}
			if tc.cause && opened.TopCause != causes[tc.scenario] {
				t.Errorf("top cause %q, want %q", opened.TopCause, causes[tc.scenario])
			}
		})
	}
}
