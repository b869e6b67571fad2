package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/whyslow/whyslow/testbed/sim"
)

func TestSimBadFlags(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no subcommand", []string{"sim"}, "usage"},
		{"unknown subcommand", []string{"sim", "replay"}, `unknown subcommand "replay"`},
		{"unknown scenario", []string{"sim", "record", "--scenario", "nope", "--out", "x"}, `unknown scenario "nope"`},
		{"missing scenario", []string{"sim", "record", "--out", "x"}, "--scenario is required"},
		{"missing out", []string{"sim", "record", "--scenario", "healthy"}, "--out is required"},
		{"bad names", []string{"sim", "record", "--scenario", "healthy", "--out", "x", "--names", "v9"}, "--names"},
		{"bad gpu series", []string{"sim", "serve", "--scenario", "healthy", "--gpu-series", "x"}, "--gpu-series"},
		{"bad dcgm layout", []string{"sim", "record", "--scenario", "healthy", "--out", "x", "--dcgm-layout", "eks"}, "--dcgm-layout"},
		{"bad dcgm counters", []string{"sim", "record", "--scenario", "healthy", "--out", "x", "--dcgm-counters", "all"}, "--dcgm-counters"},
		{"dcgm layout without dcgm", []string{"sim", "serve", "--scenario", "healthy", "--dcgm-layout", "k8s"}, "need gpu series dcgm"},
		{"names of another engine", []string{"sim", "serve", "--scenario", "healthy", "--names", "dp"}, "only sglang"},
		{"bad speed", []string{"sim", "serve", "--scenario", "healthy", "--speed", "0"}, "--speed"},
		{"bad flag", []string{"sim", "record", "--bogus"}, "bogus"},
		{"stray arg", []string{"sim", "list", "extra"}, "unexpected argument"},
		{"magnitude without wide", []string{"sim", "record", "--scenario", "gpu_throttle", "--out", "x", "--magnitude", "0.5"}, "--magnitude"},
		{"magnitude range", []string{"sim", "record", "--scenario", "gpu_throttle", "--out", "x", "--wide", "--magnitude", "2"}, "--magnitude"},
		{"bad compound", []string{"sim", "record", "--scenario", "kv_pressure+context_growth", "--out", "x"}, "unknown scenario"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := dispatch(context.Background(), tc.args, &out, &errb); code != exitFailed {
				t.Errorf("exit %d, want %d", code, exitFailed)
			}
			if !strings.Contains(errb.String(), tc.want) {
				t.Errorf("stderr %q, want %q", errb.String(), tc.want)
			}
		})
	}
}

func TestSimList(t *testing.T) {
	var out, errb bytes.Buffer
	if code := dispatch(context.Background(), []string{"sim", "list"}, &out, &errb); code != exitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != len(sim.Scenarios()) {
		t.Errorf("%d lines, want %d", len(lines), len(sim.Scenarios()))
	}
	if !strings.Contains(out.String(), "kv_pressure") || !strings.Contains(out.String(), "kv_cache_pressure") {
		t.Errorf("list lacks kv_pressure:\n%s", out.String())
	}
}

func TestSimListCompounds(t *testing.T) {
	var out, errb bytes.Buffer
	if code := dispatch(context.Background(), []string{"sim", "list", "--compounds"}, &out, &errb); code != exitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != len(sim.CompoundPairs()) || !strings.Contains(out.String(), "arrival_surge+gpu_throttle") {
		t.Errorf("compounds:\n%s", out.String())
	}
}

func TestSimRecordWide(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "b")
	var out, errb bytes.Buffer
	code := dispatch(context.Background(), []string{"sim", "record", "--scenario", "error_burst+gpu_throttle", "--seed", "3",
		"--out", dir, "--trim", "--wide", "--magnitude", "0.5", "--replicas", "1", "--gpu-series", "none"}, &out, &errb)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	truth, _ := os.ReadFile(filepath.Join(dir, "truth.yaml"))
	for _, want := range []string{"request_errors", "gpu_throttling", "magnitude: 0.5", "band: moderate", "observed:",
		"itl_attribution:", "wide: true"} {
		if !strings.Contains(string(truth), want) {
			t.Errorf("truth.yaml lacks %q:\n%s", want, truth)
		}
	}
}

func TestSimRecord(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "b")
	var out, errb bytes.Buffer
	code := dispatch(context.Background(), []string{"sim", "record", "--scenario", "error_burst", "--seed", "2",
		"--out", dir, "--trim", "--gzip", "--replicas", "1"}, &out, &errb)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, f := range []string{"metrics.om.gz", "incident.yaml", "truth.yaml"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	truth, _ := os.ReadFile(filepath.Join(dir, "truth.yaml"))
	if !strings.Contains(string(truth), "request_errors") {
		t.Errorf("truth.yaml:\n%s", truth)
	}
	inc, _ := os.ReadFile(filepath.Join(dir, "incident.yaml"))
	for _, want := range []string{"window: 5m", "baseline: 1h", "engine: vllm", "selector: model_name=", "max_num_batched_tokens:"} {
		if !strings.Contains(string(inc), want) {
			t.Errorf("incident.yaml lacks %q:\n%s", want, inc)
		}
	}
}

func TestSimServeMux(t *testing.T) {
	live, err := sim.NewLive(sim.Options{Scenario: "healthy", Seed: 1, Replicas: 2})
	if err != nil {
		t.Fatal(err)
	}
	live.Advance(2 * time.Minute)
	srv := httptest.NewServer(simMux(live, time.Unix(1700000000, 0)))
	defer srv.Close()
	for _, path := range []string{"/metrics", "/replica/1/metrics"} {
		fams := scrapeFamilies(t, srv, path)
		if _, ok := fams["vllm:num_requests_running"]; !ok {
			t.Errorf("%s lacks vllm:num_requests_running", path)
		}
	}
	resp, err := srv.Client().Get(srv.URL + "/replica/7/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("replica 7: status %d", resp.StatusCode)
	}
}

// TestSimServeMuxShapes checks the engine's own metrics path and that the
// multiprocess-registry shapes carry no process_start_time_seconds.
func TestSimServeMuxShapes(t *testing.T) {
	for _, tc := range []struct {
		opt       sim.Options
		paths     []string
		family    string
		wantStart bool
	}{
		{sim.Options{Policy: "trtllm", Names: "unprefixed"}, []string{"/prometheus/metrics", "/replica/1/prometheus/metrics", "/metrics"},
			"request_success_total", false},
		{sim.Options{Policy: "trtllm"}, []string{"/prometheus/metrics", "/metrics"}, "trtllm_num_requests_running", true},
		{sim.Options{Policy: "sglang", Names: "multiprocess"}, []string{"/metrics", "/replica/1/metrics"}, "sglang:num_running_reqs", false},
		{sim.Options{}, []string{"/metrics"}, "vllm:num_requests_running", true},
	} {
		tc.opt.Scenario, tc.opt.Seed, tc.opt.Replicas = "healthy", 1, 2
		live, err := sim.NewLive(tc.opt)
		if err != nil {
			t.Fatal(err)
		}
		live.Advance(time.Minute)
		srv := httptest.NewServer(simMux(live, time.Unix(1700000000, 0)))
		for _, path := range tc.paths {
			fams := scrapeFamilies(t, srv, path)
			if fams[tc.family] == nil {
				t.Errorf("%s/%s %s lacks %s", tc.opt.Policy, tc.opt.Names, path, tc.family)
			}
			if _, ok := fams["process_start_time_seconds"]; ok != tc.wantStart {
				t.Errorf("%s/%s %s: process_start_time_seconds present %v, want %v", tc.opt.Policy, tc.opt.Names, path, ok, tc.wantStart)
			}
		}
		srv.Close()
	}
}

// scrapeFamilies GETs a metrics path and parses it as Prometheus text.
func scrapeFamilies(t *testing.T, srv *httptest.Server, path string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := srv.Client().Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return fams
}
