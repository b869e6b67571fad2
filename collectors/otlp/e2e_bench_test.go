package otlp_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"

	"github.com/whyslow/whyslow/collectors/otlp"
	"github.com/whyslow/whyslow/collectors/spanstore"
	"github.com/whyslow/whyslow/internal/memlimit"
	"github.com/whyslow/whyslow/testbed/sim"
	"github.com/whyslow/whyslow/testbed/simtrace"
	"github.com/whyslow/whyslow/testbed/simtrace/sdkexport"
)

// loadEnv tells TestExportLoad, run as a child process, where to send how
// many spans: "ADDR SPANS".
const loadEnv = "WHYSLOW_OTLP_E2E_LOAD"

const (
	e2eStoreBytes      = 64 << 20 // the daemon's default otlp.max_bytes
	e2eRequestsPerPost = 128      // 512 spans an export: the SDK's batch size
	e2eSpansPerRequest = 4        // simtrace with a gateway
)

// TestExportLoad is the client of BenchmarkIngestEndToEnd: run as a child
// process (so that its CPU is not the receiver's), it sends spans shaped
// like llm-d's (gateway and engine) through the OTel SDK's OTLP/HTTP
// exporter as fast as the receiver takes them.
func TestExportLoad(t *testing.T) {
	spec := os.Getenv(loadEnv)
	if spec == "" {
		t.Skip("run by BenchmarkIngestEndToEnd")
	}
	addr, n, _ := strings.Cut(spec, " ")
	total, err := strconv.Atoi(n)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(addr), otlptracehttp.WithInsecure(),
		otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: false}))
	if err != nil {
		t.Fatal(err)
	}
	defer exp.Shutdown(context.Background())
	t0 := time.Unix(1700000000, 0)
	for seq := 0; seq*e2eSpansPerRequest < total; {
		b := simtrace.New(simtrace.Options{Gateway: true, Seed: 1})
		for range e2eRequestsPerPost {
			seq++
			arr := t0.Add(time.Duration(seq) * time.Millisecond)
			b.Add(sim.RequestRecord{
				ID: "chatcmpl-" + strconv.Itoa(seq), Pod: "vllm-" + strconv.Itoa(seq%4), Model: "meta-llama/Llama-3.1-8B-Instruct",
				Arrival: arr, Queued: arr.Add(2 * time.Millisecond), Scheduled: arr.Add(20 * time.Millisecond),
				FirstToken: arr.Add(120 * time.Millisecond), Finished: arr.Add(time.Second),
				PromptTokens: 400 + seq%1600, OutputTokens: 100 + seq%300, MaxTokens: 512, FinishedReason: "stop",
			})
		}
		if err := sdkexport.Export(ctx, b, exp); err != nil {
			t.Fatal(err)
		}
	}
}

// e2eRun is one phase of BenchmarkIngestEndToEnd.
type e2eRun struct {
	spans  int64
	cpu    time.Duration // the receiving process's user+sys
	gcs    uint32
	rssMiB float64 // VmRSS at the end (largest of the rounds)
}

// BenchmarkIngestEndToEnd measures OTLP ingest as a daemon does it: the OTel
// SDK's OTLP/HTTP exporter (in a child process) → the receiver → a span
// store of 64 MiB kept full, once without a Go memory limit and once with
// the daemon's (memlimit.Limiter on the store's bound). It reports spans
// per core-second of this process's CPU (getrusage, not wall time) for
// both, and their CPU per span ratio (target: ≥ 200k spans/core-s with the
// bound on; ratio ≤ 1.1). The two alternate, WHYSLOW_E2E_ROUNDS times
// each (default 2), so that a busy machine weighs on both alike;
// WHYSLOW_E2E_SPANS sets the spans of each (default 100k).
func BenchmarkIngestEndToEnd(b *testing.B) {
	spans, rounds := envInt("WHYSLOW_E2E_SPANS", 100_000), envInt("WHYSLOW_E2E_ROUNDS", 2)
	var off, on e2eRun
	for b.Loop() {
		off, on = e2eRun{}, e2eRun{}
		for range rounds {
			off.add(e2ePhase(b, spans, false))
			on.add(e2ePhase(b, spans, true))
		}
	}
	rate := func(r e2eRun) float64 { return float64(r.spans) / r.cpu.Seconds() }
	b.ReportMetric(rate(off), "spans/core-s_nolimit")
	b.ReportMetric(rate(on), "spans/core-s_limit")
	b.ReportMetric(rate(off)/rate(on), "cpu_per_span_limit/nolimit")
	b.ReportMetric(float64(on.gcs)*1e5/float64(on.spans), "gcs/100k_spans_limit")
	b.ReportMetric(float64(off.gcs)*1e5/float64(off.spans), "gcs/100k_spans_nolimit")
	b.ReportMetric(on.rssMiB, "rss_MiB_limit")
	b.ReportMetric(off.rssMiB, "rss_MiB_nolimit")
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// add sums the rounds of a phase; the RSS is the largest.
func (r *e2eRun) add(o e2eRun) {
	r.spans += o.spans
	r.cpu += o.cpu
	r.gcs += o.gcs
	r.rssMiB = max(r.rssMiB, o.rssMiB)
}

// e2ePhase fills a fresh store to its bound, then measures the CPU this
// process spends taking spans more from the child exporter.
func e2ePhase(b *testing.B, spans int, limit bool) e2eRun {
	b.Helper()
	debug.SetMemoryLimit(math.MaxInt64)
	runtime.GC()
	debug.FreeOSMemory()
	store, err := spanstore.New(spanstore.Options{MaxBytes: e2eStoreBytes})
	if err != nil {
		b.Fatal(err)
	}
	r, err := otlp.New(otlp.Options{HTTPAddr: "127.0.0.1:0", Sink: store, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	if err := r.Listen(); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)
	if limit {
		lim := &memlimit.Limiter{Bound: e2eStoreBytes, Held: store.Bytes}
		go lim.Run(ctx)
	}
	// Fill: more than the store holds, so that every export evicts.
	for store.Evicted() == 0 {
		e2eLoad(b, r.HTTPAddr(), 50_000)
	}
	before := store.Len() + int(store.Evicted())
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	cpu0 := processCPU()
	e2eLoad(b, r.HTTPAddr(), spans)
	cpu1 := processCPU()
	runtime.ReadMemStats(&ms1)
	run := e2eRun{spans: int64(store.Len() + int(store.Evicted()) - before), cpu: cpu1 - cpu0, gcs: ms1.NumGC - ms0.NumGC, rssMiB: vmRSSMiB()}
	if run.spans < int64(spans) {
		b.Fatalf("store took %d spans, want %d", run.spans, spans)
	}
	cancel()
	debug.SetMemoryLimit(math.MaxInt64)
	return run
}

// e2eLoad runs TestExportLoad in a child process sending spans to addr.
func e2eLoad(b *testing.B, addr string, spans int) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestExportLoad$", "-test.count=1")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d", loadEnv, addr, spans))
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("exporter: %v\n%s", err, out)
	}
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// vmRSSMiB is this process's resident set now, from /proc (0 elsewhere).
func vmRSSMiB() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return kb / 1024
		}
	}
	return 0
}
