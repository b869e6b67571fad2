# whyslow: build, test and demo targets. `make test` is what CI runs (.ci/run).
GO ?= go
GOTESTFLAGS ?= -count=1 -timeout 15m

.PHONY: all build demo test test-deps vet fmt bench fuzz clean

all: build

build:
	$(GO) build -o bin/whyslow ./cmd/whyslow

demo:
	$(GO) run ./cmd/whyslow demo

# test-deps installs what the integration tests start: Debian's prometheus,
# promtool and alertmanager. Needs root (CI runs as root) and the Debian mirror.
test-deps:
	@if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null || ! command -v prometheus-alertmanager >/dev/null; then \
		echo "installing prometheus and prometheus-alertmanager (Debian packages)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus prometheus-alertmanager >/dev/null; \
	fi
	@# The packages start services on :9090/:9093 we do not want; tests start their own.
	@-systemctl stop prometheus prometheus-alertmanager prometheus-node-exporter >/dev/null 2>&1 || true

test: test-deps
	$(GO) vet ./...
	$(GO) test $(GOTESTFLAGS) ./...

vet:
	$(GO) vet ./...

fmt:
	gofmt -l -w .

bench:
	$(GO) test -run '^$$' -bench . -benchtime 2x ./...

clean:
	rm -rf bin
