package main

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/whyslow/whyslow/collectors/otlp"
	"github.com/whyslow/whyslow/collectors/spanstore"
	"github.com/whyslow/whyslow/collectors/tracequery"
	"github.com/whyslow/whyslow/requests"
	"github.com/whyslow/whyslow/span"
	"github.com/whyslow/whyslow/verdict"
)

// TestWhyBundleWithTraces replays the frontend_delay bundle, whose
// traces.jsonl.gz is read by default: outside_engine ranks first with
// evidence from the correlate step, and the verdict lists the slowest
// requests with their pods' context.
func TestWhyBundleWithTraces(t *testing.T) {
	dir := filepath.Join(incidentsDir, "frontend_delay")
	r := runShared(t, "why", "--bundle", dir, "--output", "json")
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
	var got struct{ Requests []verdict.Request }
	if err := json.Unmarshal([]byte(byReq.stdout), &got); err != nil || len(got.Requests) != 1 || got.Requests[0].TraceID != id {
		t.Fatalf("--request-id json: %v %q %s", err, byReq.stdout, byReq.stderr)
	}
}

// TestWhyTracesFromDaemon reads the traces through the Tempo-compatible API
// a whyslow daemon serves over its span store (--traces whyslow:URL).
func TestWhyTracesFromDaemon(t *testing.T) {
	dir := filepath.Join(incidentsDir, "frontend_delay")
	f := openBundleTraces(t, dir)
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

// TestWhyTracesDaemonMatchesFile triages each bundle with traces twice: from
// its traces.jsonl and from the same spans served by a daemon's
// Tempo-compatible API (--traces whyslow:URL). The verdicts must be the same.
func TestWhyTracesDaemonMatchesFile(t *testing.T) {
	names := []string{"frontend_delay", "long_prompt_burst", "router_skew"}
	if testing.Short() {
		names = names[:1] // the one with more traces in a window than one search answers
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(incidentsDir, name)
			f := openBundleTraces(t, dir)
			srv := httptest.NewServer(f.QueryHandler(nil))
			defer srv.Close()
			fromFile := runShared(t, "why", "--bundle", dir, "--output", "json")
			fromDaemon := runCLI(t, "why", "--bundle", dir, "--traces", "whyslow:"+srv.URL, "--output", "json")
			if fromFile.code != fromDaemon.code {
				t.Fatalf("exit %d from the file, %d from the daemon: %s", fromFile.code, fromDaemon.code, fromDaemon.stderr)
			}
			a, b := decodeVerdict(t, fromFile.stdout), decodeVerdict(t, fromDaemon.stdout)
			if len(a.Requests) == 0 {
				t.Fatal("no requests from the file")
			}
			ja, _ := json.MarshalIndent(struct {
				C, R any
			}{a.Causes, a.Requests}, "", " ")
			jb, _ := json.MarshalIndent(struct {
				C, R any
			}{b.Causes, b.Requests}, "", " ")
			if string(ja) != string(jb) {
				t.Errorf("verdicts differ:\nfile:   %.2000s\ndaemon: %.2000s", ja, jb)
			}
		})
	}
}

// TestPagedTempoReadsWholeWindow reads a window holding more traces than one
// search answers: page by page, the requests built are those of the file.
func TestPagedTempoReadsWholeWindow(t *testing.T) {
	f := openBundleTraces(t, filepath.Join(incidentsDir, "frontend_delay"))
	srv := httptest.NewServer(f.QueryHandler(nil))
	defer srv.Close()
	ctx := context.Background()
	start, end := time.Unix(0, 0), time.Unix(4e9, 0)
	want, err := f.SpansBetween(ctx, start, end, 0)
	if err != nil {
		t.Fatal(err)
	}
	wantReqs := requests.BuildRequests(want)
	if len(wantReqs) <= 3*40 {
		t.Fatalf("%d requests: too few to page", len(wantReqs))
	}
	p := pagedTempo{&tracequery.Tempo{BaseURL: srv.URL, SearchLimit: 40}}
	got, err := p.SpansBetween(ctx, start, end, 0)
	if err != nil {
		t.Fatal(err)
	}
	gotReqs := requests.BuildRequests(got)
	if len(gotReqs) != len(wantReqs) {
		t.Fatalf("%d requests paged, %d in the file", len(gotReqs), len(wantReqs))
	}
	for i := range wantReqs {
		if a, b := wantReqs[i].Request(), gotReqs[i].Request(); !reflect.DeepEqual(a, b) {
			t.Fatalf("request %d: paged %+v, file %+v", i, b, a)
		}
	}
	// One search alone (what --traces whyslow:URL did) sees a part.
	one, err := (&tracequery.Tempo{BaseURL: srv.URL, SearchLimit: 40}).SpansBetween(ctx, start, end, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(requests.BuildRequests(one)); n >= len(wantReqs) {
		t.Errorf("one search found %d of %d requests: the test does not page", n, len(wantReqs))
	}
}

// TestWhyTracesOfTheScope triages an 8B-model bundle with traces that also
// hold a 70B model's requests, ten times slower, on other pods (the engine
// spans naming the model in gen_ai.response.model). The slowest requests
// listed are the scope's own, as without the 70B spans; and served through
// a daemon's API, the verdict is the same.
func TestWhyTracesOfTheScope(t *testing.T) {
	dir := filepath.Join(incidentsDir, "long_prompt_burst")
	f := openBundleTraces(t, dir)
	own, err := f.SpansBetween(context.Background(), time.Unix(0, 0), time.Unix(4e9, 0), 0)
	if err != nil {
		t.Fatal(err)
	}
	const big = "meta-llama/Llama-3.1-70B-Instruct"
	mixed := slices.Clone(own)
	for _, s := range own {
		s.TraceID[0] ^= 0xff
		s.Attrs = slices.Clone(s.Attrs)
		for i, a := range s.Attrs {
			switch {
			case a.Key == span.AttrRequestModel:
				s.Attrs[i] = span.StringAttr(a.Key, big)
			case strings.HasPrefix(a.Key, "gen_ai.latency."):
				s.Attrs[i] = span.FloatAttr(a.Key, 10*a.Float())
			}
		}
		if s.Name == span.SpanLLMRequest {
			s.EndUnixNano = s.StartUnixNano + 10*(s.EndUnixNano-s.StartUnixNano)
			s.Attrs = append(s.Attrs, span.StringAttr(span.AttrResponseModel, big))
			s.Resource = span.Attrs{span.StringAttr("service.name", "vllm"), span.StringAttr("k8s.pod.name", "vllm-llama-70b-0")}
		}
		mixed = append(mixed, s)
	}
	body, err := otlp.EncodeJSON(spanstore.ToOTLP(mixed))
	if err != nil {
		t.Fatal(err)
	}
	mixedPath := filepath.Join(t.TempDir(), "traces.jsonl")
	if err := os.WriteFile(mixedPath, append(body, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}

	requests := func(args ...string) []verdict.Request {
		t.Helper()
		r := runCLI(t, append([]string{"why", "--bundle", dir, "--output", "json"}, args...)...)
		if r.code != exitCause {
			t.Fatalf("%v: exit %d: %s", args, r.code, r.stderr)
		}
		return decodeVerdict(t, r.stdout).Requests
	}
	want := requests()
	if len(want) == 0 {
		t.Fatal("no requests from the bundle's traces")
	}
	got := requests("--traces", mixedPath)
	for _, r := range got {
		if r.Pod == "vllm-llama-70b-0" {
			t.Fatalf("the 8B scope lists the 70B model's request %s (%gs)", r.TraceID, r.E2E)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("requests with the 70B spans differ from the bundle's own:\n%+v\n%+v", got, want)
	}

	mf, err := tracequery.OpenJSONL(mixedPath)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mf.QueryHandler(nil))
	defer srv.Close()
	if daemon := requests("--traces", "whyslow:"+srv.URL); !reflect.DeepEqual(daemon, want) {
		t.Errorf("requests through the daemon's API differ:\n%+v\n%+v", daemon, want)
	}
}

// openBundleTraces opens the traces.jsonl(.gz) of a bundle directory.
func openBundleTraces(t *testing.T, dir string) *tracequery.File {
	t.Helper()
	path, err := tracequery.BundleTraces(dir)
	if err != nil || path == "" {
		t.Fatalf("bundle traces: %q %v", path, err)
	}
	f, err := tracequery.OpenJSONL(path)
	if err != nil {
		t.Fatal(err)
	}
	return f
}
