package accuracy

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/whyslow/whyslow/daemon"
	"github.com/whyslow/whyslow/rulesets"
	"github.com/whyslow/whyslow/testbed/sim"
	"github.com/whyslow/whyslow/verdict"
)

var (
	earlyPer     = flag.Int("accuracy.early-per", 0, "instances per scenario in TestEarlyAccuracy (default 2, 1 with -short)")
	earlySeed    = flag.Int64("accuracy.early-seed", 23, "seed for drawing TestEarlyAccuracy's instances (0: time-based)")
	earlyEnforce = flag.Bool("accuracy.early-enforce", true, "fail TestEarlyAccuracy when top-1 at open is under 90%")
	earlyHealthy = flag.Bool("accuracy.early-healthy", false, "TestEarlyAccuracy: run the instances of the scenarios without a cause too (reported when the detector fires on them, never scored)")
)

// earlyTriages is how many triages from the fire time on are scored for
// stability (fire time + 0..3 intervals).
const earlyTriages = 4

// earlyCases draws per instances of every scenario, alternating the metric
// names and varying the GPU series, as cases does. The instances of the
// scenarios without a cause (healthy variants and hard negatives: 12 of 36
// by default) are drawn but left out unless -accuracy.early-healthy:
// nothing is scored on them (the detector firing on one is reported), and
// they were half of the test's CPU (the detector runs to the end of a
// recording it seldom fires on). Drawing them keeps the seed stream: the
// scored instances are the same with or without the flag.
func earlyCases(t *testing.T, per int) []Case {
	seed := *earlySeed
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	t.Logf("early seed %d (rerun with -accuracy.early-seed=%d)", seed, seed)
	r := rand.New(rand.NewPCG(uint64(seed), 2))
	gpus := []string{"whyslow", "dcgm", "both", "none"}
	var cs []Case
	for _, s := range sim.Scenarios() {
		for i := 0; i < per; i++ {
			c := Case{Scenario: s.Name, Seed: r.Int64N(1 << 40), Names: []string{"v1", "v0"}[(i+r.IntN(2))%2], GPUSeries: gpus[r.IntN(4)]}
			if !onlyMatches(*onlyFlag, s.Name) || (s.Cause == "" && !*earlyHealthy) {
				continue
			}
			cs = append(cs, c)
		}
	}
	return cs
}

// TestEarlyAccuracy scores the verdict the daemon sends when an incident
// opens: for each drawn instance (recorded at the daemon's 5 s scrape
// interval) the daemon's detector runs from the onset, and the triages it
// would run at the fire time and the next three intervals are scored
// (RunEarly). Top-1 at open is the first of them that names a cause, as the
// tracker notifies; the target is ≥ 90%. Incident instances whose detector
// condition already held at the onset are reported, not scored: it fired on
// noise before the cause began. With -accuracy.early-healthy the scenarios
// without a cause run too, and those the detector fires on are reported,
// not scored (the detector is tuned elsewhere).
//
// The default run draws two instances per scenario and runs those of the
// scenarios with a cause (one with -short). More:
//
//	go test ./testbed/accuracy -run TestEarlyAccuracy -v -accuracy.early-per=4 -accuracy.early-seed=0
func TestEarlyAccuracy(t *testing.T) {
	skipInShort(t)
	rss, err := rulesets.All()
	if err != nil {
		t.Fatal(err)
	}
	per := *earlyPer
	if per <= 0 {
		per = 2
		if testing.Short() {
			per = 1
		}
	}
	cs := earlyCases(t, per)
	cfg := daemon.Config{}.WithDefaults()
	ctx := context.Background()
	results := make([]*EarlyResult, len(cs))
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(1, *parallel))
	for i, c := range cs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			results[i], errs[i] = RunEarly(ctx, c, rss, EarlyOptions{Config: cfg, Triages: earlyTriages, Explain: *verboseCase})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}

	type tally struct{ n, open, wrong int }
	perScenario := map[string]*tally{}
	conf := map[string]map[string]int{}
	var scored, right, allRight, triages, wrongNamed, healthyPages, healthyCauses, noise int
	for _, r := range results {
		truth := "healthy"
		if len(r.Truth) > 0 {
			truth = strings.Join(r.Truth, "+")
		}
		if conf[truth] == nil {
			conf[truth] = map[string]int{}
		}
		v, idx := r.AtOpen()
		conf[truth][Top(v)]++
		var tops []string
		for i, vv := range r.Verdicts {
			if i < earlyTriages {
				tops = append(tops, Top(vv))
			}
		}
		line := fmt.Sprintf("%-44s fired %3d intervals after onset %v; tops at fire+0..%d: %v; at open (k=%d): %s",
			r.Case, r.Intervals(cfg.ScrapeInterval), r.Triggers, len(tops)-1, tops, idx, Top(v))
		if len(r.PendingAtOnset) > 0 {
			line += fmt.Sprintf(" [detector noise: %v already held at the onset]", r.PendingAtOnset)
		}
		if len(r.Truth) == 0 {
			if !r.Fired.IsZero() {
				healthyPages++
				if v != nil && v.Status == verdict.StatusAnomaly && len(v.Causes) > 0 {
					healthyCauses++
				}
				t.Logf("DETECTOR FIRED on healthy %s", line)
			} else if *allFlag {
				t.Logf("quiet      %s", r.Case)
			}
			continue
		}
		if len(r.PendingAtOnset) > 0 {
			// The detector's condition held before the cause began: it
			// fired on noise, and the first triages describe the time
			// before the incident. Reported, not scored.
			noise++
			t.Logf("NOISE %s truth=%v", line, r.Truth)
			continue
		}
		ts := perScenario[r.Case.Scenario]
		if ts == nil {
			ts = &tally{}
			perScenario[r.Case.Scenario] = ts
		}
		ts.n++
		scored++
		ok := RightTop(v, r.Truth)
		if ok {
			right++
			ts.open++
		}
		for i, vv := range r.Verdicts {
			if i >= earlyTriages {
				break
			}
			triages++
			switch {
			case RightTop(vv, r.Truth):
				allRight++
			case vv.Status == verdict.StatusAnomaly && len(vv.Causes) > 0:
				wrongNamed++
				ts.wrong++
			}
		}
		switch {
		case !ok:
			t.Logf("MISS  %s truth=%v", line, r.Truth)
			if *verboseCase && v != nil {
				t.Logf("%s", explainVerdict(v))
			}
		case *allFlag:
			t.Logf("ok    %s", line)
			if *verboseCase && v != nil {
				t.Logf("%s", explainVerdict(v))
			}
		}
	}
	t.Logf("\nearly verdicts (at open):\n%s", table(conf))
	names := make([]string, 0, len(perScenario))
	for s := range perScenario {
		names = append(names, s)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, s := range names {
		ts := perScenario[s]
		fmt.Fprintf(&b, "  %-20s top-1 at open %d/%d; wrong top cause in %d of %d triages at fire+0..3\n", s, ts.open, ts.n, ts.wrong, earlyTriages*ts.n)
	}
	t.Logf("per scenario:\n%s", b.String())
	t.Logf("early: top-1 at open %.1f%% (%d/%d); over the triages at fire+0..3: right %.1f%%, a wrong top cause %.1f%% (%d/%d), the rest no cause yet",
		pct(right, scored), right, scored, pct(allRight, triages), pct(wrongNamed, triages), wrongNamed, triages)
	// The detector (detect/detect.go) is not under test here: a healthy
	// instance it fires on is reported; the triage's part is to name no
	// cause for it unless one shows.
	t.Logf("not scored: %d incident instances whose detector condition already held at the onset (NOISE above)", noise)
	if *earlyHealthy {
		t.Logf("healthy instances the detector fired on: %d (their verdict at open named a cause: %d)", healthyPages, healthyCauses)
	} else {
		t.Logf("instances of scenarios without a cause: not run (-accuracy.early-healthy runs them)")
	}
	if !*earlyEnforce {
		return
	}
	if p := pct(right, scored); p < 90 {
		t.Errorf("early top-1 at open %.1f%% < 90%%", p)
	}
}

// explainVerdict prints every signal and step outcome of a verdict.
func explainVerdict(v *verdict.Verdict) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  window %s..%s causes:", v.Incident.Start.Format(time.TimeOnly), v.Incident.End.Format(time.TimeOnly))
	for _, c := range v.Causes {
		fmt.Fprintf(&b, " %s:%.0f", c.ID, c.Score)
	}
	b.WriteString("\n  signals:")
	for _, s := range v.Signals {
		if s.Now != nil || s.Baseline != nil {
			fmt.Fprintf(&b, " %s=%s/%s", s.Name, f(s.Now), f(s.Baseline))
		}
	}
	for _, st := range v.Steps {
		fmt.Fprintf(&b, "\n  %s: %s", st.Name, st.Outcome)
		for _, ro := range st.Rules {
			if ro.Matched || ro.Error != "" {
				fmt.Fprintf(&b, "\n    %s -> %s %s %s", ro.Name, ro.Cause, ro.Effect, ro.Error)
			}
		}
	}
	return b.String()
}
