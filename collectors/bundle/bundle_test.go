package bundle

import (
	"bytes"
	"compress/gzip"
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/whyslow/whyslow/collectors/store"
)

func openStore(t testing.TB) *store.Store {
	t.Helper()
	s, err := store.Open(store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestLoadSmallBundle(t *testing.T) {
	b, err := Load("testdata/small")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if b.TracesPath != filepath.Join("testdata/small", TracesFile) {
		t.Errorf("TracesPath = %q", b.TracesPath)
	}
	inc := b.Incident
	if inc == nil {
		t.Fatal("no incident")
	}
	at := time.Date(2023, 11, 14, 22, 18, 20, 0, time.UTC)
	if !inc.At.Equal(at) || inc.Window != 5*time.Minute || inc.Baseline != time.Hour ||
		inc.Engine != "vllm" || inc.GPU != "H100" || inc.Selector != `job="vllm", pod=~"vllm-.*"` ||
		inc.Scheduler.ChunkedPrefill == nil || !*inc.Scheduler.ChunkedPrefill ||
		inc.Scheduler.MaxNumBatchedTokens != 8192 || inc.Scheduler.MaxNumSeqs != 256 ||
		!strings.HasPrefix(inc.Notes, "Hand-written") {
		t.Errorf("incident = %+v", inc)
	}

	s := openStore(t)
	st, err := b.LoadMetrics(context.Background(), s)
	if err != nil {
		t.Fatalf("LoadMetrics: %v", err)
	}
	// 2 pods x (gauge + counter + 4 buckets + sum + count) x 21 samples.
	if st.Format != FormatOpenMetrics || st.Series != 16 || st.Samples != 16*21 {
		t.Errorf("stats = %+v", st)
	}
	if !st.MinTime.Equal(time.Unix(1700000000, 0)) || !st.MaxTime.Equal(at) {
		t.Errorf("range %v..%v", st.MinTime, st.MaxTime)
	}

	tests := []struct {
		expr string
		want map[string]float64
	}{
		{`sum by (pod) (rate(vllm:request_success_total{finished_reason="stop"}[5m]))`, map[string]float64{"vllm-a": 0.2, "vllm-b": 0.4}},
		{`histogram_quantile(0.5, sum by (pod, le) (rate(vllm:time_to_first_token_seconds_bucket[5m])))`, map[string]float64{"vllm-a": 0.3, "vllm-b": 0.3}},
		{`sum by (pod) (rate(vllm:time_to_first_token_seconds_sum[5m])) / sum by (pod) (rate(vllm:time_to_first_token_seconds_count[5m]))`, map[string]float64{"vllm-a": 0.4, "vllm-b": 0.4}},
		{`max by (pod) (vllm:num_requests_waiting{` + inc.Selector + `})`, map[string]float64{"vllm-a": 2, "vllm-b": 5}},
	}
	for _, tc := range tests {
		t.Run(tc.expr, func(t *testing.T) {
			v, _, err := s.Query(context.Background(), tc.expr, inc.At)
			if err != nil {
				t.Fatal(err)
			}
			if len(v) != len(tc.want) {
				t.Fatalf("got %v, want %v", v, tc.want)
			}
			for _, smp := range v {
				want := tc.want[string(smp.Metric["pod"])]
				if math.Abs(float64(smp.Value)-want) > 1e-9 {
					t.Errorf("%v = %v, want %v", smp.Metric, smp.Value, want)
				}
			}
		})
	}
}

func TestLoadGzip(t *testing.T) {
	dir := t.TempDir()
	data, err := os.ReadFile("testdata/small/metrics.om")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write(data)
	_ = zw.Close()
	if err := os.WriteFile(filepath.Join(dir, MetricsGzFile), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if b.Incident != nil || b.TracesPath != "" {
		t.Errorf("bundle = %+v", b)
	}
	st, err := b.LoadMetrics(context.Background(), openStore(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.Samples != 16*21 {
		t.Errorf("samples = %d", st.Samples)
	}
}

func TestLoadTracesGzip(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{MetricsFile: "a 1 1\n# EOF\n", TracesGzFile: "gzip"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if b.TracesPath != filepath.Join(dir, TracesGzFile) {
		t.Errorf("TracesPath = %q, want %s", b.TracesPath, TracesGzFile)
	}
}

func TestLoadErrors(t *testing.T) {
	write := func(t *testing.T, files map[string]string) string {
		dir := t.TempDir()
		for name, content := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	tests := []struct {
		name  string
		files map[string]string
		want  string // substring of the Load or LoadMetrics error
	}{
		{"no metrics", map[string]string{"incident.yaml": "window: 5m\n"}, "no metrics.om"},
		{"both metrics", map[string]string{"metrics.om": "", "metrics.om.gz": ""}, "both"},
		{"both traces", map[string]string{"metrics.om": "a 1 1\n# EOF\n", "traces.jsonl": "", "traces.jsonl.gz": ""},
			"both traces.jsonl and traces.jsonl.gz present"},
		{"bad incident", map[string]string{"metrics.om": "a 1 1\n# EOF\n", "incident.yaml": "window: 5x\n"}, `incident.yaml:1:9: window: invalid duration "5x"`},
		{"bad metrics", map[string]string{"metrics.om": "a 1 1\na{ 1 1\n# EOF\n"}, "metrics.om:2:3: "},
		{"empty metrics", map[string]string{"metrics.om": "# EOF\n"}, "metrics.om: no samples"},
		{"bad gzip", map[string]string{"metrics.om.gz": "not gzip"}, "metrics.om.gz: not valid gzip"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := write(t, tc.files)
			b, err := Load(dir)
			if err == nil {
				_, err = b.LoadMetrics(context.Background(), &countingAppendable{})
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("missing dir: want error")
	}
}

func TestParseIncident(t *testing.T) {
	ok := []struct {
		name, in string
		check    func(*Incident) bool
	}{
		{"empty", "", func(i *Incident) bool { return *i == Incident{} }},
		{"comment only", "# nothing\n", func(i *Incident) bool { return i.At.IsZero() }},
		{"durations", "window: 90s\nbaseline: 1d\n", func(i *Incident) bool { return i.Window == 90*time.Second && i.Baseline == 24*time.Hour }},
		{"go duration", "window: 1.5h\n", func(i *Incident) bool { return i.Window == 90*time.Minute }},
		{"chunked off", "scheduler:\n  chunked_prefill: false\n", func(i *Incident) bool {
			return i.Scheduler.ChunkedPrefill != nil && !*i.Scheduler.ChunkedPrefill
		}},
		{"offset time", "at: 2024-05-01T12:00:00+02:00\n", func(i *Incident) bool { return i.At.Equal(time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)) }},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			inc, err := ParseIncident("incident.yaml", []byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(inc) {
				t.Errorf("got %+v", inc)
			}
		})
	}

	bad := []struct {
		name, in string
		want     []string
	}{
		{"unknown key", "window: 5m\nwindw: 5m\n", []string{`incident.yaml:2:1: unknown key "windw"`}},
		{"unknown scheduler key", "scheduler:\n  chunked: true\n", []string{`incident.yaml:2:3: unknown key "scheduler.chunked"`}},
		{"bad time", "at: yesterday\n", []string{`incident.yaml:1:5: at: invalid RFC 3339 time "yesterday"`}},
		{"bad duration", "baseline: soon\n", []string{`incident.yaml:1:11: baseline: invalid duration "soon"`}},
		{"negative duration", "window: -5m\n", []string{`incident.yaml:1:9: window: duration must be positive`}},
		{"bad engine", "engine: LM-Deploy\n", []string{`incident.yaml:1:9: engine: "LM-Deploy" is not an engine map's name`}},
		{"bad selector", "selector: pod=\n", []string{`incident.yaml:1:11: selector: invalid label matchers`}},
		{"bad bool", "scheduler:\n  chunked_prefill: maybe\n", []string{`incident.yaml:2:20: scheduler.chunked_prefill: expected true or false`}},
		{"bad int", "scheduler:\n  max_num_seqs: many\n", []string{`incident.yaml:2:17: scheduler.max_num_seqs: expected an integer`}},
		{"zero int", "scheduler:\n  max_num_batched_tokens: 0\n", []string{`incident.yaml:2:27: scheduler.max_num_batched_tokens: must be positive`}},
		{"not a mapping", "- a\n- b\n", []string{`incident.yaml:1:1: top level: expected a mapping`}},
		{"list value", "engine: [vllm]\n", []string{`incident.yaml:1:9: engine: expected a string, got a list`}},
		{"duplicate key", "window: 5m\nwindow: 6m\n", []string{`incident.yaml:2:1:`}},
		{"syntax", "window: 5m\n  bad: [\n", []string{`incident.yaml:2:`}},
		{"all errors at once", "at: x\nwindow: y\nfoo: 1\n", []string{
			`incident.yaml:1:5: at:`, `incident.yaml:2:9: window:`, `incident.yaml:3:1: unknown key "foo"`,
		}},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseIncident("incident.yaml", []byte(tc.in))
			if err == nil {
				t.Fatalf("want error, got none")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not contain %q", err, w)
				}
			}
		})
	}
}

// TestSymlinksLeavingTheBundleRefused is finding 7 of issue 26: a bundle
// whose metrics.om linked to a file elsewhere (~/.ssh/id_rsa) was read, and
// its parse error quoted the file's first line.
func TestSymlinksLeavingTheBundleRefused(t *testing.T) {
	outside := t.TempDir()
	secret := filepath.Join(outside, "id_rsa")
	if err := os.WriteFile(secret, []byte("-----BEGIN OPENSSH PRIVATE KEY----- SECRETMATERIAL\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{MetricsFile, MetricsGzFile, TracesFile, TracesGzFile, IncidentFile} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if name != MetricsFile {
				if err := os.WriteFile(filepath.Join(dir, MetricsFile), []byte("a 1 1\n# EOF\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if name == MetricsGzFile {
				os.Remove(filepath.Join(dir, MetricsFile))
			}
			if err := os.Symlink(secret, filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
			b, err := Load(dir)
			if err == nil {
				_, err = b.LoadMetrics(context.Background(), &countingAppendable{})
			}
			if err == nil || !strings.Contains(err.Error(), name+" is a symlink to outside the bundle directory") {
				t.Fatalf("got %v, want the link refused", err)
			}
			if strings.Contains(err.Error(), "SECRET") || strings.Contains(err.Error(), "BEGIN") || strings.Contains(err.Error(), outside) {
				t.Errorf("the error quotes the file outside: %v", err)
			}
		})
	}
	t.Run("dangling", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Symlink(filepath.Join(outside, "gone"), filepath.Join(dir, MetricsFile)); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(dir); err == nil || strings.Contains(err.Error(), outside) {
			t.Errorf("got %v, want a refusal that does not name the target", err)
		}
	})
	t.Run("inside", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Mkdir(filepath.Join(dir, "data"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "data", "m.om"), []byte("a 1 1\n# EOF\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("data", "m.om"), filepath.Join(dir, MetricsFile)); err != nil {
			t.Fatal(err)
		}
		b, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.LoadMetrics(context.Background(), &countingAppendable{}); err != nil {
			t.Errorf("a link inside the bundle: %v", err)
		}
	})
}
