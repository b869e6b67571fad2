package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/whyslow/whyslow/testbed/sim"
)

// recordBundle writes an engine-model incident's bundle (its whole
// history: replay needs the baseline hour) and returns its directory.
func recordBundle(t *testing.T, o sim.Options) (string, sim.Truth) {
	t.Helper()
	b, err := sim.Record(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "bundle")
	if err := b.WriteDir(dir, false); err != nil {
		t.Fatal(err)
	}
	return dir, b.Truth
}

// TestReplayBundle: replaying an incident's bundle prints the page the
// daemon would have sent, after the onset and with the injected cause; a
// healthy bundle sends nothing (exit 0).
func TestReplayBundle(t *testing.T) {
	if testing.Short() {
		t.Skip("records two engine-model hours; skipped with -short")
	}
	dir, truth := recordBundle(t, sim.Options{Scenario: "kv_pressure", Seed: 1, Replicas: 1, GPUSeries: "none"})
	var out, errb bytes.Buffer
	if code := dispatch(context.Background(), []string{"replay", "--bundle", dir, "--step", "15s", "--output", "json"}, &out, &errb); code != exitCause {
		t.Fatalf("replay exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var first replayedLine
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatal(err)
	}
	if first.Kind != "open" || first.At.Before(truth.Onset) || first.Cause != truth.Causes[0] || first.Verdict == nil {
		t.Errorf("first notification %+v; onset %s, injected %s", first, truth.Onset, truth.Causes[0])
	}
	t.Logf("opened %s after the onset: %s", first.At.Sub(truth.Onset), first.Cause)

	healthy, _ := recordBundle(t, sim.Options{Scenario: "healthy", Seed: 1, Replicas: 1, GPUSeries: "none"})
	out.Reset()
	if code := dispatch(context.Background(), []string{"replay", "--bundle", healthy, "--step", "15s"}, &out, &errb); code != exitOK {
		t.Errorf("healthy replay exit %d:\n%s", code, out.String())
	}
	if !strings.Contains(out.String(), "0 notifications, 0 incidents opened") {
		t.Errorf("healthy replay summary: %q", out.String())
	}

	// why --group-by at the incident's end ranks the scope with its verdict.
	out.Reset()
	if code := dispatch(context.Background(), []string{"why", "--bundle", dir, "--group-by", "model_name", "--output", "json"}, &out, &errb); code != exitCause {
		t.Fatalf("why --group-by exit %d: %s", code, errb.String())
	}
	var rep fleetReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Scopes != 1 || len(rep.Anomalous) != 1 || rep.Anomalous[0].Verdict == nil || rep.Anomalous[0].Verdict.Causes[0].ID != truth.Causes[0] {
		t.Errorf("why --group-by: %s", out.String())
	}
}

func TestReplayBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"replay"}, "give exactly one of --bundle DIR or --prometheus URL"},
		{[]string{"replay", "--bundle", "x", "--prometheus", "http://127.0.0.1:1"}, "give exactly one"},
		{[]string{"replay", "--prometheus", "http://127.0.0.1:1"}, "--prometheus needs --from and --to"},
		{[]string{"replay", "--prometheus", "http://127.0.0.1:1", "--from", "yesterday", "--to", "2026-01-01T00:00:00Z"}, `--from "yesterday": want RFC 3339`},
		{[]string{"replay", "--prometheus", "http://127.0.0.1:1", "--from", "2026-01-02T00:00:00Z", "--to", "2026-01-01T00:00:00Z"}, "is not after --from"},
		{[]string{"replay", "--prometheus", "http://127.0.0.1:1", "--from", "2025-01-01T00:00:00Z", "--to", "2026-01-01T00:00:00Z"}, "at most 50000"},
		{[]string{"replay", "--bundle", "/nonexistent/bundle"}, "/nonexistent/bundle"},
		{[]string{"replay", "--bundle", "x", "--output", "yaml"}, `unknown output format "yaml"`},
		{[]string{"why", "--scrape", "http://127.0.0.1:1/metrics", "--group-by", "model_name"}, "--group-by needs exactly one of --prometheus URL or --bundle DIR"},
	} {
		var out, errb bytes.Buffer
		if code := dispatch(context.Background(), tc.args, &out, &errb); code != exitFailed || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want exit 2 and %q", tc.args, code, errb.String(), tc.want)
		}
	}
}

// TestReplayUnreachablePrometheus: a Prometheus that does not answer is
// one clear error (exit 2), not a replay that found nothing.
func TestReplayUnreachablePrometheus(t *testing.T) {
	var out, errb bytes.Buffer
	code := dispatch(context.Background(), []string{"replay", "--prometheus", "http://127.0.0.1:1", "--timeout", "1s",
		"--from", "2026-01-01T00:00:00Z", "--to", "2026-01-01T00:01:00Z"}, &out, &errb)
	if code != exitFailed || !strings.Contains(errb.String(), "prometheus http://127.0.0.1:1 unreachable") {
		t.Errorf("exit %d, stderr %q", code, errb.String())
	}
}

// TestReplayNoEngineData is finding 5 of issue 25: a replay over an
// interval without engine series said "0 notifications" and exited 0, as
// if all had been quiet. It exits 2 with the reason `why` gives.
func TestReplayNoEngineData(t *testing.T) {
	dir := t.TempDir()
	var om strings.Builder
	om.WriteString("# TYPE node_load1 gauge\n")
	for i := 0; i < 120; i++ {
		fmt.Fprintf(&om, "node_load1{instance=\"gw\"} 1 %d\n", 1700000000+15*i)
	}
	om.WriteString("# EOF\n")
	if err := os.WriteFile(filepath.Join(dir, "metrics.om"), []byte(om.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := dispatch(context.Background(), []string{"replay", "--bundle", dir, "--from", "2023-11-14T22:20:00Z", "--to", "2023-11-14T22:40:00Z"}, &out, &errb)
	if code != exitFailed {
		t.Fatalf("replay over no engine data: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
	var whyOut, whyErr bytes.Buffer
	dispatch(context.Background(), []string{"why", "--bundle", dir, "--at", "2023-11-14T22:40:00Z"}, &whyOut, &whyErr)
	for _, want := range []string{"no series of a known engine (vllm, sglang, trtllm, tgi) in the source", "point whyslow at the engine's /metrics"} {
		if !strings.Contains(errb.String(), want) || !strings.Contains(whyErr.String(), want) {
			t.Errorf("replay stderr %q and why stderr %q, want both to say %q", errb.String(), whyErr.String(), want)
		}
	}
	if strings.Contains(out.String(), "0 notifications") {
		t.Errorf("stdout %q reads as an all-clear", out.String())
	}
}
