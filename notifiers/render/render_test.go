package render

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/whyslow/whyslow/notifiers/notifytest"
	"github.com/whyslow/whyslow/verdict"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

var samples = []struct {
	name string
	v    func() *verdict.Verdict
}{
	{"anomaly", notifytest.Anomaly},
	{"healthy", notifytest.Healthy},
	{"insufficient", notifytest.Insufficient},
	{"traces", tracesVerdict},
	{"insufficient_reason", insufficientReasonVerdict},
}

// insufficientReasonVerdict is the insufficient-data verdict with the
// reason newer producers give.
func insufficientReasonVerdict() *verdict.Verdict {
	v := notifytest.Insufficient()
	v.InsufficientReason = &verdict.InsufficientReason{Code: verdict.InsufficientSelector,
		Message: `the selector {model_name="llama"} matched no vllm series in the source; model_name values: a, b: fix --selector (or incident.yaml's selector)`}
	return v
}

func fp(v float64) *float64 { return &v }

// tracesVerdict is the anomaly with what newer producers add: units on
// evidence, targets and signals, the GPU class and where it came from, and
// seven slow requests with their full breakdown and pod context (text and
// Markdown list five).
func tracesVerdict() *verdict.Verdict {
	v := notifytest.Anomaly()
	// A quantile estimated inside a coarse bucket, its mean on the next
	// row, and a cause below the evidence bar.
	v.Headline[0].NowBucket = &verdict.Bucket{Lower: 1, Upper: 2.5}
	v.Headline[0].BaselineBucket = &verdict.Bucket{Lower: 0.25, Upper: 0.5}
	v.Headline = append(v.Headline[:2:2], append([]verdict.Comparison{{Signal: "tpot_mean", Title: "TPOT mean", Unit: "seconds",
		Now: fp(0.036), Baseline: fp(0.02), Ratio: fp(1.8)}}, v.Headline[2:]...)...)
	v.Considered = []verdict.Considered{{ID: "prefix_cache_regression", Title: "Prefix cache hit rate fell", Score: 0.42}}
	v.GPU = &verdict.GPUClass{Class: "H200", Source: verdict.GPUSourceMetrics,
		Detail: `model="NVIDIA H200" on the whyslow_gpu_* series of 8 GPUs serving the scope`}
	v.Causes[2].Evidence = append(v.Causes[2].Evidence,
		verdict.Evidence{Step: "kv_cache", Rule: "preemptions_rose", Signal: "preemption_rate", Now: fp(5.58), Baseline: fp(0),
			Unit: "preemptions/s", Weight: 2, Text: "preemptions rose to 5.58/s (baseline 0/s)"},
		verdict.Evidence{Step: "scheduler", Rule: "arrivals_up", Signal: "request_rate", Now: fp(4.65), Baseline: fp(7.44),
			Unit: "req/s", Weight: 1, Text: "request rate fell"},
		verdict.Evidence{Step: "correlate", Rule: "traces.one_pod_slow", Now: fp(3.2), Baseline: fp(0.4), Unit: "seconds", Weight: 1.2,
			Text: "one pod holds the slow requests"})
	for i := range v.Targets {
		v.Targets[i].Unit = "seconds"
	}
	for i := range v.Signals {
		v.Signals[i].Unit = map[string]string{"ttft_p95": "seconds", "kv_cache_usage": "fraction"}[v.Signals[i].Name]
	}
	v.Signals = append(v.Signals, verdict.SignalValue{Name: "request_rate", Expr: "sum(rate(vllm:request_success_total[5m]))",
		Now: fp(4.65), Baseline: fp(7.44), Unit: "req/s"})
	v.Requests = []verdict.Request{
		{TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", RequestID: "chatcmpl-0000000200008562", Pod: "vllm-70b-7d9f-abcde",
			Start: notifytest.T0.Add(-time.Minute), E2E: 15.412, TTFT: 3.212, Dominant: "decode",
			Parts: map[string]float64{"before_engine": 0.112, "before_engine.client": 0.05, "before_engine.admission": 0.002,
				"before_engine.scoring": 0.001, "before_engine.routing": 0.001, "before_engine.proxy": 0.003,
				"before_engine.api_server": 0.055, "queue": 2.7, "prefill": 0.4, "decode": 12.2, "after_engine": 0},
			Tokens:  map[string]int{"prompt": 11800, "completion": 900},
			Scores:  map[string]float64{"prefix_cache.score_max": 0.5},
			Context: map[string]float64{"kv_cache_usage": 0.934, "num_requests_waiting": 30, "num_requests_running": 12, "whyslow_gpu_sm_clock_mhz": 1980}},
		{TraceID: "0af7651916cd43dd8448eb211c80319c", Pod: "vllm-70b-7d9f-abcde", Start: notifytest.T0.Add(-2 * time.Minute),
			E2E: 9.5, Dominant: "before_engine",
			Parts: map[string]float64{"before_engine": 6, "before_engine.client": 6, "queue": 0.5, "prefill": 0.3, "decode": 2.7,
				"engine_other": 0.01, "after_engine": 0.001}},
	}
	for i := 0; i < 5; i++ {
		v.Requests = append(v.Requests, verdict.Request{TraceID: fmt.Sprintf("%032x", i+1), E2E: 8 - float64(i), Dominant: "decode",
			Parts: map[string]float64{"queue": 0.1, "prefill": 0.2, "decode": 7.7 - float64(i)}})
	}
	return v
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (go test -update rewrites it)\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

func TestGolden(t *testing.T) {
	variants := []struct {
		suffix string
		format Format
		opts   Options
	}{
		{"txt", FormatText, Options{}},
		{"explain.txt", FormatText, Options{Explain: true}},
		{"md", FormatMarkdown, Options{}},
		{"explain.md", FormatMarkdown, Options{Explain: true}},
		{"json", FormatJSON, Options{Indent: true}},
	}
	for _, s := range samples {
		for _, vr := range variants {
			t.Run(s.name+"."+vr.suffix, func(t *testing.T) {
				var buf bytes.Buffer
				if err := Render(&buf, s.v(), vr.format, vr.opts); err != nil {
					t.Fatal(err)
				}
				golden(t, s.name+"."+vr.suffix, buf.Bytes())
			})
		}
	}
}

// TestTextAdditions checks the reason of an insufficient-data verdict, the
// quantile's mean next to it, coarse-bucket marks and the causes below the
// evidence bar, in text and Markdown.
func TestTextAdditions(t *testing.T) {
	for _, f := range []Format{FormatText, FormatMarkdown} {
		var buf bytes.Buffer
		if err := Render(&buf, tracesVerdict(), f, Options{}); err != nil {
			t.Fatal(err)
		}
		for _, w := range []string{"TPOT p95 42 ms vs 40 ms ×1.05 (mean ×1.8)", "TPOT mean", "36 ms",
			"≈ estimated inside a coarse histogram bucket", "TTFT p95: now ≈2.41 s (bucket 1–2.5 s), baseline ≈310 ms (bucket 250–500 ms)",
			"Also considered (below the evidence bar)", "score 0.42"} {
			if !strings.Contains(buf.String(), w) {
				t.Errorf("%s lacks %q:\n%s", f, w, buf.String())
			}
		}
		buf.Reset()
		if err := Render(&buf, insufficientReasonVerdict(), f, Options{}); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(strings.Join(strings.Fields(buf.String()), " "), "values: a, b: fix --selector") {
			t.Errorf("%s lacks the insufficient-data reason:\n%s", f, buf.String())
		}
	}
}

func TestTextFitsWidth(t *testing.T) {
	for _, width := range []int{100, 80, 60} {
		for _, s := range samples {
			var buf bytes.Buffer
			if err := Text(&buf, s.v(), Options{Explain: true, Width: width}); err != nil {
				t.Fatal(err)
			}
			for i, l := range strings.Split(buf.String(), "\n") {
				if n := utf8.RuneCountInString(l); n > width {
					t.Errorf("%s width %d line %d has %d columns: %q", s.name, width, i+1, n, l)
				}
			}
		}
	}
}

func TestTextContent(t *testing.T) {
	tests := []struct {
		name string
		v    *verdict.Verdict
		want []string
	}{
		{"anomaly", notifytest.Anomaly(), []string{
			"ANOMALY (critical): prefill is slower (TTFT)",
			"TTFT p95 2.41 s vs 310 ms ×7.77", "TPOT p95 42 ms vs 40 ms ×1.05",
			"1. Requests are queueing", "[queue_saturation] confidence 83%, score 0.86", "chain: arrivals ×1.3 → queue time 1.90s → TTFT ×7.8", "TTFT +2.1 s (310 ms → 2.41 s): queue +1.9 s (90%), prefill +150 ms (7%)",
			"queue_time_p95: now 1.9 s, baseline 4 ms",
			"fix: Add replicas", "KV cache usage 93%", "Ruled out", "GPU clocks throttled [gpu_throttling]",
			"Data gaps", "99.71%",
		}},
		{"healthy", notifytest.Healthy(), []string{"HEALTHY", "TTFT p95 182 ms vs 175 ms ×1.04", "KV cache usage", "41%"}},
		{"insufficient", notifytest.Insufficient(), []string{"INSUFFICIENT DATA", "TTFT p95 n/a vs 250 ms", "too few samples"}},
		{"traces", tracesVerdict(), []string{
			"gpu:      H200 (from the GPU counters: model=\"NVIDIA H200\"",
			"preemption_rate: now 5.58 preemptions/s, baseline", "request_rate: now 4.65 req/s, baseline 7.44 req/s",
			"ttft_p95 = 3.2 s", "4bf92f3577b34da6a3ce929d0e0e4736 request chatcmpl-0000000200008562 on vllm-70b-7d9f-abcde",
			"before_engine 112 ms [client 50 ms, admission 2 ms, scoring 1 ms, routing 1 ms, proxy 3 ms,",
			"api_server 55 ms], queue 2.7 s, prefill 400 ms, decode 12.2 s\n",
			"queue 500 ms, prefill 300 ms, decode 2.7 s, engine_other", "its pod then: KV cache 93.4%, 30 waiting, 12 running",
			"00000000000000000000000000000003", "… and 2 more in the verdict JSON",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := Text(&buf, tt.v, Options{}); err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(buf.String(), w) {
					t.Errorf("text lacks %q:\n%s", w, buf.String())
				}
			}
			if strings.Contains(buf.String(), "\x1b[") {
				t.Error("colour must be off by default")
			}
		})
	}
}

func TestTextColor(t *testing.T) {
	var buf bytes.Buffer
	if err := Text(&buf, notifytest.Anomaly(), Options{Color: true}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), ansiRed) {
		t.Errorf("critical anomaly should be red:\n%q", buf.String())
	}
}

func TestJSONRoundTrip(t *testing.T) {
	v := notifytest.Anomaly()
	v.SchemaVersion = 0
	v.Causes[0].Evidence = nil
	var buf bytes.Buffer
	if err := JSON(&buf, v, Options{}); err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(buf.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	if raw["schema_version"] != float64(verdict.SchemaVersion) {
		t.Errorf("schema_version = %v", raw["schema_version"])
	}
	ev := raw["causes"].([]any)[0].(map[string]any)["evidence"]
	if ev == nil {
		t.Error("nil evidence must be encoded as []")
	}
	var back verdict.Verdict
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.Causes[2].ID != "kv_cache_pressure" || *back.Headline[0].Now != 2.41 || !back.At.Equal(notifytest.T0) {
		t.Errorf("round trip lost data: %+v", back)
	}
	if v.SchemaVersion != 0 || v.Causes[0].Evidence != nil {
		t.Error("JSON must not modify its input")
	}
}

func TestNilVerdict(t *testing.T) {
	for _, f := range []Format{FormatText, FormatJSON, FormatMarkdown} {
		if err := Render(&bytes.Buffer{}, nil, f, Options{}); err == nil {
			t.Errorf("%v: want error for nil verdict", f)
		}
	}
}

func TestParseFormat(t *testing.T) {
	tests := []struct {
		in      string
		want    Format
		wantErr bool
	}{
		{"text", FormatText, false}, {"", FormatText, false}, {"json", FormatJSON, false},
		{"markdown", FormatMarkdown, false}, {"md", FormatMarkdown, false}, {"yaml", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseFormat(tt.in)
			if (err != nil) != tt.wantErr || (!tt.wantErr && got != tt.want) {
				t.Errorf("ParseFormat(%q) = %v, %v", tt.in, got, err)
			}
			if !tt.wantErr && got.String() != map[string]string{"": "text", "md": "markdown"}[tt.in] && got.String() != tt.in {
				t.Errorf("String() = %q", got.String())
			}
		})
	}
}

func TestFormatValue(t *testing.T) {
	tests := []struct {
		v    float64
		unit string
		want string
	}{
		{0.31, "seconds", "310 ms"},
		{0.0421, "s", "42.1 ms"},
		{0.0000052, "seconds", "5.2 µs"},
		{2.414, "seconds", "2.41 s"},
		{0, "seconds", "0 s"},
		{125, "seconds", "2m5s"},
		{0.934, "fraction", "93.4%"},
		{1, "fraction", "100%"},
		{0.99712, "fraction", "99.71%"},
		{42.5, "percent", "42.5%"},
		{7.774, "ratio", "×7.77"},
		{475, "ratio", "×475"},
		{3 << 30, "bytes", "3 GiB"},
		{1.5 * (1 << 20), "bytes_per_second", "1.5 MiB/s"},
		{256, "requests", "256 requests"},
		{4.6512, "req/s", "4.65 req/s"},
		{5.58, "preemptions/s", "5.58 preemptions/s"},
		{1234.5, "tokens/s", "1234 tokens/s"},
		{0.25, "per_second", "0.25/s"},
		{1980, "MHz", "1980 MHz"},
		{20, "count", "20"},
		{11800.4, "", "11800"},
		{0.000012, "", "1.2e-05"},
		// No value is "n/a" in every unit, never "NaN" (issue 22).
		{math.NaN(), "tokens", "n/a"},
		{math.NaN(), "seconds", "n/a"},
		{math.NaN(), "ratio", "n/a"},
		{math.NaN(), "fraction", "n/a"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := FormatValue(tt.v, tt.unit); got != tt.want {
				t.Errorf("FormatValue(%v, %q) = %q, want %q", tt.v, tt.unit, got, tt.want)
			}
		})
	}
}

func TestGuessUnit(t *testing.T) {
	tests := map[string]string{
		"ttft_p95": UnitSeconds, "vllm:e2e_request_latency_seconds": UnitSeconds, "itl_p95": UnitSeconds,
		"kv_cache_usage": UnitFraction, "whyslow_gpu_memory_busy_ratio": UnitFraction,
		"whyslow_gpu_fb_used_bytes": UnitBytes, "num_requests_waiting": "", "title": "",
	}
	for in, want := range tests {
		if got := GuessUnit(in); got != want {
			t.Errorf("GuessUnit(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRequestsListed(t *testing.T) {
	v := tracesVerdict()
	for _, f := range []Format{FormatText, FormatMarkdown} {
		var buf bytes.Buffer
		if err := Render(&buf, v, f, Options{}); err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(buf.String(), "mostly "); n != MaxRequests {
			t.Errorf("%v lists %d requests, want %d", f, n, MaxRequests)
		}
		if strings.Contains(buf.String(), "00000000000000000000000000000004") {
			t.Errorf("%v lists a request past the first %d", f, MaxRequests)
		}
	}
	var buf bytes.Buffer
	if err := JSON(&buf, v, Options{}); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(buf.String(), `"trace_id"`); n != len(v.Requests) {
		t.Errorf("JSON carries %d requests, want all %d", n, len(v.Requests))
	}
}

func TestRequestParts(t *testing.T) {
	tests := []struct {
		name  string
		parts map[string]float64
		want  string
	}{
		{"engine only", map[string]float64{"decode": 2, "queue": 0.1, "prefill": 0.3, "before_engine": 0, "after_engine": 0},
			"queue 100 ms, prefill 300 ms, decode 2 s"},
		{"sub-parts in order, unknown last", map[string]float64{"before_engine.proxy": 0.003, "before_engine.client": 0.01,
			"before_engine.dns": 0.002, "before_engine": 0.015, "after_engine": 0.001, "decode": 1, "zz_other": 0.5},
			"before_engine 15 ms [client 10 ms, proxy 3 ms, dns 2 ms], decode 1 s, after_engine 1 ms, zz_other 500 ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := requestParts(verdict.Request{Parts: tt.parts}); got != tt.want {
				t.Errorf("requestParts = %q\nwant            %q", got, tt.want)
			}
		})
	}
}

func TestOwnUnitWins(t *testing.T) {
	// A value's own unit beats the headline unit of its signal and the guess.
	u := units{"kv_usage": UnitFraction}
	if got := u.of("percent", "kv_usage"); got != "percent" {
		t.Errorf("own unit: got %q", got)
	}
	if got := u.of("", "kv_usage"); got != UnitFraction {
		t.Errorf("headline unit: got %q", got)
	}
	if got := u.of("", "x_seconds"); got != UnitSeconds {
		t.Errorf("guess: got %q", got)
	}
}

func TestWrap(t *testing.T) {
	long := strings.Repeat("x", 130)
	lines := wrap("a "+long+" b c", 50, 4)
	for _, l := range lines {
		if utf8.RuneCountInString(l) > 50 {
			t.Errorf("line too long: %q", l)
		}
	}
	if got := strings.ReplaceAll(strings.Join(lines, ""), " ", ""); got != "a"+long+"bc" {
		t.Errorf("wrap lost text: %q", got)
	}
}

func BenchmarkRender(b *testing.B) {
	v := notifytest.Anomaly()
	for _, f := range []Format{FormatText, FormatMarkdown, FormatJSON} {
		b.Run(f.String(), func(b *testing.B) {
			b.ReportAllocs()
			var buf bytes.Buffer
			for b.Loop() {
				buf.Reset()
				if err := Render(&buf, v, f, Options{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestSummary(t *testing.T) {
	want := "ANOMALY (critical): prefill is slower (TTFT) — TTFT p95 2.41 s vs 310 ms ×7.77, TPOT p95 42 ms vs 40 ms ×1.05"
	if got := Summary(notifytest.Anomaly()); got != want {
		t.Errorf("Summary = %q, want %q", got, want)
	}
}

// TestStateFirst is issue 25's first finding, in the renderings: a
// daemon's learning state and a degraded baseline come before everything
// else (the status line of the text and Markdown, the one-line summary).
func TestStateFirst(t *testing.T) {
	v := notifytest.Anomaly()
	v.Learning = &verdict.Learning{HistoryMinutes: 2, BaselineMinutes: 60, Message: "learning the baseline (2 of 60 minutes); using the 2 minutes there are"}
	v.DegradedBaseline = &verdict.DegradedBaseline{Signs: []string{"KV cache peak 100.0%"}, Message: "degraded baseline: the baseline window already shows KV cache peak 100.0%"}
	for _, f := range []Format{FormatText, FormatMarkdown} {
		var b bytes.Buffer
		if err := Render(&b, v, f, Options{}); err != nil {
			t.Fatal(err)
		}
		first, _, _ := strings.Cut(b.String(), "\n")
		first = strings.TrimPrefix(first, "### ")
		if !strings.HasPrefix(first, v.Learning.Message) || !strings.Contains(first, "degraded baseline") {
			t.Errorf("format %v: first line %q, want the learning state, then the degraded baseline", f, first)
		}
	}
	if s := Summary(v); !strings.HasPrefix(s, v.Learning.Message) {
		t.Errorf("summary %q", s)
	}
}
