// Command measure reports the sidecar's cost: it runs the daemon against the
// engine model (one vLLM replica served on loopback) on a sped-up clock,
// scraping every 5 simulated seconds into an on-disk store with 6 h
// retention, and prints RSS (/proc/self/status) and CPU (getrusage) per
// simulated scrape interval. The engine model's own CPU is measured in a
// separate pass and subtracted.
//
//	go run ./internal/daemon/measure -hours 6
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/whyslow/whyslow/internal/daemon"
	"github.com/whyslow/whyslow/internal/daemon/demo"
	"github.com/whyslow/whyslow/internal/sim"
	"github.com/whyslow/whyslow/notifiers/logsink"
)

func cpu() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func status(key string) string {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, key+":") {
			return strings.TrimSpace(strings.TrimPrefix(l, key+":"))
		}
	}
	return "?"
}

func main() {
	hours := flag.Float64("hours", 6, "simulated hours to run (6 fills the retention)")
	scenario := flag.String("scenario", "healthy", "engine model scenario")
	flag.Parse()
	step := 5 * time.Second
	ticks := int(*hours * 3600 / step.Seconds())

	// Pass 1: the engine model alone (advance + render /metrics).
	live, err := sim.NewLive(sim.Options{Scenario: *scenario, Seed: 1, ScrapeInterval: step, Replicas: 1})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	h := live.Handler(0)
	c0 := cpu()
	for i := 0; i < ticks; i++ {
		live.Advance(step)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		_, _ = io.Copy(io.Discard, rec.Body)
	}
	simCPU := cpu() - c0
	live = nil
	runtime.GC()

	// Pass 2: model + daemon.
	dir, err := os.MkdirTemp("", "whyslow-measure-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	defer os.RemoveAll(dir)
	lc := logsink.DefaultConfig()
	env, err := demo.NewEnv(demo.EnvOptions{
		Scenario: *scenario, Seed: 1, LogWriter: io.Discard, Logger: slog.New(slog.DiscardHandler),
		Config: daemon.Config{DataDir: dir, Retention: 6 * time.Hour, Receivers: []daemon.ReceiverConfig{{Name: "log", Log: &lc}}},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx := context.Background()
	start, c1 := time.Now(), cpu()
	for i := 0; i < ticks; i++ {
		if err := env.Tick(ctx); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		if (i+1)%(ticks/6+1) == 0 {
			fmt.Printf("  %5.2f simulated h: RSS %s (peak %s)\n", float64(i+1)*step.Hours(), status("VmRSS"), status("VmHWM"))
		}
	}
	total := cpu() - c1
	wall := time.Since(start)
	daemonCPU := total - simCPU
	perTick := daemonCPU / time.Duration(ticks)
	fmt.Printf("scenario %s, %d scrapes (%.1f simulated h at 5 s), wall %s\n", *scenario, ticks, *hours, wall.Round(time.Millisecond))
	fmt.Printf("CPU: total %s, engine model %s, daemon %s = %s per scrape interval = %.3f%% of one core at a 5 s interval\n",
		total.Round(time.Millisecond), simCPU.Round(time.Millisecond), daemonCPU.Round(time.Millisecond), perTick.Round(time.Microsecond),
		100*perTick.Seconds()/step.Seconds())
	fmt.Printf("RSS now %s, peak %s (includes the in-process engine model)\n", status("VmRSS"), status("VmHWM"))
	_ = env.Close(ctx)
}
