package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoCgoBinary builds whyslow with CGO_ENABLED=0 and checks that each
// command runs and reports the GPU collector unavailable instead of failing.
// Add a row per command that should degrade without NVML (why, serve, ...).
func TestNoCgoBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary; skipped with -short")
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
