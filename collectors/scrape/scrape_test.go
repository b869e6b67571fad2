package scrape

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/whyslow/whyslow/collectors/bundle"
	"github.com/whyslow/whyslow/collectors/store"
)

var t0 = time.Unix(1700000000, 0).UTC()

func TestFormatFor(t *testing.T) {
	tests := []struct {
		ct      string
		want    bundle.Format
		wantErr bool
	}{
		{"application/openmetrics-text; version=1.0.0; charset=utf-8", bundle.FormatOpenMetrics, false},
		{"application/openmetrics-text;version=0.0.1", bundle.FormatOpenMetrics, false},
		{"text/plain; version=0.0.4; charset=utf-8", bundle.FormatPrometheusText, false},
		{"", bundle.FormatPrometheusText, false},
		{"garbage;;", bundle.FormatPrometheusText, false},
		{"application/json", bundle.FormatPrometheusText, false},
		{"application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily", 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.ct, func(t *testing.T) {
			got, err := FormatFor(tc.ct)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("FormatFor = %s, %v; want %s, err %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestInstanceOf(t *testing.T) {
	tests := []struct{ scheme, host, want string }{
		{"http", "10.0.0.1:8000", "10.0.0.1:8000"},
		{"http", "vllm", "vllm:80"},
		{"https", "vllm", "vllm:443"},
		{"http", "[::1]:9", "[::1]:9"},
		{"http", "[::1]", "[::1]:80"},
	}
	for _, tc := range tests {
		if got := instanceOf(tc.scheme, tc.host); got != tc.want {
			t.Errorf("instanceOf(%s, %s) = %s, want %s", tc.scheme, tc.host, got, tc.want)
		}
	}
}

func TestParse(t *testing.T) {
	target := labels.FromStrings("instance", "h:1", "job", "vllm")
	tests := []struct {
		name, body, ctype string
		want              []string // "labels value t"
		wantErr           string
	}{
		{
			name:  "classic text",
			ctype: "text/plain; version=0.0.4",
			body:  "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 3\n",
			want:  []string{`{__name__="vllm:num_requests_running", instance="h:1", job="vllm", model_name="m"} 3 1700000000000`},
		},
		{
			name:  "openmetrics",
			ctype: "application/openmetrics-text; version=1.0.0",
			body:  "# TYPE r counter\nr_total 5\nr_created 1.6999e+09\n# EOF\n",
			want: []string{
				`{__name__="r_total", instance="h:1", job="vllm"} 5 1700000000000`,
				`{__name__="r_created", instance="h:1", job="vllm"} 1.6999e+09 1700000000000`,
			},
		},
		{
			name:  "own timestamp kept",
			ctype: "text/plain",
			body:  "g 1 1699999999000\n",
			want:  []string{`{__name__="g", instance="h:1", job="vllm"} 1 1699999999000`},
		},
		{
			name:  "conflicting target labels exported",
			ctype: "text/plain",
			body:  "g{job=\"other\",instance=\"x\",pod=\"p\",empty=\"\"} 1\n",
			want:  []string{`{__name__="g", exported_instance="x", exported_job="other", instance="h:1", job="vllm", pod="p"} 1 1700000000000`},
		},
		{
			name:    "openmetrics without eof",
			ctype:   "application/openmetrics-text",
			body:    "g 1\n",
			wantErr: `http://h:1/metrics:2:1: data does not end with # EOF`,
		},
		{
			name:    "malformed line",
			ctype:   "text/plain",
			body:    "g 1\ng{ 2\n",
			wantErr: `http://h:1/metrics:2:4: expected label name`,
		},
		{
			name:    "protobuf",
			ctype:   "application/vnd.google.protobuf",
			body:    "x",
			wantErr: "protobuf",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse("http://h:1/metrics", []byte(tc.body), tc.ctype, t0, target)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var lines []string
			for _, s := range got {
				lines = append(lines, fmt.Sprintf("%s %g %d", s.Labels, s.V, s.T))
			}
			if strings.Join(lines, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

// engine is a fake engine /metrics endpoint whose counter grows 10 per
// scrape and whose histogram gets 2 observations (0.2 s, 0.8 s) per scrape.
type engine struct {
	n    atomic.Int64
	om   bool
	gzip bool
}

func (e *engine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := e.n.Add(1)
	var b strings.Builder
	fmt.Fprintf(&b, "# TYPE vllm:request_success counter\nvllm:request_success_total{model_name=\"m\"} %d\n", 100+10*n)
	fmt.Fprintf(&b, "# TYPE vllm:e2e_request_latency_seconds histogram\n")
	for _, bk := range []struct {
		le string
		c  int64
	}{{"0.5", n}, {"1.0", 2 * n}, {"+Inf", 2 * n}} {
		fmt.Fprintf(&b, "vllm:e2e_request_latency_seconds_bucket{le=\"%s\"} %d\n", bk.le, bk.c)
	}
	fmt.Fprintf(&b, "vllm:e2e_request_latency_seconds_sum %g\nvllm:e2e_request_latency_seconds_count %d\n", float64(n), 2*n)
	body := b.String()
	ctype := "text/plain; version=0.0.4; charset=utf-8"
	if e.om && strings.Contains(r.Header.Get("Accept"), "application/openmetrics-text") {
		body += "# EOF\n"
		ctype = "application/openmetrics-text; version=1.0.0; charset=utf-8"
	}
	w.Header().Set("Content-Type", ctype)
	if e.gzip && strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		_, _ = zw.Write([]byte(body))
		_ = zw.Close()
		return
	}
	_, _ = w.Write([]byte(body))
}

func newStore(t *testing.T) *store.Store {
	t.Helper()
	s, err := store.Open(store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestScrape(t *testing.T) {
	for _, tc := range []struct {
		name     string
		om, gzip bool
	}{{"text", false, false}, {"openmetrics", true, false}, {"gzip openmetrics", true, true}, {"gzip text", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(&engine{om: tc.om, gzip: tc.gzip})
			defer srv.Close()
			st := newStore(t)
			reg := prometheus.NewRegistry()
			s, err := New(st, Options{Registerer: reg, Job: "vllm"})
			if err != nil {
				t.Fatal(err)
			}
			target := srv.URL + "/metrics"
			for i := 0; i < 5; i++ {
				n, err := s.Scrape(context.Background(), target, t0.Add(time.Duration(i)*time.Second))
				if err != nil {
					t.Fatalf("scrape %d: %v", i, err)
				}
				if n != 6 {
					t.Fatalf("scrape %d stored %d samples, want 6", i, n)
				}
			}
			at := t0.Add(4 * time.Second)
			instance := strings.TrimPrefix(srv.URL, "http://")
			checks := []struct {
				expr string
				want float64
			}{
				{`rate(vllm:request_success_total{job="vllm",instance="` + instance + `"}[5s])`, 10},
				{`up{job="vllm"}`, 1},
				{`scrape_samples_scraped`, 6},
				// Lifetime mean from the cumulative counters, window mean from rate().
				{`vllm:e2e_request_latency_seconds_sum / vllm:e2e_request_latency_seconds_count`, 0.5},
				{`rate(vllm:e2e_request_latency_seconds_sum[10s]) / rate(vllm:e2e_request_latency_seconds_count[10s])`, 0.5},
				{`histogram_quantile(0.5, sum by (le) (vllm:e2e_request_latency_seconds_bucket))`, 0.5},
			}
			for _, c := range checks {
				v, _, err := st.Query(context.Background(), c.expr, at)
				if err != nil {
					t.Fatal(err)
				}
				if len(v) != 1 || math.Abs(float64(v[0].Value)-c.want) > 1e-9 {
					t.Errorf("%s = %v, want %v", c.expr, v, c.want)
				}
			}
			if got := testutil.ToFloat64(s.success.WithLabelValues(target)); got != 1 {
				t.Errorf("whyslow_scrape_success = %v", got)
			}
			if got := testutil.ToFloat64(s.samples.WithLabelValues(target)); got != 6 {
				t.Errorf("whyslow_scrape_samples = %v", got)
			}
			if n, err := testutil.GatherAndCount(reg, "whyslow_scrape_duration_seconds"); err != nil || n != 1 {
				t.Errorf("whyslow_scrape_duration_seconds series = %d, %v", n, err)
			}
		})
	}
}

func TestScrapeFailures(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	mux := http.NewServeMux()
	mux.HandleFunc("/500", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "boom", 500) })
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(bytes.Repeat([]byte("a_metric_with_a_long_name 1\n"), 100))
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("/bad", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok 1\nnot ok\n")) })
	mux.HandleFunc("/badgzip", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		_, _ = w.Write([]byte("not gzip at all"))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL
	down.Close()

	st := newStore(t)
	s, err := New(st, Options{Timeout: 200 * time.Millisecond, MaxBodyBytes: 1000, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, target, want string
	}{
		{"http error", srv.URL + "/500", "HTTP status 500"},
		{"too big", srv.URL + "/big", "larger than 1000 bytes"},
		{"timeout", srv.URL + "/slow", "timed out after 200ms"},
		{"malformed", srv.URL + "/bad", "/bad:2:5: "},
		{"bad gzip", srv.URL + "/badgzip", "gzip body"},
		{"down", downURL + "/metrics", "unreachable"},
		{"not a url", "ftp://x/metrics", "not an http(s) URL"},
		{"password redacted", "http://user:hunter2@" + strings.TrimPrefix(downURL, "http://") + "/metrics", "user:xxxxx@"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			at := t0.Add(time.Duration(i) * time.Second)
			_, err := s.Scrape(context.Background(), tc.target, at)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want error containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("password leaked: %v", err)
			}
			if tc.name == "not a url" {
				return
			}
			v, _, qerr := st.Query(context.Background(), `up`, at)
			if qerr != nil {
				t.Fatal(qerr)
			}
			found := false
			for _, smp := range v {
				if smp.Timestamp.Time().Equal(at) || int64(smp.Timestamp) == at.UnixMilli() {
					found = found || smp.Value == 0
				}
			}
			if !found {
				t.Errorf("no up=0 stored for the failed scrape: %v", v)
			}
		})
	}
}

func TestLoopSample(t *testing.T) {
	good := httptest.NewServer(&engine{})
	defer good.Close()
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL + "/metrics"
	down.Close()

	st := newStore(t)
	s, err := New(st, Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	l := &Loop{Scraper: s, Targets: []string{good.URL + "/metrics"}, Interval: 20 * time.Millisecond}
	status, err := l.Sample(context.Background(), 150*time.Millisecond)
	if err != nil {
		t.Fatalf("Sample: %v", err)
	}
	if len(status) != 1 || status[0].OK < 2 || status[0].Failed != 0 {
		t.Errorf("status = %+v", status)
	}

	l.Targets = append(l.Targets, downURL)
	status, err = l.Sample(context.Background(), 60*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("Sample with a down target: got %v", err)
	}
	if status[0].OK == 0 || status[1].OK != 0 || status[1].Failed == 0 {
		t.Errorf("status = %+v", status)
	}
}

// TestScrapeReplicasSharingHostPort scrapes two replicas that one server
// exposes on /replica/1/metrics and /replica/2/metrics (as whyslow sim serve
// does): same host:port, so the same instance label, but two targets. Both
// scrapes at the same time must be stored, as two series sets told apart by
// the target label, and each replica's lifetime comes from its own start.
func TestScrapeReplicasSharingHostPort(t *testing.T) {
	mux := http.NewServeMux()
	for _, r := range []struct {
		n       int
		running int
		total   int
		start   int64
	}{{1, 3, 10, 1700000000 - 3600}, {2, 5, 20, 1700000000 - 600}} {
		body := fmt.Sprintf("vllm:num_requests_running{model_name=\"m\"} %d\nreq_total %d\nprocess_start_time_seconds %d\n", r.running, r.total, r.start)
		mux.HandleFunc(fmt.Sprintf("/replica/%d/metrics", r.n), func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte(body))
		})
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	st := newStore(t)
	targets := []string{srv.URL + "/replica/1/metrics", srv.URL + "/replica/2/metrics"}
	s, err := New(st, Options{Targets: targets})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, target := range targets {
		if _, err := s.Scrape(ctx, target, t0); err != nil {
			t.Fatalf("second replica's samples refused: %v", err)
		}
	}
	instance := strings.TrimPrefix(srv.URL, "http://")
	for _, expr := range []string{`vllm:num_requests_running`, `up`, `req_total`} {
		v, _, err := st.Query(ctx, expr, t0)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, smp := range v {
			if string(smp.Metric["instance"]) != instance {
				t.Errorf("%s: instance %q, want host:port %q", expr, smp.Metric["instance"], instance)
			}
			got[string(smp.Metric[TargetLabel])] = float64(smp.Value)
		}
		if len(got) != 2 || got["/replica/1/metrics"] == 0 || got["/replica/2/metrics"] == 0 {
			t.Errorf("%s: series by target %v, want one per replica path", expr, got)
		}
	}

	// Each replica's lifetime is its own: 1h and 10m.
	end := t0.Add(-time.Minute)
	if _, err := WriteLifetimeBaseline(ctx, st, st, t0, end, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	for target, want := range map[string]float64{"/replica/1/metrics": 10 * 10.0 / 3600, "/replica/2/metrics": 20 * 10.0 / 600} {
		v, _, err := st.Query(ctx, `req_total{target="`+target+`"}`, end)
		if err != nil {
			t.Fatal(err)
		}
		if len(v) != 1 || math.Abs(float64(v[0].Value)-want) > 1e-9 {
			t.Errorf("%s lifetime baseline = %v, want %g (its own start time)", target, v, want)
		}
	}
}

func TestTargetOf(t *testing.T) {
	for raw, want := range map[string]string{
		"http://h:1/metrics":                  "/metrics",
		"http://h:1":                          "/",
		"http://h:1/":                         "/",
		"http://h:1/replica/2/metrics?tok=s3": "/replica/2/metrics",
		"https://u:pw@h/prometheus/metrics":   "/prometheus/metrics",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if got := targetOf(u); got != want {
			t.Errorf("targetOf(%s) = %q, want %q", raw, got, want)
		}
	}
}

// TestScrapeTargetLabelOnlyWhereShared: a target alone on its host:port
// gets exactly Prometheus's labels (job, instance), so queries read the
// embedded store and a Prometheus alike.
func TestScrapeTargetLabelOnlyWhereShared(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("req_total 1\n"))
	}))
	defer srv.Close()
	st := newStore(t)
	s, err := New(st, Options{Targets: []string{srv.URL + "/metrics", "http://127.0.0.2:9/metrics"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Scrape(context.Background(), srv.URL+"/metrics", t0); err != nil {
		t.Fatal(err)
	}
	v, _, err := st.Query(context.Background(), "req_total", t0)
	if err != nil || len(v) != 1 {
		t.Fatalf("req_total: %v %v", v, err)
	}
	if _, ok := v[0].Metric[TargetLabel]; ok {
		t.Errorf("a target alone on its host:port got a target label: %v", v[0].Metric)
	}
}
