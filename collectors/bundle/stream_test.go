package bundle

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
)

// parsed is what a parser returned: its samples with their positions, and
// its error.
type parsed struct {
	samples []string
	err     string
}

func collect(p *TextParser, err error) parsed {
	var out parsed
	if err != nil {
		out.err = err.Error()
		return out
	}
	var ls labels.Labels
	for {
		ok, err := p.Next()
		if err != nil {
			out.err = err.Error()
			return out
		}
		if !ok {
			return out
		}
		p.Labels(&ls)
		t, hasT := p.Timestamp()
		line, col := p.Position()
		out.samples = append(out.samples, fmt.Sprintf("%d:%d %s %q %d %v %x", line, col, ls, p.Series(), t, hasT, math.Float64bits(p.Value())))
	}
}

// withBlockSize runs f with blockSize set to n.
func withBlockSize(n int, f func()) {
	old := blockSize
	blockSize = n
	defer func() { blockSize = old }()
	f()
}

// checkStreamMatches checks that the stream parser, with blocks of any
// size, returns what the whole-buffer parser returns: samples, positions
// and errors.
func checkStreamMatches(t *testing.T, data []byte) {
	t.Helper()
	f := DetectFormat(data)
	want := collect(NewTextParser("metrics.om", data, f))
	for _, n := range []int{1, 7, 100, 1 << 20} {
		withBlockSize(n, func() {
			got := collect(NewStreamParser("metrics.om", bytes.NewReader(data), LoadOptions{Format: f}))
			if got.err != want.err {
				t.Fatalf("block %d: error %q, want %q (input %q)", n, got.err, want.err, data)
			}
			if len(got.samples) != len(want.samples) {
				t.Fatalf("block %d: %d samples, want %d (input %q)", n, len(got.samples), len(want.samples), data)
			}
			for i := range got.samples {
				if got.samples[i] != want.samples[i] {
					t.Fatalf("block %d: sample %d: %s, want %s (input %q)", n, i, got.samples[i], want.samples[i], data)
				}
			}
		})
	}
}

func TestStreamMatchesWhole(t *testing.T) {
	small, err := os.ReadFile("testdata/small/metrics.om")
	if err != nil {
		t.Fatal(err)
	}
	inputs := map[string]string{
		"small bundle":         string(small),
		"synthetic":            string(syntheticBundle(1, 3*time.Minute, 15*time.Second)),
		"classic":              "# TYPE h histogram\nh_bucket{le=\"1\"} 1 1000\n\nh_bucket{le=\"+Inf\"} 2 1000\nup 1 1000",
		"openmetrics le":       "# TYPE h histogram\nh_bucket{le=\"1\"} 1 1\nh_bucket{le=\"2\"} 1 1\nh_bucket{le=\"+Inf\"} 2 1\n# EOF\n\n\n",
		"eof no newline":       "a 1 1\n# EOF",
		"eof trailing blanks":  "a 1 1\n# EOF  \n \n",
		"data after eof":       "a 1 1\nb 1 1\n# EOF\n\nb 1 2\n",
		"no eof":               "# TYPE a unknown\na 1 1000\n",
		"bad value late":       "a 1 1\na 2 2\na 3 3\nb 1x 2\n# EOF\n",
		"extra token":          "a 1 1\nb{x=\"y\"} 1 2 3\n# EOF\n",
		"missing eof at end":   "a 1 1\na 1 2\n",
		"exemplar":             "# TYPE r counter\nr_total{pod=\"a\"} 7 1700000000 # {trace_id=\"x\"} 1 1700000000\n# EOF\n",
		"long line":            "a{x=\"" + strings.Repeat("y", 100<<10) + "\"} 1 1\n# EOF\n",
		"classic seconds":      "a 1 1700000000\n",
		"openmetrics millis":   "a 1 1700000000000\n# EOF\n",
		"classic blank lines":  "\n\na 1 1000\n\n\nb 2 1000\n\n",
		"escapes":              "a{x=\"q\\\"\\\\\\n\"} 1 1\n# EOF\n",
		"only eof":             "# EOF\n",
		"blank before eof":     "\n\n# EOF ",
		"space then blank":     "A 0 \nA 0 1\nA 0 1\n\n# EOF",
		"blank between":        "A 0 1\nA 0 1\n\nA 0 1\nA 0 1\n# EOF",
		"classic blank runs":   "A 0 1\nA 0 1\n\n\nA 0 1 \nA 0 1\n",
		"empty":                "",
		"type then many":       "# TYPE s summary\ns{quantile=\"0.5\"} 1 1\ns{quantile=\"1\"} 1 2\ns{quantile=\"1\"} 1 3\n# EOF\n",
		"classic type carried": "# TYPE h histogram\nh_bucket{le=\"1\"} 1 1000\nh_bucket{le=\"1\"} 1 2000\nh_bucket{le=\"1\"} 1 3000\n",
	}
	for name, in := range inputs {
		t.Run(name, func(t *testing.T) { checkStreamMatches(t, []byte(in)) })
	}
}

// FuzzStreamParser checks the stream parser against the whole-buffer one
// on any input, at several block sizes.
func FuzzStreamParser(f *testing.F) {
	f.Add([]byte("a 1 1\n# EOF\n"))
	f.Add([]byte("# TYPE a_total counter\na_total{x=\"y\"} 1 1700000000000\n"))
	f.Add([]byte("# TYPE h histogram\nh_bucket{le=\"1\"} 1 1\nh_bucket{le=\"+Inf\"} 2 1\n# EOF\n\n"))
	f.Add([]byte("a 1 1\n# EOF\nb 1 2\n"))
	// The metrics corpus, too.
	files, _ := filepath.Glob("testdata/fuzz/FuzzParseMetrics/*")
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		_, v, ok := strings.Cut(string(b), "\n[]byte(")
		if !ok {
			continue
		}
		if s, err := strconv.Unquote(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), ")"))); err == nil {
			f.Add([]byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkStreamMatches(t, data)
	})
}

func TestSampleTime(t *testing.T) {
	tests := []struct {
		line string
		f    Format
		want int64
		ok   bool
	}{
		{"a 1 1700000000\n", FormatOpenMetrics, 1700000000000, true},
		{"a 1 1700000000.25", FormatOpenMetrics, 1700000000250, true},
		{`a{x="y",z="w\"\\\n"} NaN 5`, FormatOpenMetrics, 5000, true},
		{`a{x="y"} 1 1700000000000`, FormatPrometheusText, 1700000000000, true},
		{`a{x="y"} 1 1700000000000`, FormatOpenMetrics, 0, false}, // milliseconds: the parser says so
		{`a 1 1700000000`, FormatPrometheusText, 0, false},        // seconds: likewise
		{`a 1`, FormatOpenMetrics, 0, false},
		{`a 1 1 # {x="y"} 1 1`, FormatOpenMetrics, 0, false},
		{`a{x="y"}  1 1`, FormatOpenMetrics, 0, false},
		{`a{x="y",} 1 1`, FormatOpenMetrics, 0, false},
		{`a{x="\t"} 1 1`, FormatOpenMetrics, 0, false},
		{`a{x=y} 1 1`, FormatOpenMetrics, 0, false},
		{`a 1x 1`, FormatOpenMetrics, 0, false},
		{`a 0x1 1`, FormatOpenMetrics, 0, false},
		{`a 1 1e3`, FormatOpenMetrics, 0, false},
		{`a 1 -5`, FormatPrometheusText, 0, false},
		{`1a 1 1`, FormatOpenMetrics, 0, false},
		{`{"a"} 1 1`, FormatOpenMetrics, 0, false},
	}
	for _, tc := range tests {
		got, ok := sampleTime([]byte(tc.line), tc.f)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("sampleTime(%q, %s) = %d, %v; want %d, %v", tc.line, tc.f, got, ok, tc.want, tc.ok)
		}
	}
}

func TestReadMetricsKeep(t *testing.T) {
	data := syntheticBundle(1, time.Hour, 15*time.Second) // from 1700000000 s
	start := time.Unix(1700000000, 0).UTC()
	keep := []Window{{From: start.Add(10 * time.Minute), To: start.Add(20 * time.Minute)}, {From: start.Add(50 * time.Minute), To: start.Add(55 * time.Minute)}}
	all := &countingAppendable{}
	full, err := ReadMetrics(context.Background(), "metrics.om", data, all)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1000, 1 << 20} {
		withBlockSize(n, func() {
			app := &countingAppendable{}
			st, err := ReadMetricsFrom(context.Background(), "metrics.om", bytes.NewReader(data), app, LoadOptions{Keep: keep})
			if err != nil {
				t.Fatal(err)
			}
			var want []sample
			for _, s := range all.committed {
				if keeps(spans(keep), s.t) {
					want = append(want, s)
				}
			}
			if len(app.committed) != len(want) {
				t.Fatalf("kept %d samples, want %d", len(app.committed), len(want))
			}
			for i := range want {
				if app.committed[i] != want[i] {
					t.Fatalf("sample %d: %+v, want %+v", i, app.committed[i], want[i])
				}
			}
			if st.Samples != len(want) || st.Skipped != full.Samples-len(want) || st.Series != full.Series {
				t.Errorf("stats %+v (full %+v)", st, full)
			}
			if !st.MinTime.Equal(keep[0].From) || !st.MaxTime.Equal(keep[1].To) {
				t.Errorf("kept span %s..%s", st.MinTime, st.MaxTime)
			}
			if !st.FileMinTime.Equal(full.MinTime) || !st.FileMaxTime.Equal(full.MaxTime) {
				t.Errorf("file span %s..%s, want %s..%s", st.FileMinTime, st.FileMaxTime, full.MinTime, full.MaxTime)
			}
		})
	}
}

// TestReadMetricsKeepErrors checks that a skipped region still reports the
// errors the quick check cannot rule out.
func TestReadMetricsKeepErrors(t *testing.T) {
	keep := []Window{{From: time.Unix(100, 0), To: time.Unix(200, 0)}}
	tests := []struct{ name, in, want string }{
		{"bad value outside", "a 1 150\na 1x 1\n# EOF\n", `metrics.om:2:3: strconv.ParseFloat`},
		{"no timestamp outside", "a 1 150\nb 2\n# EOF\n", `metrics.om:2:1: sample b has no timestamp`},
		{"milliseconds outside", "a 1 1700000000000\n# EOF\n", "metrics.om:1:1: timestamp 1.7e+12 s looks like milliseconds"},
		{"data after eof", "a 1 1\n# EOF\nb 1 2\n", "metrics.om:2:1: unexpected data after # EOF"},
		// A known series' lines are read from their end (knownTail).
		{"known series, bad value", "a 1 150\na 1 1\na 1x 1\n# EOF\n", `metrics.om:3:3: strconv.ParseFloat`},
		{"known series, no timestamp", "a 1 150\na 1 1\na 2\n# EOF\n", `metrics.om:3:1: sample a has no timestamp`},
		{"known series, exemplar", "a 1 150\na 1 1\na 1 1 # {x=\"y\"} 1 1\na 1 1 # {x=y} 1 1\n# EOF\n", `metrics.om:4:`},
		{"known series, no eof", "a 1 150\na 1 1\na 1 2\n", `metrics.om:4:1: data does not end with # EOF`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadMetricsFrom(context.Background(), "metrics.om", strings.NewReader(tc.in), &countingAppendable{}, LoadOptions{Keep: keep, Format: FormatOpenMetrics})
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("got %v, want prefix %q", err, tc.want)
			}
		})
	}
}

func TestDetectReader(t *testing.T) {
	for _, in := range []string{"a 1 1\n# EOF\n", "a 1 1\n# EOF", "a 1 1\n# EOF\n\n" + strings.Repeat(" \n", 5000), "# EOF\n", "# EOF",
		"a 1 1000\n", "# not EOF\na 1 1000\n", "x# EOF\n", "", "\n\n", "a 1 1\n# EOF\nb 1 1\n", "a 1 1\n# EOF  \nb 1 1\n", strings.Repeat("a 1 1\n", 2000) + "# EOF\n"} {
		want := DetectFormat([]byte(in))
		got, err := detectSeeker(strings.NewReader(in))
		if want == FormatOpenMetrics && !strings.HasPrefix(in, "# EOF") && !strings.HasSuffix(strings.TrimRight(in, " \t\r\n"), "# EOF") {
			// An "# EOF" in the middle is found while reading (below).
			_, err := ReadMetricsFrom(t.Context(), "metrics.om", strings.NewReader(in), &countingAppendable{}, LoadOptions{})
			if err == nil || !strings.HasPrefix(err.Error(), "metrics.om:2:1: unexpected data after # EOF") {
				t.Errorf("%q: got %v, want data after # EOF", in, err)
			}
		} else if err != nil || got != want {
			t.Errorf("detectSeeker(%.20q) = %s, %v; want %s", in, got, err, want)
		}
		dir := t.TempDir()
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write([]byte(in))
		zw.Close()
		if err := os.WriteFile(filepath.Join(dir, MetricsGzFile), buf.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
		b, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		got, err = b.detectStream()
		if err != nil || got != want {
			t.Errorf("detectStream(%.20q) = %s, %v; want %s", in, got, err, want)
		}
	}
}

// TestLoadMetricsGzipStream loads a gzip bundle as a stream and gets what
// the plain file gives.
func TestLoadMetricsGzipStream(t *testing.T) {
	data := syntheticBundle(1, 20*time.Minute, 15*time.Second)
	plain, gz := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(plain, MetricsFile), data, 0o600); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(data)
	zw.Close()
	if err := os.WriteFile(filepath.Join(gz, MetricsGzFile), buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	keep := LoadOptions{Keep: []Window{{From: time.Unix(1700000300, 0), To: time.Unix(1700000600, 0)}}}
	var stats []LoadStats
	for _, dir := range []string{plain, gz} {
		b, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		st, err := b.LoadMetricsWith(t.Context(), &countingAppendable{}, keep)
		if err != nil {
			t.Fatal(err)
		}
		stats = append(stats, st)
	}
	if stats[0] != stats[1] || stats[0].Format != FormatOpenMetrics || stats[0].Skipped == 0 {
		t.Errorf("plain %+v, gzip %+v", stats[0], stats[1])
	}
}

// TestIsPlainFloat checks the quick float check against strconv on the
// forms it accepts.
func TestIsPlainFloat(t *testing.T) {
	for _, v := range []string{"1", "-1", "+1.5", ".5", "5.", "1e3", "1E-3", "1.5e+10", "NaN", "+Inf", "-Inf",
		"", ".", "e3", "1e", "1e+", "--1", "1.2.3", "Inf", "inf", "nan", "0x1", "1_0", "1p3", "+", "1e3.5"} {
		_, err := strconv.ParseFloat(v, 64)
		if isPlainFloat([]byte(v)) && err != nil {
			t.Errorf("isPlainFloat(%q) but strconv: %v", v, err)
		}
	}
}

// TestReadMetricsCancelWhileSkipping checks that a cancelled load stops even
// when every sample is skipped (no batch commit checks the context).
func TestReadMetricsCancelWhileSkipping(t *testing.T) {
	data := syntheticBundle(1, time.Hour, 15*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	keep := []Window{{From: time.Unix(0, 0), To: time.Unix(1, 0)}}
	_, err := ReadMetricsFrom(ctx, "metrics.om", bytes.NewReader(data), &countingAppendable{}, LoadOptions{Keep: keep})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}
