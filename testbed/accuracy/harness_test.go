package accuracy

import (
	"context"
	"flag"
	"strings"
	"testing"

	"github.com/whyslow/whyslow/rulesets"
	"github.com/whyslow/whyslow/verdict"
)

var (
	modelsFlag   = flag.String("accuracy.models", "sim,fluid,reqsim", "engine models to draw from (sim, fluid, reqsim)")
	widePer      = flag.Int("accuracy.wide-per", 0, "wide instances per scenario and model (default 2, 1 with -short)")
	compoundN    = flag.Int("accuracy.compound", -1, "compound instances per model (default 6, 2 with -short)")
	trainSeed    = flag.Int64("accuracy.train-seed", 17, "seed of the training draws")
	validation   = flag.Bool("accuracy.validation", false, "draw from the validation seed stream (score only after the rulebook is settled)")
	showMisses   = flag.Bool("accuracy.misses", true, "log every miss")
	enforceWide  = flag.Bool("accuracy.enforce-wide", true, "fail TestGeneralization when the targets are missed")
	parallelWide = flag.Int("accuracy.wide-parallel", 2, "instances recorded and triaged at once")
)

// models returns the engine models named by -accuracy.models.
func models(t *testing.T) ([]engineModel, map[string]engineModel) {
	all := map[string]engineModel{"sim": simModel{}}
	for name, m := range extraModels {
		all[name] = m
	}
	var list []engineModel
	for _, n := range strings.Split(*modelsFlag, ",") {
		m, ok := all[strings.TrimSpace(n)]
		if !ok {
			t.Logf("engine model %q not available; skipped", n)
			continue
		}
		list = append(list, m)
	}
	return list, all
}

// TestGeneralization scores the shipped rulebook on wide draws of both
// engine models: magnitudes from barely visible to severe, loads 20–90%,
// cost coefficients ±50%, 1–8 replicas, both name generations, with and
// without GPU series, compound faults and hard negatives. Per model, cause
// and magnitude band, with the confusion table and the reliability of the
// confidences.
//
// The default (CI) run draws from the training stream; the validation run
// draws from a stream no rule is tuned on:
//
//	go test ./testbed/accuracy -run TestGeneralization -v -accuracy.validation -accuracy.wide-per=8 -accuracy.compound=24
func TestGeneralization(t *testing.T) {
	skipInShort(t)
	rss, err := rulesets.All()
	if err != nil {
		t.Fatal(err)
	}
	list, byName := models(t)
	per, comp := *widePer, *compoundN
	if per <= 0 {
		per = 2
		if testing.Short() {
			per = 1
		}
	}
	if comp < 0 {
		comp = 6
		if testing.Short() {
			comp = 2
		}
	}
	plan := drawPlan{seed: uint64(*trainSeed), per: per, compound: comp, wide: true, only: *onlyFlag}
	stream := uint64(1)
	if *validation {
		stream = validationStream
	}
	ds := plan.draws(list, stream)
	t.Logf("%d draws (seed %d, stream %#x)", len(ds), plan.seed, stream)
	outs, err := runDraws(context.Background(), byName, ds, rss, *parallelWide, *verboseCase)
	if err != nil {
		t.Fatal(err)
	}
	rep := scoreOutcomes(outs)
	if *showMisses {
		for _, o := range rep.Misses {
			t.Logf("MISS %s", describe(o))
		}
	}
	if *allFlag {
		for _, o := range outs {
			t.Logf("CASE %s", describe(o))
		}
	}
	t.Logf("\n%s", rep)
	if !*enforceWide {
		return
	}
	if rep.FalseAlarms > 0 {
		t.Errorf("%d false alarms", rep.FalseAlarms)
	}
	if rep.NoCause > 0 {
		t.Errorf("%d anomaly verdicts without a ranked cause", rep.NoCause)
	}
	if p := pct(rep.All.right, rep.All.n); p < 95 {
		t.Errorf("top-1 %.1f%% < 95%%", p)
	}
	if p := pct(rep.All.right3, rep.All.n); p < 99 {
		t.Errorf("top-3 %.1f%% < 99%%", p)
	}
	// Each engine model on its own: a rule that helps one model and hurts
	// another is a fit, not a fix.
	for m, tl := range rep.ByModel {
		if p := pct(tl.right, tl.n); p < 95 {
			t.Errorf("%s: top-1 %.1f%% < 95%%", m, p)
		}
		if p := pct(tl.right3, tl.n); p < 99 {
			t.Errorf("%s: top-3 %.1f%% < 99%%", m, p)
		}
		if p := pct(rep.ModelCalledHy[m], tl.n); p > 2 {
			t.Errorf("%s: %d of %d faults a user felt called healthy (%.1f%% > 2%%)", m, rep.ModelCalledHy[m], tl.n, p)
		}
	}
}

var drawFlag = flag.String("accuracy.draw", "", "TestOneDraw: the draw to explain, as a MISS line names it (model:scenario/seed=N/v1/gpu=G[/wide])")

// TestOneDraw records one draw and logs its verdict with every signal and
// rule grade, for looking into a miss:
//
//	go test ./testbed/accuracy -run TestOneDraw -v -accuracy.draw=sim:kv_pressure/seed=42/v1/gpu=none/wide
func TestOneDraw(t *testing.T) {
	if *drawFlag == "" {
		t.Skip("no -accuracy.draw")
	}
	d, err := parseDraw(*drawFlag)
	if err != nil {
		t.Fatal(err)
	}
	rss, err := rulesets.All()
	if err != nil {
		t.Fatal(err)
	}
	_, byName := models(t)
	outs, err := runDraws(context.Background(), byName, []Draw{d}, rss, 1, true)
	if err != nil {
		t.Fatal(err)
	}
	o := outs[0]
	t.Logf("%s", describe(o))
	for _, s := range o.Verdict.Signals {
		t.Logf("signal %-26s now %-12s base %-12s z %s", s.Name, f(s.Now), f(s.Baseline), f(s.Noise))
	}
	for _, st := range o.Verdict.Steps {
		for _, r := range st.Rules {
			if r.Matched || r.Error != "" {
				g := 0.0
				if r.Grade != nil {
					g = *r.Grade
				}
				t.Logf("rule %s/%s → %s %s grade %.3f %s", st.Name, r.Name, r.Cause, r.Effect, g, r.Error)
			}
		}
	}
	for _, g := range o.Verdict.DataGaps {
		t.Logf("gap %s/%s: %s", g.Signal, g.Window, g.Reason)
	}
	if a := o.Verdict.Attribution; a != nil {
		for _, half := range []struct {
			name string
			sp   *verdict.LatencySplit
		}{{"ttft", a.TTFT}, {"itl", a.ITL}} {
			name, sp := half.name, half.sp
			if sp == nil {
				continue
			}
			for _, p := range sp.Parts {
				t.Logf("attr %s %-9s %6.1f%% %s", name, p.Component, 100*p.Share, p.Driver)
			}
			t.Logf("attr %s unexplained %6.1f%% missing %v", name, 100*sp.UnexplainedShare, sp.Missing)
		}
	}
}

// skipInShort leaves the draws of the accuracy harness to the full run
// (`make test`): `go test -short ./...` is the inner loop, under 3 minutes.
func skipInShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("the accuracy harness draws and triages dozens of instances; it runs without -short (make test)")
	}
}
