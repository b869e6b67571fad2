package detect

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/whyslow/whyslow/query/querytest"
	"github.com/whyslow/whyslow/verdict"
)

// ttftLoad builds TTFT histograms for scope "bad" (healthy for 70 minutes,
// then every new request lands in (0.25, 1]) and scope "ok" (healthy
// throughout, with one slow scrape at 75m).
func ttftLoad() string {
	var b strings.Builder
	b.WriteString("load 5s\n")
	series := func(model, le, values string) {
		fmt.Fprintf(&b, "  vllm:time_to_first_token_seconds_bucket{model_name=%q,le=%q} %s\n", model, le, values)
	}
	series("bad", "0.1", "0+10x840 8400+0x120")
	series("bad", "0.25", "0+10x840 8400+0x120")
	series("bad", "1", "0+10x840 8400+10x120")
	series("bad", "+Inf", "0+10x840 8400+10x120")
	// One noisy scrape at sample 900: ten slow requests, then healthy again.
	series("ok", "0.1", "0+10x900 9000+0x1 9000+10x60")
	series("ok", "0.25", "0+10x900 9000+0x1 9000+10x60")
	series("ok", "1", "0+10x900 9010+0x1 9010+10x60")
	series("ok", "+Inf", "0+10x900 9010+0x1 9010+10x60")
	return b.String()
}

func TestDetectTTFTFiresWithinIntervals(t *testing.T) {
	m := querytest.New(t, ttftLoad())
	d, err := NewDetector(DetectConfig{Triggers: []Trigger{{Name: "ttft", Signal: SignalTTFTP95, Ratio: 2, MinIncrease: 0.1}}}, shipped(t))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Unix(0, 0)
	step := 5 * time.Second
	crossed, fired := -1, -1
	for i := 830; i <= 960; i++ {
		at := start.Add(time.Duration(i) * step)
		dets, err := d.Evaluate(context.Background(), m, at)
		if err != nil {
			t.Fatal(err)
		}
		for _, det := range dets {
			tr := det.Triggers[0]
			switch det.Key {
			case `model_name="ok"`:
				if det.Firing {
					t.Fatalf("scope ok fired at sample %d on one noisy scrape: %+v", i, tr)
				}
			case `model_name="bad"`:
				if crossed < 0 && tr.Short != nil && tr.Baseline != nil && *tr.Short >= 2**tr.Baseline {
					crossed = i
				}
				if fired < 0 && det.Firing {
					fired = i
					if det.Severity != verdict.SeverityWarning || det.Scope.Labels["model_name"] != "bad" {
						t.Errorf("detection = %+v", det)
					}
					if tr.Reason == "" || tr.Long == nil || tr.Since.IsZero() {
						t.Errorf("firing trigger lacks values: %+v", tr)
					}
				}
			}
		}
	}
	if crossed < 0 || fired < 0 {
		t.Fatalf("crossed at %d, fired at %d", crossed, fired)
	}
	// The hold (DefaultFor) is the only wait: the condition holds from the
	// crossing on, and it fires within 3 intervals once held that long.
	hold := int(DefaultFor / step)
	if n := fired - crossed - hold; n > 3 {
		t.Errorf("fired %d intervals after the short window crossed and the %s hold (want <= 3)", n, DefaultFor)
	}
	if fired-841-hold > 3 {
		t.Errorf("fired %d intervals after the onset and the hold (want <= 3)", fired-841-hold)
	}
	if fired <= 840 {
		t.Errorf("fired at sample %d, before the onset at 841", fired)
	}
	t.Logf("onset 841, short window crossed at %d, fired at %d", crossed, fired)
}

func TestDetectForHold(t *testing.T) {
	m := querytest.New(t, ttftLoad())
	hold := 10 * time.Minute
	d, err := NewDetector(DetectConfig{Triggers: []Trigger{{Name: "ttft", Signal: SignalTTFTP95, Ratio: 2, For: &hold}}}, shipped(t))
	if err != nil {
		t.Fatal(err)
	}
	for i := 841; i <= 960; i++ {
		dets, err := d.Evaluate(context.Background(), m, time.Unix(int64(i)*5, 0))
		if err != nil {
			t.Fatal(err)
		}
		for _, det := range dets {
			if det.Firing {
				t.Fatalf("fired at sample %d within a 10m hold", i)
			}
		}
	}
}

// successQueueLoad: scope m's requests start failing and its queue
// growing at sample 100; scope n's clients start aborting.
const successQueueLoad = `load 5s
  vllm:request_success_total{model_name="m",finished_reason="stop"} 0+10x200
  vllm:request_success_total{model_name="m",finished_reason="error"} 0+0x100 0+1x100
  vllm:request_success_total{model_name="n",finished_reason="stop"} 0+10x200
  vllm:request_success_total{model_name="n",finished_reason="abort"} 0+0x100 0+1x100
  vllm:num_requests_waiting{model_name="m"} 0+0x100 0+3x100
  vllm:num_requests_waiting{model_name="n"} 0+0x200
`

func TestDetectSuccessRateAndQueue(t *testing.T) {
	m := querytest.New(t, successQueueLoad)
	d, err := NewDetector(DetectConfig{}, shipped(t))
	if err != nil {
		t.Fatal(err)
	}
	var last []Detection
	for i := 100; i <= 180; i++ {
		last, err = d.Evaluate(context.Background(), m, time.Unix(int64(i)*5, 0))
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(last) != 2 {
		t.Fatalf("want 2 scopes, got %+v", last)
	}
	byName := map[string]Detection{}
	for _, det := range last {
		byName[det.Scope.Labels["model_name"]] = det
	}
	mDet := byName["m"]
	if !mDet.Firing || mDet.Severity != verdict.SeverityCritical {
		t.Fatalf("scope m = %+v", mDet)
	}
	got := strings.Join(mDet.FiringTriggers(), ",")
	if got != "success_rate,queue_growth" {
		t.Errorf("firing triggers = %s", got)
	}
	if byName["n"].Firing {
		t.Errorf("scope n fired: %+v", byName["n"])
	}
	for _, tr := range byName["n"].Triggers {
		if tr.Name == "success_rate" && (tr.Short == nil || *tr.Short != 1) {
			t.Errorf("n success rate = %v", tr.Short)
		}
	}
}

func TestDetectConfigValidate(t *testing.T) {
	neg := -time.Second
	tests := []struct {
		name string
		cfg  DetectConfig
		want string
	}{
		{"defaults", DetectConfig{}, ""},
		{"unknown signal", DetectConfig{Triggers: []Trigger{{Name: "x", Signal: "ttft_p99", Ratio: 2}}}, `unknown signal "ttft_p99"`},
		{"no condition", DetectConfig{Triggers: []Trigger{{Name: "x", Signal: SignalTTFTP95}}}, "no condition"},
		{"both", DetectConfig{Triggers: []Trigger{{Name: "x", Signal: SignalTTFTP95, Expr: "up", Ratio: 2}}}, "exclusive"},
		{"bad expr", DetectConfig{Triggers: []Trigger{{Name: "x", Expr: "rate(up[", Above: ptr(1.0)}}}, "expr:"},
		{"ratio", DetectConfig{Triggers: []Trigger{{Name: "x", Signal: SignalTTFTP95, Ratio: 0.5}}}, "greater than 1"},
		{"windows", DetectConfig{ShortWindow: time.Hour}, "longer than long_window"},
		{"group", DetectConfig{GroupBy: []string{"bad-label"}}, "invalid label name"},
		{"selector", DetectConfig{Selector: `job=`}, "selector"},
		{"severity", DetectConfig{Triggers: []Trigger{{Name: "x", Signal: SignalTTFTP95, Ratio: 2, Severity: "page"}}}, "severity"},
		{"for", DetectConfig{Triggers: []Trigger{{Name: "x", Signal: SignalTTFTP95, Ratio: 2, For: &neg}}}, "for must not"},
		{"dup", DetectConfig{Triggers: []Trigger{{Name: "x", Signal: SignalTTFTP95, Ratio: 2}, {Name: "x", Signal: SignalTPOTP95, Ratio: 2}}}, "duplicate"},
		{"custom", DetectConfig{Selector: `job="vllm"`, Triggers: []Trigger{{Name: "x", Expr: `sum by ($by) (rate(foo{$sel}[$window]))`, Above: ptr(1.0)}}}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestTriggerStateString(t *testing.T) {
	for s, want := range map[TriggerState]string{TriggerInactive: "inactive", TriggerPending: "pending", TriggerFiring: "firing", 7: "trigger_state(7)"} {
		if s.String() != want {
			t.Errorf("%d: %s", int(s), s)
		}
	}
}

// TestDetectMinRequests: a success rate below 98% over a handful of requests
// (an engine warming up) is not evidence; the same ratio over enough
// requests fires. A TTFT ratio against a baseline window that saw too few
// requests does not fire either.
func TestDetectMinRequests(t *testing.T) {
	tests := []struct {
		name, load string
		firing     bool
		perScrape  float64 // requests finished per 5 s
	}{
		{"few requests, 10% errors", `load 5s
  vllm:request_success_total{model_name="m",finished_reason="stop"} 0+0.18x100
  vllm:request_success_total{model_name="m",finished_reason="error"} 0+0.02x100
`, false, 0.2},
		{"many requests, 10% errors", `load 5s
  vllm:request_success_total{model_name="m",finished_reason="stop"} 0+9x100
  vllm:request_success_total{model_name="m",finished_reason="error"} 0+1x100
`, true, 10},
		// A client that closes its stream is not a failing server.
		{"many requests, 10% client aborts", `load 5s
  vllm:request_success_total{model_name="m",finished_reason="stop"} 0+9x100
  vllm:request_success_total{model_name="m",finished_reason="abort"} 0+1x100
`, false, 10},
		// vLLM V0 has no error reason: a failed request is aborted, and
		// only the API server's 5xx (on the engine's pod, no model_name)
		// tells it from a client's abort.
		{"V0, 10% aborted with 5xx", `load 5s
  vllm:request_success_total{model_name="m",pod="p",instance="10.0.0.1:8000",finished_reason="stop"} 0+9x100
  vllm:request_success_total{model_name="m",pod="p",instance="10.0.0.1:8000",finished_reason="abort"} 0+1x100
  vllm:num_requests_running{model_name="m",pod="p",instance="10.0.0.1:8000"} 4+0x100
  http_requests_total{pod="p",instance="10.0.0.1:8000",handler="/v1/completions",method="POST",status="2xx"} 0+9x100
  http_requests_total{pod="p",instance="10.0.0.1:8000",handler="/v1/completions",method="POST",status="5xx"} 0+1x100
  http_requests_total{pod="q",instance="10.0.0.2:8000",handler="/v1/completions",method="POST",status="5xx"} 0+9x100
`, true, 10},
		{"V0, 10% aborted with 2xx", `load 5s
  vllm:request_success_total{model_name="m",pod="p",instance="10.0.0.1:8000",finished_reason="stop"} 0+9x100
  vllm:request_success_total{model_name="m",pod="p",instance="10.0.0.1:8000",finished_reason="abort"} 0+1x100
  vllm:num_requests_running{model_name="m",pod="p",instance="10.0.0.1:8000"} 4+0x100
  http_requests_total{pod="p",instance="10.0.0.1:8000",handler="/v1/completions",method="POST",status="2xx"} 0+10x100
  http_requests_total{pod="q",instance="10.0.0.2:8000",handler="/v1/completions",method="POST",status="5xx"} 0+9x100
`, false, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := querytest.New(t, tt.load)
			d, err := NewDetector(DetectConfig{}, shipped(t))
			if err != nil {
				t.Fatal(err)
			}
			var last []Detection
			for i := 60; i <= 100; i++ {
				if last, err = d.Evaluate(context.Background(), m, time.Unix(int64(i)*5, 0)); err != nil {
					t.Fatal(err)
				}
			}
			if len(last) != 1 {
				t.Fatalf("detections %+v", last)
			}
			if last[0].Firing != tt.firing {
				t.Errorf("firing = %v, want %v (%+v)", last[0].Firing, tt.firing, last[0].Triggers)
			}
			want := tt.perScrape * DefaultLongWindow.Seconds() / 5
			for _, tr := range last[0].Triggers {
				if tr.Name != "success_rate" {
					continue
				}
				if tr.Requests == nil || *tr.Requests < want*0.9 || *tr.Requests > want*1.1 {
					t.Errorf("requests = %v, want about %g", tr.Requests, want)
				}
			}
		})
	}
	t.Run("thin baseline", func(t *testing.T) {
		// The baseline hour ago saw one request per minute; now 2 per 5 s,
		// all slow: the ratio is huge but the baseline is no reference.
		var b strings.Builder
		b.WriteString("load 5s\n")
		for _, le := range []string{"0.1", "1", "+Inf"} {
			fast, slow := "0.0833", "0"
			if le != "0.1" {
				slow = "2"
			}
			fmt.Fprintf(&b, "  vllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=%q} 0+%sx840 70+%sx120\n", le, fast, slow)
		}
		fmt.Fprintf(&b, "  vllm:time_to_first_token_seconds_count{model_name=\"m\"} 0+0.0833x840 70+2x120\n")
		m := querytest.New(t, b.String())
		d, err := NewDetector(DetectConfig{}, shipped(t))
		if err != nil {
			t.Fatal(err)
		}
		var last []Detection
		for i := 840; i <= 900; i++ {
			if last, err = d.Evaluate(context.Background(), m, time.Unix(int64(i)*5, 0)); err != nil {
				t.Fatal(err)
			}
		}
		for _, det := range last {
			if det.Firing {
				t.Errorf("fired against a thin baseline: %+v", det.FiringTriggers())
			}
		}
	})
}

func TestDetectConfigMinRequestsValidate(t *testing.T) {
	bad := DetectConfig{Triggers: []Trigger{{Name: "q", Signal: SignalQueueGrowth, Above: ptr(1.0), MinRequests: 5}}}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "volume_expr") {
		t.Errorf("queue_growth with min_requests: %v", err)
	}
	ok := DetectConfig{Triggers: []Trigger{{Name: "q", Expr: `sum by ($by) (x{$sel})`, Above: ptr(1.0), MinRequests: 5,
		VolumeExpr: `sum by ($by) (increase(y{$sel}[$window]))`}}}
	if err := ok.Validate(); err != nil {
		t.Errorf("custom volume_expr: %v", err)
	}
}

// itlLoad is vLLM's inter-token histogram (buckets 0.025, 0.05) of two
// scopes: at sample 840 "step" moves 6% of the tokens from the first bucket
// to the second (the mean rises 3%, the interpolated p95 1.5×); "slow"
// really slows down (mean 1.7×).
func itlLoad() string {
	var b strings.Builder
	b.WriteString("load 5s\n")
	series := func(model, suffix, le, values string) {
		lbl := fmt.Sprintf("model_name=%q", model)
		if le != "" {
			lbl += fmt.Sprintf(",le=%q", le)
		}
		fmt.Fprintf(&b, "  vllm:inter_token_latency_seconds%s{%s} %s\n", suffix, lbl, values)
	}
	for _, s := range []struct{ model, fast, sum string }{
		{"step", "0+96x840 80640+90x120", "0+2.04x840 1713.6+2.1x120"},
		{"slow", "0+96x840 80640+40x120", "0+2.04x840 1713.6+3.5x120"},
	} {
		series(s.model, "_bucket", "0.025", s.fast)
		series(s.model, "_bucket", "0.05", "0+100x840 84000+100x120")
		series(s.model, "_bucket", "+Inf", "0+100x840 84000+100x120")
		series(s.model, "_sum", "", s.sum)
		series(s.model, "_count", "", "0+100x840 84000+100x120")
		// The request count behind min_requests.
		fmt.Fprintf(&b, "  vllm:time_to_first_token_seconds_count{model_name=%q} 0+5x960\n", s.model)
	}
	return b.String()
}

func TestDetectTPOTMeanRatioIgnoresBucketSteps(t *testing.T) {
	m := querytest.New(t, itlLoad())
	tpot := DefaultTriggers()[1]
	noMean := tpot
	noMean.MeanRatio = 0
	tests := []struct {
		name   string
		trig   Trigger
		firing []string
	}{
		{"mean_ratio", tpot, []string{`model_name="slow"`}},
		{"p95 only", noMean, []string{`model_name="slow"`, `model_name="step"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := NewDetector(DetectConfig{For: time.Nanosecond, Triggers: []Trigger{tt.trig}}, shipped(t))
			if err != nil {
				t.Fatal(err)
			}
			var firing []string
			for _, i := range []int{940, 941} {
				dets, err := d.Evaluate(context.Background(), m, time.Unix(0, 0).Add(time.Duration(i)*5*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				firing = firing[:0]
				for _, det := range dets {
					if det.Firing {
						firing = append(firing, det.Key)
						t.Logf("%s: %s", det.Key, det.Triggers[0].Reason)
					}
				}
			}
			if strings.Join(firing, " ") != strings.Join(tt.firing, " ") {
				t.Errorf("firing %v, want %v", firing, tt.firing)
			}
		})
	}
}

func TestChooseBaseline(t *testing.T) {
	at := time.Unix(1700000000, 0)
	tests := []struct {
		name     string
		since    time.Time
		window   time.Duration
		offset   time.Duration
		learning bool
		note     string
	}{
		{"unknown history", time.Time{}, 5 * time.Minute, time.Hour, false, ""},
		{"enough history", at.Add(-2 * time.Hour), 5 * time.Minute, time.Hour, false, ""},
		{"shrunk to the history", at.Add(-17 * time.Minute), 5 * time.Minute, 12 * time.Minute, true,
			"baseline 12m (learning: 17 of 60 minutes of history)"},
		{"just enough", at.Add(-10 * time.Minute), 5 * time.Minute, 5 * time.Minute, true,
			"baseline 5m (learning: 10 of 60 minutes of history)"},
		{"minutes after a restart", at.Add(-8 * time.Minute), 2 * time.Minute, 6 * time.Minute, true,
			"baseline 6m (learning: 8 of 60 minutes of history)"},
		{"twice the window", at.Add(-4 * time.Minute), 2 * time.Minute, 2 * time.Minute, true,
			"baseline 2m (learning: 4 of 60 minutes of history)"},
		{"too little", at.Add(-3 * time.Minute), 90 * time.Second, 0, true,
			"learning the baseline (3 of 60 minutes): less than 4 minutes of history"},
		{"too little for the window", at.Add(-8 * time.Minute), 5 * time.Minute, 0, true,
			"learning the baseline (8 of 60 minutes): less than 10 minutes of history"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := ChooseBaseline(time.Hour, tc.window, tc.since, at)
			if c.Offset != tc.offset || c.Learning != tc.learning {
				t.Errorf("choice %+v, want offset %s learning %v", c, tc.offset, tc.learning)
			}
			if c.Offset > 0 && c.Offset < tc.window {
				t.Errorf("offset %s overlaps the window %s", c.Offset, tc.window)
			}
			if note := c.Note(); !strings.HasPrefix(note, tc.note) || (tc.note == "") != (note == "") {
				t.Errorf("note %q, want prefix %q", note, tc.note)
			}
		})
	}
}

// freshLoad is a store whose history starts at sample 660 (55 min, a
// sidecar started then): TTFT of scope "bad" degrades at sample 841, and
// its success rate falls below 98% from the first sample on.
func freshLoad() string {
	var b strings.Builder
	b.WriteString("load 5s\n")
	series := func(le, values string) {
		fmt.Fprintf(&b, "  vllm:time_to_first_token_seconds_bucket{model_name=\"bad\",le=%q} %s\n", le, values)
	}
	series("0.1", "_x660 6600+10x180 8400+0x120")
	series("0.25", "_x660 6600+10x180 8400+0x120")
	series("1", "_x660 6600+10x180 8400+10x120")
	series("+Inf", "_x660 6600+10x180 8400+10x120")
	b.WriteString("  vllm:time_to_first_token_seconds_count{model_name=\"bad\"} _x660 6600+10x300\n")
	b.WriteString("  vllm:request_success_total{model_name=\"bad\",finished_reason=\"stop\"} _x660 0+9x300\n")
	b.WriteString("  vllm:request_success_total{model_name=\"bad\",finished_reason=\"error\"} _x660 0+1x300\n")
	return b.String()
}

// TestDetectFreshSidecar: with less history than the 1h baseline, a ratio
// trigger compares with the history there is (at least MinHistory), and
// an absolute trigger fires without any baseline.
func TestDetectFreshSidecar(t *testing.T) {
	m := querytest.New(t, freshLoad())
	d, err := NewDetector(DetectConfig{For: time.Nanosecond}, shipped(t))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Unix(0, 0)
	step := 5 * time.Second
	since := start.Add(660 * step)
	firing := func(at time.Time) map[string]TriggerResult {
		// Twice: the first evaluation of a holding condition is pending.
		if _, err := d.EvaluateSince(context.Background(), m, at.Add(-step), since); err != nil {
			t.Fatal(err)
		}
		dets, err := d.EvaluateSince(context.Background(), m, at, since)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]TriggerResult{}
		for _, det := range dets {
			for _, tr := range det.Triggers {
				if tr.State == TriggerFiring {
					out[tr.Name] = tr
				}
			}
		}
		return out
	}
	// Three minutes of history: success rate (absolute) fires, nothing
	// compares with a baseline.
	got := firing(start.Add(696 * step))
	if _, ok := got["success_rate"]; !ok {
		t.Errorf("3 minutes in: success_rate not firing (%v)", got)
	}
	if tr, ok := got["ttft_p95"]; ok {
		t.Errorf("3 minutes in: ttft_p95 fired on no baseline: %+v", tr)
	}
	// 20 minutes of history, 4 minutes after the TTFT onset: the ratio
	// trigger fires against the history's start.
	got = firing(start.Add(900 * step))
	tr, ok := got["ttft_p95"]
	if !ok {
		t.Fatalf("20 minutes in: ttft_p95 not firing (%v)", got)
	}
	if tr.Baseline == nil || *tr.Baseline > 0.1 {
		t.Errorf("baseline %v, want the healthy start of the history", tr.Baseline)
	}
	// Evaluate (history unknown) looks an hour back, where there is nothing.
	dets, err := d.Evaluate(context.Background(), m, start.Add(900*step))
	if err != nil {
		t.Fatal(err)
	}
	for _, det := range dets {
		for _, tr := range det.Triggers {
			if tr.Name == "ttft_p95" && tr.Baseline != nil {
				t.Errorf("an hour back found a baseline %v", *tr.Baseline)
			}
		}
	}
}

// TestDetectMinutesAfterRestart: eight minutes after whyslow started, on
// a TTFT slowdown that began at minute 6, the p95 ratio trigger fires
// against the first minutes of the history (the default 1h baseline
// shortened to it); with three minutes of history nothing is compared.
func TestDetectMinutesAfterRestart(t *testing.T) {
	// 10 requests every 5 s; from sample 72 (minute 6) each takes 0.25–1 s.
	m := querytest.New(t, `load 5s
  vllm:time_to_first_token_seconds_bucket{model_name="m",le="0.1"} 0+10x72 720+0x24
  vllm:time_to_first_token_seconds_bucket{model_name="m",le="0.25"} 0+10x72 720+0x24
  vllm:time_to_first_token_seconds_bucket{model_name="m",le="1"} 0+10x96
  vllm:time_to_first_token_seconds_bucket{model_name="m",le="+Inf"} 0+10x96
  vllm:time_to_first_token_seconds_count{model_name="m"} 0+10x96
`)
	d, err := NewDetector(DetectConfig{Triggers: []Trigger{DefaultTriggers()[0]}}, shipped(t))
	if err != nil {
		t.Fatal(err)
	}
	since := time.Unix(0, 0)
	at := since.Add(8 * time.Minute)
	// Every 5 s, as the daemon does (the trigger holds 15 s before firing).
	var tr TriggerResult
	var fired time.Duration
	for tt := since.Add(time.Minute); !tt.After(at); tt = tt.Add(5 * time.Second) {
		dets, err := d.EvaluateSince(context.Background(), m, tt, since)
		if err != nil {
			t.Fatal(err)
		}
		if len(dets) != 1 || len(dets[0].Triggers) != 1 {
			t.Fatalf("detections at %s: %+v", tt.Sub(since), dets)
		}
		tr = dets[0].Triggers[0]
		switch age := tt.Sub(since); {
		case age < MinHistory && tr.Baseline != nil:
			t.Errorf("%s in: compared with baseline %v on too little history", age, *tr.Baseline)
		case age < 6*time.Minute && tr.State != TriggerInactive:
			t.Errorf("%s in, before the slowdown: %s (%s)", age, tr.State, tr.Reason)
		case tr.State == TriggerFiring && fired == 0:
			fired = age
		}
	}
	if tr.State != TriggerFiring {
		t.Fatalf("8 minutes in, 2 minutes into the slowdown: ttft_p95 %s (short %v long %v baseline %v)", tr.State, tr.Short, tr.Long, tr.Baseline)
	}
	if tr.Baseline == nil || *tr.Baseline > 0.1 {
		t.Errorf("baseline %v, want the healthy first minutes", tr.Baseline)
	}
	if fired > 6*time.Minute+time.Minute {
		t.Errorf("fired %s in, want within a minute of the slowdown at minute 6", fired)
	}
	t.Logf("fired %s in, %s after the slowdown", fired, fired-6*time.Minute)
	if note := ChooseBaseline(DefaultBaseline, DefaultLongWindow, since, at).Note(); note != "baseline 6m (learning: 8 of 60 minutes of history)" {
		t.Errorf("note %q", note)
	}
}

// TestDetectHTTPFailuresPerTarget: a sidecar scrape labels only instance;
// two models on two targets each get their own API server's 5xx, the join
// never matches one target's HTTP counters to another's model, and a
// target serving two models attributes its 5xx to neither (no query error).
func TestDetectHTTPFailuresPerTarget(t *testing.T) {
	m := querytest.New(t, `load 5s
  vllm:request_success_total{model_name="a",instance="h:1",finished_reason="stop"} 0+9x100
  vllm:request_success_total{model_name="a",instance="h:1",finished_reason="abort"} 0+1x100
  vllm:num_requests_running{model_name="a",instance="h:1"} 4+0x100
  http_requests_total{instance="h:1",handler="/v1/completions",method="POST",status="2xx"} 0+9x100
  http_requests_total{instance="h:1",handler="/v1/completions",method="POST",status="5xx"} 0+1x100
  vllm:request_success_total{model_name="b",instance="h:2",finished_reason="stop"} 0+10x100
  vllm:num_requests_running{model_name="b",instance="h:2"} 4+0x100
  http_requests_total{instance="h:2",handler="/v1/completions",method="POST",status="2xx"} 0+10x100
  vllm:request_success_total{model_name="c",instance="h:3",finished_reason="stop"} 0+10x100
  vllm:num_requests_running{model_name="c",instance="h:3"} 4+0x100
  vllm:request_success_total{model_name="d",instance="h:3",finished_reason="stop"} 0+10x100
  vllm:num_requests_running{model_name="d",instance="h:3"} 4+0x100
  http_requests_total{instance="h:3",handler="/v1/completions",method="POST",status="5xx"} 0+10x100
`)
	d, err := NewDetector(DetectConfig{}, shipped(t))
	if err != nil {
		t.Fatal(err)
	}
	var last []Detection
	for i := 60; i <= 100; i++ {
		if last, err = d.Evaluate(context.Background(), m, time.Unix(int64(i)*5, 0)); err != nil {
			t.Fatal(err)
		}
	}
	firing := map[string]bool{}
	for _, det := range last {
		firing[det.Scope.Labels["model_name"]] = det.Firing
	}
	// h:3 serves two models: its 5xx belong to neither for certain.
	if !firing["a"] || firing["b"] || firing["c"] || firing["d"] || len(last) != 4 {
		t.Errorf("firing %v over %d scopes, want a (10%% 5xx) only", firing, len(last))
	}
}

// toModelMetric converts a PromQL engine's labels to the client's metric.
