// Command gen adds traces to incident bundles: it re-records each bundle's
// instance (scenario, seed and policy from its truth.yaml, trimmed as
// testbed/sim/gen records it), keeps the requests of the incident and
// baseline windows (a stable sample) and writes traces.jsonl.gz next to the
// metrics. The metrics are left alone.
//
// The committed bundles under testdata/incidents get their traces from
// `go generate ./testbed/sim` (testbed/sim/gen); this command is for
// adding traces to other bundles.
//
//	go run ./testbed/simtrace/gen -per-window 600 testdata/incidents/frontend_delay ...
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"go.yaml.in/yaml/v3"

	"github.com/whyslow/whyslow/testbed/sim"
	"github.com/whyslow/whyslow/testbed/simtrace"
)

func main() {
	perWindow := flag.Int("per-window", simtrace.BundlePerWindow, "requests kept per window (0: all)")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: gen [-per-window N] BUNDLE_DIR...")
		os.Exit(2)
	}
	for _, dir := range flag.Args() {
		if err := addTraces(dir, *perWindow); err != nil {
			fmt.Fprintf(os.Stderr, "gen: %v\n", err)
			os.Exit(2)
		}
	}
}

func addTraces(dir string, perWindow int) error {
	data, err := os.ReadFile(filepath.Join(dir, "truth.yaml"))
	if err != nil {
		return err
	}
	var truth sim.Truth
	if err := yaml.Unmarshal(data, &truth); err != nil {
		return fmt.Errorf("%s/truth.yaml: %w", dir, err)
	}
	policy, _ := truth.Params["policy"].(string)
	var recs simtrace.Records
	b, err := sim.Record(context.Background(), sim.Options{Scenario: truth.Scenario, Seed: truth.Seed, Policy: policy, Trim: true, OnRequest: recs.Add})
	if err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	path, kept, err := simtrace.WriteBundleTraces(dir, b, recs.List, truth.Seed, perWindow, true)
	if err != nil {
		return err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	fmt.Printf("%s: %d of %d requests, %d bytes\n", path, kept, len(recs.List), fi.Size())
	return nil
}
