package main

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	"github.com/whyslow/whyslow/daemon"
)

// gcPercent reads the collector's target without changing it.
func gcPercent() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}

// whileServing runs serve with the config src (no GPU, no engine to
// reach) and calls during once it is serving; it returns once serve has.
func whileServing(t *testing.T, src string, during func()) {
	t.Helper()
	cfgFile := filepath.Join(t.TempDir(), "w.yml")
	if err := os.WriteFile(cfgFile, []byte("listen: \"127.0.0.1:0\"\ngpu: {enabled: false}\n"+src), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- dispatch(ctx, []string{"serve", "--config", cfgFile, "--engine-url", "http://127.0.0.1:1/metrics"}, &stdout, &stderr)
	}()
	deadline := time.Now().Add(2 * time.Minute) // a hang guard
	for !strings.Contains(stderr.String(), "msg=Serving") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(stderr.String(), "msg=Serving") {
		cancel()
		<-done
		t.Fatalf("serve did not start:\n%s", stderr.String())
	}
	during()
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("serve exit %d:\n%s", code, stderr.String())
	}
}

func TestServeRuntime(t *testing.T) {
	on, off := "127.0.0.1:4318", ""
	sidecar := daemon.Config{OTLP: daemon.OTLPConfig{HTTP: &off, GRPC: &off}}
	sidecarOTLP := daemon.Config{OTLP: daemon.OTLPConfig{HTTP: &on, GRPC: &off}}
	fleet := daemon.Config{Source: daemon.SourceConfig{Prometheus: &daemon.PrometheusSource{URL: "http://127.0.0.1:9090"}}, OTLP: sidecar.OTLP}
	profiled := sidecar
	profiled.API.Pprof = true
	for _, tc := range []struct {
		name string
		cfg  daemon.Config
		env  map[string]string
		want runtimeSettings
	}{
		{"sidecar", sidecar, nil, runtimeSettings{MaxProcs: 1, GCPercent: sidecarGCPercent, NoHeapSampling: true}},
		{"sidecar with OTLP keeps the collector's headroom", sidecarOTLP, nil, runtimeSettings{MaxProcs: 1, NoHeapSampling: true}},
		{"fleet", fleet, nil, runtimeSettings{NoHeapSampling: true}},
		{"GOMAXPROCS set", sidecar, map[string]string{"GOMAXPROCS": "2"}, runtimeSettings{GCPercent: sidecarGCPercent, NoHeapSampling: true}},
		{"GOGC set", sidecar, map[string]string{"GOGC": "100"}, runtimeSettings{MaxProcs: 1, NoHeapSampling: true}},
		{"GOGC off", sidecar, map[string]string{"GOGC": "off"}, runtimeSettings{MaxProcs: 1, NoHeapSampling: true}},
		{"api.pprof", profiled, nil, runtimeSettings{MaxProcs: 1, GCPercent: sidecarGCPercent}},
		{"memprofilerate set", sidecar, map[string]string{"GODEBUG": "gctrace=0,memprofilerate=1"}, runtimeSettings{MaxProcs: 1, GCPercent: sidecarGCPercent}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := serveRuntime(tc.cfg, func(k string) string { return tc.env[k] })
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}

	t.Run("applied and restored", func(t *testing.T) {
		procs, gc, rate := runtime.GOMAXPROCS(0), gcPercent(), runtime.MemProfileRate
		wantProcs, wantGC := 1, sidecarGCPercent
		if os.Getenv("GOMAXPROCS") != "" {
			wantProcs = procs // the operator's
		}
		if os.Getenv("GOGC") != "" {
			wantGC = gc
		}
		whileServing(t, "otlp: {http: \"\", grpc: \"\"}\n", func() {
			if p := runtime.GOMAXPROCS(0); p != wantProcs {
				t.Errorf("GOMAXPROCS %d while serving, want %d", p, wantProcs)
			}
			if g := gcPercent(); g != wantGC {
				t.Errorf("GOGC %d while serving, want %d", g, wantGC)
			}
		})
		if p, g, r := runtime.GOMAXPROCS(0), gcPercent(), runtime.MemProfileRate; p != procs || g != gc || r != rate {
			t.Errorf("after serve: GOMAXPROCS %d, GOGC %d, MemProfileRate %d; before: %d, %d, %d", p, g, r, procs, gc, rate)
		}
	})

	t.Run("OTLP keeps GOGC", func(t *testing.T) {
		gc := gcPercent()
		whileServing(t, "otlp: {http: \"127.0.0.1:0\", grpc: \"\"}\n", func() {
			if g := gcPercent(); g != gc {
				t.Errorf("GOGC %d while serving with OTLP, want %d as before", g, gc)
			}
		})
	})

	t.Run("nested", func(t *testing.T) {
		gc := gcPercent()
		outer := applyRuntime(runtimeSettings{GCPercent: gc + 10})
		inner := applyRuntime(runtimeSettings{GCPercent: gc + 20})
		if g := gcPercent(); g != gc+10 {
			t.Errorf("GOGC %d with two holders, want the first's %d", g, gc+10)
		}
		inner()
		inner() // a second call is a no-op
		if g := gcPercent(); g != gc+10 {
			t.Errorf("GOGC %d after the inner holder left, want %d", g, gc+10)
		}
		outer()
		if g := gcPercent(); g != gc {
			t.Errorf("GOGC %d after both left, want %d", g, gc)
		}
	})
}

// TestHeapSampling: serve samples the heap only when api.pprof can serve
// the profile, and puts the rate back when it returns.
func TestHeapSampling(t *testing.T) {
	if strings.Contains(os.Getenv("GODEBUG"), "memprofilerate=") {
		t.Skip("GODEBUG sets memprofilerate: serve leaves it alone")
	}
	rate := runtime.MemProfileRate
	if rate == 0 {
		t.Skip("heap sampling is off in this test process")
	}
	for _, tc := range []struct {
		name, src string
		want      int
	}{
		{"off", "otlp: {http: \"\", grpc: \"\"}\n", 0},
		{"api.pprof", "otlp: {http: \"\", grpc: \"\"}\napi: {pprof: true}\n", rate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			whileServing(t, tc.src, func() {
				if r := runtime.MemProfileRate; r != tc.want {
					t.Errorf("MemProfileRate %d while serving, want %d", r, tc.want)
				}
			})
			if r := runtime.MemProfileRate; r != rate {
				t.Errorf("MemProfileRate %d after serve, want %d as before", r, rate)
			}
		})
	}
}
