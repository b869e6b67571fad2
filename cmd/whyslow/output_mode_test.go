package main

import (
	"os"
	"path/filepath"
	"testing"
)

// Pages and charts are files people share: mode 0644 like a shell redirect
// makes, not CreateTemp's 0600 (issue 25, item 11), also when they replace
// an existing file.
func TestWriteAtomicMode(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ what, name, pattern string }{
		{"page", "v.html", ".verdict-*.html"},
		{"chart", "c.png", ".chart-*.png"},
	} {
		path := filepath.Join(dir, c.name)
		for i := 0; i < 2; i++ { // create, then replace
			if err := writeAtomic(c.what, path, c.pattern, []byte("x")); err != nil {
				t.Fatal(err)
			}
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm() != 0o644 {
				t.Errorf("%s %s (write %d): mode %v, want -rw-r--r--", c.what, c.name, i+1, st.Mode().Perm())
			}
		}
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}
