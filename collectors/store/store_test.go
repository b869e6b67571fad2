package store

import (
	"context"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
)

var t0 = time.Unix(1700000000, 0).UTC()

func openMem(t testing.TB) *Store {
	t.Helper()
	s, err := Open(Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// fill appends, series by series (the order bundles are written in), a
// counter growing 3/15s, a histogram of 3 observations per 15 s (1 at
// <=0.1, 1 at <=0.5, 1 at <=1) and a gauge, for two pods over 2 hours.
func fill(t testing.TB, s *Store) {
	t.Helper()
	app := s.Appender(context.Background())
	steps := int((2 * time.Hour) / (15 * time.Second))
	for _, pod := range []string{"a", "b"} {
		k := 1.0
		if pod == "b" {
			k = 2
		}
		base := []string{"job", "vllm", "instance", pod + ":8000", "pod", pod}
		add := func(name string, extra []string, f func(i int) float64) {
			ls := labels.FromStrings(append(append([]string{"__name__", name}, base...), extra...)...)
			for i := 0; i <= steps; i++ {
				ts := t0.Add(time.Duration(i) * 15 * time.Second).UnixMilli()
				if _, err := app.Append(0, ls, ts, f(i)); err != nil {
					t.Fatalf("append %s: %v", ls, err)
				}
			}
		}
		add("requests_total", nil, func(i int) float64 { return 3 * k * float64(i) })
		add("queue", nil, func(int) float64 { return 4 * k })
		for _, b := range []struct {
			le  string
			inc float64
		}{{"0.1", 1}, {"0.5", 2}, {"1.0", 3}, {"+Inf", 3}} {
			add("ttft_seconds_bucket", []string{"le", b.le}, func(i int) float64 { return b.inc * k * float64(i) })
		}
		add("ttft_seconds_sum", nil, func(i int) float64 { return 1.6 * k * float64(i) })
		add("ttft_seconds_count", nil, func(i int) float64 { return 3 * k * float64(i) })
	}
	if err := app.Commit(); err != nil {
		t.Fatalf("commit: %v", err)
	}
}

func TestQuery(t *testing.T) {
	s := openMem(t)
	fill(t, s)
	at := t0.Add(time.Hour)
	tests := []struct {
		name string
		expr string
		want map[string]float64 // pod (or "" for no labels) -> value
	}{
		{"rate", `rate(requests_total[5m])`, map[string]float64{"a": 0.2, "b": 0.4}},
		{"sum rate", `sum(rate(requests_total[5m]))`, map[string]float64{"": 0.6}},
		{"gauge", `queue`, map[string]float64{"a": 4, "b": 8}},
		{"histogram_quantile median", `histogram_quantile(0.5, sum by (pod, le) (rate(ttft_seconds_bucket[5m])))`,
			map[string]float64{"a": 0.3, "b": 0.3}},
		{"histogram_quantile p95", `histogram_quantile(0.95, sum by (le) (rate(ttft_seconds_bucket[5m])))`,
			map[string]float64{"": 0.5 + 0.5*(0.95*3-2)/1}},
		{"mean", `sum by (pod) (rate(ttft_seconds_sum[5m])) / sum by (pod) (rate(ttft_seconds_count[5m]))`,
			map[string]float64{"a": 1.6 / 3, "b": 1.6 / 3}},
		{"lifetime mean", `ttft_seconds_sum / ttft_seconds_count`, map[string]float64{"a": 1.6 / 3, "b": 1.6 / 3}},
		{"scalar", `scalar(sum(queue))`, map[string]float64{"": 12}},
		{"number", `1 + 2`, map[string]float64{"": 3}},
		{"nothing", `rate(missing_total[5m])`, map[string]float64{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, warns, err := s.Query(context.Background(), tc.expr, at)
			if err != nil {
				t.Fatalf("Query: %v", err)
			}
			if len(warns) > 0 {
				t.Logf("warnings: %v", warns)
			}
			if len(v) != len(tc.want) {
				t.Fatalf("got %d samples %v, want %d", len(v), v, len(tc.want))
			}
			for _, smp := range v {
				pod := string(smp.Metric["pod"])
				want, ok := tc.want[pod]
				if !ok {
					t.Fatalf("unexpected sample %v", smp)
				}
				if math.Abs(float64(smp.Value)-want) > 1e-9*math.Max(1, want) {
					t.Errorf("pod %q: got %v, want %v", pod, smp.Value, want)
				}
				if smp.Timestamp != model.TimeFromUnixNano(at.UnixNano()) {
					t.Errorf("timestamp %v, want %v", smp.Timestamp, at)
				}
			}
		})
	}
}

func TestQueryErrors(t *testing.T) {
	s := openMem(t)
	fill(t, s)
	tests := []struct {
		name, expr, want string
	}{
		{"parse error", `rate(requests_total[5m]`, `query "rate(requests_total[5m]"`},
		{"string", `"hello"`, "result is a string"},
		{"range vector", `requests_total[5m]`, "range vector"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := s.Query(context.Background(), tc.expr, t0.Add(time.Hour))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want error containing %q", err, tc.want)
			}
		})
	}
	if _, _, err := s.QueryRange(context.Background(), `queue`, t0, t0.Add(time.Minute), 0); err == nil {
		t.Error("QueryRange with zero step: want error")
	}
	if _, _, err := s.QueryRange(context.Background(), `queue)`, t0, t0.Add(time.Minute), time.Second); err == nil || !strings.Contains(err.Error(), "queue)") {
		t.Errorf("QueryRange parse error: got %v", err)
	}
	if err := s.ParseExpr(`sum(`); err == nil {
		t.Error("ParseExpr: want error")
	}
}

func TestQueryRange(t *testing.T) {
	s := openMem(t)
	fill(t, s)
	start := t0.Add(30 * time.Minute)
	m, _, err := s.QueryRange(context.Background(), `sum by (pod) (rate(requests_total[1m]))`, start, start.Add(10*time.Minute), time.Minute)
	if err != nil {
		t.Fatalf("QueryRange: %v", err)
	}
	if len(m) != 2 {
		t.Fatalf("got %d series, want 2", len(m))
	}
	for _, ss := range m {
		if len(ss.Values) != 11 {
			t.Errorf("%v: %d points, want 11", ss.Metric, len(ss.Values))
		}
		want := 0.2
		if ss.Metric["pod"] == "b" {
			want = 0.4
		}
		for _, p := range ss.Values {
			if math.Abs(float64(p.Value)-want) > 1e-9 {
				t.Errorf("%v at %v: %v, want %v", ss.Metric, p.Timestamp, p.Value, want)
			}
		}
	}
}

func TestStats(t *testing.T) {
	s := openMem(t)
	if st := s.Stats(); st.Series != 0 || !st.MinTime.IsZero() {
		t.Errorf("empty store stats: %+v", st)
	}
	fill(t, s)
	st := s.Stats()
	if st.Series != 2*8 {
		t.Errorf("series = %d, want 16", st.Series)
	}
	if !st.MinTime.Equal(t0) || !st.MaxTime.Equal(t0.Add(2*time.Hour)) {
		t.Errorf("range = %v..%v, want %v..%v", st.MinTime, st.MaxTime, t0, t0.Add(2*time.Hour))
	}
}

// TestOutOfOrder checks that a series may arrive in two pieces, the later
// piece first, as a hand-edited bundle might.
func TestOutOfOrder(t *testing.T) {
	s := openMem(t)
	ls := labels.FromStrings("__name__", "g", "pod", "a")
	app := s.Appender(context.Background())
	for _, i := range []int{10, 11, 12, 0, 1, 2} {
		if _, err := app.Append(0, ls, t0.Add(time.Duration(i)*time.Minute).UnixMilli(), float64(i)); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatalf("commit: %v", err)
	}
	v, _, err := s.Query(context.Background(), `count_over_time(g[1h])`, t0.Add(30*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if len(v) != 1 || v[0].Value != 6 {
		t.Fatalf("count_over_time = %v, want 6", v)
	}
}

func TestOnDisk(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, Retention: time.Hour})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	fill(t, s)
	v, _, err := s.Query(context.Background(), `sum(rate(requests_total[5m]))`, t0.Add(90*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if len(v) != 1 || math.Abs(float64(v[0].Value)-0.6) > 1e-9 {
		t.Fatalf("got %v, want 0.6", v)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("on-disk dir removed: %v", err)
	}
}

// TestLiveRetention checks that a live in-memory store drops what is older
// than its retention, so a long-running daemon without a data
// dir stays bounded, while recent data keeps answering queries.
func TestLiveRetention(t *testing.T) {
	s, err := Open(Options{Live: true, Retention: 3 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ls := labels.FromStrings("__name__", "requests_total", "job", "engine")
	const step = time.Minute
	end := t0.Add(10 * time.Hour)
	ctx := context.Background()
	for at, i := t0, 0; !at.After(end); at, i = at.Add(step), i+1 {
		app := s.Appender(ctx)
		if _, err := app.Append(0, ls, at.UnixMilli(), float64(i)); err != nil {
			t.Fatal(err)
		}
		if err := app.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	st := s.Stats()
	// Purged once the oldest data is an eighth of the retention past it,
	// a chunk (120 samples, 2h here) at a time.
	if got := end.Sub(st.MinTime); got > 3*time.Hour+3*time.Hour/8+2*time.Hour {
		t.Errorf("store still holds %s of history (min %s), want at most retention + 1/8 + a chunk", got, st.MinTime)
	}
	if got := end.Sub(st.MinTime); got < 3*time.Hour {
		t.Errorf("store holds only %s of history, want the whole 3h retention", got)
	}
	v, _, err := s.Query(ctx, "increase(requests_total[30m])", end)
	if err != nil || len(v) != 1 || math.Abs(float64(v[0].Value)-30) > 0.5 {
		t.Errorf("recent data: %v %v", v, err)
	}
	// Samples far behind the newest one are refused in live mode.
	app := s.Appender(ctx)
	if _, err := app.Append(0, ls, t0.Add(time.Hour).UnixMilli(), 1); err == nil {
		t.Error("append 9h in the past: want an out-of-order error")
	}
	_ = app.Rollback()
}
