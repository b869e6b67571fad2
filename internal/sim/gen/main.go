// Command gen records the committed incident bundles under
// testdata/incidents: one trimmed, gzipped bundle per scenario, at a seed
// chosen so the instance shows its cause clearly.
//
//	go generate ./internal/sim
//	go run ./internal/sim/gen -out testdata/incidents
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/whyslow/whyslow/internal/sim"
)

// seeds is the scenario → seed table of the committed bundles.
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
}

func main() {
	out := flag.String("out", filepath.Join("testdata", "incidents"), "directory to write the bundles under")
	only := flag.String("scenario", "", "record only this scenario")
	flag.Parse()
	for _, s := range sim.Scenarios() {
		if *only != "" && s.Name != *only {
			continue
		}
		seed, ok := seeds[s.Name]
		if !ok {
			fmt.Fprintf(os.Stderr, "gen: no seed for scenario %s\n", s.Name)
			os.Exit(2)
		}
		b, err := sim.Record(context.Background(), sim.Options{Scenario: s.Name, Seed: seed, Trim: true})
		if err != nil {
			fmt.Fprintf(os.Stderr, "gen: %v\n", err)
			os.Exit(2)
		}
		dir := filepath.Join(*out, s.Name)
		if err := b.WriteDir(dir, true); err != nil {
			fmt.Fprintf(os.Stderr, "gen: %v\n", err)
			os.Exit(2)
		}
		fmt.Printf("%s: seed %d, %d bytes of metrics\n", dir, seed, len(b.Metrics))
	}
}
