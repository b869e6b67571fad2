package whatiftest

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/whyslow/whyslow/testbed/reqsim"
	"github.com/whyslow/whyslow/whatif"
)

var (
	validate  = flag.Bool("whatif", false, "TestValidation: every fault × fix on the three engine models (minutes)")
	perFault  = flag.Int("whatif.per", 1, "TestValidation: instances per (fault, engine)")
	whatifPar = flag.Int("whatif.par", 2, "TestValidation: instances recorded at once")
	dumpPairs = flag.String("whatif.dump", "", "TestValidation: also write every pair as JSON to `FILE`")
	onEngine  = flag.String("whatif.engine", "", "TestValidation, TestFixOrder: only this engine model's incidents (vllm, sglang or trtllm; default all three)")
)

// faults are the injected faults the fixes are tried on.
var faults = []string{"arrival_surge", "replica_loss", "prompt_shift", "long_prompts", "kv_pressure",
	"clock_throttle", "prefix_loss", "hot_replica", "bandwidth"}

// TestSmoke is the default-on check: two fixes of a vLLM arrival surge
// (twice the replicas, three quarters of them), predicted in the right
// direction.
func TestSmoke(t *testing.T) {
	ps, err := Incident(context.Background(), reqsim.Options{Scenario: "arrival_surge", Seed: 11, Engine: "vllm"}, Catalogue[:2])
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if p.Declined != "" {
			t.Fatalf("%s: declined: %s", p.Fix, p.Declined)
		}
		if !p.RightTTFT() || !p.RightITL() {
			t.Errorf("%s: truth TTFT p95 %.3f→%.3f ITL p95 %.4f→%.4f; predicted %.3f→%.3f, %.4f→%.4f",
				p.Fix, p.TruthTTFT, p.FixedTTFT, p.TruthITL, p.FixedITL, p.ObsTTFT, p.PredTTFT, p.ObsITL, p.PredITL)
		}
	}
}

// TestValidation is issue 28's validation: direction right share and
// median relative p95 error per fix, engine and magnitude band.
func TestValidation(t *testing.T) {
	if !*validate {
		t.Skip("run with -whatif")
	}
	type job struct{ o reqsim.Options }
	var jobs []job
	for _, o := range validationIncidents() {
		jobs = append(jobs, job{o})
	}
	var (
		mu    sync.Mutex
		pairs []Pair
		wg    sync.WaitGroup
		sem   = make(chan struct{}, max(1, *whatifPar))
	)
	for _, j := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			ps, err := Incident(context.Background(), j.o, Catalogue)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("%s seed %d %s: %v", j.o.Scenario, j.o.Seed, j.o.Engine, err)
				return
			}
			pairs = append(pairs, ps...)
		}()
	}
	wg.Wait()
	t.Log("\n" + Report(pairs))
	if *dumpPairs != "" {
		data, err := json.MarshalIndent(pairs, "", " ")
		if err == nil {
			err = os.WriteFile(*dumpPairs, data, 0o644)
		}
		if err != nil {
			t.Error(err)
		}
	}
}

// validationIncidents are the incidents the validations record: each
// fault on each engine model, -whatif.per instances, magnitudes drawn wide.
func validationIncidents() []reqsim.Options {
	var out []reqsim.Options
	seed := int64(0x28000)
	for _, f := range faults {
		for _, eng := range []string{"vllm", "sglang", "trtllm"} {
			for i := 0; i < *perFault; i++ {
				seed++ // drawn for every engine, so that a filtered run keeps the seeds
				if *onEngine == "" || *onEngine == eng {
					out = append(out, reqsim.Options{Scenario: f, Seed: seed, Engine: eng, Wide: true})
				}
			}
		}
	}
	return out
}

// TestFixOrderSmoke is the default-on check of the fix order: on a vLLM
// arrival surge the verdict puts twice the replicas first, and so does
// the engine model.
func TestFixOrderSmoke(t *testing.T) {
	o, err := FixOrder(context.Background(), reqsim.Options{Scenario: "arrival_surge", Seed: 11, Engine: "vllm"})
	if err != nil {
		t.Fatal(err)
	}
	if !o.Right() || o.Predicted != "replicas×2" {
		t.Errorf("verdict first %q, truth best %q (declined %q): %v", o.Predicted, o.Best, o.Declined, o.Truth)
	}
}

// TestFixOrder is issue 28's fix order: for each incident of the
// validation, is the fix the verdict puts first (`why --predict`: the
// lowest predicted TTFT p95) the one that is best inside the engine
// model? Reported per engine; the target is 90% of incidents.
func TestFixOrder(t *testing.T) {
	if !*validate {
		t.Skip("run with -whatif")
	}
	var (
		mu     sync.Mutex
		orders []Order
		wg     sync.WaitGroup
		sem    = make(chan struct{}, max(1, *whatifPar))
	)
	for _, o := range validationIncidents() {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			r, err := FixOrder(context.Background(), o)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("%s seed %d %s: %v", o.Scenario, o.Seed, o.Engine, err)
				return
			}
			orders = append(orders, r)
		}()
	}
	wg.Wait()
	t.Log("\n" + OrderReport(orders))
}

// Report tabulates the pairs.
func Report(pairs []Pair) string {
	var b strings.Builder
	sort.SliceStable(pairs, func(i, j int) bool { return pairs[i].Seed < pairs[j].Seed })
	group := func(title string, key func(Pair) string) {
		keys := map[string][]Pair{}
		var order []string
		for _, p := range pairs {
			k := key(p)
			if _, ok := keys[k]; !ok {
				order = append(order, k)
			}
			keys[k] = append(keys[k], p)
		}
		sort.Strings(order)
		fmt.Fprintf(&b, "%-22s %5s %5s %5s %8s %8s %8s %8s\n", title, "pairs", "decl", "poor", "dirTTFT", "dirITL", "errTTFT", "errITL")
		for _, k := range order {
			b.WriteString(line(k, keys[k]))
		}
		b.WriteString("\n")
	}
	group("all", func(Pair) string { return "all" })
	group("calibration", func(p Pair) string {
		if p.Declined != "" {
			return "declined"
		}
		if p.Poor {
			return "poor fit"
		}
		return "good fit"
	})
	group("fix", func(p Pair) string { return p.Fix })
	group("engine", func(p Pair) string { return p.Engine })
	group("band", func(p Pair) string { return p.Band })
	group("fault", func(p Pair) string { return p.Scenario })
	b.WriteString(fitQuality(pairs))
	reasons := map[string]int{}
	for _, p := range pairs {
		if p.Declined != "" {
			reasons[p.Declined]++
		}
	}
	for r, n := range reasons {
		fmt.Fprintf(&b, "declined %d× %s\n", n, r)
	}
	b.WriteString(wrongDirections(pairs))
	return b.String()
}

// wrongDirections lists every pair whose predicted direction is not the
// truth's: the change the fix truly makes, the predicted one and its
// range over the replay seeds.
func wrongDirections(pairs []Pair) string {
	var b strings.Builder
	pc := func(x, of float64) float64 { return 100 * (x/of - 1) }
	for _, p := range pairs {
		if p.Declined != "" {
			continue
		}
		for _, m := range []struct {
			name                            string
			right                           bool
			truth, fixed, obs, pred, lo, hi float64
		}{
			{"TTFT", p.RightTTFT(), p.TruthTTFT, p.FixedTTFT, p.ObsTTFT, p.PredTTFT, p.PredTTFTLow, p.PredTTFTHigh},
			{"ITL", p.RightITL(), p.TruthITL, p.FixedITL, p.ObsITL, p.PredITL, p.PredITLLow, p.PredITLHigh},
		} {
			if m.right {
				continue
			}
			fmt.Fprintf(&b, "wrong %s: %s %s %s ×%.3g seed %#x, %s: true %+.1f%%, predicted %+.1f%% (seeds %+.1f…%+.1f%%)\n",
				m.name, p.Scenario, p.Engine, p.Band, p.Magnitude, p.Seed, p.Fix,
				pc(m.fixed, m.truth), pc(m.pred, m.obs), pc(m.lo, m.obs), pc(m.hi, m.obs))
		}
	}
	return b.String()
}

func line(name string, ps []Pair) string {
	var n, decl, poor, rt, ri int
	var et, ei []float64
	for _, p := range ps {
		if p.Declined != "" {
			decl++
			continue
		}
		n++
		if p.Poor {
			poor++
		}
		if p.RightTTFT() {
			rt++
		}
		if p.RightITL() {
			ri++
		}
		et = append(et, p.ErrTTFT())
		ei = append(ei, p.ErrITL())
	}
	pct := func(k int) string {
		if n == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f%%", 100*float64(k)/float64(n))
	}
	med := func(xs []float64) string {
		if len(xs) == 0 {
			return "-"
		}
		sort.Float64s(xs)
		return fmt.Sprintf("%.1f%%", 100*xs[len(xs)/2])
	}
	return fmt.Sprintf("%-22s %5d %5d %5d %8s %8s %8s %8s\n", name, n+decl, decl, poor, pct(rt), pct(ri), med(et), med(ei))
}

// fitQuality sums up the fits, one per incident: the median R², and the
// share of incidents whose replay lands within the calibration band.
func fitQuality(pairs []Pair) string {
	seen := map[int64]bool{}
	var r2, st, si []float64
	inT, inI := 0, 0
	for _, p := range pairs {
		if seen[p.Seed] || p.Fit == "" {
			continue
		}
		seen[p.Seed] = true
		r2, st, si = append(r2, p.R2), append(st, p.ScaleTTFT), append(si, p.ScaleITL)
		if p.ScaleTTFT >= whatif.CalibLow && p.ScaleTTFT <= whatif.CalibHigh {
			inT++
		}
		if p.ScaleITL >= whatif.CalibLow && p.ScaleITL <= whatif.CalibHigh {
			inI++
		}
	}
	if len(r2) == 0 {
		return ""
	}
	med := func(xs []float64) float64 { sort.Float64s(xs); return xs[len(xs)/2] }
	return fmt.Sprintf("fits: %d incidents, median R² %.2f; observed/replayed p95 median TTFT %.2f, ITL %.2f; within %.2f–%.2f: TTFT %d, ITL %d\n",
		len(r2), med(r2), med(st), med(si), whatif.CalibLow, whatif.CalibHigh, inT, inI)
}
