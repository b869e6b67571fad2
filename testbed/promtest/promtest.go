// Package promtest starts the real Prometheus server (Debian's package) for
// integration tests: on a free loopback port, scraping the given targets
// every second, with its data in the test's temporary directory.
package promtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/whyslow/whyslow/testbed/testgc"
)

// Bin is where Debian's prometheus package installs the server.
const Bin = "/usr/bin/prometheus"

// SkipUnlessAvailable skips the test under -short or when Prometheus is not
// installed.
func SkipUnlessAvailable(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping integration test in -short mode")
	}
	if _, err := os.Stat(Bin); err != nil {
		t.Skipf("skipping: %s not installed (apt-get install prometheus, or make test-deps)", Bin)
	}
}

// Start runs Prometheus scraping targets (host:port, job "engine") every
// second and returns its base URL once /-/ready answers (at most 2 min, a hang guard). The
// server is killed when the test ends; its log is shown if the test failed.
func Start(ctx context.Context, t testing.TB, targets []string) string {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1m
scrape_configs:
  - job_name: engine
    static_configs:
      - targets: ['%s']
`, strings.Join(targets, "', '"))
	return start(ctx, t, dir, cfg, filepath.Join(dir, "data"))
}

// StartWithData runs Prometheus over an existing TSDB directory (blocks
// backfilled with promtool), scraping nothing, and returns its base URL.
// Retention is 100 years: backfilled blocks of any age stay queryable.
func StartWithData(ctx context.Context, t testing.TB, dataDir string) string {
	t.Helper()
	return start(ctx, t, t.TempDir(), "global:\n  evaluation_interval: 1m\n", dataDir,
		"--storage.tsdb.retention.time=100y")
}

func start(ctx context.Context, t testing.TB, dir, cfg, dataDir string, extra ...string) string {
	t.Helper()
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := FreeLoopbackAddr(t)
	return StartServer(ctx, t, "prometheus", addr, Bin, append([]string{
		"--config.file=" + cfgPath,
		"--storage.tsdb.path=" + dataDir,
		"--web.listen-address=" + addr,
		"--log.level=warn",
	}, extra...)...)
}

// StartServer runs bin with args (a Prometheus-style server listening on
// addr), kills it when the test ends, and returns http://addr once its
// /-/ready answers 200 (at most 2 min, a hang guard). Its log is shown if the test
// failed or it exits early.
func StartServer(ctx context.Context, t testing.TB, name, addr, bin string, args ...string) string {
	t.Helper()
	logs := &syncBuffer{}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.Env = testgc.ChildEnv()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("%s log:\n%s", name, logs.String())
		}
	})
	base := "http://" + addr
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(2 * time.Minute) // hang guard; ends once ready
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("%s exited: %v\n%s", name, err, logs.String())
		case <-ctx.Done():
			t.Fatalf("timed out starting %s", name)
		case <-time.After(100 * time.Millisecond):
		}
		resp, err := client.Get(base + "/-/ready")
		if err != nil {
			continue
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return base
		}
	}
	t.Fatalf("%s not ready after 2 min:\n%s", name, logs.String())
	return ""
}

// WaitScraped waits (at most 2 min, a hang guard) until Prometheus reports n targets up:
// Prometheus 2.42 applies its scrape config a few seconds after /-/ready.
func WaitScraped(ctx context.Context, t testing.TB, base string, n int) {
	t.Helper()
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(2 * time.Minute) // hang guard; ends once scraped
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			t.Fatal("timed out waiting for prometheus to scrape")
		case <-time.After(200 * time.Millisecond):
		}
		resp, err := client.Get(base + "/api/v1/query?query=count(up%3D%3D1)")
		if err != nil {
			continue
		}
		var body struct {
			Data struct {
				Result []struct {
					Value [2]any `json:"value"`
				} `json:"result"`
			} `json:"data"`
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if err == nil && len(body.Data.Result) == 1 && body.Data.Result[0].Value[1] == fmt.Sprint(n) {
			return
		}
	}
	t.Fatalf("prometheus did not scrape all %d targets within 2 min", n)
}

// FreeLoopbackAddr returns a loopback address whose port was free a moment ago.
func FreeLoopbackAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// syncBuffer collects a child's output; the child writes while a failing
// test may read.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
