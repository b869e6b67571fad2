package diagnose_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/whyslow/whyslow/diagnose"
	"github.com/whyslow/whyslow/query"
	"github.com/whyslow/whyslow/rulesets"
	"github.com/whyslow/whyslow/testbed/accuracy"
)

// BenchmarkTriage triages one scope on the embedded store (every signal at
// both windows, plus the per-target views) and runs the same queries bare
// through the PromQL engine in the same iteration, alternating which goes
// first, reporting whyslow's overhead as the ratio of the summed times and
// as the median of the per-iteration ratios (target ≤ 1.3×):
//
//	go test ./diagnose -run '^$' -bench BenchmarkTriage -benchtime=30x -count=3
func BenchmarkTriage(b *testing.B) {
	ctx := context.Background()
	bun, err := accuracy.Record(ctx, accuracy.Case{Scenario: "kv_pressure", Seed: 7, Names: "v1", GPUSeries: "whyslow"})
	if err != nil {
		b.Fatal(err)
	}
	st, err := accuracy.Load(ctx, bun)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	rs, err := rulesets.Default("vllm")
	if err != nil {
		b.Fatal(err)
	}
	tm := &timedMetrics{Metrics: st}
	opts := accuracy.Options(bun, tm, nil)
	opts.Ruleset = rs
	opts.Concurrency = 1 // same as the bare loop, so the ratio is overhead only

	win := model.Duration(opts.Window).String()
	type q struct {
		expr string
		at   time.Time
	}
	var qs []q
	for _, s := range rs.Signals {
		e, _ := s.Render(opts.Selector, win, nil)
		qs = append(qs, q{e, opts.At}, q{e, opts.At.Add(-opts.Baseline)})
		if s.Targets {
			te, _ := s.Render(opts.Selector, win, []string{"pod"})
			qs = append(qs, q{te, opts.At})
		}
		// The baseline's noise: the gate's statistics (and the request
		// count) over five 1-minute sub-windows of the baseline window.
		if s.Noise || s.Name == "requests" {
			ne, _ := s.Render(opts.Selector, "1m", nil)
			for j := range 5 {
				qs = append(qs, q{ne, opts.At.Add(-opts.Baseline - time.Duration(j)*time.Minute)})
			}
		}
	}

	var triageNs, bareNs time.Duration
	ratios := make([]float64, 0, b.N)
	b.ResetTimer()
	runTriage := func() time.Duration {
		t0 := time.Now()
		if _, err := diagnose.Run(ctx, opts); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	runBare := func() time.Duration {
		t0 := time.Now()
		for _, x := range qs {
			if _, _, err := st.Query(ctx, x.expr, x.at); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(t0)
	}
	for i := 0; i < b.N; i++ {
		// Alternate the order so caches and scheduling noise favour neither.
		var tr, br time.Duration
		if i%2 == 0 {
			tr = runTriage()
			br = runBare()
		} else {
			br = runBare()
			tr = runTriage()
		}
		triageNs += tr
		bareNs += br
		ratios = append(ratios, float64(tr)/float64(br))
	}
	b.StopTimer()
	sort.Float64s(ratios)
	b.ReportMetric(float64(triageNs.Microseconds())/float64(b.N), "triage-µs/op")
	b.ReportMetric(float64(bareNs.Microseconds())/float64(b.N), "bare-µs/op")
	// The ratio of sums, and the median of the per-iteration ratios, which a
	// noisy neighbour on a shared machine moves less.
	b.ReportMetric(float64(triageNs)/float64(bareNs), "overhead-ratio")
	b.ReportMetric(ratios[len(ratios)/2], "overhead-ratio-median")
	b.ReportMetric(float64(len(qs)), "queries")
	b.ReportMetric(float64(tm.d.Microseconds())/float64(b.N), "triage-query-µs/op")
}

// timedMetrics sums the time spent answering queries inside triage.
type timedMetrics struct {
	query.Metrics
	d time.Duration
}

func (m *timedMetrics) Query(ctx context.Context, expr string, at time.Time) (model.Vector, []string, error) {
	t0 := time.Now()
	v, w, err := m.Metrics.Query(ctx, expr, at)
	m.d += time.Since(t0)
	return v, w, err
}
