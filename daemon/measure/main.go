// Command measure reports the sidecar's cost, the daemon alone: it runs the
// engine model (`whyslow sim serve`, one vLLM replica) and the daemon
// (`whyslow serve`) as two processes of a built binary, the daemon scraping
// the model every 5 s with 6 h retention, for a bounded time. Every sample
// period it reads the daemon's VmRSS and VmHWM from /proc/PID/status, its
// CPU time from /proc/PID/stat, and its Go heap from its own /metrics;
// at the end it prints the CPU share of one core and, with -heap FILE,
// saves a heap profile from the daemon's /debug/pprof. With -spans N it
// also sends N spans a second to the daemon's OTLP/HTTP receiver through
// the OpenTelemetry SDK's exporter (llm_request spans with llm-d gateway
// spans, four per request, as simtrace writes them).
//
//	go run ./daemon/measure -duration 3m
//	go run ./daemon/measure -duration 10m -data-dir /tmp/w -heap /tmp/heap.pb.gz
//	go run ./daemon/measure -duration 1h -spans 5000
//
// -interval shorter than 5 s with -retention 6h fills the retention with
// as many samples as 6 h of 5 s scrapes hold in less time (833ms: 1 h).
//
// Linux only (it reads /proc).
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/PID/stat times (100 on Linux).
const clockTicks = 100

func main() {
	duration := flag.Duration("duration", 3*time.Minute, "how long to measure after the daemon is ready")
	sample := flag.Duration("sample", 30*time.Second, "time between two printed samples")
	interval := flag.Duration("interval", 5*time.Second, "the daemon's scrape interval")
	speed := flag.Float64("speed", 1, "the engine model's simulated seconds per real second")
	scenario := flag.String("scenario", "healthy", "engine model scenario")
	bin := flag.String("bin", "", "whyslow binary (default: build ./cmd/whyslow into a temporary directory)")
	dataDir := flag.String("data-dir", "", "the daemon's --data-dir (default: in memory)")
	heap := flag.String("heap", "", "save a heap profile of the daemon here at the end")
	gomemlimit := flag.String("gomemlimit", "", "GOMEMLIMIT for the daemon (default: unset, the daemon chooses)")
	retention := flag.Duration("retention", 6*time.Hour, "the daemon's retention")
	spans := flag.Int("spans", 0, "OTLP spans a second to send to the daemon (0: OTLP off)")
	flag.Parse()
	o := options{duration: *duration, sample: *sample, interval: *interval, speed: *speed, scenario: *scenario, bin: *bin,
		dataDir: *dataDir, heap: *heap, gomemlimit: *gomemlimit, retention: *retention, spans: *spans}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "measure:", err)
		os.Exit(2)
	}
}

type options struct {
	duration, sample, interval, retention time.Duration
	speed                                 float64
	scenario, bin, dataDir, heap          string
	gomemlimit                            string
	spans                                 int
}

func run(o options) error {
	duration, sample, interval, speed, scenario, bin, dataDir, heap := o.duration, o.sample, o.interval, o.speed, o.scenario, o.bin, o.dataDir, o.heap
	tmp, err := os.MkdirTemp("", "whyslow-measure-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if bin == "" {
		bin = filepath.Join(tmp, "whyslow")
		build := exec.Command("go", "build", "-o", bin, "./cmd/whyslow")
		build.Dir, err = moduleRoot()
		if err != nil {
			return err
		}
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("build: %w", err)
		}
	}
	enginePort, err := freePort()
	if err != nil {
		return err
	}
	apiPort, err := freePort()
	if err != nil {
		return err
	}
	engineURL := fmt.Sprintf("http://127.0.0.1:%d/metrics", enginePort)
	api := fmt.Sprintf("http://127.0.0.1:%d", apiPort)

	engine := exec.Command(bin, "sim", "serve", "--scenario", scenario, "--replicas", "1",
		"--speed", strconv.FormatFloat(speed, 'g', -1, 64), "--listen", fmt.Sprintf("127.0.0.1:%d", enginePort))
	engine.Stdout, engine.Stderr = io.Discard, os.Stderr
	engine.SysProcAttr = endWithParent()
	if err := engine.Start(); err != nil {
		return fmt.Errorf("start engine model: %w", err)
	}
	defer stop(engine)
	if err := waitOK(engineURL, 30*time.Second); err != nil {
		return fmt.Errorf("engine model: %w", err)
	}

	otlpConf, otlpURL := `{http: "", grpc: ""}`, ""
	if o.spans > 0 {
		port, err := freePort()
		if err != nil {
			return err
		}
		otlpConf, otlpURL = fmt.Sprintf(`{http: "127.0.0.1:%d", grpc: ""}`, port), fmt.Sprintf("http://127.0.0.1:%d", port)
	}
	cfg := filepath.Join(tmp, "whyslow.yml")
	conf := fmt.Sprintf(`engine_urls: [%q]
scrape_interval: %s
retention: %s
listen: 127.0.0.1:%d
otlp: %s
receivers: [{name: log, log: {format: json}}]
`, engineURL, interval, o.retention, apiPort, otlpConf)
	if heap != "" {
		// Only then: with api.pprof the daemon samples its heap, which
		// costs memory of its own.
		conf += "api: {pprof: true}\n"
	}
	if dataDir != "" {
		conf += fmt.Sprintf("data_dir: %q\n", dataDir)
	}
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		return err
	}
	daemon := exec.Command(bin, "serve", "--config", cfg, "--log-level", "warn")
	daemon.Stdout, daemon.Stderr = io.Discard, os.Stderr
	daemon.SysProcAttr = endWithParent()
	if o.gomemlimit != "" {
		daemon.Env = append(os.Environ(), "GOMEMLIMIT="+o.gomemlimit)
	}
	if err := daemon.Start(); err != nil {
		return fmt.Errorf("start daemon: %w", err)
	}
	defer stop(daemon)
	if err := waitOK(api+"/readyz", 30*time.Second); err != nil {
		return fmt.Errorf("daemon: %w", err)
	}
	pid := daemon.Process.Pid
	mode := "in memory"
	if dataDir != "" {
		mode = "data dir " + dataDir
	}
	fmt.Printf("daemon pid %d scraping %s (%s ×%g) every %s, retention %s, %s\n", pid, engineURL, scenario, speed, interval, o.retention, mode)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var load *spanLoad
	if o.spans > 0 {
		load, err = startSpanLoad(ctx, otlpURL, o.spans)
		if err != nil {
			return err
		}
		fmt.Printf("sending %d spans/s to %s/v1/traces\n", o.spans, otlpURL)
	}
	fmt.Printf("%8s  %9s  %9s  %9s  %9s  %9s  %9s  %9s  %9s  %8s  %7s\n", "elapsed", "VmRSS", "RssAnon", "RssFile", "VmHWM", "heap", "heap_sys", "spans", "memlimit", "CPU", "samples")
	var rssSum, rssMax, n int64

	start := time.Now()
	cpu0, err := cpuTime(pid)
	if err != nil {
		return err
	}
	lastT, lastCPU := start, cpu0
	stopped, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	for done := false; !done; {
		next := time.Since(start) + sample
		if next >= duration {
			next, done = duration, true
		}
		select {
		case <-time.After(time.Until(start.Add(next))):
		case <-stopped.Done():
			// Interrupted: report what was measured; the deferred stops
			// end the daemon and the engine model.
			done = true
		}
		if daemon.ProcessState != nil {
			return errors.New("daemon exited")
		}
		now := time.Now()
		c, err := cpuTime(pid)
		if err != nil {
			return err
		}
		st, err := procStatus(pid)
		if err != nil {
			return err
		}
		m := scrapeOwn(api + "/metrics")
		share := 100 * (c - lastCPU).Seconds() / now.Sub(lastT).Seconds()
		fmt.Printf("%8s  %9s  %9s  %9s  %9s  %9s  %9s  %9s  %9s  %7.3f%%  %7s\n", now.Sub(start).Round(time.Second), st["VmRSS"], st["RssAnon"], st["RssFile"], st["VmHWM"],
			mib(m["go_memstats_heap_inuse_bytes"]), mib(m["go_memstats_heap_sys_bytes"]), mib(m["whyslow_spanstore_bytes"]), mib(m["go_gc_gomemlimit_bytes"]), share, m["whyslow_scrape_samples"])
		lastT, lastCPU = now, c
		if kb, err := strconv.ParseInt(strings.TrimSuffix(st["VmRSS"], " kB"), 10, 64); err == nil {
			rssSum, rssMax, n = rssSum+kb, max(rssMax, kb), n+1
		}
	}
	c, _ := cpuTime(pid)
	st, _ := procStatus(pid)
	wall := time.Since(start)
	fmt.Printf("over %s: daemon CPU %s = %.3f%% of one core; VmRSS %s (anonymous %s, file-backed %s: the binary's pages), peak (VmHWM) %s\n",
		wall.Round(time.Second), (c - cpu0).Round(time.Millisecond), 100*(c-cpu0).Seconds()/wall.Seconds(), st["VmRSS"], st["RssAnon"], st["RssFile"], st["VmHWM"])
	if n > 0 {
		fmt.Printf("VmRSS over the samples: mean %.1f MB, max %.1f MB\n", float64(rssSum)/float64(n)*1024/1e6, float64(rssMax)*1024/1e6)
	}
	if load != nil {
		m := scrapeOwn(api + "/metrics")
		sent, failed := load.stop()
		fmt.Printf("spans: sent %d (%.0f/s), export errors %d; daemon received %s, span store %s (bound 64 MiB), evicted %s\n",
			sent, float64(sent)/wall.Seconds(), failed, m["whyslow_otlp_spans_received_total"], mib(m["whyslow_spanstore_bytes"]), m["whyslow_spanstore_evicted_total"])
	}
	if heap != "" {
		if err := save(api+"/debug/pprof/heap", heap); err != nil {
			return err
		}
		fmt.Printf("heap profile: %s (go tool pprof -sample_index=inuse_space -top %s)\n", heap, heap)
	}
	return nil
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("run from inside the whyslow module")
	}
	return filepath.Dir(mod), nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func waitOK(url string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	var last error
	for time.Now().Before(deadline) {
		resp, err := http.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("%s: %s", url, resp.Status)
		}
		last = err
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("not ready after %s: %w", limit, last)
}

func stop(cmd *exec.Cmd) {
	if cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// cpuTime is utime + stime of a process.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields after its ')' are plain.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	// f[0] is field 3 (state): utime is field 14, stime field 15.
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	stt, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return time.Duration(ut+stt) * time.Second / clockTicks, nil
}

func procStatus(pid int) (map[string]string, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok {
			out[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	return out, sc.Err()
}

// scrapeOwn reads unlabelled (or first-seen) values of the daemon's metrics.
func scrapeOwn(url string) map[string]string {
	out := map[string]string{}
	resp, err := http.Get(url)
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		name := line[:i]
		if j := strings.IndexByte(name, '{'); j >= 0 {
			name = name[:j]
		}
		// Counters sum over their label values (e.g. both transports).
		if v, seen := out[name]; !seen {
			out[name] = line[i+1:]
		} else if strings.HasSuffix(name, "_total") {
			a, err1 := strconv.ParseFloat(v, 64)
			b, err2 := strconv.ParseFloat(line[i+1:], 64)
			if err1 == nil && err2 == nil {
				out[name] = strconv.FormatFloat(a+b, 'f', -1, 64)
			}
		}
	}
	return out
}

func mib(v string) string {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return "?"
	}
	if f >= 1<<62 {
		return "none" // go_gc_gomemlimit_bytes without a limit is MaxInt64
	}
	return fmt.Sprintf("%.1f MiB", f/(1<<20))
}

func save(url, path string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
