package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/whyslow/whyslow/collectors/bundle"
	"github.com/whyslow/whyslow/diagnose"
	"github.com/whyslow/whyslow/notifiers/chart"
	"github.com/whyslow/whyslow/query"
	"github.com/whyslow/whyslow/rulesets"
	"github.com/whyslow/whyslow/verdict"
)

// TestUnknownEngineFromMap: adding an engine is adding a map. A map for an
// engine no Go code names (../../testdata/engines/myengine.yaml: vLLM's signals over
// made-up myengine_* names) passes `rules check`, and every reader of the
// maps takes it with `why --ruleset`: incident.yaml may name the engine; the
// triage of a recorded bundle renamed to those names gives the verdict the
// vLLM map gives the original; the detector's triggers fire on it (why
// --group-by); the chart draws its panels. Without the map, none of that.
func TestUnknownEngineFromMap(t *testing.T) {
	const myMap = "../../testdata/engines/myengine.yaml"
	if r := runCLI(t, "rules", "check", myMap); r.code != exitOK {
		t.Fatalf("rules check: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	dir := renamedBundle(t, "arrival_surge", "vllm:", "myengine_")
	f, err := os.OpenFile(filepath.Join(dir, "incident.yaml"), os.O_APPEND|os.O_WRONLY, 0)
	if err == nil {
		_, err = f.WriteString("engine: myengine\n")
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		t.Fatal(err)
	}

	want := runCLI(t, "why", "--bundle", filepath.Join(incidentsDir, "arrival_surge"), "--output", "json")
	got := runCLI(t, "why", "--bundle", dir, "--ruleset", myMap, "--output", "json")
	if got.code != exitCause {
		t.Fatalf("why with the myengine map: exit %d, want %d\n%s", got.code, exitCause, got.stderr)
	}
	wv, gv := decodeVerdict(t, want.stdout), decodeVerdict(t, got.stdout)
	if gv.Engine != "myengine" || gv.Status != verdict.StatusAnomaly || len(gv.Causes) == 0 {
		t.Fatalf("engine %q, status %s, %d causes; want myengine, anomaly, a cause", gv.Engine, gv.Status, len(gv.Causes))
	}
	if !slices.Equal(causeIDList(gv), causeIDList(wv)) {
		t.Errorf("causes %v with the myengine map, %v with the vllm map", causeIDList(gv), causeIDList(wv))
	}
	if r := runCLI(t, "why", "--bundle", dir); r.code != exitFailed || !strings.Contains(r.stderr, `unknown engine "myengine"`) || !strings.Contains(r.stderr, "--ruleset FILE") {
		t.Errorf("without the map: exit %d, %q; want exit %d naming the engine and --ruleset", r.code, r.stderr, exitFailed)
	}

	// The detector: its triggers fire on the map's series only with the map.
	fleet := func(args ...string) fleetReport {
		t.Helper()
		r := runCLI(t, append([]string{"why", "--bundle", dir, "--group-by", "model_name", "--output", "json"}, args...)...)
		var rep fleetReport
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("why --group-by %v: exit %d, %v\n%s", args, r.code, err, r.stderr)
		}
		return rep
	}
	if rep := fleet("--ruleset", myMap); len(rep.Anomalous) != 1 || len(rep.Anomalous[0].Triggers) == 0 || rep.Anomalous[0].Verdict == nil || rep.Anomalous[0].Verdict.Engine != "myengine" {
		t.Errorf("why --group-by --ruleset: %+v, want one anomalous scope triaged with myengine", rep)
	}
	if rep := fleet("--engine", "vllm"); rep.Scopes != 0 {
		t.Errorf("why --group-by without the map: %d scopes, want none (no shipped map knows myengine_*)", rep.Scopes)
	}

	// The chart: the map's panels have data only with the map.
	rs, err := rulesets.Load("", myMap)
	if err != nil {
		t.Fatal(err)
	}
	maps := rulesets.Shipped().WithUser(rs)
	drawn := func(ctx context.Context, m query.Metrics, v *verdict.Verdict, o chart.Options) map[string]bool {
		d, err := chart.ForVerdict(ctx, m, v, o)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, p := range d.Panels {
			out[p.Title] = p.Query != ""
		}
		return out
	}
	var with, without map[string]bool
	_, err = whyBundle(t.Context(), dir, bundle.DefaultMaxSeries, diagnose.Options{Engine: "auto", Ruleset: rs}, maps,
		func(ctx context.Context, m query.Metrics, v *verdict.Verdict) error {
			with, without = drawn(ctx, m, v, chart.Options{Maps: maps}), drawn(ctx, m, v, chart.Options{})
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	for _, title := range []string{"TTFT p95", "ITL / TPOT p95", "Queue depth (waiting requests)", "Request rate (first tokens/s)", "Preemptions /s"} {
		if !with[title] || without[title] {
			t.Errorf("chart panel %q: data %v with the map, %v without; want only with", title, with[title], without[title])
		}
	}
}

// TestRenamedShapes: an engine's names rewritten on the way (Ray Serve LLM's
// ray_vllm_*, a pipeline's ":" → "_") are the same engine in another shape.
// Recorded bundles renamed so give the original's verdict with auto
// detection: the surge is queue_saturation first, the healthy one healthy.
func TestRenamedShapes(t *testing.T) {
	for _, c := range []struct {
		incident, from, to, engine, shape string
	}{
		{"arrival_surge", "vllm:", "ray_vllm_", "vllm", "ray"},
		{"healthy", "vllm:", "ray_vllm_", "vllm", "ray"},
		{"arrival_surge", "vllm:", "vllm_", "vllm", "sanitized"},
		{"healthy", "vllm:", "vllm_", "vllm", "sanitized"},
		{"sglang_kv_pressure", "sglang:", "sglang_", "sglang", "sanitized"},
	} {
		t.Run(c.incident+"/"+c.to, func(t *testing.T) {
			src := filepath.Join(incidentsDir, c.incident)
			dir := renamedBundle(t, c.incident, c.from, c.to)
			wv := decodeVerdict(t, runShared(t, "why", "--bundle", src, "--output", "json").stdout)
			got := runCLI(t, "why", "--bundle", dir, "--output", "json")
			gv := decodeVerdict(t, got.stdout)
			shape := ""
			if gv.EngineShape != nil {
				shape = gv.EngineShape.Name
			}
			if gv.Engine != c.engine || shape != c.shape {
				t.Fatalf("read as %s/%s, want %s/%s\n%s", gv.Engine, shape, c.engine, c.shape, got.stderr)
			}
			if gv.Status != wv.Status || !slices.Equal(causeIDList(gv), causeIDList(wv)) {
				t.Errorf("renamed: %s %v; original: %s %v", gv.Status, causeIDList(gv), wv.Status, causeIDList(wv))
			}
			if c.incident == "arrival_surge" && (len(gv.Causes) == 0 || gv.Causes[0].ID != "queue_saturation") {
				t.Errorf("surge: causes %v, want queue_saturation first", causeIDList(gv))
			}
			if c.incident == "healthy" && gv.Status != verdict.StatusHealthy {
				t.Errorf("healthy: status %s", gv.Status)
			}
			if len(gv.DataGaps) != len(wv.DataGaps) {
				t.Errorf("renamed: %d data gaps, original %d: %+v", len(gv.DataGaps), len(wv.DataGaps), gv.DataGaps)
			}
		})
	}
}

// renamedBundle copies a recorded incident with its metric names' prefix
// rewritten (from → to) and its engine line dropped, so the shape is found
// from the names alone.
func renamedBundle(t *testing.T, incident, from, to string) string {
	t.Helper()
	return rewrittenBundle(t, incident, true, func(om string) string { return strings.ReplaceAll(om, from, to) })
}

// rewrittenBundle copies a recorded incident with its exposition passed
// through rewrite, and its engine line dropped when dropEngine.
func rewrittenBundle(t *testing.T, incident string, dropEngine bool, rewrite func(string) string) string {
	t.Helper()
	src := filepath.Join(incidentsDir, incident)
	dir := t.TempDir()
	gz, err := os.ReadFile(filepath.Join(src, "metrics.om.gz"))
	inc, err2 := os.ReadFile(filepath.Join(src, "incident.yaml"))
	if err := errors.Join(err, err2); err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	var om strings.Builder
	if _, err := io.Copy(&om, zr); err != nil {
		t.Fatal(err)
	}
	if dropEngine {
		inc = regexp.MustCompile(`(?m)^engine: .*\n`).ReplaceAll(inc, nil)
	}
	err = errors.Join(os.WriteFile(filepath.Join(dir, "metrics.om"), []byte(rewrite(om.String())), 0o644),
		os.WriteFile(filepath.Join(dir, "incident.yaml"), inc, 0o644))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestRenamedShapesDetect: the detector's triggers (why --group-by, as the
// daemon runs them) fire on renamed names as on the originals; the success
// rate among them (error_burst).
func TestRenamedShapesDetect(t *testing.T) {
	triggers := func(dir string) []string {
		var out, errb bytes.Buffer
		code := dispatch(context.Background(), []string{"why", "--bundle", dir, "--group-by", "model_name", "--output", "json"}, &out, &errb)
		if code != exitCause {
			t.Fatalf("why --group-by %s: exit %d: %s", dir, code, errb.String())
		}
		var rep fleetReport
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil || len(rep.Anomalous) != 1 {
			t.Fatalf("why --group-by %s: %v %s", dir, err, out.String())
		}
		return rep.Anomalous[0].Triggers
	}
	want := triggers(filepath.Join(incidentsDir, "error_burst"))
	if !slices.ContainsFunc(want, func(s string) bool { return strings.HasPrefix(s, "success_rate") }) {
		t.Fatalf("original error_burst triggers %v: no success_rate", want)
	}
	for _, to := range []string{"ray_vllm_", "vllm_"} {
		if got := triggers(renamedBundle(t, "error_burst", "vllm:", to)); !slices.Equal(got, want) {
			t.Errorf("%s: triggers %v, original %v", to, got, want)
		}
	}
}

// tgiFromVLLM rewrites a recorded vLLM exposition into TGI's router names
// (rulesets/tgi.yaml): the families TGI has under its names, the prefill
// time as the prefill batch histogram, every other vllm:* family dropped
// (TGI has no TTFT, KV or prefix-cache series).
func tgiFromVLLM(om string) string {
	rename := map[string]string{
		"vllm:e2e_request_latency_seconds":           "tgi_request_duration",
		"vllm:request_queue_time_seconds":            "tgi_request_queue_duration",
		"vllm:request_inference_time_seconds":        "tgi_request_inference_duration",
		"vllm:request_time_per_output_token_seconds": "tgi_request_mean_time_per_token_duration",
		"vllm:request_prompt_tokens":                 "tgi_request_input_length",
		"vllm:request_generation_tokens":             "tgi_request_generated_tokens",
		"vllm:num_requests_running":                  "tgi_batch_current_size",
		"vllm:num_requests_waiting":                  "tgi_queue_size",
		"vllm:request_prefill_time_seconds":          "tgi_batch_inference_duration",
	}
	var out strings.Builder
	for _, l := range strings.Split(om, "\n") {
		if strings.HasPrefix(l, "# ") {
			f := strings.Fields(l)
			switch {
			case len(f) < 3:
				out.WriteString(l + "\n")
			case rename[f[2]] != "":
				out.WriteString(strings.Replace(l, f[2], rename[f[2]], 1) + "\n")
			case f[2] == "vllm:request_success" && f[1] == "TYPE":
				// metrics-rs counters carry no _total: untyped here.
				out.WriteString("# TYPE tgi_request_success unknown\n# TYPE tgi_request_count unknown\n")
			case !strings.HasPrefix(f[2], "vllm:") && !strings.HasPrefix(f[2], "http_"):
				out.WriteString(l + "\n")
			}
			continue
		}
		name, rest, _ := strings.Cut(l, "{")
		if i := strings.IndexByte(name, ' '); i >= 0 {
			name, rest = name[:i], "}"+name[i:]
		}
		base, suffix := name, ""
		for _, s := range []string{"_bucket", "_sum", "_count", "_created"} {
			if b, ok := strings.CutSuffix(name, s); ok && rename[b] != "" {
				base, suffix = b, s
			}
		}
		switch {
		case base == "vllm:request_prefill_time_seconds":
			if !strings.HasPrefix(rest, "}") {
				rest = "," + rest
			}
			out.WriteString(rename[base] + suffix + `{method="prefill"` + rest + "\n")
		case rename[base] != "":
			out.WriteString(rename[base] + suffix + "{" + rest + "\n")
		case name == "vllm:request_success_total":
			out.WriteString("tgi_request_success{" + rest + "\ntgi_request_count{" + rest + "\n")
		case strings.HasPrefix(name, "vllm:") || strings.HasPrefix(name, "http_"):
		default:
			out.WriteString(l + "\n")
		}
	}
	return strings.TrimSuffix(out.String(), "\n")
}

// TestTGIFromVLLMBundle: recorded vLLM incidents in TGI's names are read
// as TGI: the surge is queue_saturation first, the healthy one healthy,
// and what TGI does not export (TTFT percentiles, KV) is a stated gap.
func TestTGIFromVLLMBundle(t *testing.T) {
	for _, incident := range []string{"arrival_surge", "healthy"} {
		t.Run(incident, func(t *testing.T) {
			dir := rewrittenBundle(t, incident, true, tgiFromVLLM)
			r := runCLI(t, "why", "--bundle", dir, "--output", "json")
			v := decodeVerdict(t, r.stdout)
			if v.Engine != "tgi" {
				t.Fatalf("engine %q, want tgi\n%s", v.Engine, r.stderr)
			}
			switch incident {
			case "arrival_surge":
				if v.Status != verdict.StatusAnomaly || len(v.Causes) == 0 || v.Causes[0].ID != "queue_saturation" {
					t.Errorf("surge: status %s, causes %+v; want anomaly, queue_saturation first", v.Status, v.Causes)
				}
			case "healthy":
				if v.Status != verdict.StatusHealthy {
					t.Errorf("healthy: status %s", v.Status)
				}
			}
			var gaps []string
			for _, g := range v.DataGaps {
				gaps = append(gaps, g.Signals...)
			}
			for _, s := range []string{"ttft_p95", "kv_usage", "kv_usage_peak", "prefix_hit_rate"} {
				if !slices.Contains(gaps, s) {
					t.Errorf("%s is not a stated gap: %+v", s, v.DataGaps)
				}
			}
		})
	}
}

// dataParallel2 rewrites a recorded single-engine vLLM exposition as one
// API server over two engine cores (--data-parallel-size 2): each
// engine="0" series split in two, the counts, histograms and request
// gauges halved per core, KV usage the same on both.
func dataParallel2(om string) string {
	var out strings.Builder
	for _, l := range strings.Split(om, "\n") {
		if strings.HasPrefix(l, "#") || !strings.Contains(l, `engine="0"`) {
			out.WriteString(l + "\n")
			continue
		}
		f := strings.Fields(l)
		name, _, _ := strings.Cut(l, "{")
		series := strings.Join(f[:len(f)-2], " ")
		v, err := strconv.ParseFloat(f[len(f)-2], 64)
		if err != nil {
			out.WriteString(l + "\n")
			continue
		}
		for _, s := range []string{"_total", "_count", "_sum", "_bucket", "num_requests_running", "num_requests_waiting"} {
			if strings.HasSuffix(name, s) {
				v /= 2
				break
			}
		}
		for _, e := range []string{"0", "1"} {
			fmt.Fprintf(&out, "%s %s %s\n", strings.Replace(series, `engine="0"`, `engine="`+e+`"`, 1),
				strconv.FormatFloat(v, 'g', -1, 64), f[len(f)-1])
		}
	}
	return strings.TrimSuffix(out.String(), "\n")
}

// TestDataParallelBundle: the recorded surge and healthy incidents as vLLM
// with --data-parallel-size 2 in one API server give the single engine's
// verdict, and the running-weighted KV usage is the engines' own (≤100%,
// within 5% of the single-engine control), not their sum.
func TestDataParallelBundle(t *testing.T) {
	for _, incident := range []string{"arrival_surge", "healthy"} {
		t.Run(incident, func(t *testing.T) {
			src := filepath.Join(incidentsDir, incident)
			dir := rewrittenBundle(t, incident, false, dataParallel2)
			wv := decodeVerdict(t, runCLI(t, "why", "--bundle", src, "--output", "json", "--explain").stdout)
			gv := decodeVerdict(t, runCLI(t, "why", "--bundle", dir, "--output", "json", "--explain").stdout)
			if gv.Engine != "vllm" || gv.EngineShape == nil || gv.EngineShape.Name != "v1" {
				t.Fatalf("read as %s/%+v, want vllm/v1", gv.Engine, gv.EngineShape)
			}
			if gv.Status != wv.Status || !slices.Equal(causeIDList(gv), causeIDList(wv)) {
				t.Errorf("DP=2: %s %v; single engine: %s %v", gv.Status, causeIDList(gv), wv.Status, causeIDList(wv))
			}
			if incident == "arrival_surge" && (len(gv.Causes) == 0 || gv.Causes[0].ID != "queue_saturation") {
				t.Errorf("surge: causes %v, want queue_saturation first", causeIDList(gv))
			}
			now := func(v *verdict.Verdict, name string) float64 {
				for _, s := range v.Signals {
					if s.Name == name && s.Now != nil {
						return *s.Now
					}
				}
				t.Fatalf("no %s in the verdict", name)
				return 0
			}
			one, two := now(wv, "decode_kv_usage"), now(gv, "decode_kv_usage")
			t.Logf("decode_kv_usage: single engine %.3f, DP=2 %.3f", one, two)
			if two > 1 || math.Abs(two/one-1) > 0.05 {
				t.Errorf("DP=2 decode_kv_usage %.3f, single engine %.3f: want ≤ 1 and within 5%%", two, one)
			}
		})
	}
}

// causeIDList are a verdict's cause IDs, most likely first.
func causeIDList(v *verdict.Verdict) []string {
	var out []string
	for _, c := range v.Causes {
		out = append(out, c.ID)
	}
	return out
}

// TestSanitizedSGLangSimulated: no recorded SGLang surge exists, so the
// simulator records one (and a healthy hour) with SGLang's names; with
// ':' rewritten to '_' the surge is an anomaly with queue_saturation
// first, the healthy hour healthy, each read as SGLang's sanitized shape
// with the verdict the original names give.
func TestSanitizedSGLangSimulated(t *testing.T) {
	for _, scenario := range []string{"arrival_surge", "healthy"} {
		t.Run(scenario, func(t *testing.T) {
			src := t.TempDir()
			if r := runCLI(t, "sim", "record", "--scenario", scenario, "--seed", "3", "--policy", "sglang", "--trim", "--out", src); r.code != exitOK {
				t.Fatalf("sim record: exit %d: %s", r.code, r.stderr)
			}
			om, err := os.ReadFile(filepath.Join(src, "metrics.om"))
			inc, err2 := os.ReadFile(filepath.Join(src, "incident.yaml"))
			if err := errors.Join(err, err2); err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			inc = regexp.MustCompile(`(?m)^engine: .*\n`).ReplaceAll(inc, nil)
			err = errors.Join(os.WriteFile(filepath.Join(dir, "metrics.om"), []byte(strings.ReplaceAll(string(om), "sglang:", "sglang_")), 0o644),
				os.WriteFile(filepath.Join(dir, "incident.yaml"), inc, 0o644))
			if err != nil {
				t.Fatal(err)
			}
			wv := decodeVerdict(t, runCLI(t, "why", "--bundle", src, "--output", "json").stdout)
			got := runCLI(t, "why", "--bundle", dir, "--output", "json")
			gv := decodeVerdict(t, got.stdout)
			if gv.Engine != "sglang" || gv.EngineShape == nil || gv.EngineShape.Name != "sanitized" {
				t.Fatalf("read as %s/%+v, want sglang/sanitized\n%s", gv.Engine, gv.EngineShape, got.stderr)
			}
			if gv.Status != wv.Status || !slices.Equal(causeIDList(gv), causeIDList(wv)) {
				t.Errorf("sanitized: %s %v; original: %s %v", gv.Status, causeIDList(gv), wv.Status, causeIDList(wv))
			}
			switch scenario {
			case "arrival_surge":
				if gv.Status != verdict.StatusAnomaly || len(gv.Causes) == 0 || gv.Causes[0].ID != "queue_saturation" {
					t.Errorf("surge: %s %v, want anomaly with queue_saturation first", gv.Status, causeIDList(gv))
				}
			case "healthy":
				if gv.Status != verdict.StatusHealthy || got.code != exitOK {
					t.Errorf("healthy: %s, exit %d", gv.Status, got.code)
				}
			}
		})
	}
}
