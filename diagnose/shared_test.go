package diagnose_test

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/whyslow/whyslow/collectors/bundle"
	"github.com/whyslow/whyslow/collectors/store"
	"github.com/whyslow/whyslow/diagnose"
	"github.com/whyslow/whyslow/query"
	"github.com/whyslow/whyslow/rules"
	"github.com/whyslow/whyslow/rulesets"
)

// countedMetrics counts the queries that reach it.
type countedMetrics struct {
	query.Metrics
	n atomic.Int64
}

func (c *countedMetrics) Query(ctx context.Context, expr string, at time.Time) (model.Vector, []string, error) {
	c.n.Add(1)
	return c.Metrics.Query(ctx, expr, at)
}

func (c *countedMetrics) QueryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) (model.Matrix, []string, error) {
	c.n.Add(1)
	return c.Metrics.QueryRange(ctx, expr, start, end, step)
}

// Unwrap leaves the source's optional interfaces in sight, as the
// daemon's query counter does.
func (c *countedMetrics) Unwrap() query.Metrics { return c.Metrics }

// instantOnly is the store asked one instant query at a time: it says its
// range steps are not exact.
type instantOnly struct{ *store.Store }

func (instantOnly) ExactSteps() bool { return false }

// TestSharedQueriesKeepVerdicts triages recorded incidents twice, on the
// store one query at a time, and the way a daemon cycle does (4 queries at
// once, one SharedQueries over every triage of the store as
// Options.Shared), and wants the same verdict JSON byte for byte. The
// variants reach the insufficient-data diagnosis, whose queries over every
// scope go to Shared; each triage runs twice, the second answered from
// what the first left in Shared.
func TestSharedQueriesKeepVerdicts(t *testing.T) {
	rss, err := rulesets.All()
	if err != nil {
		t.Fatal(err)
	}
	variants := []struct {
		name string
		edit func(o *diagnose.Options, incident string)
	}{
		{"recorded", func(*diagnose.Options, string) {}},
		{"short window", func(o *diagnose.Options, _ string) { o.Window = 2 * time.Minute }},
		{"selector matches nothing", func(o *diagnose.Options, _ string) { o.Selector = `model_name="no-such-model"` }},
		{"window after the data", func(o *diagnose.Options, _ string) { o.At = o.At.Add(48 * time.Hour) }},
		{"no data near the window", func(o *diagnose.Options, _ string) { o.At = o.At.Add(30 * 24 * time.Hour) }},
		{"another engine", func(o *diagnose.Options, incident string) {
			o.Engine = "sglang"
			if strings.HasPrefix(incident, "sglang") {
				o.Engine = "vllm"
			}
		}},
	}
	for _, name := range []string{"kv_pressure", "gpu_throttle", "prompt_shift", "healthy", "sglang_kv_pressure",
		"trtllm_kv_pressure", "dcgm_k8s_gpu_throttle"} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			st, base := loadIncident(t, name, rss)
			under := &countedMetrics{Metrics: st}
			asked := &countedMetrics{Metrics: query.NewSharedQueries(under)}
			for _, vt := range variants {
				plain := base
				plain.Metrics, plain.Concurrency = st, 1
				vt.edit(&plain, name)
				want := verdictJSON(t, ctx, plain)
				for run := range 2 {
					cycle := base
					cycle.Metrics, cycle.Shared = st, asked
					vt.edit(&cycle, name)
					if got := verdictJSON(t, ctx, cycle); !bytes.Equal(got, want) {
						t.Errorf("%s, run %d: verdict differs with shared queries\n got %s\nwant %s", vt.name, run, got, want)
					}
				}
			}
			if asked.n.Load() == 0 || under.n.Load() >= asked.n.Load() {
				t.Errorf("shared queries: %d asked, %d run: none answered twice", asked.n.Load(), under.n.Load())
			}
		})
	}
}

// TestExactStepsKeepVerdicts triages recorded incidents (and the
// variants that reach the insufficient-data diagnosis) on the store one
// instant query at a time, and with the queries of one expression at
// evenly spaced times asked as one range query (the incident and baseline
// windows, the baseline sub-windows), and wants the same verdict JSON
// byte for byte, with fewer queries.
func TestExactStepsKeepVerdicts(t *testing.T) {
	rss, err := rulesets.All()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"kv_pressure", "gpu_throttle", "prompt_shift", "healthy", "sglang_kv_pressure",
		"trtllm_kv_pressure", "dcgm_k8s_gpu_throttle"} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			st, base := loadIncident(t, name, rss)
			for _, edit := range []func(o *diagnose.Options){
				func(*diagnose.Options) {},
				func(o *diagnose.Options) { o.Window = 2 * time.Minute },
				func(o *diagnose.Options) { o.GPU = "" }, // the GPU class inferred
				func(o *diagnose.Options) { o.Selector = `model_name="no-such-model"` },
				func(o *diagnose.Options) { o.At = o.At.Add(48 * time.Hour) },
			} {
				instant := &countedMetrics{Metrics: instantOnly{st}}
				one := base
				one.Metrics = instant
				edit(&one)
				want := verdictJSON(t, ctx, one)
				stepped := &countedMetrics{Metrics: st}
				grouped := base
				grouped.Metrics = stepped
				edit(&grouped)
				if got := verdictJSON(t, ctx, grouped); !bytes.Equal(got, want) {
					t.Errorf("verdict differs with range queries\n got %s\nwant %s", got, want)
				}
				if stepped.n.Load() >= instant.n.Load() {
					t.Errorf("%d queries with range queries, %d without: none grouped", stepped.n.Load(), instant.n.Load())
				}
			}
		})
	}
}

func verdictJSON(t *testing.T, ctx context.Context, o diagnose.Options) []byte {
	t.Helper()
	v, err := diagnose.Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// loadIncident loads a recorded incident bundle into a store of its own
// (closed with the test) and returns the triage options its incident.yaml
// gives, with --explain.
func loadIncident(t *testing.T, name string, rss []*rules.Ruleset) (*store.Store, diagnose.Options) {
	t.Helper()
	b, err := bundle.Load(filepath.Join("..", "testdata", "incidents", name))
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := b.LoadMetrics(context.Background(), st); err != nil {
		t.Fatal(err)
	}
	inc := b.Incident
	o := diagnose.Options{Rulesets: rss, Engine: "auto", At: inc.At, Window: inc.Window, Baseline: inc.Baseline,
		Selector: inc.Selector, GPU: inc.GPU, Explain: true}
	if inc.Engine != "" {
		o.Engine = inc.Engine
	}
	return st, o
}
