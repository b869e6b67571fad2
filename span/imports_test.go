package span

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/whyslow/whyslow"

// imports returns the import paths of the .go files in dir (test files too
// when tests is set), whatever their build tags, mapped to the file that
// imports them.
func imports(t *testing.T, dir string, tests bool) map[string]string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	fset := token.NewFileSet()
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || !tests && strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, is := range f.Imports {
			p, err := strconv.Unquote(is.Path.Value)
			if err != nil {
				t.Fatal(err)
			}
			out[p] = filepath.Join(dir, name)
		}
	}
	return out
}

// analysis are the packages of the analysis: the diagnosis, the detector,
// incidents, the request model and the verdict they produce.
var analysis = []string{"diagnose", "detect", "incident", "requests", "verdict"}

// TestCollectorsDoNotImportTriage: no package under collectors/, nor its
// tests, nor anything of this module they import, depends on the analysis.
// Collectors produce span data (this package); the analysis is the
// diagnosis's.
func TestCollectorsDoNotImportTriage(t *testing.T) {
	root := ".."
	var queue []string // directories to read, relative to root
	err := filepath.WalkDir(filepath.Join(root, "collectors"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "testdata" {
			return filepath.SkipDir
		}
		if d.IsDir() {
			rel, _ := filepath.Rel(root, p)
			queue = append(queue, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	collectors := len(queue)
	why := map[string]string{} // directory -> how it was reached
	seen := map[string]bool{}
	for _, d := range queue {
		seen[d] = true
		why[d] = d
	}
	for i := 0; i < len(queue); i++ {
		dir := queue[i]
		for p, file := range imports(t, filepath.Join(root, dir), i < collectors) {
			if slices.ContainsFunc(analysis, func(a string) bool { return p == module+"/"+a || strings.HasPrefix(p, module+"/"+a+"/") }) {
				t.Errorf("%s imports %s (via %s)", file, p, why[dir])
				continue
			}
			if !strings.HasPrefix(p, module+"/") {
				continue
			}
			dep := filepath.FromSlash(strings.TrimPrefix(p, module+"/"))
			if !seen[dep] {
				seen[dep] = true
				why[dep] = why[dir] + " -> " + p
				queue = append(queue, dep)
			}
		}
	}
	if collectors < 8 {
		t.Errorf("found %d collector directories; is the test run from span/?", collectors)
	}
}

// TestNoDependencies: span imports only the standard library.
func TestNoDependencies(t *testing.T) {
	for p, file := range imports(t, ".", false) {
		if first, _, _ := strings.Cut(p, "/"); strings.Contains(first, ".") {
			t.Errorf("%s imports %s: span is the standard library only", file, p)
		}
	}
}

// TestLayers: the analysis packages import only the ones below them:
// verdict, span and query nothing of the module; requests the data and
// query; detect query and verdict; incident detect and verdict; the
// diagnosis neither the detector nor incidents; whatif the diagnosis and
// what it reads.
func TestLayers(t *testing.T) {
	allowed := map[string][]string{
		"verdict":  {},
		"query":    {},
		"span":     {},
		"requests": {"span", "verdict", "query"},
		"detect":   {"query", "verdict"},
		"incident": {"detect", "verdict"},
		"diagnose": {"query", "requests", "rules", "span", "verdict"},
		// the what-if model reads a triage; no engine model, no collector
		"whatif": {"diagnose", "query", "rules", "verdict"},
	}
	for dir, ok := range allowed {
		for p, file := range imports(t, filepath.Join("..", dir), false) {
			if rest, found := strings.CutPrefix(p, module+"/"); found && !slices.Contains(ok, rest) {
				t.Errorf("%s imports %s: %s may import only %v of the module", file, p, dir, ok)
			}
		}
	}
}
