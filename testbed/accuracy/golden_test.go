package accuracy

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/whyslow/whyslow/collectors/bundle"
	"github.com/whyslow/whyslow/collectors/store"
	"github.com/whyslow/whyslow/diagnose"
	"github.com/whyslow/whyslow/query"
	"github.com/whyslow/whyslow/rules"
	"github.com/whyslow/whyslow/rulesets"
	"github.com/whyslow/whyslow/verdict"
)

// incidentsDir holds the committed bundles of testbed/sim (go generate
// ./testbed/sim), fluidDir those of the second engine model (go generate
// ./testbed/fluid).
const (
	incidentsDir = "../../testdata/incidents"
	fluidDir     = "../../testdata/fluid"
)

// truthFile is the part of a bundle's truth.yaml the golden test reads.
type truthFile struct {
	Scenario string   `yaml:"scenario"`
	Causes   []string `yaml:"causes"`
}

// bundleOptions returns the triage options a loaded bundle implies.
func bundleOptions(b *bundle.Bundle, m query.Metrics, rss []*rules.Ruleset) diagnose.Options {
	opts := diagnose.Options{Metrics: m, Rulesets: rss, Engine: "auto"}
	if inc := b.Incident; inc != nil {
		opts.At, opts.Window, opts.Baseline = inc.At, inc.Window, inc.Baseline
		opts.Selector, opts.GPU = inc.Selector, inc.GPU
		if inc.Engine != "" {
			opts.Engine = inc.Engine
		}
		if inc.Scheduler.MaxNumBatchedTokens > 0 {
			opts.Scheduler = rules.Scheduler{
				Known:               true,
				ChunkedPrefill:      inc.Scheduler.ChunkedPrefill == nil || *inc.Scheduler.ChunkedPrefill,
				MaxNumBatchedTokens: inc.Scheduler.MaxNumBatchedTokens,
				MaxNumSeqs:          inc.Scheduler.MaxNumSeqs,
				Source:              "incident",
			}
		}
	}
	return opts
}

// TestIncidentBundles triages every committed bundle in testdata/incidents
// and checks the verdict against the bundle's truth.yaml: the injected cause
// ranks first, and a healthy bundle (no causes) is stated healthy.
func TestIncidentBundles(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join(incidentsDir, "*", "truth.yaml"))
	if more, err2 := filepath.Glob(filepath.Join(fluidDir, "*", "truth.yaml")); err2 == nil {
		dirs = append(dirs, more...)
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) == 0 {
		t.Fatalf("no bundles with truth.yaml under %s", incidentsDir)
	}
	rss, err := rulesets.All()
	if err != nil {
		t.Fatal(err)
	}
	for _, tf := range dirs {
		dir := filepath.Dir(tf)
		name := filepath.Base(dir)
		if filepath.Dir(dir) == filepath.Clean(fluidDir) {
			name = "fluid/" + name
		}
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(tf)
			if err != nil {
				t.Fatal(err)
			}
			var truth truthFile
			if err := yaml.Unmarshal(raw, &truth); err != nil {
				t.Fatalf("%s: %v", tf, err)
			}
			b, err := bundle.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			if b.Incident == nil {
				t.Fatalf("%s: no incident.yaml", dir)
			}
			st, err := store.Open(store.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			ctx := context.Background()
			if _, err := b.LoadMetrics(ctx, st); err != nil {
				t.Fatal(err)
			}
			v, err := diagnose.Run(ctx, bundleOptions(b, st, rss))
			if err != nil {
				t.Fatal(err)
			}
			if len(truth.Causes) == 0 {
				if v.Status != verdict.StatusHealthy {
					t.Errorf("status %s with causes %v, want healthy", v.Status, goldenCauseIDs(v))
				}
				return
			}
			if v.Status != verdict.StatusAnomaly {
				t.Fatalf("status %s, want anomaly with top cause %s", v.Status, truth.Causes[0])
			}
			if len(v.Causes) == 0 || !goldenContains(truth.Causes, v.Causes[0].ID) {
				t.Errorf("top cause %v, want one of %v", goldenCauseIDs(v), truth.Causes)
			}
		})
	}
}

func goldenCauseIDs(v *verdict.Verdict) []string {
	ids := make([]string, len(v.Causes))
	for i, c := range v.Causes {
		ids[i] = c.ID
	}
	return ids
}

func goldenContains(xs []string, x string) bool {
	for _, s := range xs {
		if s == x {
			return true
		}
	}
	return false
}
