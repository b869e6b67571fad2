package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWhyHTML: --html writes the verdict page of a bundle as one file with
// its curves (SVG), the same causes as the text, and nothing it would have
// to fetch; a directory that does not exist fails before any triage.
func TestWhyHTML(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kv.html")
	r := runCLI(t, "why", "--bundle", filepath.Join(incidentsDir, "kv_pressure"), "--html", path)
	if r.code != exitCause {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	for _, want := range []string{"<!doctype html>", `http-equiv="Content-Security-Policy"`, "Causes, most likely first",
		"kv_cache_pressure", `class="line line-incident"`, "Where the time went", "A saved page"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	for _, bad := range []string{"<script", " src=", `href="http`, "<form", "No curves"} {
		if strings.Contains(page, bad) {
			t.Errorf("page has %q", bad)
		}
	}
	if !strings.Contains(r.stdout, "kv_cache_pressure") {
		t.Errorf("text output still goes to stdout; got:\n%s", r.stdout)
	}

	r = runCLI(t, "why", "--bundle", filepath.Join(incidentsDir, "kv_pressure"), "--html", filepath.Join(t.TempDir(), "no", "x.html"))
	if r.code != exitFailed || !strings.Contains(r.stderr, "does not exist") {
		t.Errorf("missing directory: exit %d, %s", r.code, r.stderr)
	}
}
