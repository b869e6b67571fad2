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
// engine no Go code names (testdata/engines/tgi.yaml: vLLM's signals over
// made-up tgi_* names) passes `rules check`, and `why --ruleset` triages a
// recorded bundle renamed to those names to the verdict the vLLM map gives
// the original.
func TestUnknownEngineFromMap(t *testing.T) {
	const tgiMap = "testdata/engines/tgi.yaml"
	if r := runCLI(t, "rules", "check", tgiMap); r.code != exitOK {
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
	err = errors.Join(os.WriteFile(filepath.Join(dir, "metrics.om"), []byte(strings.ReplaceAll(om.String(), "vllm:", "tgi_")), 0o644),
		os.WriteFile(filepath.Join(dir, "incident.yaml"), inc, 0o644))
	if err != nil {
		t.Fatal(err)
	}

	want := runCLI(t, "why", "--bundle", src, "--output", "json")
	got := runCLI(t, "why", "--bundle", dir, "--ruleset", tgiMap, "--output", "json")
	if got.code != exitCause {
		t.Fatalf("why with the tgi map: exit %d, want %d\n%s", got.code, exitCause, got.stderr)
	}
	wv, gv := decodeVerdict(t, want.stdout), decodeVerdict(t, got.stdout)
	if gv.Engine != "tgi" || gv.Status != verdict.StatusAnomaly || len(gv.Causes) == 0 {
		t.Fatalf("engine %q, status %s, %d causes; want tgi, anomaly, a cause", gv.Engine, gv.Status, len(gv.Causes))
	}
	ids := func(v *verdict.Verdict) []string {
		var out []string
		for _, c := range v.Causes {
			out = append(out, c.ID)
		}
		return out
	}
	if !slices.Equal(ids(gv), ids(wv)) {
		t.Errorf("causes %v with the tgi map, %v with the vllm map", ids(gv), ids(wv))
	}
}
