package querytest

import (
	"context"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestLoadNotation(t *testing.T) {
	st, err := load(`
load 5s
  req_total{pod="a"} 0+10x4
  req_total{pod="b"} 1 _ 3
  # a comment inside a block
  req_total{pod="b"} 7 8

load 1m
  req_total{pod="a"} 0 _ 240
`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range st.series {
		got = append(got, s.lset.String())
	}
	if want := []string{`{__name__="req_total", pod="a"}`, `{__name__="req_total", pod="b"}`}; !reflect.DeepEqual(got, want) {
		t.Fatalf("series %v, want %v (sorted by labels)", got, want)
	}
	a, b := st.series[0], st.series[1]
	// pod a: 0,10,20,30,40 every 5 s, merged with the 1m block's 0 at 0 s
	// (the same value) and 240 at 120 s.
	if want := []int64{0, 5000, 10000, 15000, 20000, 120000}; !reflect.DeepEqual(a.t, want) {
		t.Errorf("pod a times %v, want %v", a.t, want)
	}
	if want := []float64{0, 10, 20, 30, 40, 240}; !reflect.DeepEqual(a.f, want) {
		t.Errorf("pod a values %v, want %v", a.f, want)
	}
	// pod b: the second line of the block replaces the first.
	if !reflect.DeepEqual(b.t, []int64{0, 5000}) || !reflect.DeepEqual(b.f, []float64{7, 8}) {
		t.Errorf("pod b %v %v, want the later line's [0 5000] [7 8]", b.t, b.f)
	}

	for _, bad := range []string{
		"eval instant at 0s up",
		"load 0s\n  up 1",
		"load 5s\n  up{ 1",
		"load 5s\n  up 1 2\n\nload 5s\n  up 1 3",
	} {
		if _, err := load(bad); err == nil {
			t.Errorf("load(%q): want an error", bad)
		}
	}
}

// The engine reads the loaded series: rates over windows (a selector's
// series seeked into), sums across series, and a series with no sample in
// a window's range is absent from the answer.
func TestLoadAnswersQueries(t *testing.T) {
	m := New(t, `
load 5s
  req_total{pod="a"} 0+10x120
  req_total{pod="b"} 0+20x120
  old_total{pod="c"} 0+1x10
`)
	r := Range{m}
	ctx := context.Background()
	at := time.Unix(0, 0).Add(5 * time.Minute)
	vec, _, err := m.Query(ctx, `sum(rate(req_total[1m]))`, at)
	if err != nil {
		t.Fatal(err)
	}
	if len(vec) != 1 || math.Abs(float64(vec[0].Value)-6) > 1e-9 {
		t.Errorf("sum of rates %v, want 6/s (2 + 4)", vec)
	}
	vec, _, err = m.Query(ctx, `rate(old_total[1m])`, at)
	if err != nil || len(vec) != 0 {
		t.Errorf("a series ended 4 minutes earlier: %v %v, want no sample", vec, err)
	}
	mat, _, err := r.QueryRange(ctx, `rate(req_total{pod="b"}[1m])`, at.Add(-2*time.Minute), at, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(mat) != 1 || len(mat[0].Values) != 3 {
		t.Fatalf("range answer %v, want one series at three steps", mat)
	}
	for _, p := range mat[0].Values {
		if math.Abs(float64(p.Value)-4) > 1e-9 {
			t.Errorf("rate at %s = %v, want 4/s", p.Timestamp, p.Value)
		}
	}
	if !strings.Contains(mat[0].Metric.String(), `pod="b"`) {
		t.Errorf("range series %s", mat[0].Metric)
	}
}
