// Command gen records the committed incident bundles under
// testdata/incidents, all of them in one run: one trimmed, gzipped bundle
// per scenario at a seed chosen so the instance shows its cause clearly,
// the SGLang and TensorRT-LLM variants of some scenarios, and
// traces.jsonl.gz for the bundles whose tests read traces.
//
//	go generate ./testbed/sim
//	go run ./testbed/sim/gen -out testdata/incidents [-bundle NAME]
//
// Each bundle is what `whyslow sim record --scenario S --seed N --policy P
// --trim --gzip [--traces --traces-per-window N]` writes.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/whyslow/whyslow/testbed/sim"
	"github.com/whyslow/whyslow/testbed/simtrace"
)

// seeds is the scenario → seed table of the vLLM bundles, one per scenario
// (the directory is the scenario's name).
var seeds = map[string]int64{
	"healthy":           1,
	"healthy_busy":      3,
	"healthy_burst":     2,
	"arrival_surge":     2,
	"long_prompt_burst": 2,
	"prompt_shift":      3,
	"kv_pressure":       2,
	"bandwidth_bound":   1,
	"gpu_throttle":      3,
	"prefix_cache_loss": 2,
	"abort_storm":       2,
	"router_skew":       3,
	"frontend_delay":    2,
	"capacity_loss":     1,
	"context_growth":    1,
	"error_burst":       1,
	"diurnal_growth":    1,
	"new_tenant":        2,
}

// notCommitted are the scenarios that have no committed bundle yet: the
// accuracy harness draws them, the rulebook does not read them yet.
var notCommitted = map[string]bool{}

// withTraces are the vLLM bundles that also carry traces, with how many
// requests each window keeps (router_skew keeps fewer: its four replicas'
// metrics are already the largest bundle).
var withTraces = map[string]int{
	"frontend_delay":    simtrace.BundlePerWindow,
	"long_prompt_burst": simtrace.BundlePerWindow,
	"router_skew":       150,
}

// engineBundles are the bundles of the other engines' scheduler policies
// and metric names: directory <policy>_<scenario>.
var engineBundles = []spec{
	{scenario: "kv_pressure", seed: 2, policy: "sglang"},
	{scenario: "prompt_shift", seed: 2, policy: "sglang"},
	{scenario: "kv_pressure", seed: 2, policy: "trtllm"},
	{scenario: "long_prompt_burst", seed: 2, policy: "trtllm"},
	// The shipped shapes other than each engine's newest (docs/engines.md):
	// trtllm-serve ≤1.1's five unprefixed families, NVIDIA Dynamo's
	// re-export, SGLang with DP attention, and dcgm-exporter as Kubernetes
	// stores it by default (exported_pod, default counters).
	{scenario: "gpu_throttle", seed: 3, policy: "trtllm", names: "unprefixed", gpu: "dcgm", dcgmLayout: "k8s"},
	{scenario: "arrival_surge", seed: 2, policy: "trtllm", names: "dynamo"},
	{scenario: "kv_pressure", seed: 2, policy: "sglang", names: "dp"},
	{scenario: "gpu_throttle", seed: 3, gpu: "dcgm", dcgmLayout: "k8s", dcgmCounters: "default", tag: "dcgm_k8s"},
}

// spec is one committed bundle.
type spec struct {
	scenario string
	seed     int64
	policy   string // "" is vllm
	// traces is how many requests per window traces.jsonl.gz keeps; 0
	// writes no traces.
	traces int
	// names, gpu, dcgmLayout and dcgmCounters pick a shape (sim.Options);
	// tag names a vLLM bundle that differs only in them.
	names, gpu, dcgmLayout, dcgmCounters, tag string
}

// dir is the bundle's directory name.
func (s spec) dir() string {
	d := s.scenario
	if s.policy != "" && s.policy != "vllm" {
		d = s.policy + "_" + d
	}
	if s.names != "" {
		d = s.policy + "_" + s.names + "_" + s.scenario
	}
	if s.tag != "" {
		d = s.tag + "_" + s.scenario
	}
	return d
}

// specs lists every committed bundle, the scenario bundles in the order of
// sim.Scenarios, then the engine bundles.
func specs() ([]spec, error) {
	var out []spec
	for _, s := range sim.Scenarios() {
		if notCommitted[s.Name] {
			continue
		}
		seed, ok := seeds[s.Name]
		if !ok {
			return nil, fmt.Errorf("no seed for scenario %s", s.Name)
		}
		out = append(out, spec{scenario: s.Name, seed: seed, traces: withTraces[s.Name]})
	}
	return append(out, engineBundles...), nil
}

func main() {
	out := flag.String("out", filepath.Join("testdata", "incidents"), "directory to write the bundles under")
	only := flag.String("bundle", "", "record only this bundle (directory name, e.g. kv_pressure or sglang_kv_pressure)")
	flag.Parse()
	all, err := specs()
	if err != nil {
		fmt.Fprintf(os.Stderr, "gen: %v\n", err)
		os.Exit(2)
	}
	n := 0
	for _, s := range all {
		if *only != "" && s.dir() != *only {
			continue
		}
		n++
		if err := record(context.Background(), s, filepath.Join(*out, s.dir())); err != nil {
			fmt.Fprintf(os.Stderr, "gen: %s: %v\n", s.dir(), err)
			os.Exit(2)
		}
	}
	if n == 0 {
		fmt.Fprintf(os.Stderr, "gen: no bundle named %q\n", *only)
		os.Exit(2)
	}
}

// record writes one bundle (and its traces) into dir.
func record(ctx context.Context, s spec, dir string) error {
	var recs simtrace.Records
	opt := sim.Options{Scenario: s.scenario, Seed: s.seed, Policy: s.policy, Trim: true,
		Names: s.names, GPUSeries: s.gpu, DCGMLayout: s.dcgmLayout, DCGMCounters: s.dcgmCounters}
	if s.traces > 0 {
		opt.OnRequest = recs.Add
	}
	b, err := sim.Record(ctx, opt)
	if err != nil {
		return err
	}
	if err := b.WriteDir(dir, true); err != nil {
		return err
	}
	msg := fmt.Sprintf("%s: seed %d, %d bytes of metrics", dir, s.seed, len(b.Metrics))
	if s.traces > 0 {
		path, kept, err := simtrace.WriteBundleTraces(dir, b, recs.List, s.seed, s.traces, true)
		if err != nil {
			return err
		}
		msg += fmt.Sprintf(", %d traced requests in %s", kept, filepath.Base(path))
	}
	fmt.Println(msg)
	return nil
}
