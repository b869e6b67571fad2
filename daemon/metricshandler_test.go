package daemon

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// failingGatherer returns one family and an error, as prometheus.Gatherers
// does when two gatherers expose inconsistent families.
type failingGatherer struct{}

func (failingGatherer) Gather() ([]*dto.MetricFamily, error) {
	return nil, errors.New("collected metric x was collected before with the same name and label values")
}

// TestMetricsHandlerServesWhatPromhttpServed compares metricsHandler with
// the promhttp.HandlerFor it replaced (compression off) on the same
// gatherers: the same text page for what scrapers ask, name[] filtering
// and the error page.
func TestMetricsHandlerServesWhatPromhttpServed(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "whyslow_test_total", Help: "A counter."}, []string{"target"})
	c.WithLabelValues(`http://a/"x"`).Add(3)
	c.WithLabelValues("b\nc").Inc()
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "whyslow_test_seconds", Help: "A histogram.", Buckets: []float64{0.1, 1}})
	h.Observe(0.5)
	s := prometheus.NewSummary(prometheus.SummaryOpts{Name: "whyslow_test_summary", Help: "A summary\\with \"escapes\".", Objectives: map[float64]float64{0.5: 0.05}})
	s.Observe(2)
	reg.MustRegister(c, h, s, prometheus.NewGoCollector())
	other := prometheus.NewRegistry()
	other.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "whyslow_test_up", Help: "A gauge."}, func() float64 { return 1 }))
	// Gather once per handler: the Go collector's values move between calls.
	snapshot := func(g prometheus.Gatherer) prometheus.Gatherer {
		mfs, err := g.Gather()
		if err != nil {
			t.Fatal(err)
		}
		return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) { return mfs, nil })
	}
	gs := snapshot(prometheus.Gatherers{reg, other})

	serve := func(h http.Handler, target, accept string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, target, nil)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	ours, theirs := metricsHandler(gs), promhttp.HandlerFor(gs, promhttp.HandlerOpts{DisableCompression: true})
	for _, tc := range []struct{ target, accept string }{
		{"/metrics", ""},
		{"/metrics", "text/plain;version=0.0.4;q=0.3,*/*;q=0.2"},
		// Prometheus's default scrape protocols and whyslow's own scraper:
		// promhttp without OpenMetrics answers classic text to both.
		{"/metrics", "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"},
		{"/metrics?name[]=whyslow_test_total&name[]=whyslow_test_up", ""},
	} {
		got, want := serve(ours, tc.target, tc.accept), serve(theirs, tc.target, tc.accept)
		if got.Code != http.StatusOK || want.Code != http.StatusOK {
			t.Fatalf("%s: status %d, promhttp %d", tc.target, got.Code, want.Code)
		}
		if got.Body.String() != want.Body.String() {
			t.Errorf("%s (Accept %q): page differs from promhttp's\n--- ours\n%s\n--- promhttp\n%s", tc.target, tc.accept, got.Body, want.Body)
		}
		if ct := got.Header().Get("Content-Type"); expfmt.ResponseFormat(got.Header()).FormatType() != expfmt.TypeTextPlain {
			t.Errorf("Content-Type %q is not classic text", ct)
		}
	}

	gotErr := serve(metricsHandler(failingGatherer{}), "/metrics", "")
	wantErr := serve(promhttp.HandlerFor(failingGatherer{}, promhttp.HandlerOpts{DisableCompression: true}), "/metrics", "")
	if gotErr.Code != wantErr.Code || gotErr.Body.String() != wantErr.Body.String() {
		t.Errorf("error page = %d %q, promhttp %d %q", gotErr.Code, gotErr.Body, wantErr.Code, wantErr.Body)
	}
}
