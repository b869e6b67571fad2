package rulesets_test

import (
	"context"
	"testing"

	"github.com/whyslow/whyslow/collectors/bundle"
	"github.com/whyslow/whyslow/collectors/store"
	"github.com/whyslow/whyslow/diagnose"
	"github.com/whyslow/whyslow/rulesets"
	"github.com/whyslow/whyslow/testbed/sim"
	"github.com/whyslow/whyslow/verdict"
)

// An external test package: collectors/bundle reads the engine list from
// this package.

// TestEngineDetection records each engine's telemetry with the engine model
// and checks that engine auto-detection picks the matching ruleset.
func TestEngineDetection(t *testing.T) {
	rss, err := rulesets.All()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, engine := range rulesets.Engines {
		t.Run(engine, func(t *testing.T) {
			if _, err := sim.ParsePolicy(engine); err != nil {
				t.Skipf("the simulator does not model %s: %v (its map is tested on fixtures: cmd/whyslow TestConformanceScrape)", engine, err)
			}
			b, err := sim.Record(ctx, sim.Options{Scenario: "healthy", Seed: 4, Policy: engine, Trim: true})
			if err != nil {
				t.Fatal(err)
			}
			st, err := store.Open(store.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if _, err := bundle.ReadMetrics(ctx, "metrics.om", b.Metrics, st); err != nil {
				t.Fatal(err)
			}
			v, err := diagnose.Run(ctx, diagnose.Options{Metrics: st, Rulesets: rss, Engine: "auto", At: b.Incident.At,
				Window: b.Incident.Window, Baseline: b.Incident.Baseline, Selector: b.Incident.Selector, GPU: b.Incident.GPU})
			if err != nil {
				t.Fatal(err)
			}
			if v.Engine != engine {
				t.Errorf("auto-detected %q, want %q", v.Engine, engine)
			}
			if v.Status == verdict.StatusInsufficientData {
				t.Errorf("insufficient data on a healthy %s bundle: %+v", engine, v.DataGaps)
			}
		})
	}
}
