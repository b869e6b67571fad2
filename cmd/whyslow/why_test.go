package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/whyslow/whyslow/rulesets"
	"github.com/whyslow/whyslow/testbed/sim"
	"github.com/whyslow/whyslow/verdict"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// incidentsDir holds the committed incident bundles (go generate ./testbed/sim).
const incidentsDir = "../../testdata/incidents"

// knownWrong lists the committed bundles whose verdict does not match their
// truth yet, with the reason. The golden test skips these cases only while
// they still fail; each one is a bug in the rules, not in the test.
var knownWrong = map[string]string{}

// cliResult is what one in-process run of the CLI gave.
type cliResult struct {
	code           int
	stdout, stderr string
}

// runCLI runs whyslow in-process with args.
func runCLI(t testing.TB, args ...string) cliResult {
	t.Helper()
	return runArgs(args...)
}

// runArgs is runCLI without a test, for a run started before the tests that
// check it (conformanceRuns).
func runArgs(args ...string) cliResult {
	ctx, cancel := context.WithTimeout(context.Background(), cliHangGuard)
	defer cancel()
	var out, errb bytes.Buffer
	code := dispatch(ctx, args, &out, &errb)
	return cliResult{code: code, stdout: out.String(), stderr: errb.String()}
}

// sharedRuns holds the results of runShared, one per distinct command line.
var sharedRuns sync.Map // args joined by NUL → func() cliResult

// runShared is runCLI, run once per package run for the same args: several
// tests check the same triage of a committed bundle (every bundle's JSON
// verdict, the golden bundles' text, the default demo), and a read-only
// command over committed files gives the same output each time (the
// goldens pin it byte for byte). Only for such commands; a test that
// compares two runs must call runCLI twice.
func runShared(t testing.TB, args ...string) cliResult {
	t.Helper()
	once, _ := sharedRuns.LoadOrStore(strings.Join(args, "\x00"), sync.OnceValue(func() cliResult {
		return runCLI(t, args...)
	}))
	return once.(func() cliResult)()
}

// cliHangGuard only stops a command that hangs: no test asserts how fast a
// command runs (demo --live needs about 30 CPU-seconds, minutes on a busy
// 2-core machine).
const cliHangGuard = 10 * time.Minute

// bundleTruth is the part of truth.yaml the tests check against.
type bundleTruth struct {
	Scenario string   `yaml:"scenario"`
	Causes   []string `yaml:"causes"`
}

func readTruth(t *testing.T, dir string) bundleTruth {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "truth.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var tr bundleTruth
	if err := yaml.Unmarshal(data, &tr); err != nil {
		t.Fatalf("%s/truth.yaml: %v", dir, err)
	}
	return tr
}

func decodeVerdict(t *testing.T, data string) *verdict.Verdict {
	t.Helper()
	var v verdict.Verdict
	if err := json.Unmarshal([]byte(data), &v); err != nil {
		t.Fatalf("output is not a verdict: %v\n%s", err, data)
	}
	return &v
}

// checkTruth compares a verdict and exit code with a bundle's truth and
// returns what is wrong, or "" when they agree.
func checkTruth(tr bundleTruth, r cliResult, v *verdict.Verdict) string {
	if len(tr.Causes) == 0 {
		if r.code != exitOK || v.Status != verdict.StatusHealthy {
			top := "-"
			if len(v.Causes) > 0 {
				top = v.Causes[0].ID
			}
			return fmt.Sprintf("exit %d, status %s (top cause %s); want exit 0, status healthy", r.code, v.Status, top)
		}
		return ""
	}
	if r.code != exitCause || v.Status != verdict.StatusAnomaly {
		return fmt.Sprintf("exit %d, status %s; want exit 1, status anomaly", r.code, v.Status)
	}
	if len(v.Causes) == 0 {
		return "no cause ranked; want " + tr.Causes[0]
	}
	if v.Causes[0].ID != tr.Causes[0] {
		return "top cause " + v.Causes[0].ID + "; want " + tr.Causes[0]
	}
	return ""
}

// TestWhyBundleTruth triages every committed bundle through the CLI and
// checks status, exit code and top cause against its truth.yaml.
func TestWhyBundleTruth(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join(incidentsDir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 10 {
		t.Fatalf("only %d bundles under %s", len(dirs), incidentsDir)
	}
	for _, dir := range dirs {
		name := filepath.Base(dir)
		t.Run(name, func(t *testing.T) {
			tr := readTruth(t, dir)
			r := runShared(t, "why", "--bundle", dir, "--output", "json")
			if r.code == exitFailed {
				t.Fatalf("exit 2: %s", r.stderr)
			}
			v := decodeVerdict(t, r.stdout)
			if v.SchemaVersion != verdict.SchemaVersion {
				t.Errorf("schema_version %d, want %d", v.SchemaVersion, verdict.SchemaVersion)
			}
			problem := checkTruth(tr, r, v)
			reason, known := knownWrong[name]
			switch {
			case problem != "" && known:
				t.Skipf("known wrong verdict (%s): %s", reason, problem)
			case problem != "":
				t.Errorf("%s: %s", tr.Scenario, problem)
			case known:
				t.Logf("%s now matches its truth: remove it from knownWrong", name)
			}
		})
	}
}

// TestWhyTextGolden keeps the text rendering of a few bundles in
// testdata/*.golden; go test -run TestWhyTextGolden -update rewrites them.
func TestWhyTextGolden(t *testing.T) {
	for _, tc := range []struct {
		bundle string
		args   []string
		golden string
	}{
		{bundle: "kv_pressure", golden: "why_kv_pressure.golden"},
		{bundle: "healthy", golden: "why_healthy.golden"},
		{bundle: "prompt_shift", golden: "why_prompt_shift.golden"},
	} {
		t.Run(tc.bundle, func(t *testing.T) {
			args := append([]string{"why", "--bundle", filepath.Join(incidentsDir, tc.bundle)}, tc.args...)
			r := runShared(t, args...)
			if r.code == exitFailed {
				t.Fatalf("exit 2: %s", r.stderr)
			}
			checkGolden(t, filepath.Join("testdata", tc.golden), r.stdout)
		})
	}
}

// lineDiff shows the first lines where want and got differ.
func lineDiff(want, got string) string {
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	shown := 0
	for i := 0; i < max(len(wl), len(gl)) && shown < 10; i++ {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g {
			fmt.Fprintf(&b, "line %d:\n  want: %s\n  got:  %s\n", i+1, w, g)
			shown++
		}
	}
	return b.String()
}

// TestWhyBadInput checks that every kind of bad input gives exit 2 and a
// message that names the place.
func TestWhyBadInput(t *testing.T) {
	healthy := filepath.Join(incidentsDir, "healthy")
	for _, tc := range []struct {
		name string
		args []string
		want []string
		// notWant must not appear on stderr.
		notWant []string
		// lines is the number of stderr lines (0: one).
		lines int
	}{
		{
			name: "malformed metrics.om",
			args: []string{"why", "--bundle", "testdata/bad/metrics_syntax"},
			want: []string{"testdata/bad/metrics_syntax/metrics.om:3:34:"},
		},
		{
			name: "metrics.om without EOF",
			args: []string{"why", "--bundle", "testdata/bad/metrics_no_eof"},
			want: []string{"testdata/bad/metrics_no_eof/metrics.om", "EOF"},
		},
		{
			name: "unknown incident.yaml key",
			args: []string{"why", "--bundle", "testdata/bad/incident_key"},
			want: []string{"testdata/bad/incident_key/incident.yaml:4:1:", `unknown key "windw"`},
		},
		{
			name: "missing bundle",
			args: []string{"why", "--bundle", "testdata/bad/does-not-exist"},
			want: []string{"testdata/bad/does-not-exist"},
		},
		{
			name:  "ruleset with three errors",
			args:  []string{"why", "--bundle", healthy, "--ruleset", "testdata/bad/three_errors.yaml"},
			want:  []string{"testdata/bad/three_errors.yaml:6:11:", "testdata/bad/three_errors.yaml:14:15:", "testdata/bad/three_errors.yaml:16:9:"},
			lines: 3,
		},
		{
			name: "missing ruleset file",
			args: []string{"why", "--bundle", healthy, "--ruleset", "testdata/bad/nope.yaml"},
			want: []string{"testdata/bad/nope.yaml"},
		},
		{
			name:    "unreachable prometheus",
			args:    []string{"why", "--prometheus", "http://127.0.0.1:1", "--timeout", "5s", "--at", "2026-01-01T01:23:00Z"},
			want:    []string{"whyslow why: prometheus http://127.0.0.1:1 unreachable: "},
			notWant: []string{"triage:", "detect engine", "no query succeeded"},
		},
		{
			name:    "unreachable prometheus, engine named",
			args:    []string{"why", "--prometheus", "http://127.0.0.1:1", "--timeout", "5s", "--engine", "vllm"},
			want:    []string{"whyslow why: prometheus http://127.0.0.1:1 unreachable: "},
			notWant: []string{"triage:", "no query succeeded"},
		},
		{
			name: "prometheus URL without scheme",
			args: []string{"why", "--prometheus", "127.0.0.1:9090"},
			want: []string{"127.0.0.1:9090"},
		},
		{
			name: "unreachable scrape target",
			args: []string{"why", "--scrape", "http://127.0.0.1:1/metrics"},
			want: []string{"http://127.0.0.1:1/metrics", "unreachable"},
		},
		{
			name: "empty scrape list",
			args: []string{"why", "--scrape", ","},
			want: []string{`--scrape ","`},
		},
		{
			name: "unreachable server",
			args: []string{"why", "--server", "http://127.0.0.1:1", "--timeout", "5s"},
			want: []string{"http://127.0.0.1:1", "unreachable"},
		},
		{
			name: "no source",
			args: []string{"why"},
			want: []string{"give exactly one source"},
		},
		{
			name: "two sources",
			args: []string{"why", "--bundle", healthy, "--prometheus", "http://127.0.0.1:1"},
			want: []string{"give exactly one source"},
		},
		{
			name: "bad --at",
			args: []string{"why", "--bundle", healthy, "--at", "yesterday"},
			want: []string{`--at "yesterday"`, "RFC 3339"},
		},
		{
			name: "window longer than the baseline offset",
			args: []string{"why", "--bundle", healthy, "--window", "2h", "--baseline", "1h"},
			want: []string{"2h", "1h"},
		},
		{
			name: "unknown engine",
			args: []string{"why", "--bundle", healthy, "--engine", "lmdeploy"},
			want: []string{`"lmdeploy"`},
		},
		{
			name: "bad selector",
			args: []string{"why", "--bundle", healthy, "--selector", `pod=`},
			want: []string{"selector", "pod="},
		},
		{
			name: "bad output",
			args: []string{"why", "--bundle", healthy, "--output", "yaml"},
			want: []string{`"yaml"`},
		},
		{
			name: "window with --scrape",
			args: []string{"why", "--scrape", "http://127.0.0.1:1/metrics", "--window", "1m"},
			want: []string{"--window", "--scrape"},
		},
		{
			name: "sample too short",
			args: []string{"why", "--scrape", "http://127.0.0.1:1/metrics", "--sample", "1s"},
			want: []string{"--sample 1s"},
		},
		{
			name: "stray argument",
			args: []string{"why", "--bundle", healthy, "now"},
			want: []string{`unexpected argument "now"`},
		},
		{
			name: "chart into a missing directory",
			args: []string{"why", "--bundle", healthy, "--chart", "testdata/bad/no/such/dir/c.png"},
			want: []string{"testdata/bad/no/such/dir/c.png"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, tc.args...)
			if r.code != exitFailed {
				t.Errorf("exit %d, want %d\nstdout:\n%s", r.code, exitFailed, r.stdout)
			}
			if r.stdout != "" {
				t.Errorf("stdout not empty on failure:\n%s", r.stdout)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(r.stderr, w) {
					t.Errorf("stderr has %q:\n%s", w, r.stderr)
				}
			}
			lines := tc.lines
			if lines == 0 {
				lines = 1
			}
			if got := strings.Count(strings.TrimRight(r.stderr, "\n"), "\n") + 1; got != lines {
				t.Errorf("stderr has %d lines, want %d:\n%s", got, lines, r.stderr)
			}
			if strings.Contains(r.stderr, "panic") || strings.Contains(r.stderr, "goroutine ") {
				t.Errorf("stderr shows a panic:\n%s", r.stderr)
			}
		})
	}
}

// TestWriteChartErrorNamesPath checks that a chart that cannot be written
// is reported under the path the user asked for, not the temporary file's.
func TestWriteChartErrorNamesPath(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	v := &verdict.Verdict{Status: verdict.StatusAnomaly, Engine: "vllm",
		Incident: verdict.Window{Start: t0.Add(-5 * time.Minute), End: t0},
		Baseline: verdict.Window{Start: t0.Add(-65 * time.Minute), End: t0.Add(-time.Hour)}}
	path := filepath.Join(t.TempDir(), "missing", "c.png")
	err := writeChart(context.Background(), rampMetrics{}, v, path, nil)
	if err == nil || !strings.Contains(err.Error(), "write chart "+path+": ") || strings.Contains(err.Error(), ".chart-") {
		t.Errorf("err = %v, want it to name %s", err, path)
	}
}

// TestWhyExplain checks that --explain shows every signal of the vLLM
// ruleset and every rule's outcome.
func TestWhyExplain(t *testing.T) {
	rs, err := rulesets.Default("vllm")
	if err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, "why", "--bundle", filepath.Join(incidentsDir, "gpu_throttle"), "--explain")
	if r.code != exitCause {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, s := range rs.Signals {
		if !strings.Contains(r.stdout, "  - "+s.Name+": ") {
			t.Errorf("--explain lacks signal %s", s.Name)
		}
	}
	for _, st := range rs.Steps {
		if !strings.Contains(r.stdout, st.Title) {
			t.Errorf("--explain lacks step %s (%q)", st.Name, st.Title)
		}
		for _, rule := range st.Rules {
			if !strings.Contains(r.stdout, " "+rule.Name+": ") {
				t.Errorf("--explain lacks the outcome of rule %s/%s", st.Name, rule.Name)
			}
		}
	}

	// The JSON form carries the same: every signal, every rule outcome.
	r = runCLI(t, "why", "--bundle", filepath.Join(incidentsDir, "gpu_throttle"), "--explain", "--output", "json")
	v := decodeVerdict(t, r.stdout)
	if len(v.Signals) != len(rs.Signals) {
		t.Errorf("%d signals in the JSON, want %d", len(v.Signals), len(rs.Signals))
	}
	if len(v.Steps) != len(rs.Steps) {
		t.Fatalf("%d steps in the JSON, want %d", len(v.Steps), len(rs.Steps))
	}
	for i, st := range rs.Steps {
		if len(v.Steps[i].Rules) != len(st.Rules) {
			t.Errorf("step %s: %d rule outcomes, want %d", st.Name, len(v.Steps[i].Rules), len(st.Rules))
		}
	}
}

// TestWhyOutputs checks the JSON and markdown renderings and the chart.
func TestWhyOutputs(t *testing.T) {
	dir := filepath.Join(incidentsDir, "prompt_shift")

	r := runCLI(t, "why", "--bundle", dir, "--output", "json")
	if r.code != exitCause {
		t.Fatalf("json: exit %d: %s", r.code, r.stderr)
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &raw); err != nil {
		t.Fatalf("json: %v", err)
	}
	for _, k := range []string{"schema_version", "status", "phase", "causes", "ruled_out", "steps", "data_gaps", "incident_window", "baseline_window", "headline"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("json lacks %q", k)
		}
	}
	v := decodeVerdict(t, r.stdout)
	if len(v.Causes) == 0 || v.Causes[0].Rank != 1 || len(v.Causes[0].Evidence) == 0 || len(v.Causes[0].Remediation) == 0 {
		t.Errorf("json: top cause lacks rank, evidence or remediation: %+v", v.Causes)
	}

	r = runCLI(t, "why", "--bundle", dir, "--output", "markdown")
	if r.code != exitCause {
		t.Fatalf("markdown: exit %d: %s", r.code, r.stderr)
	}
	for _, w := range []string{"### ANOMALY", "| Signal | Now | Baseline | Change |", v.Causes[0].ID} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("markdown lacks %q:\n%s", w, r.stdout)
		}
	}

	chart := filepath.Join(t.TempDir(), "chart.png")
	r = runCLI(t, "why", "--bundle", dir, "--chart", chart)
	if r.code != exitCause {
		t.Fatalf("chart: exit %d: %s", r.code, r.stderr)
	}
	f, err := os.Open(chart)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("chart: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 100 || b.Dy() < 100 {
		t.Errorf("chart is %v", b)
	}
}

// TestWhyFlagsOverrideIncident checks that --at, --window and --baseline
// win over the bundle's incident.yaml.
func TestWhyFlagsOverrideIncident(t *testing.T) {
	r := runCLI(t, "why", "--bundle", filepath.Join(incidentsDir, "kv_pressure"), "--output", "json",
		"--at", "2026-01-01T01:22:00Z", "--window", "2m", "--baseline", "59m")
	if r.code == exitFailed {
		t.Fatalf("exit 2: %s", r.stderr)
	}
	v := decodeVerdict(t, r.stdout)
	at := time.Date(2026, 1, 1, 1, 22, 0, 0, time.UTC)
	if !v.At.Equal(at) || !v.Incident.Start.Equal(at.Add(-2*time.Minute)) || !v.Baseline.End.Equal(at.Add(-59*time.Minute)) {
		t.Errorf("windows: at %s incident %v baseline %v", v.At, v.Incident, v.Baseline)
	}
}

// TestWhyServer checks --server against a fake daemon.
func TestWhyServer(t *testing.T) {
	var got map[string]string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/api/v1/triage" || r.Header.Get("Authorization") != "Bearer s3cret" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		_ = json.NewDecoder(r.Body).Decode(&got)
		v := verdict.Verdict{SchemaVersion: verdict.SchemaVersion, Status: verdict.StatusHealthy, Phase: verdict.PhaseNone, Engine: "vllm",
			At: time.Unix(1700000000, 0).UTC()}
		_ = json.NewEncoder(w).Encode(v)
	}))
	defer srv.Close()
	r := runCLI(t, "why", "--server", srv.URL, "--bearer-token", "s3cret", "--selector", `pod="a"`, "--window", "2m", "--output", "json")
	if r.code != exitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if got["selector"] != `pod="a"` || got["window"] != "2m0s" {
		t.Errorf("request %v", got)
	}
	r = runCLI(t, "why", "--server", srv.URL, "--bearer-token", "wrong")
	if r.code != exitFailed || !strings.Contains(r.stderr, "400") {
		t.Errorf("rejected request: exit %d, stderr %s", r.code, r.stderr)
	}
}

// TestWhyScrape triages a live engine-model replica over HTTP with no
// Prometheus: a short sample window against the lifetime baseline.
func TestWhyScrape(t *testing.T) {
	if testing.Short() {
		t.Skip("samples for 4 s; skipped with -short")
	}
	live, err := sim.NewLive(sim.Options{Scenario: "healthy", Seed: 3, Replicas: 2})
	if err != nil {
		t.Fatal(err)
	}
	// An engine that has run for the assumed lifetime, so lifetime rates
	// are comparable with the sample's.
	live.Advance(time.Hour)
	var srvs []string
	for i := range live.Replicas() {
		srv := httptest.NewServer(live.Handler(i))
		defer srv.Close()
		srvs = append(srvs, srv.URL+"/metrics")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		advanceReal(ctx, live, 1, 30*time.Second)
	}()

	r := runCLI(t, "why", "--scrape", strings.Join(srvs, ","), "--sample", "4s", "--output", "json")
	cancel()
	<-done
	if r.code == exitFailed {
		t.Fatalf("exit 2: %s", r.stderr)
	}
	v := decodeVerdict(t, r.stdout)
	if v.Status == verdict.StatusInsufficientData {
		t.Errorf("insufficient data: %+v", v.DataGaps)
	}
	if v.Engine != "vllm" {
		t.Errorf("engine %q", v.Engine)
	}
	if w := v.Incident.End.Sub(v.Incident.Start); w < 2*time.Second || w > 5*time.Second {
		t.Errorf("sample window %s, want about 3-4 s", w)
	}
	// The model exposes no start time: the baseline is the engine's
	// lifetime of unknown length, said in the header, and its rates are
	// one gap, never a guess.
	if !strings.HasPrefix(v.Baseline.Label, "the engine's lifetime, length unknown") || !v.Baseline.End.IsZero() {
		t.Errorf("baseline %+v: want the lifetime of unknown length, no clock-time window", v.Baseline)
	}
	if v.Incident.Label == "" || !strings.HasPrefix(v.Incident.Label, "sample ") {
		t.Errorf("incident window label %q, want \"sample …\"", v.Incident.Label)
	}
	gap := false
	for _, g := range v.DataGaps {
		if g.Signal == "baseline_rates" && strings.Contains(g.Reason, "process_start_time_seconds") && slices.Contains(g.Signals, "request_rate") {
			gap = true
		}
		if g.Window == "baseline" && strings.Contains(g.Reason, "gauges") && strings.Contains(g.Signal, "request_rate") {
			t.Errorf("request_rate (a counter rate) described as a gauge: %s", g.Reason)
		}
	}
	if !gap {
		t.Errorf("no baseline_rates data gap (the model exposes no start time): %+v", v.DataGaps)
	}
	// Gauges have no lifetime baseline: one gap says so, not one per signal.
	folded := false
	for _, g := range v.DataGaps {
		if g.Window == "baseline" && g.Reason == "no series matched" {
			t.Errorf("unexplained baseline gap %s", g.Signal)
		}
		if strings.HasPrefix(g.Reason, "gauges have no lifetime baseline") && strings.Contains(g.Signal, "kv_usage") {
			folded = true
		}
	}
	if !folded {
		t.Errorf("no gap explains the gauges' missing baseline: %+v", v.DataGaps)
	}
	// The lifetime baseline gives every latency (histogram) signal of the
	// headline a baseline value; gauges have none.
	latencies := 0
	for _, h := range v.Headline {
		if h.Unit != "seconds" {
			continue
		}
		latencies++
		if h.Baseline == nil {
			t.Errorf("headline %s has no lifetime baseline", h.Signal)
		}
	}
	if latencies < 3 {
		t.Errorf("only %d latency signals in the headline: %+v", latencies, v.Headline)
	}
	t.Logf("scrape verdict: %s, %d causes, gaps %+v", v.Status, len(v.Causes), v.DataGaps)
}

// advanceReal moves the model's clock with the wall clock, speed simulated
// seconds per real second, until ctx is done or limit has passed.
func advanceReal(ctx context.Context, live *sim.Live, speed float64, limit time.Duration) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	stop := time.After(limit)
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-stop:
			return
		case now := <-tick.C:
			live.Advance(time.Duration(float64(now.Sub(last)) * speed))
			last = now
		}
	}
}

// BenchmarkWhyBundle times `why --bundle` end to end (load, triage, render)
// on a 4-replica bundle, untrimmed, with as many scrapes as two hours at
// 15 s: the model records 83 minutes, so it scrapes every 10 s.
func BenchmarkWhyBundle(b *testing.B) {
	bd, err := sim.Record(context.Background(), sim.Options{Scenario: "kv_pressure", Seed: 4, Replicas: 4, ScrapeInterval: 10 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	if err := bd.WriteDir(dir, false); err != nil {
		b.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, "metrics.om"))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(fi.Size())
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		var errb bytes.Buffer
		if code := dispatch(context.Background(), []string{"why", "--bundle", dir, "--output", "json"}, io.Discard, &errb); code == exitFailed {
			b.Fatalf("exit 2: %s", errb.String())
		}
	}
}

// TestWhyInsufficientReason checks that each way of getting no verdict
// from a bundle prints its own reason on stderr, with exit 2, and that the
// JSON verdict carries it.
func TestWhyInsufficientReason(t *testing.T) {
	kv := filepath.Join(incidentsDir, "kv_pressure")
	for _, tc := range []struct {
		name string
		args []string
		code verdict.InsufficientCode
		want []string
	}{
		{"no engine series", []string{"--bundle", "testdata/insufficient/no_engine"}, verdict.InsufficientNoEngine,
			[]string{"no series of a known engine (vllm, sglang, trtllm, tgi) in the source", "vllm:num_requests_running"}},
		{"engine named wrong", []string{"--bundle", kv, "--engine", "sglang"}, verdict.InsufficientNoEngine,
			[]string{"no sglang series in the source, but it holds vllm series: use --engine vllm"}},
		{"selector matches nothing", []string{"--bundle", kv, "--selector", `model_name="llama"`}, verdict.InsufficientSelector,
			[]string{`the selector {model_name="llama"} matched no vllm series`, "model_name values: meta-llama/Llama-3.1-8B-Instruct"}},
		{"window outside the data", []string{"--bundle", kv, "--at", "2027-01-01T00:00:00Z"}, verdict.InsufficientOutsideData,
			[]string{"lies outside the scope's data, which runs from 2026-01-01 00:13:00 UTC to 2026-01-01 01:23:00 UTC", "--at 2026-01-01T01:23:00Z"}},
		{"baseline not covered", []string{"--bundle", kv, "--baseline", "80m"}, verdict.InsufficientBaseline,
			[]string{"(1h20m before --at) is not covered", "1h10m of history", "--baseline 1h5m or less"}},
		{"required signal missing", []string{"--bundle", "testdata/insufficient/no_ttft"}, verdict.InsufficientSignal,
			[]string{"the required signal ttft_mean (TTFT mean) has no value in the incident window", "vllm:time_to_first_token_seconds_sum"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, append([]string{"why"}, tc.args...)...)
			if r.code != exitFailed {
				t.Errorf("exit %d, want %d", r.code, exitFailed)
			}
			line := strings.TrimSpace(r.stderr)
			if !strings.HasPrefix(line, "whyslow why: insufficient data: ") || strings.Contains(line, "\n") {
				t.Errorf("stderr is not one insufficient-data line:\n%s", r.stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
				}
			}
			if !strings.Contains(r.stdout, "\nreason:   ") {
				t.Errorf("text output does not give the reason:\n%s", r.stdout)
			}
			j := runCLI(t, append([]string{"why", "--output", "json"}, tc.args...)...)
			v := decodeVerdict(t, j.stdout)
			if v.InsufficientReason == nil || v.InsufficientReason.Code != tc.code {
				t.Errorf("insufficient_reason %+v, want code %s", v.InsufficientReason, tc.code)
			}
		})
	}
}

// TestVerdictExitNamesReason checks that the CLI prints the verdict's
// reason, not the first data gap (a --scrape whose engine started serving
// during the sample lists preemption_rate's gap first).
func TestVerdictExitNamesReason(t *testing.T) {
	r := &verdict.InsufficientReason{Code: verdict.InsufficientSignal, Signal: "ttft_mean", Window: "baseline", Message: "ttft_mean missing"}
	scrapeReason(r)
	v := &verdict.Verdict{Status: verdict.StatusInsufficientData, InsufficientReason: r,
		DataGaps: []verdict.DataGap{{Signal: "preemption_rate", Window: "incident", Reason: "no series matched"}}}
	var errb bytes.Buffer
	if code := verdictExit(v, &errb); code != exitFailed {
		t.Errorf("exit %d", code)
	}
	if strings.Contains(errb.String(), "preemption_rate") || !strings.Contains(errb.String(), "served no requests before the sample began") {
		t.Errorf("stderr %q: want the baseline reason, not the first gap", errb.String())
	}
	if r.Code != verdict.InsufficientBaseline {
		t.Errorf("code %s, want %s", r.Code, verdict.InsufficientBaseline)
	}
}

// TestWhyTextShowsWhatEvidenceQuotes checks, on committed bundles, that the
// text headline carries the means the evidence quotes, marks quantiles
// estimated inside coarse buckets, and lists causes below the evidence bar.
func TestWhyTextShowsWhatEvidenceQuotes(t *testing.T) {
	r := runCLI(t, "why", "--bundle", filepath.Join(incidentsDir, "bandwidth_bound"))
	if r.code != exitCause {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, w := range []string{
		"\n  Inter-token latency mean ", "\n  TTFT mean ", "(mean ×",
		"≈ estimated inside a coarse histogram bucket:", "(bucket ",
		"Also considered (below the evidence bar)\n  - More work arrives than the replicas admit [queue_saturation] score 0.042",
	} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("text lacks %q:\n%s", w, r.stdout)
		}
	}
}

// TestWhyEscapesControlCharacters is finding 6 of issue 26: a label value
// holding ESC[2J or an OSC 8 hyperlink reached the terminal raw in `why`'s
// text output (here from a server's verdict; bundles render the same way).
func TestWhyEscapesControlCharacters(t *testing.T) {
	const evil = "llama\x1b[2J\x1b]8;;https://evil.example/\x1b\\docs\x1b]8;;\x1b\\"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := verdict.Verdict{SchemaVersion: verdict.SchemaVersion, Status: verdict.StatusHealthy, Phase: verdict.PhaseNone, Engine: "vllm",
			At: time.Unix(1700000000, 0).UTC(), Scope: verdict.Scope{Selector: `model_name="` + evil + `"`, Labels: map[string]string{"model_name": evil}}}
		_ = json.NewEncoder(w).Encode(v)
	}))
	defer srv.Close()
	r := runCLI(t, "why", "--server", srv.URL)
	if r.code != exitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if strings.Contains(r.stdout, "\x1b") {
		t.Errorf("raw ESC in the text output:\n%q", r.stdout)
	}
	if !strings.Contains(r.stdout, `llama\x1b[2J\x1b]8;;https://evil.example/`) {
		t.Errorf("the label is not shown escaped:\n%s", r.stdout)
	}
}

// checkGolden compares got with the golden file at path; with -update it
// writes got there instead.
func checkGolden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (rerun with -update if the change is intended):\n%s", path, lineDiff(string(want), got))
	}
}
