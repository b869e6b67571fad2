package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/whyslow/whyslow/collectors/bundle"
	"github.com/whyslow/whyslow/diagnose"
	"github.com/whyslow/whyslow/testbed/sim"
)

// The cost of `why --bundle` (issue 16 item 1). The growth table and the
// promtool comparison need minutes and gigabytes of disk, so they run only
// with WHYSLOW_COST=1:
//
//	WHYSLOW_COST=1 go test -run TestBundleCostGrowth -v -timeout 60m ./cmd/whyslow/
//	WHYSLOW_COST=1 go test -run XXX -bench BundleVsPromtool -benchtime 1x ./cmd/whyslow/
//
// WHYSLOW_COST_OLD=/path/to/whyslow adds that binary's figures to the
// table (an older build, for a before/after comparison).

func needCost(tb testing.TB) {
	if os.Getenv("WHYSLOW_COST") == "" {
		tb.Skip("set WHYSLOW_COST=1 to measure the bundle cost (minutes, gigabytes of disk)")
	}
}

// healthyPrefix is the part of the kv_pressure recording stretchBundle
// repeats: before the onset (75 min), so the copies are healthy traffic.
const healthyPrefix = time.Hour

// writeStretched writes sb as a bundle in dir whose metrics span length
// before the incident time. Shorter than the recording (about 83 min):
// only the last length is kept and the baseline offset becomes length*2/3
// so its window stays inside. Longer: copies of the healthy first hour,
// shifted back by one hour each, are written before each family's own
// samples, so every series stays in time order (a counter restarts at each
// seam, which rate() takes as a reset).
func writeStretched(tb testing.TB, sb *sim.Bundle, dir string, length time.Duration) {
	tb.Helper()
	inc := sb.Incident
	start := sim.DefaultStart
	recorded := inc.At.Sub(start)
	from := start.Unix()
	if length < recorded {
		from = inc.At.Add(-length).Unix()
		inc.Baseline = (length * 2 / 3).Truncate(time.Minute)
	}
	extra := max(length-recorded, 0)
	copies := int((extra + healthyPrefix - 1) / healthyPrefix)
	oldest := start.Add(-extra).Unix()
	prefixEnd := start.Add(healthyPrefix).Unix()
	stub := sim.Bundle{Metrics: []byte("# EOF\n"), Incident: inc, Truth: sb.Truth}
	if err := stub.WriteDir(dir, false); err != nil {
		tb.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, bundle.MetricsFile))
	if err != nil {
		tb.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	type line struct {
		head []byte // up to the timestamp, with its space
		ts   int64
	}
	var cur []line // one family's samples (the sim writes some time slice by time slice)
	flush := func() {
		for j := copies; j >= 1; j-- {
			shift := int64(j) * int64(healthyPrefix/time.Second)
			for _, l := range cur {
				if l.ts >= prefixEnd || l.ts-shift < oldest {
					continue
				}
				w.Write(l.head)
				w.WriteString(strconv.FormatInt(l.ts-shift, 10))
				w.WriteByte('\n')
			}
		}
		for _, l := range cur {
			if l.ts < from {
				continue
			}
			w.Write(l.head)
			w.WriteString(strconv.FormatInt(l.ts, 10))
			w.WriteByte('\n')
		}
		cur = cur[:0]
	}
	data := sb.Metrics
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			i = len(data) - 1
		}
		l := data[:i+1]
		data = data[i+1:]
		if l[0] == '#' {
			flush()
			if !bytes.HasPrefix(l, []byte("# EOF")) {
				w.Write(l)
			}
			continue
		}
		body := bytes.TrimRight(l, "\n")
		sp := bytes.LastIndexByte(body, ' ')
		ts, err := strconv.ParseInt(string(body[sp+1:]), 10, 64)
		if err != nil {
			tb.Fatalf("sim line %q: %v", l, err)
		}
		cur = append(cur, line{head: body[:sp+1], ts: ts})
	}
	flush()
	w.WriteString("# EOF\n")
	if err := w.Flush(); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
}

// buildCostBinary builds the command into a temporary directory.
func buildCostBinary(tb testing.TB) string {
	tb.Helper()
	bin := filepath.Join(tb.TempDir(), "whyslow")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		tb.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// runMeasured runs a command and returns its wall time and peak RSS. The
// peak comes from GNU time (/usr/bin/time -f %M) when there is one: Linux's
// ru_maxrss of a process this one spawns directly (ProcessState.SysUsage)
// counts this process's own high-water RSS too, since exec records the
// peak of the address space it leaves and Go spawns with vfork, so it is
// only an upper bound (used without GNU time).
func runMeasured(tb testing.TB, okCodes []int, name string, args ...string) (time.Duration, int64) {
	tb.Helper()
	timeBin, haveTime := "/usr/bin/time", false
	if fi, err := os.Stat(timeBin); err == nil && fi.Mode().IsRegular() {
		haveTime = true
	}
	cmd := exec.Command(name, args...)
	if haveTime {
		cmd = exec.Command(timeBin, append([]string{"-f", "maxrss_kib=%M", name}, args...)...)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	if cmd.ProcessState == nil {
		tb.Fatalf("%s: %v", name, err)
	}
	code := cmd.ProcessState.ExitCode()
	ok := false
	for _, c := range okCodes {
		ok = ok || c == code
	}
	if !ok {
		tb.Fatalf("%s %s: exit %d: %s", name, strings.Join(args, " "), code, stderr.String())
	}
	if haveTime {
		out := stderr.String()
		if i := strings.LastIndex(out, "maxrss_kib="); i >= 0 {
			if kib, err := strconv.ParseInt(strings.TrimSpace(out[i+len("maxrss_kib="):]), 10, 64); err == nil {
				return d, kib << 10
			}
		}
		tb.Fatalf("%s: no maxrss from %s: %s", name, timeBin, out)
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	return d, ru.Maxrss << 10 // KiB on Linux
}

// costLengths are the bundle lengths of the growth table.
var costLengths = []time.Duration{30 * time.Minute, 2 * time.Hour, 6 * time.Hour}

// TestBundleCostGrowth is the growth table: `why --bundle` wall time and
// peak RSS for 1, 4 and 16 replicas × 30 min, 2 h and 6 h bundles. The
// bundles are written by a child test process (TestBundleCostWrite), so
// that this process stays small: without GNU time its peak RSS is the
// floor of the figures (see runMeasured), printed with the table.
func TestBundleCostGrowth(t *testing.T) {
	needCost(t)
	bin := buildCostBinary(t)
	old := os.Getenv("WHYSLOW_COST_OLD")
	var rows []string
	head := fmt.Sprintf("%-9s %-7s %10s %9s %10s", "replicas", "length", "metrics", "time", "peak RSS")
	if old != "" {
		head += fmt.Sprintf(" %9s %10s", "old time", "old RSS")
	}
	for _, n := range []int{1, 4, 16} {
		root := t.TempDir()
		cmd := exec.Command(os.Args[0], "-test.run=^TestBundleCostWrite$", "-test.v")
		cmd.Env = append(os.Environ(), fmt.Sprintf("WHYSLOW_COST_WRITE=%s:%d", root, n))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("write bundles: %v\n%s", err, out)
		}
		for _, length := range costLengths {
			dir := filepath.Join(root, length.String())
			fi, err := os.Stat(filepath.Join(dir, bundle.MetricsFile))
			if err != nil {
				t.Fatal(err)
			}
			d, rss := runMeasured(t, []int{exitOK, exitCause}, bin, "why", "--bundle", dir, "--output", "json")
			row := fmt.Sprintf("%-9d %-7s %6.0f MiB %8.2fs %6.0f MiB", n, length, float64(fi.Size())/(1<<20), d.Seconds(), float64(rss)/(1<<20))
			if old != "" {
				d, rss := runMeasured(t, []int{exitOK, exitCause}, old, "why", "--bundle", dir, "--output", "json")
				row += fmt.Sprintf(" %8.2fs %6.0f MiB", d.Seconds(), float64(rss)/(1<<20))
			}
			t.Log(row)
			rows = append(rows, row)
			os.RemoveAll(dir)
		}
	}
	var self syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	t.Logf("why --bundle cost (kv_pressure, seed 1; this process's peak RSS, the floor: %d MiB):\n%s\n%s",
		self.Maxrss>>10, head, strings.Join(rows, "\n"))
}

// TestBundleCostWrite writes the growth table's bundles for one replica
// count (WHYSLOW_COST_WRITE=DIR:REPLICAS), one directory per length.
func TestBundleCostWrite(t *testing.T) {
	spec := os.Getenv("WHYSLOW_COST_WRITE")
	if spec == "" {
		t.Skip("run by TestBundleCostGrowth")
	}
	root, ns, _ := strings.Cut(spec, ":")
	n, err := strconv.Atoi(ns)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := sim.Record(context.Background(), sim.Options{Scenario: "kv_pressure", Seed: 1, Replicas: n})
	if err != nil {
		t.Fatal(err)
	}
	for _, length := range costLengths {
		writeStretched(t, sb, filepath.Join(root, length.String()), length)
	}
}

// BenchmarkBundleVsPromtool times, in one run, `why --bundle` (load and
// triage, in process) and `promtool tsdb create-blocks-from openmetrics` on
// the same metrics.om, and reports the ratio (target ≤ 0.35): the sim's
// own 4-replica recording (about 83 min), its last 30 min (window-dense:
// the triage's windows hold nearly every sample) and the recording
// stretched to 6 h.
func BenchmarkBundleVsPromtool(b *testing.B) {
	needCost(b)
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		b.Skip("no promtool")
	}
	sb, err := sim.Record(context.Background(), sim.Options{Scenario: "kv_pressure", Seed: 1, Replicas: 4})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		length time.Duration
	}{{"4x83m", 0}, {"4x30m", 30 * time.Minute}, {"4x6h", 6 * time.Hour}} {
		b.Run(c.name, func(b *testing.B) {
			dir := b.TempDir()
			if c.length == 0 {
				if err := sb.WriteDir(dir, false); err != nil {
					b.Fatal(err)
				}
			} else {
				writeStretched(b, sb, dir, c.length)
			}
			metrics := filepath.Join(dir, bundle.MetricsFile)
			if fi, err := os.Stat(metrics); err == nil {
				b.SetBytes(fi.Size())
			}
			var tWhy, tProm time.Duration
			for b.Loop() {
				start := time.Now()
				r := runCLI(b, "why", "--bundle", dir, "--output", "json")
				if r.code != exitOK && r.code != exitCause {
					b.Fatalf("why: exit %d: %s", r.code, r.stderr)
				}
				tWhy += time.Since(start)
				out := b.TempDir()
				d, _ := runMeasured(b, []int{0}, promtool, "tsdb", "create-blocks-from", "openmetrics", metrics, out)
				tProm += d
				os.RemoveAll(out)
			}
			b.ReportMetric(tWhy.Seconds()/float64(b.N), "why-s")
			b.ReportMetric(tProm.Seconds()/float64(b.N), "promtool-s")
			b.ReportMetric(float64(tWhy)/float64(tProm), "why/promtool")
		})
	}
}

// TestBundleKeepWindows checks the windows `why --bundle` loads for an
// incident: the incident and baseline windows, each with the look-back and
// the --html lead-in before it.
func TestBundleKeepWindows(t *testing.T) {
	at := time.Unix(1700000000, 0).UTC()
	if w := bundleKeep(diagnose.Options{}); w != nil {
		t.Errorf("no incident time: %v, want everything", w)
	}
	w := bundleKeep(diagnose.Options{At: at})
	lead := keepLookback + 5*time.Minute + 10*time.Second
	want := []bundle.Window{
		{From: at.Add(-5*time.Minute - lead), To: at},
		{From: at.Add(-time.Hour - 5*time.Minute - lead), To: at.Add(-time.Hour)},
	}
	if len(w) != 2 || w[0] != want[0] || w[1] != want[1] {
		t.Errorf("windows %v, want %v", w, want)
	}
}
