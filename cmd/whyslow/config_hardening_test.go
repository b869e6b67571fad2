package main

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/whyslow/whyslow/testbed/secrettest"
)

// aliasBomb is a config of a few kB whose aliases expand, for the key
// checker, to millions of nodes: receivers × routes × match entries.
func aliasBomb() string {
	var b strings.Builder
	b.WriteString("receivers:\n  - &r\n    name: x\n    slack:\n      token: xoxb-1\n      channel: \"#c\"\n      routes:\n        - &rt\n          channel: \"#d\"\n          match: {")
	for i := 0; i < 400; i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "k%d: v", i)
	}
	b.WriteString("}\n")
	for i := 0; i < 120; i++ {
		b.WriteString("        - *rt\n")
	}
	for i := 0; i < 120; i++ {
		b.WriteString("  - *r\n")
	}
	return b.String()
}

// configBombAllocLimit bounds what parsing aliasBomb may allocate.
const configBombAllocLimit = 256 << 20

// TestConfigAliasExpansionBounded is finding 9 of issue 14: an 8.4 kB
// config took 30.8 s and 1.4 GB in `check config` (and at serve and on
// SIGHUP): the key checker followed nested aliases without a bound.
func TestConfigAliasExpansionBounded(t *testing.T) {
	src := aliasBomb()
	if len(src) > 10<<10 {
		t.Fatalf("bomb is %d bytes; keep it small", len(src))
	}
	// The bound is on work, not wall time: the unbounded checker allocated
	// 1.4 GB expanding this config; the bounded one stops at about 45 MB (2 GB without the bound).
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := parseConfig("bomb.yml", []byte(src), envMap(nil))
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > configBombAllocLimit {
		t.Errorf("parsing the %d-byte bomb allocated %d MB, want under %d MB", len(src), alloc>>20, configBombAllocLimit>>20)
	}
	if err == nil || !strings.Contains(err.Error(), "alias") {
		t.Fatalf("err = %v", err)
	}
	// Aliases that share a block are fine.
	ok := "receivers:\n  - name: a\n    webhook: &hook {url: \"https://h.example.com/x\", timeout: 5s}\n  - name: b\n    webhook: *hook\n"
	if _, err := parseConfig("ok.yml", []byte(ok), envMap(nil)); err != nil {
		t.Fatalf("a shared block was refused: %v", err)
	}
}

// TestConfigTypeErrorHidesValue is finding 6 of issue 14 (its last part):
// a YAML type error quoted the first characters of the value, a secret's
// when a secret landed on the wrong key.
func TestConfigTypeErrorHidesValue(t *testing.T) {
	tok := secrettest.Secret("xoxb-1234")
	sc := secrettest.New(t, tok)
	env := envMap(map[string]string{"TOKEN": tok})
	for _, src := range []string{
		"api:\n  max_body_bytes: ${TOKEN}\n",
		"scrape_interval: ${TOKEN}\n",
		"gpu:\n  enabled: ${TOKEN}\n",
	} {
		_, err := parseConfig("w.yml", []byte(src), env)
		if err == nil || !strings.Contains(err.Error(), "w.yml:") {
			t.Fatalf("%q: err = %v", src, err)
		}
		sc.Error(src, err)
	}
}
