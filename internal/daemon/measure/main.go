// Command measure reports the sidecar's cost, the daemon alone: it runs the
// engine model (`whyslow sim serve`, one vLLM replica) and the daemon
// (`whyslow serve`) as two processes of a built binary, the daemon scraping
// the model every 5 s with 6 h retention, for a bounded time. Every sample
// period it reads the daemon's VmRSS and VmHWM from /proc/PID/status, its
// CPU time from /proc/PID/stat, and its Go heap from its own /metrics;
// at the end it prints the CPU share of one core and, with -heap FILE,
// saves a heap profile from the daemon's /debug/pprof.
//
//	go run ./internal/daemon/measure -duration 3m
//	go run ./internal/daemon/measure -duration 10m -data-dir /tmp/w -heap /tmp/heap.pb.gz
//
// Linux only (it reads /proc).
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
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
	gomemlimit := flag.String("gomemlimit", "", "GOMEMLIMIT for the daemon (default: none)")
	flag.Parse()
	if err := run(*duration, *sample, *interval, *speed, *scenario, *bin, *dataDir, *heap, *gomemlimit); err != nil {
		fmt.Fprintln(os.Stderr, "measure:", err)
		os.Exit(2)
	}
}

func run(duration, sample, interval time.Duration, speed float64, scenario, bin, dataDir, heap, gomemlimit string) error {
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
	if err := engine.Start(); err != nil {
		return fmt.Errorf("start engine model: %w", err)
	}
	defer stop(engine)
	if err := waitOK(engineURL, 30*time.Second); err != nil {
		return fmt.Errorf("engine model: %w", err)
	}

	cfg := filepath.Join(tmp, "whyslow.yml")
	conf := fmt.Sprintf(`engine_urls: [%q]
scrape_interval: %s
retention: 6h
listen: 127.0.0.1:%d
api: {pprof: true}
otlp: {http: "", grpc: ""}
receivers: [{name: log, log: {format: json}}]
`, engineURL, interval, apiPort)
	if dataDir != "" {
		conf += fmt.Sprintf("data_dir: %q\n", dataDir)
	}
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		return err
	}
	daemon := exec.Command(bin, "serve", "--config", cfg, "--log-level", "warn")
	daemon.Stdout, daemon.Stderr = io.Discard, os.Stderr
	if gomemlimit != "" {
		daemon.Env = append(os.Environ(), "GOMEMLIMIT="+gomemlimit)
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
	fmt.Printf("daemon pid %d scraping %s (%s ×%g) every %s, retention 6h, %s\n", pid, engineURL, scenario, speed, interval, mode)
	fmt.Printf("%8s  %9s  %9s  %9s  %9s  %9s  %9s  %8s  %7s\n", "elapsed", "VmRSS", "RssAnon", "RssFile", "VmHWM", "heap", "heap_sys", "CPU", "samples")

	start := time.Now()
	cpu0, err := cpuTime(pid)
	if err != nil {
		return err
	}
	lastT, lastCPU := start, cpu0
	for done := false; !done; {
		next := time.Since(start) + sample
		if next >= duration {
			next, done = duration, true
		}
		time.Sleep(time.Until(start.Add(next)))
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
		fmt.Printf("%8s  %9s  %9s  %9s  %9s  %9s  %9s  %7.3f%%  %7s\n", now.Sub(start).Round(time.Second), st["VmRSS"], st["RssAnon"], st["RssFile"], st["VmHWM"],
			mib(m["go_memstats_heap_inuse_bytes"]), mib(m["go_memstats_heap_sys_bytes"]), share, m["whyslow_scrape_samples"])
		lastT, lastCPU = now, c
	}
	c, _ := cpuTime(pid)
	st, _ := procStatus(pid)
	wall := time.Since(start)
	fmt.Printf("over %s: daemon CPU %s = %.3f%% of one core; VmRSS %s (anonymous %s, file-backed %s: the binary's pages), peak (VmHWM) %s\n",
		wall.Round(time.Second), (c - cpu0).Round(time.Millisecond), 100*(c-cpu0).Seconds()/wall.Seconds(), st["VmRSS"], st["RssAnon"], st["RssFile"], st["VmHWM"])
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
		if _, seen := out[name]; !seen {
			out[name] = line[i+1:]
		}
	}
	return out
}

func mib(v string) string {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return "?"
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
