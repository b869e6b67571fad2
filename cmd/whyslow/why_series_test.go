package main

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWhyBundleSeriesLimit is finding 2 of issue 26: a bundle of many
// series, small when gzipped, was loaded whole (4.1 GB for a million). Past
// --max-series the load stops with exit 2 and an error that names the flag.
func TestWhyBundleSeriesLimit(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "metrics.om.gz"))
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	w := bufio.NewWriter(zw)
	for i := range 5000 {
		fmt.Fprintf(w, "vllm:num_requests_running{pod=\"vllm-%d\",model_name=\"llama\"} 1 1700000000\n", i)
	}
	fmt.Fprintln(w, "# EOF")
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, "why", "--bundle", dir, "--max-series", "1000")
	if r.code != exitFailed {
		t.Fatalf("exit %d, want %d: %s", r.code, exitFailed, r.stderr)
	}
	for _, want := range []string{"metrics.om.gz:1001:1:", "more than 1000 series", "--max-series 2000 raises the limit"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	// Within the limit the same bundle loads (and is triaged: too little
	// data, which is exit 2 for another reason).
	r = runCLI(t, "why", "--bundle", dir, "--max-series", "0")
	if strings.Contains(r.stderr, "series") && strings.Contains(r.stderr, "max-series") {
		t.Errorf("--max-series 0 still limits:\n%s", r.stderr)
	}
}
