package query

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/model"
)

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
	s := NewSharedQueries(g)
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
	s := NewSharedQueries(g)
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
	s = NewSharedQueries(g)
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

// steppedMetrics is a source with exact range steps.
type steppedMetrics struct{ gateMetrics }

func (*steppedMetrics) ExactSteps() bool { return true }

// opaque wraps a source without Unwrap.
type opaque struct{ Metrics }

// TestAsLooksThroughWrappers: what a source can do is found through the
// wrappers that unwrap (SharedQueries, the daemon's counter), and hidden
// by one that does not.
func TestAsLooksThroughWrappers(t *testing.T) {
	src := &steppedMetrics{}
	if es, ok := As[ExactSteps](NewSharedQueries(NewSharedQueries(src))); !ok || !es.ExactSteps() {
		t.Error("two SharedQueries hid the source's ExactSteps")
	}
	if _, ok := As[ExactSteps](NewSharedQueries(opaque{src})); ok {
		t.Error("found ExactSteps through a wrapper without Unwrap")
	}
	if _, ok := As[ExactSteps](NewSharedQueries(&gateMetrics{})); ok {
		t.Error("found ExactSteps on a source without it")
	}
}
