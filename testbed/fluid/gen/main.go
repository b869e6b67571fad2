// Command gen writes sample incident bundles from the fluid engine model.
//
//	go run ./testbed/fluid/gen -out /tmp/fluid                  # every catalogue scenario, seed 1
//	go run ./testbed/fluid/gen -scenario kv_pressure -seed 4 -wide -out /tmp/kv
//	go run ./testbed/fluid/gen -list
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/whyslow/whyslow/testbed/fluid"
)

func main() {
	var (
		scenario = flag.String("scenario", "", "scenario (or a+b); empty writes one bundle per catalogue scenario under -out")
		seed     = flag.Int64("seed", 1, "seed")
		out      = flag.String("out", "", "output directory")
		wide     = flag.Bool("wide", false, "draw from the wide ranges")
		trim     = flag.Bool("trim", true, "keep only the two windows and their look-back")
		gz       = flag.Bool("gzip", true, "write metrics.om.gz")
		names    = flag.String("names", "", "v1 or v0 (default v1; drawn with -wide)")
		gpu      = flag.String("gpu-series", "", "whyslow, dcgm, both or none (default whyslow; drawn with -wide)")
		list     = flag.Bool("list", false, "list the scenarios and exit")
	)
	flag.Parse()
	if *list {
		for _, s := range fluid.Scenarios() {
			fmt.Printf("%-18s %-28s %s\n", s.Name, strings.Join(s.Causes, ","), s.Summary)
		}
		fmt.Printf("\ncompounds: %s\n", strings.Join(fluid.CompoundPairs(), " "))
		return
	}
	if *out == "" {
		fmt.Fprintln(os.Stderr, "gen: -out is required")
		os.Exit(2)
	}
	todo := []string{*scenario}
	dirs := []string{*out}
	if *scenario == "" {
		todo, dirs = nil, nil
		for _, s := range fluid.Scenarios() {
			todo = append(todo, s.Name)
			dirs = append(dirs, filepath.Join(*out, s.Name))
		}
	}
	for i, sc := range todo {
		b, err := fluid.Record(context.Background(), fluid.Options{Scenario: sc, Seed: *seed, Names: *names,
			GPUSeries: *gpu, Wide: *wide, Trim: *trim})
		if err != nil {
			fmt.Fprintln(os.Stderr, "gen:", err)
			os.Exit(2)
		}
		if err := b.WriteDir(dirs[i], *gz); err != nil {
			fmt.Fprintln(os.Stderr, "gen:", err)
			os.Exit(2)
		}
		fmt.Printf("%s: %s (%s, m=%.2f) %d KiB\n", dirs[i], sc, b.Truth.Band, b.Truth.Magnitude, len(b.Metrics)>>10)
	}
}
