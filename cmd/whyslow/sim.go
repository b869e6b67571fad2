package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/whyslow/whyslow/testbed/sim"
	"github.com/whyslow/whyslow/testbed/simtrace"
)

func init() {
	register(command{name: "sim", summary: "simulated vLLM fleet: list scenarios, record bundles, serve /metrics", run: runSim})
}

const simUsage = `usage:
  whyslow sim list [--compounds]
  whyslow sim record --scenario NAME --seed N --out DIR [--names SHAPE] [--gpu-series whyslow|dcgm|both|none]
                     [--dcgm-layout k8s] [--dcgm-counters default|violations]
                     [--replicas N] [--policy vllm|sglang|trtllm] [--trim] [--gzip]
                     [--traces] [--traces-per-window N] [--wide [--magnitude M]]
  whyslow sim serve --scenario NAME --seed N [--listen 127.0.0.1:8000] [--speed 60] [--replicas N]
                    [--names SHAPE] [--gpu-series ...] [--dcgm-layout ...] [--dcgm-counters ...]
serve exposes replica 0 on /metrics and replica N on /replica/N/metrics (trtllm-serve shapes also
on /prometheus/metrics and /replica/N/prometheus/metrics).
SHAPE is v1 (default) or v0 (vllm, sglang); unprefixed or dynamo (trtllm); multiprocess or dp (sglang).
NAME is a scenario of 'whyslow sim list' or two faults "a+b" of 'whyslow sim list --compounds'.
--wide draws from the accuracy harness's wide ranges (load, cost coefficients, replicas,
model, GPU) with a fault magnitude M in (0, 1] (default: drawn uniformly).
`

func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, simUsage)
		return exitFailed
	}
	switch args[0] {
	case "list":
		return simList(args[1:], stdout, stderr)
	case "record":
		return simRecord(ctx, args[1:], stdout, stderr)
	case "serve":
		return simServe(ctx, args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, simUsage)
		return exitOK
	}
	fmt.Fprintf(stderr, "whyslow sim: unknown subcommand %q (want list, record or serve)\n", args[0])
	return exitFailed
}

func simList(args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && args[0] == "--compounds" {
		causes := map[string]string{}
		for _, s := range sim.Scenarios() {
			causes[s.Name] = s.Cause
		}
		for _, c := range sim.CompoundPairs() {
			fmt.Fprintf(stdout, "%-40s %s,%s\n", c[0]+"+"+c[1], causes[c[0]], causes[c[1]])
		}
		return exitOK
	}
	if len(args) > 0 {
		fmt.Fprintf(stderr, "whyslow sim list: unexpected argument %q\n", args[0])
		return exitFailed
	}
	for _, s := range sim.Scenarios() {
		cause := s.Cause
		if cause == "" {
			cause = "-"
		}
		fmt.Fprintf(stdout, "%-18s %-28s %s\n", s.Name, cause, s.Summary)
	}
	return exitOK
}

// simFlags are the options record and serve share.
type simFlags struct {
	scenario, names, gpuSeries, policy string
	dcgmLayout, dcgmCounters           string
	seed                               int64
	replicas                           int
	wide                               bool
	magnitude                          float64
}

func (f *simFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.scenario, "scenario", "", "scenario name (see 'whyslow sim list')")
	fs.Int64Var(&f.seed, "seed", 1, "seed that draws the instance")
	fs.StringVar(&f.names, "names", "v1", "metric names: v1 or v0; trtllm also unprefixed or dynamo, sglang also multiprocess or dp")
	fs.StringVar(&f.gpuSeries, "gpu-series", "whyslow", "GPU counters: whyslow, dcgm, both or none")
	fs.StringVar(&f.dcgmLayout, "dcgm-layout", "", "with dcgm series: k8s stores them as a ServiceMonitor with honorLabels: false does (exported_pod)")
	fs.StringVar(&f.dcgmCounters, "dcgm-counters", "", "with dcgm series: default (etc/default-counters.csv) or violations (default plus the violation counters)")
	fs.IntVar(&f.replicas, "replicas", 0, "replicas (0 = the scenario's drawn default)")
	fs.StringVar(&f.policy, "policy", "vllm", "scheduler policy: vllm, sglang or trtllm")
	fs.BoolVar(&f.wide, "wide", false, "draw from the accuracy harness's wide ranges (load, cost coefficients, replicas, model, GPU, magnitude)")
	fs.Float64Var(&f.magnitude, "magnitude", 0, "with --wide: the fault magnitude in (0, 1]; 0 draws it")
}

func (f *simFlags) options() (sim.Options, error) {
	if f.scenario == "" {
		return sim.Options{}, errors.New("--scenario is required (see 'whyslow sim list')")
	}
	if !sim.ValidScenario(f.scenario) {
		return sim.Options{}, fmt.Errorf("unknown scenario %q (see 'whyslow sim list')", f.scenario)
	}
	if f.magnitude < 0 || f.magnitude > 1 || (f.magnitude > 0 && !f.wide) {
		return sim.Options{}, fmt.Errorf("--magnitude %v: want a value in (0, 1] with --wide", f.magnitude)
	}
	switch f.names {
	case "v1", "v0", "unprefixed", "dynamo", "multiprocess", "dp":
	default:
		return sim.Options{}, fmt.Errorf("--names %q: want v1 or v0 (trtllm also unprefixed or dynamo, sglang also multiprocess or dp)", f.names)
	}
	if f.dcgmLayout != "" && f.dcgmLayout != "k8s" {
		return sim.Options{}, fmt.Errorf("--dcgm-layout %q: want k8s (or leave it out)", f.dcgmLayout)
	}
	if f.dcgmCounters != "" && f.dcgmCounters != "default" && f.dcgmCounters != "violations" {
		return sim.Options{}, fmt.Errorf("--dcgm-counters %q: want default or violations (or leave it out)", f.dcgmCounters)
	}
	switch f.gpuSeries {
	case "whyslow", "dcgm", "both", "none":
	default:
		return sim.Options{}, fmt.Errorf("--gpu-series %q: want whyslow, dcgm, both or none", f.gpuSeries)
	}
	if f.replicas < 0 || f.replicas > 64 {
		return sim.Options{}, fmt.Errorf("--replicas %d: want 0 to 64", f.replicas)
	}
	if _, err := sim.ParsePolicy(f.policy); err != nil {
		return sim.Options{}, fmt.Errorf("--policy: %w", err)
	}
	return sim.Options{Scenario: f.scenario, Seed: f.seed, Names: f.names, GPUSeries: f.gpuSeries,
		DCGMLayout: f.dcgmLayout, DCGMCounters: f.dcgmCounters, Replicas: f.replicas, Policy: f.policy,
		Wide: f.wide, Magnitude: f.magnitude}, nil
}

func parseSimFlags(fs *flag.FlagSet, args []string, stderr io.Writer) bool {
	fs.SetOutput(stderr)
	if err := parseQuiet(fs, args); err != nil {
		return false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "whyslow %s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return false
	}
	return true
}

func simRecord(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sim record", flag.ContinueOnError)
	var sf simFlags
	sf.register(fs)
	out := fs.String("out", "", "bundle directory to write")
	trim := fs.Bool("trim", false, "keep only the incident and baseline windows plus a rate() look-back margin")
	gz := fs.Bool("gzip", false, "write metrics.om.gz (and traces.jsonl.gz) instead of metrics.om")
	traces := fs.Bool("traces", false, "also write traces.jsonl: llm_request and llm-d gateway spans of the requests in the incident and baseline windows")
	perWindow := fs.Int("traces-per-window", 1500, "with --traces: at most this many requests per window (a stable sample; 0: all)")
	if !parseSimFlags(fs, args, stderr) {
		return exitFailed
	}
	opt, err := sf.options()
	if err == nil && *out == "" {
		err = errors.New("--out is required")
	}
	if err != nil {
		fmt.Fprintf(stderr, "whyslow sim record: %v\n", err)
		return exitFailed
	}
	opt.Trim = *trim
	var recs simtrace.Records
	if *traces {
		opt.OnRequest = recs.Add
	}
	start := time.Now()
	b, err := sim.Record(ctx, opt)
	if err != nil {
		fmt.Fprintf(stderr, "whyslow sim record: %v\n", err)
		return exitFailed
	}
	if err := b.WriteDir(*out, *gz); err != nil {
		fmt.Fprintf(stderr, "whyslow sim record: %v\n", err)
		return exitFailed
	}
	if *traces {
		if err := writeSimTraces(*out, b, recs.List, opt.Seed, *perWindow, *gz, stdout); err != nil {
			fmt.Fprintf(stderr, "whyslow sim record: %v\n", err)
			return exitFailed
		}
	}
	causes := strings.Join(b.Truth.Causes, ",")
	if causes == "" {
		causes = "none"
	}
	fmt.Fprintf(stdout, "wrote %s: scenario %s seed %d, causes %s (magnitude %.2f, %s), onset %s, at %s (%d bytes of metrics, %s)\n",
		*out, b.Truth.Scenario, b.Truth.Seed, causes, b.Truth.Magnitude, b.Truth.Band, b.Truth.Onset.Format(time.RFC3339),
		b.Incident.At.Format(time.RFC3339), len(b.Metrics), time.Since(start).Round(time.Millisecond))
	return exitOK
}

func simServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sim serve", flag.ContinueOnError)
	var sf simFlags
	sf.register(fs)
	listen := fs.String("listen", "127.0.0.1:8000", "address to serve /metrics on")
	speed := fs.Float64("speed", 1, "simulated seconds per real second")
	if !parseSimFlags(fs, args, stderr) {
		return exitFailed
	}
	opt, err := sf.options()
	if err == nil && (*speed <= 0 || *speed > 3600) {
		err = fmt.Errorf("--speed %v: want a factor in (0, 3600]", *speed)
	}
	if err != nil {
		fmt.Fprintf(stderr, "whyslow sim serve: %v\n", err)
		return exitFailed
	}
	live, err := sim.NewLive(opt)
	if err != nil {
		fmt.Fprintf(stderr, "whyslow sim serve: %v\n", err)
		return exitFailed
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(stderr, "whyslow sim serve: %v\n", err)
		return exitFailed
	}
	srv := &http.Server{Handler: simMux(live, time.Now()), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "serving %s seed %d: %d replicas on http://%s/metrics and /replica/N/metrics (speed ×%g, onset at %s)\n",
		opt.Scenario, opt.Seed, live.Replicas(), ln.Addr(), *speed, live.Onset().Format(time.RFC3339))
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(shut)
			return exitOK
		case err := <-errc:
			fmt.Fprintf(stderr, "whyslow sim serve: %v\n", err)
			return exitFailed
		case now := <-tick.C:
			live.Advance(time.Duration(float64(now.Sub(last)) * *speed))
			last = now
			slog.Debug("Sim advanced", "virtual", live.Now())
		}
	}
}

// simMux routes /metrics to replica 0 and /replica/N/metrics to replica N,
// and likewise the engine's own metrics path where it differs
// (trtllm-serve's /prometheus/metrics). Like a single-process vLLM, each
// replica also exposes process_start_time_seconds (the serve's wall-clock
// start), which lets 'why --scrape' turn lifetime counters into rates;
// the shapes served through a multiprocess registry leave it out
// (sim.Live.ProcessStart).
func simMux(live *sim.Live, started time.Time) http.Handler {
	startLine := fmt.Sprintf("# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.\n"+
		"# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds %.3f\n", float64(started.UnixMilli())/1000)
	replica := func(n int) http.Handler {
		h := live.Handler(n)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.ServeHTTP(w, r)
			if live.ProcessStart() {
				_, _ = io.WriteString(w, startLine)
			}
		})
	}
	byN := func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(r.PathValue("n"))
		if err != nil || n < 0 || n >= live.Replicas() {
			http.Error(w, fmt.Sprintf("no replica %q (have 0..%d)", r.PathValue("n"), live.Replicas()-1), http.StatusNotFound)
			return
		}
		replica(n).ServeHTTP(w, r)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", replica(0))
	mux.HandleFunc("GET /replica/{n}/metrics", byN)
	if p := live.MetricsPath(); p != "/metrics" {
		mux.Handle("GET "+p, replica(0))
		mux.HandleFunc("GET /replica/{n}"+p, byN)
	}
	return mux
}

// writeSimTraces writes the bundle's traces: the requests of its incident
// and baseline windows (sampled to perWindow each), as an llm-d gateway in
// front of vLLM would trace them.
func writeSimTraces(dir string, b *sim.Bundle, recs []sim.RequestRecord, seed int64, perWindow int, gz bool, stdout io.Writer) error {
	path, kept, err := simtrace.WriteBundleTraces(dir, b, recs, seed, perWindow, gz)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s: %d of %d requests traced\n", path, kept, len(recs))
	return nil
}
