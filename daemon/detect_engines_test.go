package daemon

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/whyslow/whyslow/query"
)

// queryLog remembers the instant queries sent to a source; fail makes
// those it matches fail.
type queryLog struct {
	query.Metrics
	mu    sync.Mutex
	exprs []string
	fail  func(expr string) bool
}

func (q *queryLog) Query(ctx context.Context, expr string, at time.Time) (model.Vector, []string, error) {
	q.mu.Lock()
	q.exprs = append(q.exprs, expr)
	fail := q.fail
	q.mu.Unlock()
	if fail != nil && fail(expr) {
		return nil, nil, context.DeadlineExceeded
	}
	return q.Metrics.Query(ctx, expr, at)
}

// logQueries wraps the harness's source in a queryLog.
func logQueries(ql *queryLog) func(*Options) {
	return func(o *Options) { ql.Metrics = o.Metrics; o.Metrics = ql }
}

// A sidecar whose engine is set reads that engine's names only once its
// engine check found its series: the detector's `or` of every engine
// costs CPU on each cycle (detect.BenchmarkDetectorTick).
func TestSidecarDetectorReadsItsEngineOnly(t *testing.T) {
	cfg := testConfig()
	cfg.Engine = "vllm"
	ql := &queryLog{}
	h := newHarnessWith(t, cfg, logQueries(ql))
	check := map[string]bool{}
	for _, q := range h.d.engineQueries {
		check[q.expr] = true
	}
	h.ticks(t, 3)
	if got := h.d.detector.Reads(); !reflect.DeepEqual(got, []string{"vllm"}) {
		t.Fatalf("detector reads %v, want [vllm]", got)
	}
	detector := 0
	for _, q := range ql.exprs {
		if check[q] {
			continue // the engine check counts every engine's series on purpose
		}
		detector++
		for _, other := range []string{"sglang", "trtllm", "engine_type", "tgi_"} {
			if strings.Contains(q, other) {
				t.Fatalf("engine vllm, the detector read %q: %s", other, q)
			}
		}
	}
	if detector == 0 {
		t.Fatal("no detector query recorded")
	}
}

// A sidecar left at the default engine (vllm) that scrapes SGLang still
// detects SGLang's incidents, as when the detector read every engine: it
// reads what its engine check found besides the configured engine.
func TestSidecarDefaultEngineDetectsSGLang(t *testing.T) {
	h := newHarness(t, testConfig())
	h.eng.sglang = true
	h.ticks(t, 15*12)
	if got := h.d.detector.Reads(); !reflect.DeepEqual(got, []string{"vllm", "sglang"}) {
		t.Fatalf("detector reads %v, want [vllm sglang]", got)
	}
	if got := h.ob.kinds(); got != "" {
		t.Fatalf("healthy period notified: %s", got)
	}
	h.eng.setSlow(true)
	h.tri.cause = "kv_cache_pressure"
	h.ticks(t, 3)
	if len(h.d.Incidents()) != 1 || h.ob.kinds() != "open:kv_cache_pressure" {
		t.Fatalf("SGLang's TTFT rise opened %d incidents, notified %q", len(h.d.Incidents()), h.ob.kinds())
	}
}

// Until the engine check has answered, and in a fleet, the detector reads
// every engine: no answer is no evidence of which engine is there.
func TestDetectorReadsEveryEngineUntilKnown(t *testing.T) {
	ql := &queryLog{fail: func(expr string) bool { return strings.HasPrefix(expr, "count(") }}
	h := newHarnessWith(t, testConfig(), logQueries(ql))
	h.ticks(t, 2)
	if got := h.d.detector.Reads(); got != nil {
		t.Errorf("engine check failing: detector reads %v, want every engine", got)
	}
	ql.mu.Lock()
	ql.fail = func(expr string) bool { return strings.Contains(expr, "sglang") && strings.HasPrefix(expr, "count(") }
	ql.mu.Unlock()
	h.ticks(t, 1)
	if got := h.d.detector.Reads(); !slices.Equal(got, []string{"vllm", "sglang"}) {
		t.Errorf("SGLang's check failing: detector reads %v, want vllm and sglang (not ruled out)", got)
	}
}
