package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestNoCgoBinary builds whyslow with CGO_ENABLED=0 and checks that each
// command runs and reports the GPU collector unavailable instead of failing.
// Add a row per command that should degrade without NVML (why, serve, ...).
//
// The second full build is minutes of CPU on a small machine, so the test
// runs only with WHYSLOW_NOCGO_TEST=1: `make test` runs it as a step of its
// own (make test-nocgo), with its own -timeout, not as part of go test ./...
func TestNoCgoBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary; skipped with -short")
	}
	if os.Getenv("WHYSLOW_NOCGO_TEST") != "1" {
		t.Skip("a second, CGO_ENABLED=0 build; set WHYSLOW_NOCGO_TEST=1 (make test-nocgo runs it)")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool in PATH")
	}
	bin := filepath.Join(t.TempDir(), "whyslow")
	build := exec.Command(goBin, "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 go build: %v\n%s", err, out)
	}

	for _, tc := range []struct {
		name     string
		args     []string
		wantCode int
		wantOut  []string
	}{
		{
			name:     "gpu probe",
			args:     []string{"gpu", "probe"},
			wantCode: exitOK,
			wantOut: []string{
				"no NVML: NVML not available in this build (CGO_ENABLED=0)",
				`verdicts list "no GPU counters" as a data gap`,
			},
		},
		{
			name:     "gpu probe json",
			args:     []string{"gpu", "probe", "--json"},
			wantCode: exitOK,
			wantOut: []string{
				`"nvml": false`,
				`"built_with_nvml": false`,
				`"reason": "NVML not available in this build (CGO_ENABLED=0)"`,
			},
		},
		{
			// The bundle carries its own GPU series: nothing is missing.
			name:     "why bundle",
			args:     []string{"why", "--bundle", "../../testdata/incidents/healthy"},
			wantCode: exitOK,
			wantOut:  []string{"HEALTHY: no anomaly against the baseline", "GPU clocks are throttled [gpu_throttling]"},
		},
		{
			name:     "why bundle json",
			args:     []string{"why", "--bundle", "../../testdata/incidents/healthy", "--output", "json"},
			wantCode: exitOK,
			wantOut:  []string{`"status": "healthy"`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, tc.args...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatalf("run: %v", err)
			}
			if code != tc.wantCode {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.wantCode, stdout.String(), stderr.String())
			}
			for _, w := range tc.wantOut {
				if !strings.Contains(stdout.String(), w) {
					t.Errorf("stdout lacks %q:\n%s", w, stdout.String())
				}
			}
		})
	}

	t.Run("serve", func(t *testing.T) { noCgoServe(t, bin) })
}

// noCgoServe starts the daemon from the CGO_ENABLED=0 binary on a free
// port, checks /healthz and that the missing NVML is logged (not fatal),
// and stops it with SIGTERM.
func noCgoServe(t *testing.T, bin string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a hang guard
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "serve", "--listen", "127.0.0.1:0", "--otlp-http", "", "--otlp-grpc", "",
		"--engine-url", "http://127.0.0.1:1/metrics")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		logs strings.Builder
	)
	addrc := make(chan string, 1)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			mu.Lock()
			logs.WriteString(line + "\n")
			mu.Unlock()
			if strings.Contains(line, "msg=Serving") {
				for _, f := range strings.Fields(line) {
					if a, ok := strings.CutPrefix(f, "listen="); ok {
						addrc <- a
					}
				}
			}
		}
	}()
	stop := func() int {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-scanned
		err := cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		return 0
	}
	var addr string
	select {
	case addr = <-addrc:
	case <-time.After(2 * time.Minute): // a hang guard
		stop()
		t.Fatalf("serve did not report its address:\n%s", logs.String())
	}
	client := &http.Client{Timeout: time.Minute} // a hang guard
	var status int
	for i := 0; i < 20 && status != http.StatusOK; i++ {
		resp, err := client.Get("http://" + addr + "/healthz")
		if err == nil {
			status = resp.StatusCode
			resp.Body.Close()
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Wait for the GPU state to be logged (counted in polls, not assumed
	// after a second of wall time: a busy machine may take longer).
	for i := 0; i < 1200; i++ {
		mu.Lock()
		logged := strings.Contains(logs.String(), "NVML not available in this build (CGO_ENABLED=0)")
		mu.Unlock()
		if logged {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	code := stop()
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	if status != http.StatusOK {
		t.Errorf("/healthz: status %d\n%s", status, out)
	}
	if code != exitOK {
		t.Errorf("exit %d after SIGTERM\n%s", code, out)
	}
	if !strings.Contains(out, "NVML not available in this build (CGO_ENABLED=0)") {
		t.Errorf("log does not say NVML is unavailable:\n%s", out)
	}
	if strings.Contains(out, "level=ERROR") || strings.Contains(out, "panic") {
		t.Errorf("errors in the log:\n%s", out)
	}
}

func TestGPUProbeFlags(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		want    int
		wantErr string
	}{
		{"no subcommand", []string{"gpu"}, exitFailed, "usage: whyslow gpu probe"},
		{"unknown subcommand", []string{"gpu", "list"}, exitFailed, "usage: whyslow gpu probe"},
		{"bad pid", []string{"gpu", "probe", "--pid", "12,x"}, exitFailed, `--pid "12,x": entry 2 "x" is not a process id`},
		{"bad visible", []string{"gpu", "probe", "--visible", "MIG-1"}, exitFailed, "MIG instances are not supported"},
		{"extra argument", []string{"gpu", "probe", "now"}, exitFailed, `unexpected argument "now"`},
		{"unknown flag", []string{"gpu", "probe", "--bogus"}, exitFailed, "flag provided but not defined: -bogus"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if got := dispatch(context.Background(), tc.args, &stdout, &stderr); got != tc.want {
				t.Errorf("exit %d, want %d", got, tc.want)
			}
			if !strings.Contains(stderr.String(), tc.wantErr) {
				t.Errorf("stderr lacks %q:\n%s", tc.wantErr, stderr.String())
			}
		})
	}
}
