package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/whyslow/whyslow/verdict"
)

func TestDemo(t *testing.T) {
	for _, tc := range []struct {
		scenario, cause string
	}{
		{"kv_pressure", "kv_cache_pressure"},
		{"gpu_throttle", "gpu_throttling"},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			r := runCLI(t, "demo", "--scenario", tc.scenario)
			if r.code != exitCause {
				t.Fatalf("exit %d, want %d (a cause found, as why): %s", r.code, exitCause, r.stderr)
			}
			for _, w := range []string{
				`Engine model: scenario "` + tc.scenario + `"`,
				"ANOMALY",
				"Causes, most likely first\n 1. ",
				"[" + tc.cause + "]",
				"Ground truth: injected " + tc.cause,
				"whyslow ranked it #1",
			} {
				if !strings.Contains(r.stdout, w) {
					t.Errorf("output lacks %q:\n%s", w, r.stdout)
				}
			}
		})
	}
}

// TestDemoDefault runs the README's command as is.
func TestDemoDefault(t *testing.T) {
	r := runShared(t, "demo")
	if r.code != exitCause {
		t.Fatalf("exit %d, want %d (a cause found, as why): %s", r.code, exitCause, r.stderr)
	}
	if !strings.Contains(r.stdout, "whyslow ranked it #1") {
		t.Errorf("default demo does not rank its injected cause first:\n%s", r.stdout)
	}
}

// TestDemoLive plays the default incident to the daemon: it must open with
// the injected cause and resolve after the engine is fixed.
func TestDemoLive(t *testing.T) {
	if testing.Short() {
		t.Skip("plays 1.5 simulated hours through the daemon")
	}
	r := runCLI(t, "demo", "--live")
	if r.code != exitCause {
		t.Fatalf("exit %d, want %d (an incident opened): %s", r.code, exitCause, r.stderr)
	}
	// The long simulated run is announced at once, on stderr.
	if !strings.HasPrefix(r.stderr, liveProgress+"\n") {
		t.Errorf("stderr does not start with the progress line %q:\n%s", liveProgress, r.stderr)
	}
	// The engine model serves its own GPU counters (the verdict names the
	// model's GPU from them): the daemon's NVML collector has nothing to add,
	// and this host's lack of a driver is no data gap of the modelled engine.
	if !strings.Contains(r.stdout, "(from the GPU counters: model=") {
		t.Errorf("live demo verdict does not name the model's GPU from its counters:\n%s", r.stdout)
	}
	if strings.Contains(r.stdout, "no GPU counters") || strings.Contains(r.stdout, "NVML") {
		t.Errorf("live demo reports the host's NVML as a data gap while the model serves GPU counters:\n%s", r.stdout)
	}
	for _, w := range []string{
		"== whyslow open: incident",
		"top cause chunked_prefill_mismatch",
		"the engine is fixed",
		"incident resolved",
		"== whyslow resolve: incident",
	} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("live demo output lacks %q:\n%s", w, r.stdout)
		}
	}
	// Each status line comes before the notification it introduces. This
	// is the suite's one full play of demo.Play (1.5 simulated hours, the
	// costliest test): package demo's tests do not play it again.
	for _, p := range []struct{ status, body string }{
		{"opened (", "== whyslow open: incident"},
		{"incident resolved:", "== whyslow resolve: incident"},
	} {
		si, bi := strings.Index(r.stdout, p.status), strings.Index(r.stdout, p.body)
		switch {
		case si < 0 || bi < 0:
			t.Errorf("live demo output lacks %q or %q", p.status, p.body)
		case bi < si:
			t.Errorf("%q printed before its status line %q", p.body, p.status)
		}
	}
}

func TestDemoJSON(t *testing.T) {
	r := runCLI(t, "demo", "--scenario", "error_burst", "--output", "json")
	if r.code != exitCause {
		t.Fatalf("exit %d, want %d (a cause found, as why): %s", r.code, exitCause, r.stderr)
	}
	if !json.Valid([]byte(r.stdout)) {
		t.Fatalf("not JSON:\n%s", r.stdout)
	}
	var v verdict.Verdict
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatal(err)
	}
	if v.Status != verdict.StatusAnomaly || len(v.Causes) == 0 || v.Causes[0].ID != "request_errors" {
		t.Errorf("status %s, causes %+v; want anomaly with request_errors first", v.Status, v.Causes)
	}
}

// TestDemoKeep checks that --keep leaves a bundle that why --bundle replays
// to the same verdict.
func TestDemoKeep(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bundle")
	r := runCLI(t, "demo", "--scenario", "prefix_cache_loss", "--keep", dir, "--output", "json")
	if r.code != exitCause {
		t.Fatalf("exit %d, want %d: %s", r.code, exitCause, r.stderr)
	}
	for _, f := range []string{"metrics.om", "incident.yaml", "truth.yaml"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	var demo, why verdict.Verdict
	if err := json.Unmarshal([]byte(r.stdout), &demo); err != nil {
		t.Fatal(err)
	}
	r = runCLI(t, "why", "--bundle", dir, "--output", "json")
	if r.code != exitCause {
		t.Fatalf("why --bundle: exit %d: %s", r.code, r.stderr)
	}
	if err := json.Unmarshal([]byte(r.stdout), &why); err != nil {
		t.Fatal(err)
	}
	if len(demo.Causes) == 0 || len(why.Causes) == 0 || demo.Causes[0].ID != why.Causes[0].ID || demo.Status != why.Status {
		t.Errorf("demo %s %+v, why --bundle %s %+v", demo.Status, demo.Causes, why.Status, why.Causes)
	}
}

// TestDemoHealthyExitsOK: a healthy scenario exits 0, as why does on a
// healthy verdict.
func TestDemoHealthyExitsOK(t *testing.T) {
	r := runCLI(t, "demo", "--scenario", "healthy", "--output", "json")
	var v verdict.Verdict
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("exit %d: %v: %s", r.code, err, r.stderr)
	}
	if v.Status != verdict.StatusHealthy || r.code != exitOK {
		t.Errorf("status %s, exit %d; want healthy, exit %d", v.Status, r.code, exitOK)
	}
}

// TestDemoHelp: --help, -h and help print demo's usage and exit 0.
func TestDemoHelp(t *testing.T) {
	for _, h := range []string{"--help", "-h", "help"} {
		r := runCLI(t, "demo", h)
		if r.code != exitOK || !strings.Contains(r.stdout, "-scenario") {
			t.Errorf("demo %s: exit %d, stdout %q, stderr %q; want usage, exit 0", h, r.code, r.stdout, r.stderr)
		}
	}
}

func TestDemoBadFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown scenario", []string{"demo", "--scenario", "nope"}, `"nope"`},
		{"bad output", []string{"demo", "--output", "yaml"}, `"yaml"`},
		{"stray argument", []string{"demo", "now"}, `unexpected argument "now"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, tc.args...)
			if r.code != exitFailed {
				t.Errorf("exit %d, want %d", r.code, exitFailed)
			}
			if !strings.Contains(r.stderr, tc.want) || strings.Count(strings.TrimRight(r.stderr, "\n"), "\n") != 0 {
				t.Errorf("stderr lacks %q or is not one line:\n%s", tc.want, r.stderr)
			}
		})
	}
}
