package main

import (
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/whyslow/whyslow/verdict"
)

// conformanceDir holds one exposition per shipped engine shape, written from
// the engines' published metric definitions (testdata/conformance/README.md).
const conformanceDir = "../../testdata/conformance"

// conformanceSpeed is how much faster than the fixture's steady rate the
// served counters grow: a fixture's hour of counts is served as an engine
// that ran for an hour/speed, so a 4 s sample sees ~500 requests, enough
// for the minimum request volume, while its rates equal its lifetime's.
const conformanceSpeed = 25

// fixtureShape is what a fixture must be read as.
type fixtureShape struct {
	engine, shape string
	// requests is the series counting finished requests, whose growth the
	// variants' extra series follow.
	requests string
	// abort and failure are the series a client abort and a server
	// failure add to (family, label, value); empty when the shape has none.
	abort, failure [3]string
	// lacks are core signals the shape has no series for.
	lacks []string
}

var fixtureShapes = map[string]fixtureShape{
	"vllm-v1.prom": {engine: "vllm", shape: "v1", requests: "vllm:e2e_request_latency_seconds_count",
		abort:   [3]string{"vllm:request_success_total", "finished_reason", "abort"},
		failure: [3]string{"http_requests_total", "status", "5xx"}},
	"vllm-0.10.prom": {engine: "vllm", shape: "v1_overlap", requests: "vllm:e2e_request_latency_seconds_count",
		abort:   [3]string{"vllm:request_success_total", "finished_reason", "abort"},
		failure: [3]string{"http_requests_total", "status", "5xx"}},
	"vllm-v0.prom": {engine: "vllm", shape: "v0", requests: "vllm:e2e_request_latency_seconds_count",
		abort: [3]string{"vllm:request_success_total", "finished_reason", "abort"}, lacks: []string{"queue_mean"}},
	"sglang.prom": {engine: "sglang", shape: "default", requests: "sglang:num_requests_total",
		abort: [3]string{"sglang:num_aborted_requests_total", "", ""}},
	"sglang-dp.prom": {engine: "sglang", shape: "dp_attention", requests: "sglang:num_requests_total",
		abort:   [3]string{"sglang:num_aborted_requests_total", "", ""},
		failure: [3]string{"sglang:http_responses_total", "status_code", "500"}},
	"sglang-multiprocess.prom": {engine: "sglang", shape: "default", requests: "sglang:num_requests_total",
		abort:   [3]string{"sglang:num_aborted_requests_total", "", ""},
		failure: [3]string{"sglang:http_responses_total", "status_code", "500"}},
	"trtllm.prom": {engine: "trtllm", shape: "current", requests: "trtllm_e2e_request_latency_seconds_count",
		abort:   [3]string{"trtllm_request_success_total", "finished_reason", "cancelled"},
		failure: [3]string{"trtllm_request_error_total", "http_code", "500"}},
	"trtllm-dynamo.prom": {engine: "trtllm", shape: "dynamo", requests: "trtllm_e2e_request_latency_seconds_count",
		abort: [3]string{"trtllm_request_success_total", "finished_reason", "cancelled"}},
	"trtllm-unprefixed.prom": {engine: "trtllm", shape: "unprefixed", requests: "e2e_request_latency_seconds_count",
		abort: [3]string{"request_success_total", "finished_reason", "cancelled"}},
	// Builds that name the label finish_reason: aborts are still aborts.
	"trtllm-finish-reason.prom": {engine: "trtllm", shape: "current", requests: "trtllm_e2e_request_latency_seconds_count",
		abort:   [3]string{"trtllm_request_success_total", "finish_reason", "cancelled"},
		failure: [3]string{"trtllm_request_error_total", "http_code", "500"}},
	// Data parallelism in one API server: engine="0" and "1" on one target.
	"vllm-dp2.prom": {engine: "vllm", shape: "v1", requests: "vllm:e2e_request_latency_seconds_count",
		abort:   [3]string{"vllm:request_success_total", "finished_reason", "abort"},
		failure: [3]string{"http_requests_total", "status", "5xx"}},
	// Ray Serve LLM: no API server HTTP counter, so no failure variant.
	"vllm-ray.prom": {engine: "vllm", shape: "ray", requests: "ray_vllm_e2e_request_latency_seconds_count",
		abort: [3]string{"ray_vllm_request_success_total", "finished_reason", "abort"}},
	// No TTFT histogram (its mean is estimated) and no KV series.
	"tgi.prom": {engine: "tgi", shape: "", requests: "tgi_request_duration_count",
		abort:   [3]string{"tgi_request_failure", "err", "dropped"},
		failure: [3]string{"tgi_request_failure", "err", "generation"}},
	"sglang-sanitized.prom": {engine: "sglang", shape: "sanitized", requests: "sglang_num_requests_total",
		abort: [3]string{"sglang_num_aborted_requests_total", "", ""}},
}

// TestConformanceScrape serves every engine fixture as a live, steady engine
// and triages it with `why --scrape`: the engine and its shape are
// detected, the verdict is healthy, every canonical signal the shape's map
// gives either has a value or is a stated gap; with 3% client aborts it is
// still healthy, with 3% server failures it is request_errors.
func TestConformanceScrape(t *testing.T) {
	if testing.Short() {
		t.Skip("samples for 4 s per fixture; skipped with -short")
	}
	var index struct {
		Fixtures map[string]struct {
			Engine string `yaml:"engine"`
		} `yaml:"fixtures"`
	}
	raw, err := os.ReadFile(filepath.Join(conformanceDir, "shapes.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &index); err != nil {
		t.Fatal(err)
	}
	for name, f := range index.Fixtures {
		if _, ok := fixtureShapes[name]; !ok && f.Engine != "dcgm" {
			t.Errorf("fixture %s (%s) has no expectation here", name, f.Engine)
		}
	}
	runs, err := conformanceRuns()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range conformanceKeys() {
		t.Run(strings.TrimSuffix(k.fixture, ".prom")+"/"+k.variant, func(t *testing.T) {
			r := runs[k]
			if r.code == exitFailed {
				t.Fatalf("exit 2: %s", r.stderr)
			}
			v := decodeVerdict(t, r.stdout)
			checkConformance(t, v, fixtureShapes[k.fixture], k.variant, hasStartTime(r.body))
		})
	}
}

// conformanceKey is one fixture served in one variant (newFixtureServer).
type conformanceKey struct{ fixture, variant string }

// conformanceResult is the `why --scrape` of one conformanceKey, with the
// fixture's text.
type conformanceResult struct {
	cliResult
	body string
}

// conformanceKeys are every fixture of fixtureShapes in every variant it has,
// sorted.
func conformanceKeys() []conformanceKey {
	names := make([]string, 0, len(fixtureShapes))
	for n := range fixtureShapes {
		names = append(names, n)
	}
	slices.Sort(names)
	var keys []conformanceKey
	for _, name := range names {
		for _, variant := range []string{"steady", "aborts", "failures"} {
			if variant == "failures" && fixtureShapes[name].failure[0] == "" {
				continue
			}
			keys = append(keys, conformanceKey{name, variant})
		}
	}
	return keys
}

// conformanceRuns runs `why --scrape --sample 4s --output json --explain`
// against every conformanceKey once per package run (TestConformanceScrape
// checks them all, TestDataParallelKV compares two steady ones), all at the
// same time: each run is 4 s of mostly idle sampling, which as parallel
// subtests went -test.parallel (GOMAXPROCS, 2 on a small machine) at a time,
// over a minute of the package's wall time.
var conformanceRuns = sync.OnceValues(func() (map[conformanceKey]conformanceResult, error) {
	keys := conformanceKeys()
	runs := make([]conformanceResult, len(keys))
	var wg sync.WaitGroup
	for i, k := range keys {
		body, err := os.ReadFile(filepath.Join(conformanceDir, k.fixture))
		if err != nil {
			return nil, err
		}
		h, err := newFixtureServer(string(body), fixtureShapes[k.fixture], k.variant)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k.fixture, err)
		}
		runs[i].body = string(body)
		wg.Go(func() {
			srv := httptest.NewServer(h)
			defer srv.Close()
			runs[i].cliResult = runArgs("why", "--scrape", srv.URL+"/metrics", "--sample", "4s", "--output", "json", "--explain")
		})
	}
	wg.Wait()
	out := map[conformanceKey]conformanceResult{}
	for i, k := range keys {
		out[k] = runs[i]
	}
	return out, nil
})

func checkConformance(t *testing.T, v *verdict.Verdict, want fixtureShape, variant string, hasStart bool) {
	t.Helper()
	shape := ""
	if v.EngineShape != nil {
		shape = v.EngineShape.Name
	}
	if v.Engine != want.engine || shape != want.shape {
		t.Fatalf("read as %s/%s, want %s/%s (gaps %+v)", v.Engine, shape, want.engine, want.shape, v.DataGaps)
	}
	top := ""
	if len(v.Causes) > 0 {
		top = v.Causes[0].ID
	}
	switch variant {
	case "steady", "aborts":
		if v.Status != verdict.StatusHealthy {
			t.Errorf("%s engine: status %s (top cause %q), want healthy; headline %+v", variant, v.Status, top, v.Headline)
		}
	case "failures":
		if v.Status != verdict.StatusAnomaly || top != "request_errors" {
			t.Errorf("3%% server failures: status %s, top cause %q, want anomaly with request_errors", v.Status, top)
		}
	}
	// Every signal the shape maps has a value now, or says why not.
	gapped := map[string]bool{}
	for _, g := range v.DataGaps {
		for _, s := range append(g.Signals, strings.Split(g.Signal, ", ")...) {
			gapped[s] = true
		}
	}
	now := map[string]float64{}
	for _, s := range v.Signals {
		if s.Now != nil {
			now[s.Name] = *s.Now
		} else if !gapped[s.Name] {
			t.Errorf("signal %s has no value and no data gap", s.Name)
		}
	}
	for _, s := range []string{"samples", "requests", "ttft_mean", "tpot_mean", "e2e_mean", "queue_mean", "request_rate", "abort_ratio"} {
		if _, ok := now[s]; !ok && !slices.Contains(want.lacks, s) {
			t.Errorf("core signal %s has no value in the sample", s)
		}
	}
	// The sample's own rate is read whether or not the engine exports its
	// start time: each fixture is a 5 req/s engine, served 25× faster. The
	// fixture's counters follow the handler's clock while the scraper stamps
	// each round when it starts, so on a loaded machine the first and last
	// scrapes lag by different amounts: the bound checks the rate is the
	// sample's (not zero, not a lifetime count), not the machine's speed.
	if rr, ok := now["request_rate"]; ok && (rr < 0.5*5*conformanceSpeed || rr > 2*5*conformanceSpeed) {
		t.Errorf("request rate %.1f req/s in the sample, want about %d", rr, 5*conformanceSpeed)
	}
	// The lifetime baseline: an exact rate where the engine says when it
	// started, one stated gap where it cannot (SGLang, trtllm-serve and
	// vLLM V0 serve multiprocess metrics: no start time).
	var baseRate *float64
	for _, s := range v.Signals {
		if s.Name == "request_rate" {
			baseRate = s.Baseline
		}
	}
	rateGap := false
	for _, g := range v.DataGaps {
		rateGap = rateGap || (g.Signal == "baseline_rates" && slices.Contains(g.Signals, "request_rate"))
	}
	if hasStart {
		if baseRate == nil || math.Abs(*baseRate/(5*conformanceSpeed)-1) > 0.1 {
			t.Errorf("lifetime request rate %v, want %d ±10%% (the engine exports its start time)", baseRate, 5*conformanceSpeed)
		}
	} else if baseRate != nil || !rateGap {
		t.Errorf("no start time: baseline request rate %v, gap %v; want no value and a baseline_rates gap", baseRate, rateGap)
	}
	if variant == "aborts" {
		if a := now["abort_ratio"]; a < 0.02 || a > 0.05 {
			t.Errorf("abort ratio %.3f, want about 3%% (plus the fixture's own)", a)
		}
	}
}

// newFixtureServer serves a fixture as an engine that ran for an hour/speed
// before the first scrape and keeps its pace: every cumulative sample
// (_total, _count, _sum, _bucket) grows in proportion, process_start_time_seconds
// and *_created say when it started, gauges hold. Variants add 3% of the requests as
// client aborts or server failures from the first scrape on.
func newFixtureServer(body string, fs fixtureShape, variant string) (http.Handler, error) {
	lifetime := 3600.0 / conformanceSpeed
	var once sync.Once
	var t0 time.Time
	var requests0 float64
	lines := strings.Split(body, "\n")
	// Counters named without _total (metrics-rs: TGI) grow as well.
	counters := map[string]bool{}
	for _, l := range lines {
		if f := strings.Fields(l); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" && f[3] == "counter" {
			counters[f[2]] = true
		}
	}
	for _, l := range lines {
		if strings.HasPrefix(l, fs.requests) {
			f := strings.Fields(l)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			requests0 += v
		}
	}
	if requests0 == 0 {
		return nil, fmt.Errorf("fixture has no %s", fs.requests)
	}
	extra := map[string][3]string{"aborts": fs.abort, "failures": fs.failure}[variant]
	// The variant's series, when the fixture already has it, grows by the
	// added requests; otherwise it is inserted next to its family's first.
	bump := extra[1] == ""
	for _, l := range lines {
		if extra[0] != "" && strings.HasPrefix(l, extra[0]+"{") && strings.Contains(l, extra[1]+`="`+extra[2]+`"`) {
			bump = true
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		once.Do(func() { t0 = time.Now() })
		elapsed := time.Since(t0).Seconds()
		grow := 1 + elapsed/lifetime
		added := 0.03 * requests0 * elapsed / lifetime
		var out strings.Builder
		inserted := extra[0] == ""
		for _, l := range lines {
			if l == "" || strings.HasPrefix(l, "#") {
				out.WriteString(l + "\n")
				continue
			}
			name, value, ok := splitSample(l)
			if !ok {
				out.WriteString(l + "\n")
				continue
			}
			switch {
			case name == "process_start_time_seconds" || strings.HasSuffix(name, "_created"):
				value = float64(t0.Unix()) - lifetime
			case counters[name] || strings.HasSuffix(name, "_total") || strings.HasSuffix(name, "_count") ||
				strings.HasSuffix(name, "_sum") || strings.HasSuffix(name, "_bucket"):
				value *= grow
			}
			if name == extra[0] && !inserted {
				switch {
				case !bump:
					fmt.Fprintf(&out, "%s %g\n", withLabel(l[:strings.LastIndexByte(l, ' ')], extra[1], extra[2]), added)
					inserted = true
				case extra[1] == "" || strings.Contains(l, extra[1]+`="`+extra[2]+`"`):
					value += added
					inserted = true
				}
			}
			fmt.Fprintf(&out, "%s %s\n", l[:strings.LastIndexByte(l, ' ')], strconv.FormatFloat(value, 'g', -1, 64))
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte(out.String()))
	}), nil
}

// splitSample returns a sample line's metric name and value.
func splitSample(l string) (string, float64, bool) {
	i := strings.LastIndexByte(l, ' ')
	if i < 0 {
		return "", 0, false
	}
	v, err := strconv.ParseFloat(l[i+1:], 64)
	if err != nil {
		return "", 0, false
	}
	name := l[:i]
	if j := strings.IndexAny(name, "{ "); j >= 0 {
		name = name[:j]
	}
	return name, v, true
}

// withLabel sets one label of a series (`name{a="1",b="2"}`) to a value.
func withLabel(series, label, value string) string {
	open := strings.IndexByte(series, '{')
	if open < 0 {
		return series + "{" + label + "=\"" + value + "\"}"
	}
	inner := strings.TrimSuffix(series[open+1:], "}")
	parts := strings.Split(inner, ",")
	for i, p := range parts {
		if strings.HasPrefix(strings.TrimSpace(p), label+"=") {
			parts[i] = label + "=\"" + value + "\""
			return series[:open+1] + strings.Join(parts, ",") + "}"
		}
	}
	return series[:open+1] + strings.Join(append(parts, label+"=\""+value+"\""), ",") + "}"
}

// hasStartTime reports whether an exposition says when the engine started.
func hasStartTime(body string) bool {
	for _, l := range strings.Split(body, "\n") {
		if name, _, ok := splitSample(l); ok && (name == "process_start_time_seconds" || strings.HasSuffix(name, "_created")) {
			return true
		}
	}
	return false
}

// TestDataParallelKV: vLLM with --data-parallel-size 2 in one API server
// (engine="0","1" on one target) reads per engine core: the running-weighted
// KV usage is the engines' own (≤100%, within 5% of the single-engine
// control vllm-v1.prom) and the decode batch is one core's, not the sum.
func TestDataParallelKV(t *testing.T) {
	if testing.Short() {
		t.Skip("samples for 4 s per fixture; skipped with -short")
	}
	runs, err := conformanceRuns()
	if err != nil {
		t.Fatal(err)
	}
	read := func(name string) map[string]float64 {
		r := runs[conformanceKey{name, "steady"}]
		if r.code == exitFailed {
			t.Fatalf("%s: exit 2: %s", name, r.stderr)
		}
		now := map[string]float64{}
		for _, s := range decodeVerdict(t, r.stdout).Signals {
			if s.Now != nil {
				now[s.Name] = *s.Now
			}
		}
		return now
	}
	one, two := read("vllm-v1.prom"), read("vllm-dp2.prom")
	for _, s := range []string{"decode_kv_usage", "decode_batch", "kv_usage"} {
		a, okA := one[s]
		b, okB := two[s]
		if !okA || !okB {
			t.Fatalf("%s: single engine %v (%v), DP=2 %v (%v): want values", s, a, okA, b, okB)
		}
		t.Logf("%s: single engine %.3f, DP=2 %.3f", s, a, b)
	}
	if kv := two["decode_kv_usage"]; kv > 1 || math.Abs(kv/one["decode_kv_usage"]-1) > 0.05 {
		t.Errorf("DP=2 decode_kv_usage %.3f, single engine %.3f: want ≤ 1 and within 5%%", kv, one["decode_kv_usage"])
	}
	// The fixture splits the target's 24 running requests over two cores.
	if b := two["decode_batch"]; math.Abs(b/(one["decode_batch"]/2)-1) > 0.05 {
		t.Errorf("DP=2 decode_batch %.1f, want half the single engine's %.1f (one core's batch)", b, one["decode_batch"])
	}
}

// TestRecognisedSources: a scrape that finds only the endpoint picker's or
// Dynamo's frontend's series exits 2 with a message that names the source
// and what to point whyslow at instead, not "point whyslow at the engine's
// /metrics" (which the user did).
func TestRecognisedSources(t *testing.T) {
	for _, c := range []struct {
		name, body string
		want       []string
	}{
		{"epp", "# TYPE inference_pool_average_kv_cache_utilization gauge\ninference_pool_average_kv_cache_utilization{name=\"pool\"} 0.4\n" +
			"# TYPE inference_pool_average_queue_size gauge\ninference_pool_average_queue_size{name=\"pool\"} 2\n" +
			"# TYPE inference_pool_ready_pods gauge\ninference_pool_ready_pods{name=\"pool\"} 3\n",
			[]string{"endpoint picker", "model server pods"}},
		{"dynamo-frontend", "# TYPE dynamo_frontend_inflight_requests gauge\ndynamo_frontend_inflight_requests{model=\"m\"} 3\n" +
			"# TYPE dynamo_frontend_requests_total counter\ndynamo_frontend_requests_total{model=\"m\"} 100\n",
			[]string{"Dynamo's frontend", "worker"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "text/plain; version=0.0.4")
				_, _ = w.Write([]byte(c.body))
			}))
			defer srv.Close()
			r := runCLI(t, "why", "--scrape", srv.URL+"/metrics", "--sample", "3s")
			if r.code != exitFailed {
				t.Fatalf("exit %d, want %d\n%s%s", r.code, exitFailed, r.stdout, r.stderr)
			}
			out := r.stdout + r.stderr
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("message lacks %q:\n%s", w, out)
				}
			}
			if strings.Contains(out, "point whyslow at the engine's /metrics") {
				t.Errorf("the generic message, for a source whyslow can name:\n%s", out)
			}
		})
	}
}

// TestDynamoFrontendBesideWorker: Dynamo's frontend and the endpoint
// picker scraped beside a vLLM worker are not silently ignored: the engine
// is triaged (healthy), the headline's TTFT mean is the frontend's (0.12 s
// against the worker's 0.11 s: 10 ms outside the engine), and the pool's
// average queue is read as the verdict's pool context.
func TestDynamoFrontendBesideWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("samples for 4 s; skipped with -short")
	}
	body, err := os.ReadFile(filepath.Join(conformanceDir, "vllm-v1.prom"))
	if err != nil {
		t.Fatal(err)
	}
	// Dynamo's frontend families (ai-dynamo/dynamo lib/runtime/src/metrics/
	// prometheus_names.rs), one bucket each: means, no percentiles.
	frontend := "# TYPE dynamo_frontend_time_to_first_token_seconds histogram\n" +
		"dynamo_frontend_time_to_first_token_seconds_bucket{model=\"m\",le=\"+Inf\"} 18000\n" +
		"dynamo_frontend_time_to_first_token_seconds_sum{model=\"m\"} 2160\n" +
		"dynamo_frontend_time_to_first_token_seconds_count{model=\"m\"} 18000\n" +
		"# TYPE dynamo_frontend_inter_token_latency_seconds histogram\n" +
		"dynamo_frontend_inter_token_latency_seconds_bucket{model=\"m\",le=\"+Inf\"} 4482000\n" +
		"dynamo_frontend_inter_token_latency_seconds_sum{model=\"m\"} 98604\n" +
		"dynamo_frontend_inter_token_latency_seconds_count{model=\"m\"} 4482000\n" +
		// The endpoint picker's pool averages beside it.
		"# TYPE inference_pool_average_queue_size gauge\ninference_pool_average_queue_size{name=\"pool\"} 0\n"
	h, err := newFixtureServer(string(body)+frontend, fixtureShapes["vllm-v1.prom"], "steady")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	r := runCLI(t, "why", "--scrape", srv.URL+"/metrics", "--sample", "4s", "--output", "json")
	if r.code == exitFailed {
		t.Fatalf("exit 2: %s", r.stderr)
	}
	v := decodeVerdict(t, r.stdout)
	if v.Engine != "vllm" || v.Status != verdict.StatusHealthy {
		t.Errorf("engine %s, status %s; want vllm, healthy", v.Engine, v.Status)
	}
	found := map[string]bool{}
	for _, g := range v.DataGaps {
		found[g.Signal] = true
	}
	if found["client_view"] || found["pool_context"] {
		t.Errorf("want no client_view or pool_context gap (both read): %+v", v.DataGaps)
	}
	// The one pool's average queue, read as context.
	if pc := v.PoolContext; pc == nil || pc.Pool != "pool" || len(pc.Rows) == 0 || pc.Rows[0].Signal != "pool_queue_mean" ||
		pc.Rows[0].Now == nil || *pc.Rows[0].Now != 0 {
		t.Errorf("pool context %+v, want pool's queue 0", pc)
	}
	mean, out := headlineRow(v, "ttft_mean"), headlineRow(v, "ttft_outside_engine")
	if mean == nil || mean.Source != "dynamo_frontend" || mean.Now == nil || math.Abs(*mean.Now-0.12) > 0.001 {
		t.Errorf("headline TTFT mean %+v, want the frontend's 0.12 s", mean)
	}
	if out == nil || out.Now == nil || math.Abs(*out.Now-(0.12-1982.64/18024)) > 0.001 {
		t.Errorf("outside the engine %+v, want 0.12 s - 0.11 s", out)
	}
}
