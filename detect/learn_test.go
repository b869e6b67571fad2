package detect

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/whyslow/whyslow/query"
	"github.com/whyslow/whyslow/query/querytest"
)

// rangeCounter counts a source's instant and range queries; a range
// query asked twice in one evaluation is a repeat.
type rangeCounter struct {
	query.Metrics
	instant, ranges int
	asked           map[string]int
}

func (c *rangeCounter) Query(ctx context.Context, expr string, at time.Time) (model.Vector, []string, error) {
	c.instant++
	return c.Metrics.Query(ctx, expr, at)
}

func (c *rangeCounter) QueryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) (model.Matrix, []string, error) {
	c.ranges++
	c.asked[expr+" @ "+start.UTC().Format(time.RFC3339Nano)+" "+step.String()]++
	return c.Metrics.QueryRange(ctx, expr, start, end, step)
}

// A learning baseline's points are asked as one range query per
// expression where the source answers range queries; tick by tick the
// detections are those of a detector that asks each point as an instant
// query (querytest.Metrics has no range queries), over histories that give
// one to six points, with onsets that fire ratio triggers while learning.
func TestLearnedBaselineRangeQueryDetectsTheSame(t *testing.T) {
	engines := shipped(t)
	for _, c := range onsetCases() {
		if c.from != 836 {
			continue // the histories below are counted back from sample 840
		}
		t.Run(c.name, func(t *testing.T) {
			m := querytest.New(t, c.load)
			cfg := DetectConfig{Triggers: c.triggers}
			fired := false
			// History at the onset (sample 840, 70 min): 9, 14, 40 and 54
			// minutes, so learning reads one point (an instant query),
			// three, and six.
			for _, since := range []time.Duration{61 * time.Minute, 56 * time.Minute, 30 * time.Minute, 16 * time.Minute} {
				pointwise, err := NewDetector(cfg, engines)
				if err != nil {
					t.Fatal(err)
				}
				ranged, err := NewDetector(cfg, engines)
				if err != nil {
					t.Fatal(err)
				}
				src := &rangeCounter{Metrics: querytest.Range{Metrics: m}}
				from := time.Unix(0, 0).Add(since)
				for i := 836; i <= 866; i += 2 {
					at := time.Unix(int64(i)*5, 0)
					src.asked = map[string]int{}
					fired = judgedAlike(t, fmt.Sprintf("history from %s, sample %d: with range queries", since, i),
						func() ([]Detection, error) { return ranged.EvaluateSince(context.Background(), src, at, from) },
						func() ([]Detection, error) { return pointwise.EvaluateSince(context.Background(), m, at, from) }) || fired
					for q, n := range src.asked {
						if n > 1 {
							t.Errorf("sample %d: range query asked %d times: %s", i, n, q)
						}
					}
				}
				if since < 61*time.Minute && src.ranges == 0 {
					t.Errorf("history from %s: the learning baseline asked no range query", since)
				}
				t.Logf("history from %s: %d instant and %d range queries", since, src.instant, src.ranges)
			}
			if !fired {
				t.Fatal("nothing fired: the comparison proves little")
			}
		})
	}
}

// alignedRange answers a range query from the start aligned down to a
// multiple of the step, as a query frontend that aligns queries does.
type alignedRange struct{ querytest.Range }

func (a alignedRange) QueryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) (model.Matrix, []string, error) {
	return a.Range.QueryRange(ctx, expr, start.Truncate(step), end, step)
}

// A range answer at other times than the baseline's points is not taken
// for them: the detector asks the points one by one and judges as a
// detector that never asks a range query.
func TestLearnedBaselineIgnoresAlignedRangeAnswers(t *testing.T) {
	// TTFT whose p95 rises through the history (the share of requests
	// under 0.1 s falls from 90% to 30%, a tenth every 10 minutes), so the
	// learned baseline (the highest window) moves with its points; from
	// sample 841 on every request is over 1 s.
	var fast, second, all strings.Builder
	for i, n := 0, 0; i <= 960; i++ {
		fmt.Fprintf(&fast, " %d", n)
		fmt.Fprintf(&second, " %d", 10*min(i, 840))
		fmt.Fprintf(&all, " %d", 10*i)
		if i < 840 {
			n += 9 - i/120
		}
	}
	m := querytest.New(t, "load 5s\n"+
		`  vllm:time_to_first_token_seconds_bucket{model_name="m",le="0.1"}`+fast.String()+"\n"+
		`  vllm:time_to_first_token_seconds_bucket{model_name="m",le="1"}`+second.String()+"\n"+
		`  vllm:time_to_first_token_seconds_bucket{model_name="m",le="+Inf"}`+all.String()+"\n")
	hold := time.Duration(0)
	cfg := DetectConfig{Triggers: []Trigger{{Name: "ttft", Signal: SignalTTFTP95, Ratio: 1.05, For: &hold}}}
	pointwise, err := NewDetector(cfg, shipped(t))
	if err != nil {
		t.Fatal(err)
	}
	aligned, err := NewDetector(cfg, shipped(t))
	if err != nil {
		t.Fatal(err)
	}
	from := time.Unix(0, 0).Add(30*time.Minute + 7*time.Second) // points off the step grid
	fired := false
	for i := 836; i <= 866; i += 3 {
		at := time.Unix(int64(i)*5, 0)
		fired = judgedAlike(t, fmt.Sprintf("sample %d: with an aligning source", i),
			func() ([]Detection, error) {
				return aligned.EvaluateSince(context.Background(), alignedRange{querytest.Range{Metrics: m}}, at, from)
			},
			func() ([]Detection, error) { return pointwise.EvaluateSince(context.Background(), m, at, from) }) || fired
	}
	if !fired {
		t.Fatal("nothing fired: the comparison proves little")
	}
}

// judgedAlike runs one tick of two detectors that must agree (got, then the
// reference), fails the test where they do not, and says whether the
// reference fired: a comparison where nothing fires proves little.
func judgedAlike(t *testing.T, what string, got, want func() ([]Detection, error)) bool {
	t.Helper()
	g, err := got()
	if err != nil {
		t.Fatal(err)
	}
	w, err := want()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("%s the detector judged\n%+v\nagainst\n%+v", what, g, w)
	}
	for _, det := range w {
		if det.Firing {
			return true
		}
	}
	return false
}
