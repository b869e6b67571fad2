package main

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/whyslow/whyslow/testbed/sim"
	"github.com/whyslow/whyslow/verdict"
)

// TestDCGMKubernetesLayout: dcgm-exporter scraped the way its Helm chart
// does by default (honorLabels false: the workload's pod is exported_pod,
// pod is the exporter's) gives the same GPU class, evidence and score as
// with the workload's pod kept, with the default counters (clocks and
// temperatures, no profiling fields, no violation counters).
func TestDCGMKubernetesLayout(t *testing.T) {
	if testing.Short() {
		t.Skip("records two bundles; skipped with -short")
	}
	verdicts := map[string]*verdict.Verdict{}
	for _, layout := range []string{"", "k8s"} {
		b, err := sim.Record(context.Background(), sim.Options{Scenario: "gpu_throttle", Seed: 3, Trim: true,
			GPUSeries: "dcgm", DCGMLayout: layout, DCGMCounters: "default"})
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(t.TempDir(), "b")
		// The GPU class from the counters' modelName, through the join, not
		// from incident.yaml.
		b.Incident.GPU = ""
		if err := b.WriteDir(dir, false); err != nil {
			t.Fatal(err)
		}
		r := runCLI(t, "why", "--bundle", dir, "--output", "json")
		if r.code == exitFailed {
			t.Fatalf("%q: exit 2: %s", layout, r.stderr)
		}
		verdicts[layout] = decodeVerdict(t, r.stdout)
	}
	score := func(v *verdict.Verdict) (float64, []string) {
		for _, c := range v.Causes {
			if c.ID == "gpu_throttling" {
				var ev []string
				for _, e := range c.Evidence {
					ev = append(ev, e.Text)
				}
				return c.Score, ev
			}
		}
		return 0, nil
	}
	pod, k8s := verdicts[""], verdicts["k8s"]
	sp, ep := score(pod)
	sk, ek := score(k8s)
	if sp == 0 || len(pod.Causes) == 0 || pod.Causes[0].ID != "gpu_throttling" {
		t.Fatalf("with pod labels: gpu_throttling score %v, causes %+v", sp, pod.Causes)
	}
	if sk != sp || len(ek) != len(ep) {
		t.Errorf("exported_pod layout: gpu_throttling score %v (%d evidence), want %v (%d) as with pod", sk, len(ek), sp, len(ep))
	}
	for i := range min(len(ek), len(ep)) {
		if ek[i] != ep[i] {
			t.Errorf("evidence %d: %q, want %q", i, ek[i], ep[i])
		}
	}
	if pod.GPU == nil || k8s.GPU == nil || pod.GPU.Class != k8s.GPU.Class {
		t.Errorf("GPU class %+v vs %+v", pod.GPU, k8s.GPU)
	}
}
