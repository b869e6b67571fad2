package main

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/whyslow/whyslow/verdict"
)

// TestUnknownEngineFromMap: adding an engine is adding a map. A map for an
// engine no Go code names (testdata/engines/myengine.yaml: vLLM's signals over
// made-up myengine_* names) passes `rules check`, and `why --ruleset` triages a
// recorded bundle renamed to those names to the verdict the vLLM map gives
// the original.
func TestUnknownEngineFromMap(t *testing.T) {
	const myMap = "testdata/engines/myengine.yaml"
	if r := runCLI(t, "rules", "check", myMap); r.code != exitOK {
		t.Fatalf("rules check: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	src := filepath.Join(incidentsDir, "arrival_surge")
	dir := t.TempDir()
	gz, err := os.ReadFile(filepath.Join(src, "metrics.om.gz"))
	inc, err2 := os.ReadFile(filepath.Join(src, "incident.yaml"))
	zr, err3 := gzip.NewReader(bytes.NewReader(gz))
	if err := errors.Join(err, err2, err3); err != nil {
		t.Fatal(err)
	}
	var om strings.Builder
	if _, err := io.Copy(&om, zr); err != nil {
		t.Fatal(err)
	}
	// incident.yaml names a shipped engine only; the map names this one.
	inc = regexp.MustCompile(`(?m)^engine: .*\n`).ReplaceAll(inc, nil)
	err = errors.Join(os.WriteFile(filepath.Join(dir, "metrics.om"), []byte(strings.ReplaceAll(om.String(), "vllm:", "myengine_")), 0o644),
		os.WriteFile(filepath.Join(dir, "incident.yaml"), inc, 0o644))
	if err != nil {
		t.Fatal(err)
	}

	want := runCLI(t, "why", "--bundle", src, "--output", "json")
	got := runCLI(t, "why", "--bundle", dir, "--ruleset", myMap, "--output", "json")
	if got.code != exitCause {
		t.Fatalf("why with the myengine map: exit %d, want %d\n%s", got.code, exitCause, got.stderr)
	}
	wv, gv := decodeVerdict(t, want.stdout), decodeVerdict(t, got.stdout)
	if gv.Engine != "myengine" || gv.Status != verdict.StatusAnomaly || len(gv.Causes) == 0 {
		t.Fatalf("engine %q, status %s, %d causes; want myengine, anomaly, a cause", gv.Engine, gv.Status, len(gv.Causes))
	}
	ids := func(v *verdict.Verdict) []string {
		var out []string
		for _, c := range v.Causes {
			out = append(out, c.ID)
		}
		return out
	}
	if !slices.Equal(ids(gv), ids(wv)) {
		t.Errorf("causes %v with the myengine map, %v with the vllm map", ids(gv), ids(wv))
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
			dir := t.TempDir()
			gz, err := os.ReadFile(filepath.Join(src, "metrics.om.gz"))
			inc, err2 := os.ReadFile(filepath.Join(src, "incident.yaml"))
			zr, err3 := gzip.NewReader(bytes.NewReader(gz))
			if err := errors.Join(err, err2, err3); err != nil {
				t.Fatal(err)
			}
			var om strings.Builder
			if _, err := io.Copy(&om, zr); err != nil {
				t.Fatal(err)
			}
			inc = regexp.MustCompile(`(?m)^engine: .*\n`).ReplaceAll(inc, nil)
			err = errors.Join(os.WriteFile(filepath.Join(dir, "metrics.om"), []byte(strings.ReplaceAll(om.String(), c.from, c.to)), 0o644),
				os.WriteFile(filepath.Join(dir, "incident.yaml"), inc, 0o644))
			if err != nil {
				t.Fatal(err)
			}
			wv := decodeVerdict(t, runCLI(t, "why", "--bundle", src, "--output", "json").stdout)
			got := runCLI(t, "why", "--bundle", dir, "--output", "json")
			gv := decodeVerdict(t, got.stdout)
			shape := ""
			if gv.EngineShape != nil {
				shape = gv.EngineShape.Name
			}
			if gv.Engine != c.engine || shape != c.shape {
				t.Fatalf("read as %s/%s, want %s/%s\n%s", gv.Engine, shape, c.engine, c.shape, got.stderr)
			}
			ids := func(v *verdict.Verdict) []string {
				var out []string
				for _, c := range v.Causes {
					out = append(out, c.ID)
				}
				return out
			}
			if gv.Status != wv.Status || !slices.Equal(ids(gv), ids(wv)) {
				t.Errorf("renamed: %s %v; original: %s %v", gv.Status, ids(gv), wv.Status, ids(wv))
			}
			if c.incident == "arrival_surge" && (len(gv.Causes) == 0 || gv.Causes[0].ID != "queue_saturation") {
				t.Errorf("surge: causes %v, want queue_saturation first", ids(gv))
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
