package rulesets

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestMaps: the maps value lists the shipped maps, then a user's; a user's
// file over a shipped engine takes that map's place; every section reader
// (detector files, series, chart, rulesets) sees the same list; an engine
// no map names is an error that names the maps loaded.
func TestMaps(t *testing.T) {
	shipped := Shipped()
	if !slices.Equal(shipped.Engines(), Engines) {
		t.Fatalf("Shipped engines %v, want %v", shipped.Engines(), Engines)
	}
	b, _ := FS.ReadFile("vllm.yaml")
	mine := strings.Replace(strings.Replace(string(b), "engine: vllm", "engine: mine", 1), "\norder:", "\n# order:", 1)
	path := filepath.Join(t.TempDir(), "mine.yaml")
	if err := os.WriteFile(path, []byte(mine), 0o644); err != nil {
		t.Fatal(err)
	}
	rs, err := Load("", path)
	if err != nil {
		t.Fatal(err)
	}
	extra, err := LoadAll() // no user files: the shipped maps themselves
	if err != nil {
		t.Fatal(err)
	}
	m := shipped.WithUser(append(extra, rs)...)
	want := append(slices.Clone(Engines), "mine")
	if !slices.Equal(m.Engines(), want) || !m.Knows("mine") || shipped.Knows("mine") {
		t.Fatalf("WithUser engines %v, want %v (and Shipped unchanged)", m.Engines(), want)
	}
	var files []string
	for name, data := range m.Files() {
		if len(data) == 0 {
			t.Errorf("%s: empty map", name)
		}
		files = append(files, name)
	}
	series, charts, rss := m.Series(), m.Chart(), m.Rulesets()
	if !slices.Equal(files, want) || len(series) != len(want) || len(charts) != len(want) || len(rss) != len(want) {
		t.Fatalf("files %v, %d series, %d charts, %d rulesets; want %v each", files, len(series), len(charts), len(rss), want)
	}
	if last := len(want) - 1; series[last].Engine != "mine" || charts[last].Engine != "mine" || rss[last] != rs || len(charts[last].TTFT) == 0 {
		t.Errorf("the user's map: series %+v, chart %+v", series[last], charts[last])
	}
	err = m.Unknown("other")
	if err == nil || !strings.Contains(err.Error(), `"other"`) || !strings.Contains(err.Error(), "mine ("+path+")") || !strings.Contains(err.Error(), "--ruleset FILE") {
		t.Errorf("Unknown: %v", err)
	}
}

// Releasable maps compile the shipped rulesets into a cache of their own,
// which Release empties; the process-wide cache is not filled.
func TestReleasableMapsHoldTheirRulesetsUntilRelease(t *testing.T) {
	m := Shipped().Releasable()
	if err := m.Check("vllm"); err != nil {
		t.Fatal(err)
	}
	if err := m.Check("nosuchengine"); err == nil {
		t.Error("Check(nosuchengine): no error")
	}
	if got := m.Held(); len(got) > 0 {
		t.Fatalf("Check compiled %v", got)
	}
	global := Compiled()
	first, err := m.For("vllm")
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Held(); !slices.Equal(got, []string{"vllm"}) {
		t.Fatalf("held after For(vllm) = %v, want [vllm]", got)
	}
	if again, _ := m.For("vllm"); again[0] != first[0] {
		t.Error("a second For(vllm) compiled again while held")
	}
	if got := Compiled(); !slices.Equal(got, global) {
		t.Errorf("the process-wide cache went from %v to %v", global, got)
	}
	if got := m.Release(); !slices.Equal(got, []string{"vllm"}) {
		t.Errorf("Release() = %v, want [vllm]", got)
	}
	if got := m.Held(); len(got) > 0 {
		t.Fatalf("held after Release = %v", got)
	}
	after, err := m.For("vllm")
	if err != nil {
		t.Fatal(err)
	}
	if after[0] == first[0] {
		t.Error("For(vllm) after Release returned the released ruleset")
	}
	if after[0].Engine != "vllm" || len(after[0].Steps) != len(first[0].Steps) || !slices.Equal(after[0].Files, first[0].Files) {
		t.Errorf("recompiled ruleset differs: engine %q, %d steps (was %d)", after[0].Engine, len(after[0].Steps), len(first[0].Steps))
	}
	if got := Shipped().Release(); got != nil {
		t.Errorf("Release of maps that are not Releasable = %v", got)
	}
}
