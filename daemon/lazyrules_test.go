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
