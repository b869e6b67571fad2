package main

import (
	"context"
	"image/png"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/whyslow/whyslow/verdict"
)

// rampMetrics answers every range query with a ramp.
type rampMetrics struct{}

func (rampMetrics) Query(context.Context, string, time.Time) (model.Vector, []string, error) {
	return nil, nil, nil
}

func (rampMetrics) QueryRange(_ context.Context, _ string, start, end time.Time, step time.Duration) (model.Matrix, []string, error) {
	ss := &model.SampleStream{}
	for t, i := start, 0; !t.After(end); t, i = t.Add(step), i+1 {
		ss.Values = append(ss.Values, model.SamplePair{Timestamp: model.TimeFromUnixNano(t.UnixNano()), Value: model.SampleValue(i)})
	}
	return model.Matrix{ss}, nil, nil
}

func TestWriteChart(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	v := &verdict.Verdict{Status: verdict.StatusAnomaly, Engine: "vllm",
		Incident: verdict.Window{Start: t0.Add(-5 * time.Minute), End: t0},
		Baseline: verdict.Window{Start: t0.Add(-65 * time.Minute), End: t0.Add(-time.Hour)}}
	path := filepath.Join(t.TempDir(), "c.png")
	if err := writeChart(context.Background(), rampMetrics{}, v, path, nil); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Fatal(err)
	}
	if err := writeChart(context.Background(), rampMetrics{}, v, filepath.Join(t.TempDir(), "missing", "c.png"), nil); err == nil {
		t.Error("no error for a missing directory")
	}
}
