package rulesets

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/whyslow/whyslow/rules"
)

var updateRendered = flag.Bool("update", false, "rewrite testdata/rendered/*.txt from the shipped maps")

// renderedScopes are the scopes each signal is rendered for: no selector
// (no GPU join), a pod scope and a namespaced one (the join on namespace
// and pod), each for the scope and per target.
var renderedScopes = []struct {
	selector string
	targets  []string
}{
	{"", nil},
	{`model_name="m"`, nil},
	{`namespace="ns", model_name="m"`, []string{"pod"}},
}

// TestRenderedQueries pins the PromQL every shipped map renders, for every
// shape: what the shared blocks (gpu.yaml) instantiate per engine must be
// what each map wrote out before. After an intended change to a map's PromQL,
// re-capture with `go test ./rulesets -run TestRenderedQueries -update`.
func TestRenderedQueries(t *testing.T) {
	rss, err := All()
	if err != nil {
		t.Fatal(err)
	}
	for _, rs := range rss {
		var b strings.Builder
		forms := append([]*rules.Ruleset{rs}, rs.Shapes...)
		for i, form := range forms {
			name := "map"
			if i > 0 {
				name = "shape " + form.Shape().Name
			}
			for _, s := range form.Signals {
				for _, sc := range renderedScopes {
					q, err := s.Render(sc.selector, "5m", sc.targets)
					if err != nil {
						q = "error: " + err.Error()
					}
					fmt.Fprintf(&b, "%s %s {%s} %v\n%s\n\n", name, s.Name, sc.selector, sc.targets, q)
				}
			}
		}
		path := filepath.Join("testdata", "rendered", rs.Engine+".txt")
		if *updateRendered {
			if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (capture with -update)", err)
		}
		if got := b.String(); got != string(want) {
			t.Errorf("%s: rendered PromQL differs from %s:\n%s", rs.Engine, path, firstEntryDiff(string(want), got))
		}
	}
}

// firstEntryDiff shows the first entry (a header line and its PromQL) that
// differs between two captures.
func firstEntryDiff(want, got string) string {
	w, g := strings.Split(want, "\n\n"), strings.Split(got, "\n\n")
	w, g = append(w, "(none)"), append(g, "(none)")
	i := 0
	for i < len(w)-1 && i < len(g)-1 && w[i] == g[i] {
		i++
	}
	return "want " + w[i] + "\n got " + g[i]
}
