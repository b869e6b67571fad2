// Command gen adds traces to committed incident bundles: it re-records each
// bundle's instance (scenario and seed from its truth.yaml, trimmed as
// internal/sim/gen records it), keeps the requests of the incident and
// baseline windows (a stable sample) and writes traces.jsonl.gz next to the
// metrics. The metrics are left alone.
//
//	go run ./internal/simtrace/gen -per-window 600 testdata/incidents/frontend_delay ...
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"gopkg.in/yaml.v3"

	"github.com/whyslow/whyslow/internal/sim"
	"github.com/whyslow/whyslow/internal/simtrace"
)

func main() {
	perWindow := flag.Int("per-window", 600, "requests kept per window (0: all)")
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
	var recs simtrace.Records
	b, err := sim.Record(context.Background(), sim.Options{Scenario: truth.Scenario, Seed: truth.Seed, Trim: true, OnRequest: recs.Add})
	if err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	kept := simtrace.Sample(recs.List, simtrace.BundleWindows(b.Incident), perWindow)
	batch := simtrace.New(simtrace.Options{Seed: truth.Seed, Gateway: true})
	for _, r := range kept {
		batch.Add(r)
	}
	path, err := batch.WriteBundleFile(dir, true)
	if err != nil {
		return err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	fmt.Printf("%s: %d of %d requests, %d bytes\n", path, len(kept), len(recs.List), fi.Size())
	return nil
}
