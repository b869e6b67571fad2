package detect

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/whyslow/whyslow/query"
	"github.com/whyslow/whyslow/query/querytest"
)

// shipped are the shipped maps' detector sections, in the engine list's
// order (detect may not import rulesets, which hands them to the daemon).
func shipped(t testing.TB) []Engine {
	t.Helper()
	var out []Engine
	for _, name := range []string{"vllm", "sglang", "trtllm"} {
		out = append(out, shippedEngine(t, name))
	}
	return out
}

// shippedEngine is the detector part of the shipped map of engine name.
func shippedEngine(t testing.TB, name string) Engine {
	t.Helper()
	b, err := os.ReadFile("../rulesets/" + name + ".yaml")
	if err != nil {
		t.Fatal(err)
	}
	e, err := ParseEngine(name, b)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// recorder remembers the queries a detector sends.
type recorder struct {
	query.Metrics
	exprs []string
}

func (r *recorder) Query(ctx context.Context, expr string, at time.Time) (model.Vector, []string, error) {
	r.exprs = append(r.exprs, expr)
	return r.Metrics.Query(ctx, expr, at)
}

// engineNames are the metric names an engine's part reads (its families
// and counters, matchers cut), each matched as a whole name.
func engineNames(e Engine) []*regexp.Regexp {
	var names []string
	for _, fams := range [][]string{e.TTFT, e.ITL, e.Queue, e.Requests} {
		for _, f := range fams {
			name, _, _ := strings.Cut(f, "{")
			names = append(names, name)
		}
	}
	for _, h := range e.HTTP {
		names = append(names, h.Counter, h.EngineSeries)
	}
	var out []*regexp.Regexp
	for _, n := range names {
		out = append(out, regexp.MustCompile(`(^|[^a-zA-Z0-9_:])`+regexp.QuoteMeta(n)+`($|[^a-zA-Z0-9_:])`))
	}
	return out
}

// onsetCase is a store whose slowdown fires the detector, the triggers it
// fires, and the samples around its onset that a comparison ticks through.
type onsetCase struct {
	name, load string
	triggers   []Trigger
	from, to   int
}

// onsetCases are the comparisons' stores: a TTFT ratio trigger and the
// default inter-token triggers with onsets at sample 840, and the default
// success and queue triggers with one at sample 100.
func onsetCases() []onsetCase {
	hold := time.Duration(0)
	return []onsetCase{
		{"ttft", ttftLoad(), []Trigger{{Name: "ttft", Signal: SignalTTFTP95, Ratio: 2, MinIncrease: 0.1, For: &hold}}, 836, 866},
		{"itl defaults", itlLoad(), nil, 836, 866},
		{"success and queue defaults", successQueueLoad, nil, 96, 136},
	}
}

// A detector narrowed to vLLM (ReadOnly) on a vLLM store judges every
// scope as the one that reads every engine, tick by tick, pending holds
// included (it is narrowed mid-run), and sends none of the other
// engines' names.
func TestReadOnlyDetectsTheSame(t *testing.T) {
	engines := shipped(t)
	for _, c := range onsetCases() {
		t.Run(c.name, func(t *testing.T) {
			m := querytest.New(t, c.load)
			cfg := DetectConfig{Triggers: c.triggers}
			all, err := NewDetector(cfg, engines)
			if err != nil {
				t.Fatal(err)
			}
			narrow, err := NewDetector(cfg, engines)
			if err != nil {
				t.Fatal(err)
			}
			rec := &recorder{Metrics: m}
			fired := false
			for i := c.from; i <= c.to; i++ {
				if i == (c.from+c.to)/2 {
					narrow.ReadOnly([]string{"vllm"})
					rec.exprs = nil
				}
				at := time.Unix(int64(i)*5, 0)
				fired = judgedAlike(t, fmt.Sprintf("sample %d: narrowed,", i),
					func() ([]Detection, error) { return narrow.Evaluate(context.Background(), rec, at) },
					func() ([]Detection, error) { return all.Evaluate(context.Background(), m, at) }) || fired
			}
			if !fired {
				t.Fatal("nothing fired: the comparison proves little")
			}
			if got := narrow.Reads(); !reflect.DeepEqual(got, []string{"vllm"}) {
				t.Errorf("Reads() = %v", got)
			}
			if len(rec.exprs) == 0 {
				t.Fatal("no query recorded")
			}
			for _, e := range engines[1:] {
				for _, re := range engineNames(e) {
					for _, q := range rec.exprs {
						if re.MatchString(q) {
							t.Fatalf("narrowed to vllm, the detector read %s's %s: %s", e.Name, re, q)
						}
					}
				}
			}
		})
	}
}

// An engine that gives no signal of a trigger (TGI has no TTFT histogram)
// reads nothing for it, as the whole `or` finds no series, instead of
// failing; ReadOnly(nil) reads every engine again.
func TestReadOnlyEngineWithoutSignal(t *testing.T) {
	tgi := shippedEngine(t, "tgi")
	d, err := NewDetector(DetectConfig{}, append(shipped(t), tgi))
	if err != nil {
		t.Fatal(err)
	}
	m := querytest.New(t, ttftLoad())
	at := time.Unix(900*5, 0)
	d.ReadOnly([]string{"tgi"})
	rec := &recorder{Metrics: m}
	dets, err := d.Evaluate(context.Background(), rec, at)
	if err != nil {
		t.Fatal(err)
	}
	if len(dets) != 0 {
		t.Errorf("tgi alone judged the vLLM store's scopes: %+v", dets)
	}
	for _, q := range rec.exprs {
		if strings.Contains(q, "time_to_first_token") {
			t.Errorf("tgi alone queried a TTFT histogram: %s", q)
		}
	}
	d.ReadOnly(nil)
	if d.Reads() != nil {
		t.Errorf("Reads() = %v after ReadOnly(nil)", d.Reads())
	}
	if dets, err = d.Evaluate(context.Background(), m, at); err != nil || len(dets) != 2 {
		t.Errorf("every engine again: %d scopes, %v", len(dets), err)
	}
}

// timedRecorder remembers each query with its time.
type timedRecorder struct {
	query.Metrics
	asked map[string]int
}

func (r *timedRecorder) Query(ctx context.Context, expr string, at time.Time) (model.Vector, []string, error) {
	r.asked[expr+" @ "+at.UTC().Format(time.RFC3339Nano)]++
	return r.Metrics.Query(ctx, expr, at)
}

// One evaluation asks each query once: ttft_p95 and tpot_p95 both count
// requests with TTFT's _count, in the windows and, while learning, at each
// baseline point. The detections are those of TestReadOnlyDetectsTheSame's
// loads, which compare with a detector answering every query itself.
func TestEvaluationAsksEachQueryOnce(t *testing.T) {
	m := querytest.New(t, vllmLoad(2))
	d, err := NewDetector(DetectConfig{}, shipped(t))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Unix(0, 0)
	for _, at := range []time.Duration{30 * time.Minute, 70 * time.Minute} { // learning, then the whole baseline
		rec := &timedRecorder{Metrics: m, asked: map[string]int{}}
		dets, err := d.EvaluateSince(context.Background(), rec, start.Add(at), start)
		if err != nil {
			t.Fatal(err)
		}
		if len(dets) != 2 {
			t.Fatalf("at %s: %d scopes, want 2", at, len(dets))
		}
		for q, n := range rec.asked {
			if n > 1 {
				t.Errorf("at %s: asked %d times: %s", at, n, q)
			}
		}
	}
}
