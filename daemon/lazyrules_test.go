package daemon

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/whyslow/whyslow/rulesets"
)

// A sidecar's start builds its triage without compiling the shipped
// rulesets: they are compiled by the first triage that reads them, so an
// idle sidecar does not hold them (README, Cost). The check runs in a
// fresh process: other tests here compile rulesets into the process-wide
// cache.
func TestTriageWithCompilesNoShippedRuleset(t *testing.T) {
	if os.Getenv("WHYSLOW_TEST_TRIAGEWITH_CHILD") == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestTriageWithCompilesNoShippedRuleset$", "-test.v")
		cmd.Env = append(os.Environ(), "WHYSLOW_TEST_TRIAGEWITH_CHILD=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestTriageWithCompilesNoShippedRuleset") {
			t.Fatalf("child: %v\n%s", err, out)
		}
		return
	}
	if got := rulesets.Compiled(); len(got) > 0 {
		t.Fatalf("before TriageWith the process has compiled %v; want none", got)
	}
	for _, engine := range []string{"vllm", "auto"} {
		if _, err := TriageWith(nil, nil, nil, engine); err != nil {
			t.Fatalf("TriageWith(%s): %v", engine, err)
		}
		if got := rulesets.Compiled(); len(got) > 0 {
			t.Errorf("TriageWith(%s) compiled %v at start; want none until a triage reads them", engine, got)
		}
	}
	if _, err := TriageWith(nil, nil, nil, "nosuchengine"); err == nil {
		t.Error("TriageWith(nosuchengine): no error; an engine no map names must fail at start")
	}
	// The first triage's read compiles only the engine's own.
	if _, err := rulesets.Shipped().For("vllm"); err != nil {
		t.Fatal(err)
	}
	if got := rulesets.Compiled(); !slices.Equal(got, []string{"vllm"}) {
		t.Errorf("after For(vllm) the process has compiled %v; want [vllm]", got)
	}
}

// The daemon holds the shipped rulesets its triages compile only while an
// incident is open: a Tick with none open releases them, and the next
// incident's triage compiles them again.
func TestDaemonHoldsRulesetsOnlyWhileAnIncidentIsOpen(t *testing.T) {
	cfg := testConfig()
	var maps *rulesets.Maps
	h := newHarnessWith(t, cfg, func(o *Options) {
		shipped, err := cfg.Maps()
		if err != nil {
			t.Fatal(err)
		}
		maps = shipped.Releasable()
		tri, err := TriageWith(o.Metrics, nil, maps, cfg.WithDefaults().Engine)
		if err != nil {
			t.Fatal(err)
		}
		o.Maps, o.Triage = maps, tri
	})
	h.ticks(t, 15*12) // the detector's baseline
	if got := maps.Held(); len(got) > 0 {
		t.Fatalf("healthy period: the daemon holds compiled rulesets %v", got)
	}
	for round := 1; round <= 2; round++ {
		h.eng.setSlow(true)
		for i := 0; i < 12 && len(h.d.tracker.OpenKeys()) == 0; i++ {
			h.ticks(t, 1)
		}
		if len(h.d.tracker.OpenKeys()) == 0 {
			t.Fatalf("round %d: no incident opened", round)
		}
		h.ticks(t, 2)
		if got := maps.Held(); len(got) == 0 {
			t.Fatalf("round %d: an incident is open and its triage's rulesets are not held", round)
		}
		h.eng.setSlow(false)
		for i := 0; i < 15*12 && len(h.d.tracker.OpenKeys()) > 0; i++ {
			h.ticks(t, 1)
		}
		if len(h.d.tracker.OpenKeys()) > 0 {
			t.Fatalf("round %d: the incident did not resolve", round)
		}
		if got := maps.Held(); len(got) > 0 {
			t.Errorf("round %d: no incident open and the daemon still holds compiled rulesets %v", round, got)
		}
	}
}
