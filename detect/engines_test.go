package detect

import (
	"os"
	"testing"
)

// shipped are the shipped maps' detector sections, in the engine list's
// order (detect may not import rulesets, which hands them to the daemon).
func shipped(t testing.TB) []Engine {
	t.Helper()
	var out []Engine
	for _, name := range []string{"vllm", "sglang", "trtllm"} {
		b, err := os.ReadFile("../rulesets/" + name + ".yaml")
		if err != nil {
			t.Fatal(err)
		}
		e, err := ParseEngine(name, b)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}
