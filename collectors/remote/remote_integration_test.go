package remote

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/whyslow/whyslow/collectors/scrape"
	"github.com/whyslow/whyslow/collectors/store"
	"github.com/whyslow/whyslow/testbed/promtest"
)

// linearEngine serves metrics that are linear in wall-clock time, so two
// scrapers hitting it at slightly different moments see the same rates.
func linearEngine(start time.Time) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := time.Since(start).Seconds()
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		fmt.Fprintf(w, "# TYPE test_requests_total counter\ntest_requests_total{model_name=\"m\"} %g\n", 1000+10*s)
		fmt.Fprintf(w, "# TYPE test_waiting gauge\ntest_waiting 7\n")
		fmt.Fprintf(w, "# TYPE test_ttft_seconds histogram\n")
		fmt.Fprintf(w, "test_ttft_seconds_bucket{le=\"0.5\"} %g\n", 2*s)
		fmt.Fprintf(w, "test_ttft_seconds_bucket{le=\"1\"} %g\n", 3*s)
		fmt.Fprintf(w, "test_ttft_seconds_bucket{le=\"+Inf\"} %g\n", 4*s)
		fmt.Fprintf(w, "test_ttft_seconds_sum %g\ntest_ttft_seconds_count %g\n", 2.4*s, 4*s)
	})
}

// TestRemoteMatchesEmbedded scrapes one endpoint with a real Prometheus and
// with whyslow's scraper into the embedded store, then runs the same PromQL
// on both and compares.
func TestRemoteMatchesEmbedded(t *testing.T) {
	promtest.SkipUnlessAvailable(t)
	engine := httptest.NewServer(linearEngine(time.Now()))
	defer engine.Close()
	target := strings.TrimPrefix(engine.URL, "http://")

	base := promtest.Start(context.Background(), t, []string{target})

	// whyslow scrapes the same endpoint into the embedded store meanwhile.
	st, err := store.Open(store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sc, err := scrape.New(st, scrape.Options{Job: "engine", Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	loopCtx, stopLoop := context.WithCancel(context.Background())
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		(&scrape.Loop{Scraper: sc, Targets: []string{engine.URL + "/metrics"}, Interval: time.Second}).Run(loopCtx)
	}()
	defer func() { stopLoop(); <-loopDone }()

	rc, err := New(Options{URL: base, Timeout: time.Minute}) // hang guard per query
	if err != nil {
		t.Fatal(err)
	}

	// Wait until Prometheus has six scrapes of the target: the loop ends as
	// soon as it has; the deadline only guards against a hang.
	ctx := context.Background()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		v, _, err := rc.Query(ctx, `count_over_time(test_waiting[1m])`, time.Now())
		if err == nil && len(v) == 1 && v[0].Value >= 6 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus has no data after 2m: last result %v, err %v", v, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	stopLoop()
	<-loopDone

	at := time.Now().Add(-500 * time.Millisecond)
	queries := []string{
		`rate(test_requests_total[5s])`,
		`sum by (job, instance) (rate(test_requests_total[5s]))`,
		`test_waiting`,
		`histogram_quantile(0.6, sum by (le) (rate(test_ttft_seconds_bucket[5s])))`,
		`test_ttft_seconds_sum / test_ttft_seconds_count`,
		`up`,
	}
	for _, q := range queries {
		t.Run(q, func(t *testing.T) {
			remote, _, err := rc.Query(ctx, q, at)
			if err != nil {
				t.Fatalf("remote: %v", err)
			}
			local, _, err := st.Query(ctx, q, at)
			if err != nil {
				t.Fatalf("embedded: %v", err)
			}
			compareVectors(t, remote, local, 0.02)
		})
	}

	// The same check for a range query.
	rm, _, err := rc.QueryRange(ctx, `rate(test_requests_total[3s])`, at.Add(-2*time.Second), at, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	lm, _, err := st.QueryRange(ctx, `rate(test_requests_total[3s])`, at.Add(-2*time.Second), at, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(rm) != 1 || len(lm) != 1 {
		t.Fatalf("range: remote %v, embedded %v", rm, lm)
	}
	for _, p := range append(rm[0].Values, lm[0].Values...) {
		if math.Abs(float64(p.Value)-10) > 0.2 {
			t.Errorf("range point %v, want about 10", p)
		}
	}
}

// compareVectors checks both results have the same label sets and values
// within a relative tolerance.
func compareVectors(t *testing.T, remote, local model.Vector, tol float64) {
	t.Helper()
	key := func(v model.Vector) []string {
		var out []string
		for _, s := range v {
			out = append(out, s.Metric.String())
		}
		sort.Strings(out)
		return out
	}
	if strings.Join(key(remote), ";") != strings.Join(key(local), ";") {
		t.Fatalf("label sets differ:\nremote   %v\nembedded %v", remote, local)
	}
	if len(remote) == 0 {
		t.Fatal("empty result")
	}
	byKey := map[string]float64{}
	for _, s := range local {
		byKey[s.Metric.String()] = float64(s.Value)
	}
	for _, s := range remote {
		r, l := float64(s.Value), byKey[s.Metric.String()]
		if math.Abs(r-l) > tol*math.Max(math.Abs(r), 1e-9) {
			t.Errorf("%s: remote %v, embedded %v", s.Metric, r, l)
		}
	}
}
