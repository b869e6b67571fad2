package sim

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPromtoolAcceptsBundle backfills recorded bundles with
// `promtool tsdb create-blocks-from openmetrics`.
func TestPromtoolAcceptsBundle(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (apt-get install prometheus); skipping the backfill check")
	}
	cases := []Options{
		{Scenario: "kv_pressure", Seed: 2, Trim: true},
		{Scenario: "router_skew", Seed: 1, Names: "v0", GPUSeries: "both", Trim: true},
	}
	for _, opt := range cases {
		t.Run(opt.Scenario+"/"+opt.Names, func(t *testing.T) {
			b, err := Record(context.Background(), opt)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			if err := b.WriteDir(filepath.Join(dir, "bundle"), false); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(promtool, "tsdb", "create-blocks-from", "openmetrics",
				filepath.Join(dir, "bundle", "metrics.om"), filepath.Join(dir, "tsdb")).CombinedOutput()
			if err != nil {
				t.Fatalf("promtool rejected the bundle: %v\n%s", err, out)
			}
			blocks, _ := os.ReadDir(filepath.Join(dir, "tsdb"))
			if len(blocks) == 0 {
				t.Fatalf("promtool wrote no blocks:\n%s", out)
			}
			list, err := exec.Command(promtool, "tsdb", "list", filepath.Join(dir, "tsdb")).CombinedOutput()
			if err != nil {
				t.Fatalf("promtool tsdb list: %v\n%s", err, list)
			}
			if !strings.Contains(string(list), "BLOCK ULID") {
				t.Errorf("unexpected list output:\n%s", list)
			}
			t.Logf("promtool:\n%s", list)
		})
	}
}
