package bundle

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// TestNoTextparseNew keeps the protobuf and OpenMetrics 2.0 exposition
// parsers out of the binary: textparse.New can return either, so calling
// it links both (the binary was 279 KB larger, all of it file-backed pages
// of the sidecar, issue 27), while this package reads only text and
// OpenMetrics 1.0 and calls their constructors (Format.parser).
func TestNoTextparseNew(t *testing.T) {
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "textparse" && sel.Sel.Name == "New" {
				t.Errorf("%s calls textparse.New; use Format.parser", fset.Position(sel.Pos()))
			}
			return true
		})
	}
}
