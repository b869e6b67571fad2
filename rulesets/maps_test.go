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
