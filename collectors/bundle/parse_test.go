package bundle

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
)

type sample struct {
	series string
	t      int64
	hasT   bool
	v      float64
}

func parseAll(name, in string, f Format) ([]sample, Format, error) {
	p, err := NewTextParser(name, []byte(in), f)
	if err != nil {
		return nil, 0, err
	}
	var out []sample
	var ls labels.Labels
	for {
		ok, err := p.Next()
		if err != nil {
			return out, p.Format(), err
		}
		if !ok {
			return out, p.Format(), nil
		}
		p.Labels(&ls)
		t, hasT := p.Timestamp()
		out = append(out, sample{series: ls.String(), t: t, hasT: hasT, v: p.Value()})
	}
}

func TestDetectFormat(t *testing.T) {
	tests := []struct {
		name, in string
		want     Format
	}{
		{"openmetrics", "a 1 1\n# EOF\n", FormatOpenMetrics},
		{"openmetrics no newline", "a 1 1\n# EOF", FormatOpenMetrics},
		{"openmetrics trailing blank lines", "a 1 1\n# EOF\n\n\n", FormatOpenMetrics},
		{"openmetrics empty", "# EOF\n", FormatOpenMetrics},
		{"openmetrics data after eof", "a 1 1\n# EOF\nb 2 2\n", FormatOpenMetrics},
		{"classic", "# TYPE a gauge\na 1 1000\n", FormatPrometheusText},
		{"classic comment mentioning eof", "# not EOF\na 1 1000\n", FormatPrometheusText},
		{"empty", "", FormatPrometheusText},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := DetectFormat([]byte(tc.in)); got != tc.want {
				t.Errorf("DetectFormat = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		format Format
		want   []sample
	}{
		{
			name: "openmetrics seconds timestamps",
			in: `# TYPE vllm:num_requests_running gauge
# HELP vllm:num_requests_running Number of requests in model execution batches.
vllm:num_requests_running{pod="a"} 3 1700000000
vllm:num_requests_running{pod="a"} 4 1700000015.5
# EOF
`,
			format: FormatOpenMetrics,
			want: []sample{
				{`{__name__="vllm:num_requests_running", pod="a"}`, 1700000000000, true, 3},
				{`{__name__="vllm:num_requests_running", pod="a"}`, 1700000015500, true, 4},
			},
		},
		{
			name: "openmetrics histogram le normalised",
			in: `# TYPE x_seconds histogram
# UNIT x_seconds seconds
x_seconds_bucket{le="1"} 2 1700000000
x_seconds_bucket{le="+Inf"} 3 1700000000
x_seconds_sum 1.5 1700000000
x_seconds_count 3 1700000000
# EOF`,
			format: FormatOpenMetrics,
			want: []sample{
				{`{__name__="x_seconds_bucket", le="1.0"}`, 1700000000000, true, 2},
				{`{__name__="x_seconds_bucket", le="+Inf"}`, 1700000000000, true, 3},
				{`{__name__="x_seconds_sum"}`, 1700000000000, true, 1.5},
				{`{__name__="x_seconds_count"}`, 1700000000000, true, 3},
			},
		},
		{
			name: "openmetrics exemplar ignored",
			in: `# TYPE r counter
r_total{pod="a"} 7 1700000000 # {trace_id="abc"} 1.0 1700000000
# EOF
`,
			format: FormatOpenMetrics,
			want:   []sample{{`{__name__="r_total", pod="a"}`, 1700000000000, true, 7}},
		},
		{
			name: "classic text milliseconds and blank lines",
			in: `# HELP a_total A counter.
# TYPE a_total counter

a_total{job="vllm",instance="h:1"} 10 1700000000000
# a comment

a_total{job="vllm",instance="h:1"} 12 1700000015000`,
			format: FormatPrometheusText,
			want: []sample{
				{`{__name__="a_total", instance="h:1", job="vllm"}`, 1700000000000, true, 10},
				{`{__name__="a_total", instance="h:1", job="vllm"}`, 1700000015000, true, 12},
			},
		},
		{
			name:   "classic text without timestamps",
			in:     "up 1\n",
			format: FormatPrometheusText,
			want:   []sample{{`{__name__="up"}`, 0, false, 1}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, f, err := parseAll("metrics.om", tc.in, FormatAuto)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if f != tc.format {
				t.Errorf("format %s, want %s", f, tc.format)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d samples %+v, want %d", len(got), got, len(tc.want))
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("sample %d: got %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string // prefix: position and start of message
	}{
		{"bad value", "a 1 1\nb 1x 2\n# EOF\n", `metrics.om:2:3: strconv.ParseFloat: parsing "1x"`},
		{"unquoted label value", "a 1 1\nb{x=y} 1 2\n# EOF\n", "metrics.om:2:5: expected label value"},
		{"extra token", "a 1 1\nb{x=\"y\"} 1 2 3\n# EOF\n", "metrics.om:2:14: expected next entry after timestamp"},
		{"data after eof", "a 1 1\n# EOF\nb 1 2\n", "metrics.om:2:1: unexpected data after # EOF"},
		{"bad type", "a 1 1\n# TYPE b wrong\n# EOF\n", `metrics.om:2:1: invalid metric type "wrong"`},
		{"classic bad value after blank lines", "a 1 1000\n\n\nb 1x 2000\n", "metrics.om:4:3: strconv.ParseFloat"},
		{"classic fractional timestamp", "a 1 1000\nb 1 2000.5\n", "metrics.om:2:9: expected next entry after timestamp"},
		{"classic seconds timestamp", "a 1 1000\na 1 1700000000\n", "metrics.om:2:1: timestamp 1700000000 looks like seconds"},
		{"openmetrics milliseconds timestamp", "a 1 1700000000000\n# EOF\n", "metrics.om:1:1: timestamp 1.7e+12 s looks like milliseconds"},
		{"openmetrics without eof", "# TYPE a unknown\na 1 1000\n", `metrics.om:1:1: invalid metric type "unknown" (this looks like OpenMetrics: it must end with "# EOF")`},
		{"unclosed brace", "a{b=\"c\" 1 1000\n", `metrics.om:1:9: expected label name`},
		// Finding 10 of issue 26: the store called this "too old" at year -292275055.
		{"openmetrics far-future timestamp", "a 1 1\nb 1 1e300\n# EOF\n", "metrics.om:2:1: timestamp out of range: a bundle's samples lie within the years 1 to 9999"},
		{"openmetrics far-past timestamp", "a 1 -1e300\n# EOF\n", "metrics.om:1:1: timestamp out of range"},
		{"classic timestamp past year 9999", "a 1 9000000000000000000\n", "metrics.om:1:1: timestamp out of range"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := parseAll("metrics.om", tc.in, FormatAuto)
			if err == nil {
				t.Fatalf("want error %q, got none", tc.want)
			}
			if !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("got  %q\nwant prefix %q", err, tc.want)
			}
			var pe *PosError
			if !errors.As(err, &pe) {
				t.Errorf("error %T is not a *PosError", err)
			}
		})
	}
}

// countingAppendable is a storage.Appendable that keeps samples in memory.
type countingAppendable struct {
	committed []sample
}

type countingAppender struct {
	storage.Appender // nil: only the methods below are used
	c                *countingAppendable
	pending          []sample
}

func (c *countingAppendable) Appender(context.Context) storage.Appender {
	return &countingAppender{c: c}
}

func (a *countingAppender) Append(ref storage.SeriesRef, l labels.Labels, t int64, v float64) (storage.SeriesRef, error) {
	a.pending = append(a.pending, sample{series: l.String(), t: t, hasT: true, v: v})
	return ref + 1, nil
}

func (a *countingAppender) Commit() error {
	a.c.committed = append(a.c.committed, a.pending...)
	a.pending = nil
	return nil
}

func (a *countingAppender) Rollback() error {
	a.pending = nil
	return nil
}

func TestReadMetricsErrors(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"missing timestamp", "a 1 1\nb{pod=\"x\"} 2\n# EOF\n", `metrics.om:2:1: sample b{pod="x"} has no timestamp`},
		{"duplicate label", "a{x=\"1\",x=\"2\"} 1 1\n# EOF\n", `metrics.om:1:1: series a{x="1",x="2"} has label "x" twice`},
		{"parse error", "a 1 1\nb 1 1 1 1\n# EOF\n", "metrics.om:2:"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			app := &countingAppendable{}
			_, err := ReadMetrics(context.Background(), "metrics.om", []byte(tc.in), app)
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("got %v, want prefix %q", err, tc.want)
			}
			if len(app.committed) != 0 {
				t.Errorf("committed %d samples of a failed load", len(app.committed))
			}
		})
	}
}

func TestReadMetricsEmptyLabel(t *testing.T) {
	app := &countingAppendable{}
	st, err := ReadMetrics(context.Background(), "m", []byte("a{x=\"\",y=\"1\"} 1 1\n# EOF\n"), app)
	if err != nil {
		t.Fatal(err)
	}
	if st.Samples != 1 || st.Series != 1 || app.committed[0].series != `{__name__="a", y="1"}` {
		t.Errorf("stats %+v, samples %+v", st, app.committed)
	}
}

// TestErrorLineDeepInFile checks line counting across many entries of every
// kind (HELP, TYPE, UNIT, samples).
func TestErrorLineDeepInFile(t *testing.T) {
	data, err := os.ReadFile("testdata/small/metrics.om")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	for _, n := range []int{3, 46, 90, 200, 341} {
		bad := append([]string(nil), lines...)
		bad[n-1] = strings.Replace(bad[n-1], "} ", "} x", 1)
		_, err := ReadMetrics(context.Background(), "metrics.om", []byte(strings.Join(bad, "\n")), &countingAppendable{})
		want := fmt.Sprintf("metrics.om:%d:", n)
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("line %d: got %v, want prefix %q", n, err, want)
		}
	}
}

// TestNULByte: textparse reads a NUL as the end of the input; the parser
// reports the NUL where it is, wherever in its line, instead of ending early
// without an error or with textparse's error for what a NUL cut short.
func TestNULByte(t *testing.T) {
	for in, want := range map[string]string{
		"\x00\nA 0 0\n":                               "metrics.prom:1:1: NUL byte",
		"a 1 1000\n\x00b 2 1000\n":                    "metrics.prom:2:1: NUL byte",
		"a 1 1000\nb\x00 2 1000\n":                    "metrics.prom:2:2: NUL byte",
		"a 1 1\nb 2 1\x00\n# EOF\n":                   "metrics.om:2:6: NUL byte",
		"a{x=\"\x00\"} 1 1\n":                         "metrics.prom:1:6: NUL byte",
		"# TYPE A gauge\nA 0 0\nA 0 0\n\x00\n# EOF\n": "metrics.om:4:1: NUL byte",
		"a 1 1\nb{ 1 1\n\x00\n":                       "metrics.prom:2:",
	} {
		name := "metrics.prom"
		if strings.Contains(in, "# EOF") {
			name = "metrics.om"
		}
		p, err := NewTextParser(name, []byte(in), FormatAuto)
		if err != nil {
			t.Fatal(err)
		}
		for {
			ok, err := p.Next()
			if err != nil {
				if !strings.HasPrefix(err.Error(), want) {
					t.Errorf("%q: error %q, want prefix %q", in, err, want)
				}
				break
			}
			if !ok {
				t.Errorf("%q: no error, want %q", in, want)
				break
			}
		}
	}
}
