package main

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/whyslow/whyslow/collectors/tracequery"
	"github.com/whyslow/whyslow/triage"
)

// TestWhyBundleWithTraces replays the frontend_delay bundle, whose
// traces.jsonl.gz is read by default: outside_engine ranks first with
// evidence from the correlate step, and the verdict lists the slowest
// requests with their pods' context.
func TestWhyBundleWithTraces(t *testing.T) {
	dir := filepath.Join(incidentsDir, "frontend_delay")
	r := runCLI(t, "why", "--bundle", dir, "--output", "json")
	if r.code != exitCause {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	v := decodeVerdict(t, r.stdout)
	if len(v.Causes) == 0 || v.Causes[0].ID != "outside_engine" {
		t.Fatalf("causes %+v, want outside_engine first", v.Causes)
	}
	fromTraces := false
	for _, e := range v.Causes[0].Evidence {
		fromTraces = fromTraces || e.Step == "correlate"
	}
	if !fromTraces {
		t.Errorf("no correlate evidence for outside_engine: %+v", v.Causes[0].Evidence)
	}
	if len(v.Requests) == 0 || v.Requests[0].Parts["before_engine.api_server"] <= 0 || v.Requests[0].Context["kv_cache_usage"] <= 0 {
		t.Fatalf("requests = %+v", v.Requests)
	}

	// Text output lists the slowest requests; --traces none leaves them out.
	text := runCLI(t, "why", "--bundle", dir)
	if !strings.Contains(text.stdout, "Slowest requests") {
		t.Errorf("text output lacks the slowest requests:\n%s", text.stdout)
	}
	none := runCLI(t, "why", "--bundle", dir, "--traces", "none", "--output", "json")
	if v := decodeVerdict(t, none.stdout); len(v.Requests) != 0 {
		t.Errorf("--traces none still lists %d requests", len(v.Requests))
	}

	// One request by trace id: its breakdown and its pod's state.
	id := v.Requests[0].TraceID
	one := runCLI(t, "why", "--bundle", dir, "--trace-id", id)
	if one.code != exitOK {
		t.Fatalf("--trace-id: exit %d: %s", one.code, one.stderr)
	}
	for _, want := range []string{"trace " + id, "where the time went", "before_engine", "api_server", "queue", "prefill", "decode",
		"router scores: prefix_cache.score_max=", "when the engine queued it: kv_cache_usage="} {
		if !strings.Contains(one.stdout, want) {
			t.Errorf("--trace-id output lacks %q:\n%s", want, one.stdout)
		}
	}

	// The same by request id, as JSON.
	byReq := runCLI(t, "why", "--bundle", dir, "--request-id", v.Requests[0].RequestID, "--output", "json")
	var got struct{ Requests []triage.Request }
	if err := json.Unmarshal([]byte(byReq.stdout), &got); err != nil || len(got.Requests) != 1 || got.Requests[0].TraceID != id {
		t.Fatalf("--request-id json: %v %q %s", err, byReq.stdout, byReq.stderr)
	}
}

// TestWhyTracesFromDaemon reads the traces through the Tempo-compatible API
// a whyslow daemon serves over its span store (--traces whyslow:URL).
func TestWhyTracesFromDaemon(t *testing.T) {
	dir := filepath.Join(incidentsDir, "frontend_delay")
	path, err := tracequery.BundleTraces(dir)
	if err != nil || path == "" {
		t.Fatalf("bundle traces: %q %v", path, err)
	}
	f, err := tracequery.OpenJSONL(path)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(f.QueryHandler(nil))
	defer srv.Close()
	r := runCLI(t, "why", "--bundle", dir, "--traces", "whyslow:"+srv.URL, "--output", "json")
	if r.code != exitCause {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	v := decodeVerdict(t, r.stdout)
	if len(v.Requests) == 0 || v.Causes[0].ID != "outside_engine" {
		t.Fatalf("requests %d, causes %+v", len(v.Requests), v.Causes)
	}
	one := runCLI(t, "why", "--traces", "whyslow:"+srv.URL, "--trace-id", v.Requests[0].TraceID)
	if one.code != exitOK || !strings.Contains(one.stdout, "api_server") {
		t.Errorf("--trace-id over the daemon API: exit %d\n%s%s", one.code, one.stdout, one.stderr)
	}
}

func TestWhyTracesBadInput(t *testing.T) {
	dir := filepath.Join(incidentsDir, "frontend_delay")
	noTraces := filepath.Join(incidentsDir, "healthy")
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"trace id without traces", []string{"why", "--bundle", noTraces, "--trace-id", "0123456789abcdef0123456789abcdef"}, "need traces"},
		{"bad trace id", []string{"why", "--bundle", dir, "--trace-id", "xyz"}, "--trace-id"},
		{"unknown trace", []string{"why", "--bundle", dir, "--trace-id", "00000000000000000000000000000001"}, "trace not found"},
		{"unknown request", []string{"why", "--bundle", dir, "--request-id", "nope"}, `no span carries gen_ai.request.id="nope"`},
		{"both ids", []string{"why", "--bundle", dir, "--trace-id", "0123456789abcdef", "--request-id", "x"}, "not both"},
		{"bare url", []string{"why", "--bundle", dir, "--traces", "http://127.0.0.1:1"}, "tempo:http://127.0.0.1:1"},
		{"missing file", []string{"why", "--bundle", dir, "--traces", "nope/traces.jsonl"}, "nope/traces.jsonl"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := runCLI(t, c.args...)
			if r.code != exitFailed || !strings.Contains(r.stderr, c.want) {
				t.Errorf("exit %d, stderr %q, want 2 and %q", r.code, r.stderr, c.want)
			}
		})
	}
}

// TestSimRecordTraces records a bundle with traces and triages it.
func TestSimRecordTraces(t *testing.T) {
	out := t.TempDir()
	r := runCLI(t, "sim", "record", "--scenario", "frontend_delay", "--seed", "2", "--trim", "--gzip", "--traces", "--traces-per-window", "200", "--out", out)
	if r.code != exitOK || !strings.Contains(r.stdout, "traces.jsonl.gz") {
		t.Fatalf("sim record: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(out, "traces.jsonl.gz")); err != nil {
		t.Fatal(err)
	}
	w := runCLI(t, "why", "--bundle", out, "--output", "json")
	v := decodeVerdict(t, w.stdout)
	if len(v.Requests) == 0 || len(v.Causes) == 0 || v.Causes[0].ID != "outside_engine" {
		t.Fatalf("exit %d, causes %+v, %d requests: %s", w.code, v.Causes, len(v.Requests), w.stderr)
	}
}
