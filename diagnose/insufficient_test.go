package diagnose

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/whyslow/whyslow/query"
	"github.com/whyslow/whyslow/query/querytest"
	"github.com/whyslow/whyslow/rules"
	"github.com/whyslow/whyslow/rulesets"
	"github.com/whyslow/whyslow/verdict"
)

// spanned is querytest.Range that knows its data range, as the embedded store does.
type spanned struct {
	querytest.Range
	start, end time.Time
}

func (s spanned) DataSpan() (time.Time, time.Time) { return s.start, s.end }

// servingLoad is two vLLM models served from offset on (in 15 s steps) to
// 90m, with request counts but no TTFT histogram.
func servingLoad(offset int) string {
	n := 360 - offset
	lead := ""
	if offset > 0 {
		lead = fmt.Sprintf("_x%d ", offset)
	}
	var b strings.Builder
	b.WriteString("load 15s\n")
	for _, m := range []string{"a", "b"} {
		fmt.Fprintf(&b, "  vllm:num_requests_running{model_name=%q, pod=\"p-%s\"} %s1+0x%d\n", m, m, lead, n)
		fmt.Fprintf(&b, "  vllm:e2e_request_latency_seconds_count{model_name=%q, pod=\"p-%s\"} %s0+3x%d\n", m, m, lead, n)
	}
	return b.String()
}

// TestInsufficientReason checks that each way of getting no verdict names
// its own cause, in the documented order, with what to do.
func TestInsufficientReason(t *testing.T) {
	all, err := rulesets.All()
	if err != nil {
		t.Fatal(err)
	}
	vllm, err := rulesets.Default("vllm")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(0, 0)
	for _, tc := range []struct {
		name     string
		load     string
		exact    bool // the source is a DataSpanner
		at       time.Duration
		selector string
		engine   string
		code     verdict.InsufficientCode
		want     []string
	}{
		{name: "no engine series", load: "load 15s\n  node_load1{instance=\"a\"} 1+0x360\n", at: 90 * time.Minute,
			code: verdict.InsufficientNoEngine, want: []string{"no series of a known engine (vllm, sglang, trtllm, tgi)", "vllm:num_requests_running"}},
		{name: "endpoint picker only", load: "load 15s\n  inference_pool_average_kv_cache_utilization{name=\"pool\"} 0.4+0x360\n  inference_pool_average_queue_size{name=\"pool\"} 2+0x360\n", at: 90 * time.Minute,
			code: verdict.InsufficientNoEngine, want: []string{"endpoint picker", "inference_pool_*", "model server pods"}},
		{name: "dynamo frontend only", load: "load 15s\n  dynamo_frontend_inflight_requests{model=\"m\"} 3+0x360\n", at: 90 * time.Minute,
			code: verdict.InsufficientNoEngine, want: []string{"Dynamo's frontend", "DYN_SYSTEM_PORT"}},
		{name: "other engine", load: servingLoad(0), at: 90 * time.Minute, engine: "sglang",
			code: verdict.InsufficientNoEngine, want: []string{"no sglang series", "--engine vllm"}},
		{name: "selector matches nothing", load: servingLoad(0), at: 90 * time.Minute, selector: `model_name="c"`,
			code: verdict.InsufficientSelector, want: []string{`{model_name="c"}`, "model_name values: a, b", "--selector"}},
		{name: "unknown label", load: servingLoad(0), at: 90 * time.Minute, selector: `model="a"`, engine: "vllm",
			code: verdict.InsufficientSelector, want: []string{"no series has the label model"}},
		{name: "window after the data", load: servingLoad(0), exact: true, at: 5 * time.Hour, selector: `model_name="a"`,
			code: verdict.InsufficientOutsideData, want: []string{"lies outside the scope's data", "1970-01-01 00:00:00 UTC to 1970-01-01 01:30:00 UTC", "--at 1970-01-01T01:30:00Z"}},
		{name: "baseline before the data", load: servingLoad(200), exact: true, at: 90 * time.Minute, selector: `model_name="a"`,
			code: verdict.InsufficientBaseline, want: []string{"1h before --at", "starts at 1970-01-01 00:50:00 UTC", "40m of history", "--baseline 35m or less"}},
		{name: "required signal missing", load: servingLoad(0), at: 90 * time.Minute, selector: `model_name="a"`,
			code: verdict.InsufficientSignal, want: []string{"ttft_mean (TTFT mean)", "incident window", "vllm:time_to_first_token_seconds_sum"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m query.Metrics = querytest.Range{Metrics: querytest.New(t, tc.load)}
			if tc.exact {
				m = spanned{m.(querytest.Range), t0, t0.Add(90 * time.Minute)}
			}
			opts := Options{Metrics: m, Rulesets: all, At: t0.Add(tc.at), Selector: tc.selector, Engine: tc.engine, GPU: "H100"}
			if tc.engine == "vllm" {
				opts.Rulesets, opts.Ruleset = nil, vllm
			}
			v, err := Run(context.Background(), opts)
			if err != nil {
				t.Fatal(err)
			}
			if v.Status != verdict.StatusInsufficientData || v.InsufficientReason == nil {
				t.Fatalf("status %s, reason %+v", v.Status, v.InsufficientReason)
			}
			r := v.InsufficientReason
			if r.Code != tc.code {
				t.Errorf("code %s, want %s: %s", r.Code, tc.code, r.Message)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.Message, w) {
					t.Errorf("message lacks %q:\n%s", w, r.Message)
				}
			}
		})
	}
}

// TestInsufficientReasonNotGapOrder checks that a verdict whose baseline
// has no TTFT names that, not whichever data gap came first (a --scrape
// whose engine started serving during the sample).
func TestInsufficientReasonNotGapOrder(t *testing.T) {
	rs, err := rulesets.Default("vllm")
	if err != nil {
		t.Fatal(err)
	}
	now := baseline()
	base := map[string]float64{"samples": 20, "kv_usage": 0.1}
	v := run(t, rs, now, base)
	if v.Status != verdict.StatusInsufficientData {
		t.Fatalf("status %s", v.Status)
	}
	r := v.InsufficientReason
	if r == nil || r.Code != verdict.InsufficientSignal || r.Signal != "ttft_mean" || r.Window != "baseline" {
		t.Fatalf("reason %+v, want ttft_mean missing from the baseline (first gap: %+v)", r, v.DataGaps[0])
	}
	if healthy := run(t, rs, now, now); healthy.InsufficientReason != nil {
		t.Errorf("a healthy verdict carries a reason: %+v", healthy.InsufficientReason)
	}
}

func TestRequiredRefs(t *testing.T) {
	got := requiredRefs(`!("samples" in now) || now.samples < 2.0 || !("ttft_mean" in base) || now.?x.orValue(1.0) > 0`)
	want := []requiredRef{{"samples", "incident"}, {"ttft_mean", "baseline"}, {"x", "incident"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("requiredRefs = %v, want %v", got, want)
	}
	_ = rules.DefaultTargetLabels
}

// freshLoad is one vLLM model whose data starts at 5000 s (1970-01-01
// 01:23:20 UTC) and runs for n 5 s scrapes: a source minutes old.
func freshLoad(n int) string {
	return fmt.Sprintf("load 5s\n  vllm:num_requests_running{model_name=\"a\", pod=\"p\"} _x1000 1+0x%d\n"+
		"  vllm:e2e_request_latency_seconds_count{model_name=\"a\", pod=\"p\"} _x1000 0+3x%d\n", n, n)
}

// TestInsufficientReasonFreshSource: a remote source a few minutes (or
// seconds) old is found where its data really starts, to the second, not
// a probe step after it (once "runs from 21:34:12 to 21:34:12", past
// --at, so window_outside_data); a learning daemon gets its state, and
// no CLI flag, instead.
func TestInsufficientReasonFreshSource(t *testing.T) {
	vllm, err := rulesets.Default("vllm")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(0, 0)
	start := t0.Add(5000 * time.Second)
	for _, tc := range []struct {
		name     string
		scrapes  int
		learning *verdict.Learning
		code     verdict.InsufficientCode
		want     []string
		not      []string
	}{
		{name: "5 minutes old", scrapes: 60, code: verdict.InsufficientBaseline,
			want: []string{"starts at 1970-01-01 01:23:20 UTC", "5m of history"}},
		{name: "20 s old", scrapes: 4, code: verdict.InsufficientBaseline,
			want: []string{"starts at 1970-01-01 01:23:20 UTC", "20s of history"}},
		{name: "20 s old daemon", scrapes: 4, code: verdict.InsufficientLearning,
			learning: &verdict.Learning{BaselineMinutes: 60, NeededMinutes: 10, Message: "learning the baseline (0 of 60 minutes); using the 20s there are"},
			want:     []string{"learning the baseline (0 of 60 minutes)", "starts at 1970-01-01 01:23:20 UTC", "once it holds 10 minutes"},
			not:      []string{"--"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := querytest.Range{Metrics: querytest.New(t, freshLoad(tc.scrapes))}
			at := start.Add(time.Duration(tc.scrapes)*5*time.Second + 500*time.Millisecond)
			v, err := Run(context.Background(), Options{Metrics: m, Ruleset: vllm, At: at, Selector: `model_name="a"`, GPU: "H100",
				Daemon: tc.learning != nil, Learning: tc.learning})
			if err != nil {
				t.Fatal(err)
			}
			r := v.InsufficientReason
			if v.Status != verdict.StatusInsufficientData || r == nil {
				t.Fatalf("status %s, reason %+v", v.Status, r)
			}
			if r.Code != tc.code {
				t.Errorf("code %s, want %s: %s", r.Code, tc.code, r.Message)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.Message, w) {
					t.Errorf("message lacks %q:\n%s", w, r.Message)
				}
			}
			for _, w := range tc.not {
				if strings.Contains(r.Message, w) {
					t.Errorf("message has %q:\n%s", w, r.Message)
				}
			}
			if tc.learning != nil {
				if v.Learning != tc.learning {
					t.Errorf("verdict learning %+v", v.Learning)
				}
				n := 0
				for _, g := range v.DataGaps {
					if g.Window == "baseline" {
						n++
					}
				}
				if n != 1 {
					t.Errorf("%d baseline-window gaps while learning, want the one that says so: %+v", n, v.DataGaps)
				}
			}
		})
	}
}

// TestInsufficientReasonDaemonAdvice: a daemon takes no flags, so its
// insufficient-data advice names its config instead (issue 25, finding 1:
// "give an --at inside that range" paged from a daemon).
func TestInsufficientReasonDaemonAdvice(t *testing.T) {
	all, err := rulesets.All()
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(0, 0)
	for _, tc := range []struct {
		name, load, selector, engine string
		exact                        bool
		at                           time.Duration
		code                         verdict.InsufficientCode
	}{
		{name: "other engine", load: servingLoad(0), at: 90 * time.Minute, engine: "sglang", code: verdict.InsufficientNoEngine},
		{name: "selector", load: servingLoad(0), at: 90 * time.Minute, selector: `model_name="c"`, code: verdict.InsufficientSelector},
		{name: "window after the data", load: servingLoad(0), exact: true, at: 5 * time.Hour, selector: `model_name="a"`, code: verdict.InsufficientOutsideData},
		{name: "baseline before the data", load: servingLoad(200), exact: true, at: 90 * time.Minute, selector: `model_name="a"`, code: verdict.InsufficientBaseline},
		{name: "signal missing", load: servingLoad(0), at: 90 * time.Minute, selector: `model_name="a"`, code: verdict.InsufficientSignal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m query.Metrics = querytest.Range{Metrics: querytest.New(t, tc.load)}
			if tc.exact {
				m = spanned{m.(querytest.Range), t0, t0.Add(90 * time.Minute)}
			}
			v, err := Run(context.Background(), Options{Metrics: m, Rulesets: all, At: t0.Add(tc.at), Selector: tc.selector,
				Engine: tc.engine, GPU: "H100", Daemon: true})
			if err != nil {
				t.Fatal(err)
			}
			r := v.InsufficientReason
			if r == nil || r.Code != tc.code {
				t.Fatalf("reason %+v, want %s", r, tc.code)
			}
			if strings.Contains(r.Message, "--") {
				t.Errorf("daemon advice names a CLI flag: %s", r.Message)
			}
		})
	}
}

// TestSpanOfToTheSecond checks the data-span search against the samples
// themselves: whatever the length of the search range (a few minutes of a
// source's own span, the week around a remote source's incident, a long
// bundle), it finds the first and the last sample to the second of its
// range's points, clipped to the range.
func TestSpanOfToTheSecond(t *testing.T) {
	t0 := time.Unix(0, 0)
	// Samples at 7000 s, every 7 s to 7350 s; a lone one at 10500 s.
	load := "load 7s\n  vllm:num_requests_running{model_name=\"a\"} _x1000 1+0x50 _x449 1\n"
	m := querytest.Range{Metrics: querytest.New(t, load)}
	first, last := t0.Add(7000*time.Second), t0.Add(10500*time.Second)
	// The search's points are its start plus whole seconds: a sample at e
	// is found at the first of them at or after it.
	ceil := func(start, e time.Time) time.Time {
		n := (e.Sub(start) + time.Second - 1) / time.Second
		return start.Add(n * time.Second)
	}
	for _, tc := range []struct {
		name       string
		start, end time.Time
	}{
		{"the data's own span", first.Add(-300 * time.Millisecond), last.Add(200 * time.Millisecond)},
		{"a week around", last.Add(-7*24*time.Hour + 500*time.Millisecond), last.Add(24*time.Hour + 500*time.Millisecond)},
		{"sixty days", first.Add(-30*24*time.Hour - 250*time.Millisecond), last.Add(30 * 24 * time.Hour)},
		{"starts inside the data", first.Add(10*time.Second + 400*time.Millisecond), last.Add(time.Hour)},
		{"ends inside the data", first.Add(-time.Hour + 100*time.Millisecond), first.Add(100*time.Second + 100*time.Millisecond)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &diagnosis{ctx: context.Background(), opts: &Options{}, search: dataSpan{tc.start, tc.end}}
			got, ok, err := d.spanOf(m, []string{`vllm:num_requests_running{model_name="a"}`})
			if err != nil || !ok {
				t.Fatalf("found %v, err %v", ok, err)
			}
			want := dataSpan{maxTime(ceil(tc.start, first), tc.start), ceil(tc.start, last)}
			if want.end.After(tc.end) {
				// Clipped; or samples go on past the end.
				want.end = tc.end
			}
			if !got.start.Equal(want.start) || !got.end.Equal(want.end) {
				t.Errorf("span %s → %s, want %s → %s", got.start.UTC(), got.end.UTC(), want.start.UTC(), want.end.UTC())
			}
		})
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
