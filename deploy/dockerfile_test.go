package deploy

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

const dockerfile = "Dockerfile"

// The image has GPU counters by default (issue 25 item 10: the default was
// CGO_ENABLED=0, no NVML, while the sidecar manifest asks for the GPU): a
// cgo build on a base with glibc from the build stage's Debian release, and
// the NVML deprecation warnings silenced as in the Makefile.
func TestDockerfileBuildsNVML(t *testing.T) {
	b, err := os.ReadFile(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	arg := func(name string) string {
		m := regexp.MustCompile(`(?m)^ARG ` + name + `=(\S+)$`).FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("no ARG %s with a default", name)
		}
		return m[1]
	}
	if v := arg("CGO_ENABLED"); v != "1" {
		t.Errorf("ARG CGO_ENABLED=%s: the default image has no NVML", v)
	}
	base := arg("BASE")
	if strings.Contains(base, "static") || !strings.Contains(base, "distroless/base-") {
		t.Errorf("BASE=%s: a cgo binary needs a base with glibc (distroless base)", base)
	}
	// Debian codename of the build stage ↔ distroless's debianNN.
	releases := map[string]string{"bookworm": "debian12", "trixie": "debian13"}
	from := regexp.MustCompile(`(?m)^FROM golang:\S+-(\w+) AS build$`).FindStringSubmatch(text)
	if from == nil {
		t.Fatal("the build stage does not name its Debian release (FROM golang:X-<codename> AS build)")
	}
	if want := releases[from[1]]; want == "" || !strings.HasSuffix(strings.Split(base, ":")[0], want) {
		t.Errorf("build stage on %s, base %s: glibc versions differ", from[1], base)
	}
	if !regexp.MustCompile(`(?m)^ENV CGO_CFLAGS=".*-Wno-deprecated-declarations.*"$`).MatchString(text) {
		t.Error("the build stage does not silence go-nvml's deprecation warnings (CGO_CFLAGS)")
	}
	if !regexp.MustCompile(`(?m)^RUN CGO_ENABLED=\$\{CGO_ENABLED\} go build .*\./cmd/whyslow$`).MatchString(text) {
		t.Error("the go build does not use ARG CGO_ENABLED")
	}
}
