package main

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/whyslow/whyslow/collectors/bundle"
	"github.com/whyslow/whyslow/diagnose"
	"github.com/whyslow/whyslow/rulesets"
	"github.com/whyslow/whyslow/testbed/sim"
	"github.com/whyslow/whyslow/verdict"
)

// TestWhyBundleKeepSameVerdict checks that loading only the windows the
// triage reads changes nothing: on whole (untrimmed) sim recordings, the
// verdict of `why --bundle --explain` equals the one over the whole file.
func TestWhyBundleKeepSameVerdict(t *testing.T) {
	if testing.Short() {
		t.Skip("records sim bundles")
	}
	for _, scenario := range []string{"kv_pressure", "healthy", "prompt_shift"} {
		t.Run(scenario, func(t *testing.T) {
			sb, err := sim.Record(context.Background(), sim.Options{Scenario: scenario, Seed: 1, Replicas: 1})
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			if err := sb.WriteDir(dir, false); err != nil {
				t.Fatal(err)
			}
			render := func(v *verdict.Verdict) string {
				var buf bytes.Buffer
				if err := json.NewEncoder(&buf).Encode(v); err != nil {
					t.Fatal(err)
				}
				return buf.String()
			}
			opts := diagnose.Options{Explain: true}
			if err := loadRulesets(&opts, nil); err != nil {
				t.Fatal(err)
			}
			got, err := whyBundle(t.Context(), dir, bundle.DefaultMaxSeries, opts, rulesets.Shipped(), nil)
			if err != nil {
				t.Fatal(err)
			}
			b, st, stats, err := openBundle(t.Context(), dir, bundle.DefaultMaxSeries)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			applyIncident(&opts, b.Incident)
			opts.Metrics = st
			want, err := triageThen(t.Context(), opts, nil)
			if err != nil {
				t.Fatal(err)
			}
			if g, w := render(got), render(want); g != w {
				t.Errorf("verdict over the kept windows differs from the whole bundle's (%d samples):\n got %s\nwant %s", stats.Samples, g, w)
			}
			_, kst, kept, err := openBundleKeep(t.Context(), dir, bundle.DefaultMaxSeries, func(*bundle.Bundle) []bundle.Window { return bundleKeep(opts) })
			if err != nil {
				t.Fatal(err)
			}
			kst.Close()
			if kept.Skipped == 0 || kept.Samples+kept.Skipped != stats.Samples {
				t.Errorf("kept %d + skipped %d of %d samples", kept.Samples, kept.Skipped, stats.Samples)
			}
		})
	}
}
