package detect

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/common/model"
)

// manySeries answers every query with n series, one per model_name, all
// with the same value: a Prometheus holding more scopes than the bounds.
type manySeries struct {
	n       int
	queries int
}

func (m *manySeries) Query(_ context.Context, _ string, at time.Time) (model.Vector, []string, error) {
	m.queries++
	vec := make(model.Vector, m.n)
	for i := range vec {
		vec[i] = &model.Sample{Metric: model.Metric{"model_name": model.LabelValue(fmt.Sprintf("m-%05d", i))},
			Value: 0.5, Timestamp: model.TimeFromUnixNano(at.UnixNano())}
	}
	return vec, nil, nil
}

func (m *manySeries) QueryRange(context.Context, string, time.Time, time.Time, time.Duration) (model.Matrix, []string, error) {
	return nil, nil, nil
}

// TestDetectorBounds: with more series than max_series the answers are
// truncated and counted; with more scopes than max_scopes each evaluation
// judges at most max_scopes of them and the evaluations rotate, so every
// scope is judged within a few rotations and none starves.
func TestDetectorBounds(t *testing.T) {
	hold := time.Nanosecond
	cfg := DetectConfig{MaxSeries: 1500, MaxScopes: 100, For: hold,
		Triggers: []Trigger{{Name: "queue_growth", Signal: SignalQueueGrowth, Above: ptr(0.2)}}}
	det, err := NewDetector(cfg, shipped(t))
	if err != nil {
		t.Fatal(err)
	}
	m := &manySeries{n: 2000}
	at := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	judged := map[string]int{}
	fired := 0
	const evaluations = 60
	for i := 0; i < evaluations; i++ {
		dets, err := det.Evaluate(context.Background(), m, at.Add(time.Duration(i)*15*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if len(dets) > cfg.MaxScopes {
			t.Fatalf("evaluation %d judged %d scopes, more than max_scopes %d", i, len(dets), cfg.MaxScopes)
		}
		st := det.Stats()
		if st.Truncated == 0 || st.Series != 2000 || st.Skipped == 0 || st.Parts < 2 || !st.Bounded() {
			t.Fatalf("evaluation %d: stats %+v, want series truncated and scopes skipped", i, st)
		}
		for _, d := range dets {
			judged[d.Key]++
			if d.Firing {
				fired++
			}
			if !det.Covers(d.Key) {
				t.Errorf("Covers(%s) = false for a judged scope", d.Key)
			}
		}
	}
	// 1500 scopes are left after max_series; each one is judged in turn.
	if len(judged) != cfg.MaxSeries {
		t.Errorf("%d distinct scopes judged in %d evaluations, want all %d (rotation)", len(judged), evaluations, cfg.MaxSeries)
	}
	// A pending condition is kept across the evaluations that leave its
	// scope out, so its hold completes when the rotation comes back.
	if fired == 0 {
		t.Error("no scope fired: the rotation forgot the pending conditions")
	}
}
