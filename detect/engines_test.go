package detect

import (
	"os"
	"testing"
)

// shipped are the shipped maps' detector sections, in the engine list's
// order (detect may not import rulesets, which hands them to the daemon).
func shipped(t testing.TB) []Engine {
	t.Helper()
	out, err := ReadEngines(os.DirFS("../rulesets"), []string{"vllm", "sglang", "trtllm"})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
