package scrape

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// agedEngine is an engine that started an hour before t0 and served 5
// requests/s (latency 0.2 s, all under le=0.5) until t0, then serves 20/s
// (latency 0.8 s, le=1) during the sample; scrape i happens at t0+i s.
type agedEngine struct {
	n         atomic.Int64
	withStart bool
}

func (e *agedEngine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	i := float64(e.n.Add(1) - 1)
	life := 5 * 3600.0 // requests before t0
	fast, slow := life, 20*i
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	if e.withStart {
		fmt.Fprintf(w, "process_start_time_seconds %d\n", t0.Add(-time.Hour).Unix())
	}
	fmt.Fprintf(w, "vllm:request_success_total %g\n", fast+slow)
	fmt.Fprintf(w, "vllm:e2e_request_latency_seconds_bucket{le=\"0.5\"} %g\n", fast)
	fmt.Fprintf(w, "vllm:e2e_request_latency_seconds_bucket{le=\"1.0\"} %g\n", fast+slow)
	fmt.Fprintf(w, "vllm:e2e_request_latency_seconds_bucket{le=\"+Inf\"} %g\n", fast+slow)
	fmt.Fprintf(w, "vllm:e2e_request_latency_seconds_sum %g\n", 0.2*fast+0.8*slow)
	fmt.Fprintf(w, "vllm:e2e_request_latency_seconds_count %g\n", fast+slow)
	fmt.Fprintf(w, "vllm:num_requests_running 3\n")
}

func TestWriteLifetimeBaseline(t *testing.T) {
	for _, withStart := range []bool{true, false} {
		t.Run(fmt.Sprintf("start known %v", withStart), func(t *testing.T) {
			srv := httptest.NewServer(&agedEngine{withStart: withStart})
			defer srv.Close()
			st := newStore(t)
			s, err := New(st, Options{})
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i <= 5; i++ {
				if _, err := s.Scrape(context.Background(), srv.URL, t0.Add(time.Duration(i)*time.Second)); err != nil {
					t.Fatal(err)
				}
			}
			window := 5 * time.Second
			baseEnd := t0.Add(-time.Minute)
			lb, err := WriteLifetimeBaseline(context.Background(), st, st, t0, baseEnd, window)
			if err != nil {
				t.Fatal(err)
			}
			if lb.Series != 6 || lb.StartKnown != withStart {
				t.Errorf("baseline = %+v", lb)
			}
			lifeRate := 5.0 // requests per second over the hour before t0
			if !withStart {
				lifeRate = 5 * 3600 / AssumedLifetime.Seconds()
			}
			at := t0.Add(5 * time.Second)
			checks := []struct {
				expr     string
				at       time.Time
				want     float64
				tolerant bool
			}{
				{`rate(vllm:request_success_total[5s])`, baseEnd, lifeRate, true},
				{`rate(vllm:e2e_request_latency_seconds_sum[5s]) / rate(vllm:e2e_request_latency_seconds_count[5s])`, baseEnd, 0.2, false},
				{`vllm:e2e_request_latency_seconds_sum / vllm:e2e_request_latency_seconds_count`, baseEnd, 0.2, false},
				{`histogram_quantile(0.9, sum by (le) (rate(vllm:e2e_request_latency_seconds_bucket[5s])))`, baseEnd, 0.45, false},
				// The sample window is untouched by the synthetic baseline.
				{`rate(vllm:request_success_total[5s])`, at, 20, true},
				{`rate(vllm:e2e_request_latency_seconds_sum[5s]) / rate(vllm:e2e_request_latency_seconds_count[5s])`, at, 0.8, false},
			}
			for _, c := range checks {
				v, _, err := st.Query(context.Background(), c.expr, c.at)
				if err != nil {
					t.Fatal(err)
				}
				tol := 1e-6
				if c.tolerant {
					tol = 0.01 * c.want // the synthetic window is 1 ms short
				}
				if len(v) != 1 || math.Abs(float64(v[0].Value)-c.want) > tol {
					t.Errorf("%s at %s = %v, want %v", c.expr, c.at.Format(time.TimeOnly), v, c.want)
				}
			}
			// Gauges get no baseline.
			if v, _, _ := st.Query(context.Background(), `vllm:num_requests_running`, baseEnd); len(v) != 0 {
				t.Errorf("gauge has a baseline: %v", v)
			}
		})
	}
}

func TestWriteLifetimeBaselineErrors(t *testing.T) {
	st := newStore(t)
	if _, err := WriteLifetimeBaseline(context.Background(), st, st, t0, t0, time.Second); err == nil {
		t.Error("baseline end at the first scrape: want error")
	}
}
