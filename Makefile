# whyslow: build, test and demo targets. `make test` is what CI runs (.ci/run).
GO ?= go
GOTESTFLAGS ?= -count=1 -timeout 40m
# TESTBUILDFLAGS go to every `go test` of `make test`: test binaries are
# linked without DWARF (-w: a third less link time and disk, stack traces
# keep their file:line), and vet, run once over the module first, is not
# run again per package (-vet=off).
TESTBUILDFLAGS ?= -ldflags=-w

.PHONY: all build check-quiet-build demo test test-main test-accuracy test-nocgo test-short test-deps vet fmt bench fuzz fuzz-smoke loadtest clean

# FUZZTIME is how long `make fuzz` runs each fuzz target; FUZZ_SMOKE_TIME
# how much the smoke run of `make test` (CI) does: a few thousand inputs
# per target over its committed corpus (testdata/fuzz/FuzzX), so a crasher
# fails CI. The smoke budget is a count, not a duration: Go's fuzz
# coordinator can report "context deadline exceeded" without any failing
# input when a duration runs out while a worker is mid-call on a loaded
# machine (golang/go#75804, fixed in Go 1.27); a count has no deadline.
FUZZTIME ?= 30s
FUZZ_SMOKE_TIME ?= 5000x

# The NVML bindings (github.com/NVIDIA/go-nvml) wrap every function of
# nvml.h, some marked deprecated there: gcc prints ~150 lines of
# -Wdeprecated-declarations warnings on a cold build. Keep Go's default
# CGO_CFLAGS (-O2 -g) and silence that one warning; deploy/Dockerfile sets
# the same.
CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations
export CGO_CFLAGS

all: build

build:
	$(GO) build -o bin/whyslow ./cmd/whyslow

# check-quiet-build fails when the C compiler prints a warning while
# compiling the packages of whyslow that have C code (the cgo packages:
# go-nvml, net, os/user, runtime/cgo): what a first `make build` would
# print. It builds them as `make build` does first; on a cold cache that
# compiles them, C included, and the later steps reuse it (`make test` runs
# this check before anything else builds). Where that build came from the
# cache (nothing compiled, nothing to check) it compiles them again with
# a define no source reads, new on each run, in CGO_CFLAGS: the C flags
# are part of the cache key of cgo packages only, so those are compiled
# again, C included, while the Go packages they import come from the
# build cache (an empty cache of its own rebuilt the standard library too:
# twice the CPU). `go build -v` names what it compiled: every cgo package
# must be among them, or the check proved nothing.
check-quiet-build:
	@set -e; \
	pkgs=$$($(GO) list -deps -f '{{if .CgoFiles}}{{.ImportPath}}{{end}}' ./cmd/whyslow); \
	if [ -z "$$pkgs" ]; then echo "check-quiet-build: no cgo package (CGO_ENABLED=0): nothing to check"; exit 0; fi; \
	compiled() { for p in $$pkgs; do echo "$$out" | grep -qx "$$p" || return 1; done; }; \
	how="compiled"; \
	out=$$($(GO) build -v $$pkgs 2>&1) || { echo "$$out"; exit 1; }; \
	if ! compiled; then \
		how="compiled again"; \
		out=$$(CGO_CFLAGS="$$CGO_CFLAGS -DWHYSLOW_QUIET_BUILD_CHECK=$$(date +%s%N)" $(GO) build -v $$pkgs 2>&1) || { echo "$$out"; exit 1; }; \
	fi; \
	for p in $$pkgs; do \
		if ! echo "$$out" | grep -qx "$$p"; then echo "$$out"; echo "check-quiet-build: $$p was not compiled again (cached): no C compiler output to check"; exit 1; fi; \
	done; \
	if echo "$$out" | grep -q 'warning:'; then \
		echo "$$out"; echo "check-quiet-build: $$(echo "$$out" | grep -c 'warning:') C warnings on a fresh compile (CGO_CFLAGS=$$CGO_CFLAGS)"; exit 1; \
	fi; \
	echo "check-quiet-build: $$(echo $$pkgs | wc -w) cgo packages $$how, no C warning"

demo:
	$(GO) run ./cmd/whyslow demo

# test-deps installs what the integration tests start: Debian's prometheus,
# promtool and alertmanager, and chromium (the pages' browser test drives it
# headless). Needs root (CI runs as root) and the Debian mirror.
test-deps:
	@if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null || ! command -v prometheus-alertmanager >/dev/null || ! command -v chromium >/dev/null; then \
		echo "installing prometheus, prometheus-alertmanager and chromium (Debian packages)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus prometheus-alertmanager chromium >/dev/null; \
	fi
	@# The packages start services on :9090/:9093 we do not want; tests start their own.
	@-systemctl stop prometheus prometheus-alertmanager prometheus-node-exporter >/dev/null 2>&1 || true

# `make test` runs every test of the module in steps, each with its own
# -timeout, so that one heavy run cannot eat another package's budget on a
# busy 2-core machine:
#   check-quiet-build  compiling the C parts prints no warning (first: on a
#                  cold cache its compile is the one the later steps reuse)
#   vet            go vet ./...
#   test-main      go test ./... less the packages with a step of their own
#   test-accuracy  the accuracy harness (./testbed/accuracy): minutes of CPU
#   test-nocgo     a second, CGO_ENABLED=0 build of whyslow and what it must
#                  do without NVML (TestNoCgoBinary, gated by WHYSLOW_NOCGO_TEST)
#   fuzz-smoke     a few seconds of each fuzz target over its corpus
# The timeouts only guard against hangs; no test asserts wall-clock speed.
# cmd/whyslow takes 7–10 min of a busy 2-core machine: 40m leaves it 4×.
ACCURACY_PKG = github.com/whyslow/whyslow/testbed/accuracy
ACCURACY_TIMEOUT ?= 60m
NOCGO_TIMEOUT ?= 30m

test: test-deps
	$(MAKE) check-quiet-build
	$(GO) vet ./...
	$(MAKE) test-main TESTBUILDFLAGS='$(TESTBUILDFLAGS) -vet=off'
	$(MAKE) test-accuracy TESTBUILDFLAGS='$(TESTBUILDFLAGS) -vet=off'
	$(MAKE) test-nocgo TESTBUILDFLAGS='$(TESTBUILDFLAGS) -vet=off'
	$(MAKE) fuzz-smoke

# test-main: every package but those run by test-accuracy (the list is
# computed, so a new package is in it without a Makefile change).
test-main:
	@set -e; all=$$($(GO) list ./...); \
	pkgs=$$(echo "$$all" | grep -vx '$(ACCURACY_PKG)'); \
	if [ -z "$$pkgs" ] || [ "$$pkgs" = "$$all" ]; then echo "test-main: go list ./... lacks $(ACCURACY_PKG) or found nothing"; exit 1; fi; \
	echo "$(GO) test $(GOTESTFLAGS) $(TESTBUILDFLAGS) <go list ./... less $(ACCURACY_PKG)>"; \
	$(GO) test $(GOTESTFLAGS) $(TESTBUILDFLAGS) $$pkgs

test-accuracy:
	$(GO) test -count=1 -timeout $(ACCURACY_TIMEOUT) $(TESTBUILDFLAGS) ./testbed/accuracy

test-nocgo:
	WHYSLOW_NOCGO_TEST=1 $(GO) test -count=1 -timeout $(NOCGO_TIMEOUT) $(TESTBUILDFLAGS) -run '^TestNoCgoBinary$$' -v ./cmd/whyslow

# test-short is the quick loop while editing: every package's tests with
# -short (slow integration and accuracy runs skip themselves), no vet, no
# fuzzing, no Debian packages. Under 3 minutes on a 2-core machine.
test-short:
	$(GO) test -short $(GOTESTFLAGS) ./...

# fuzz runs every fuzz target of the module, one at a time, for FUZZTIME
# each; a failure stops it (the crasher is written to testdata/fuzz/).
fuzz:
	@set -e; for f in $$(grep -rl --include='*_test.go' '^func Fuzz' . | sort); do \
		dir=$$(dirname $$f); \
		for t in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$f); do \
			echo "fuzz $$dir $$t for $(FUZZTIME)"; \
			$(GO) test -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 10s $$dir; \
		done; \
	done

# fuzz-smoke builds one fuzzing test binary per package (the module's own
# packages instrumented for coverage, as `go test -fuzz` would; the
# dependencies not, which halves the build) and runs each target from it in
# the package's directory, so a crasher lands in its testdata/fuzz/.
FUZZ_INSTRUMENT = -gcflags='$(shell $(GO) list -m)/...=-d=libfuzzer'
fuzz-smoke:
	@set -e; bins=$$(mktemp -d); trap 'rm -rf "$$bins"' EXIT; \
	for dir in $$(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u); do \
		bin=$$bins/$$(echo $$dir | tr / _).test; \
		$(GO) test -c -o $$bin -ldflags=-w $(FUZZ_INSTRUMENT) $$dir; \
		for t in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$dir/*_test.go); do \
			echo "fuzz $$dir $$t for $(FUZZ_SMOKE_TIME)"; \
			(cd $$dir && $$bin -test.run '^$$' -test.fuzz "^$$t\$$" -test.fuzztime $(FUZZ_SMOKE_TIME) \
				-test.fuzzminimizetime 10s -test.fuzzcachedir $$bins/cache/$$t); \
		done; \
	done

# loadtest runs the daemon's bounded load test (about 90 s): stalled OTLP
# uploads, exports and oversized Alertmanager webhooks against `whyslow serve`.
loadtest:
	WHYSLOW_LOADTEST=1 $(GO) test -count=1 -run TestLoad -v -timeout 10m ./daemon/

vet:
	$(GO) vet ./...

fmt:
	gofmt -l -w .

bench:
	$(GO) test -run '^$$' -bench . -benchtime 2x ./...

clean:
	rm -rf bin
