# whyslow: build, test and demo targets. `make test` is what CI runs (.ci/run).
GO ?= go
GOTESTFLAGS ?= -count=1 -timeout 15m

.PHONY: all build demo test test-short test-deps vet fmt bench fuzz fuzz-smoke loadtest clean

# FUZZTIME is how long `make fuzz` runs each fuzz target; FUZZ_SMOKE_TIME
# how long the smoke run of `make test` (CI) does: a few seconds over each
# target's committed corpus (testdata/fuzz/FuzzX), so a crasher fails CI.
FUZZTIME ?= 30s
FUZZ_SMOKE_TIME ?= 3s

all: build

build:
	$(GO) build -o bin/whyslow ./cmd/whyslow

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

test: test-deps
	$(GO) vet ./...
	$(GO) test $(GOTESTFLAGS) ./...
	$(MAKE) fuzz-smoke

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

fuzz-smoke:
	$(MAKE) fuzz FUZZTIME=$(FUZZ_SMOKE_TIME)

# loadtest runs the daemon's bounded load test (about 90 s): stalled OTLP
# uploads, exports and oversized Alertmanager webhooks against `whyslow serve`.
loadtest:
	WHYSLOW_LOADTEST=1 $(GO) test -count=1 -run TestLoad -v -timeout 10m ./internal/daemon/

vet:
	$(GO) vet ./...

fmt:
	gofmt -l -w .

bench:
	$(GO) test -run '^$$' -bench . -benchtime 2x ./...

clean:
	rm -rf bin
