package triage_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/whyslow/whyslow/collectors/bundle"
	"github.com/whyslow/whyslow/collectors/store"
	"github.com/whyslow/whyslow/rulesets"
	"github.com/whyslow/whyslow/triage"
)

// countedMetrics counts the queries that reach it.
type countedMetrics struct {
	triage.Metrics
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
		edit func(o *triage.Options, incident string)
	}{
		{"recorded", func(*triage.Options, string) {}},
		{"short window", func(o *triage.Options, _ string) { o.Window = 2 * time.Minute }},
		{"selector matches nothing", func(o *triage.Options, _ string) { o.Selector = `model_name="no-such-model"` }},
		{"window after the data", func(o *triage.Options, _ string) { o.At = o.At.Add(48 * time.Hour) }},
		{"no data near the window", func(o *triage.Options, _ string) { o.At = o.At.Add(30 * 24 * time.Hour) }},
		{"another engine", func(o *triage.Options, incident string) {
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
			b, err := bundle.Load(filepath.Join("..", "testdata", "incidents", name))
			if err != nil {
				t.Fatal(err)
			}
			st, err := store.Open(store.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if _, err := b.LoadMetrics(ctx, st); err != nil {
				t.Fatal(err)
			}
			inc := b.Incident
			base := triage.Options{Rulesets: rss, Engine: "auto", At: inc.At, Window: inc.Window, Baseline: inc.Baseline,
				Selector: inc.Selector, GPU: inc.GPU, Explain: true}
			if inc.Engine != "" {
				base.Engine = inc.Engine
			}
			under := &countedMetrics{Metrics: st}
			asked := &countedMetrics{Metrics: triage.NewSharedQueries(under)}
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

func verdictJSON(t *testing.T, ctx context.Context, o triage.Options) []byte {
	t.Helper()
	v, err := triage.Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// gateMetrics answers after release is closed, counting the queries.
type gateMetrics struct {
	release chan struct{}
	n       atomic.Int64
	err     error
}

func (g *gateMetrics) Query(ctx context.Context, expr string, at time.Time) (model.Vector, []string, error) {
	g.n.Add(1)
	select {
	case <-g.release:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	return model.Vector{{Metric: model.Metric{"q": model.LabelValue(expr)}, Value: model.SampleValue(at.Unix())}}, []string{"w"}, g.err
}

func (g *gateMetrics) QueryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) (model.Matrix, []string, error) {
	g.n.Add(1)
	<-g.release
	return model.Matrix{{Values: []model.SamplePair{{Timestamp: model.TimeFromUnix(start.Unix()), Value: model.SampleValue(step.Seconds())}}}}, nil, g.err
}

func TestSharedQueriesRunEachOnce(t *testing.T) {
	ctx := context.Background()
	g := &gateMetrics{release: make(chan struct{})}
	s := triage.NewSharedQueries(g)
	t0 := time.Unix(1700000000, 0)
	var wg sync.WaitGroup
	results := make([]model.Vector, 8)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, w, err := s.Query(ctx, "up", t0)
			if err != nil || len(w) != 1 {
				t.Errorf("query: %v %v", w, err)
			}
			results[i] = v
		}()
	}
	// Let the callers pile up on the first one's query, then answer it.
	for g.n.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(10 * time.Millisecond)
	close(g.release)
	wg.Wait()
	if n := g.n.Load(); n != 1 {
		t.Errorf("%d queries for 8 identical callers, want 1", n)
	}
	for _, v := range results {
		if len(v) != 1 || v[0].Value != model.SampleValue(t0.Unix()) {
			t.Errorf("result %v", v)
		}
	}
	// Another time, expression or range is another query.
	s.Query(ctx, "up", t0.Add(time.Second))
	s.Query(ctx, "up2", t0)
	s.QueryRange(ctx, "up", t0, t0.Add(time.Minute), time.Second)
	s.QueryRange(ctx, "up", t0, t0.Add(time.Minute), 2*time.Second)
	s.QueryRange(ctx, "up", t0, t0.Add(time.Minute), 2*time.Second)
	if n := g.n.Load(); n != 5 {
		t.Errorf("%d queries, want 5", n)
	}
	// A caller's copy is its own.
	v, _, _ := s.Query(ctx, "up", t0)
	v[0] = nil
	if v2, _, _ := s.Query(ctx, "up", t0); v2[0] == nil {
		t.Error("a caller's change reached the shared answer")
	}
}

func TestSharedQueriesKeepErrorsButNotCancelled(t *testing.T) {
	g := &gateMetrics{release: make(chan struct{}), err: errors.New("bad query")}
	close(g.release)
	s := triage.NewSharedQueries(g)
	t0 := time.Unix(1700000000, 0)
	for range 2 {
		if _, _, err := s.Query(context.Background(), "up", t0); err == nil || err.Error() != "bad query" {
			t.Fatalf("err %v", err)
		}
	}
	if n := g.n.Load(); n != 1 {
		t.Errorf("a failing query ran %d times, want once (the same answer for all)", n)
	}

	// The answer of a caller whose context ended is nobody else's.
	g = &gateMetrics{release: make(chan struct{})}
	s = triage.NewSharedQueries(g)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := s.Query(ctx, "up", t0); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want cancelled", err)
	}
	close(g.release)
	v, _, err := s.Query(context.Background(), "up", t0)
	if err != nil || len(v) != 1 {
		t.Fatalf("after a cancelled caller: %v %v", v, err)
	}
	if n := g.n.Load(); n != 2 {
		t.Errorf("%d queries, want 2 (the cancelled answer not kept)", n)
	}
}
