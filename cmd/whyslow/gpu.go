package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"

	"github.com/whyslow/whyslow/collectors/gpu"
)

func init() {
	register(command{name: "gpu", summary: "GPU counters: gpu probe [--json] lists what NVML can read here", run: runGPU})
}

// runGPU implements `whyslow gpu probe [--json] [--visible LIST] [--pid PIDS]`.
//
// The probe prints every counter the NVML collector reads on this machine,
// with values, and every counter it cannot read and why. A machine without
// NVML (no driver, or a CGO_ENABLED=0 build) exits 0 with "no NVML: <reason>":
// the probe's job is to tell what is there, and "nothing" is a valid answer
// that whyslow itself runs with. Exit 2 is kept for bad flags and for NVML
// failing after a successful Init.
func runGPU(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	usage := func() {
		fmt.Fprintln(stderr, "usage: whyslow gpu probe [--json] [--visible LIST] [--pid PID,...]")
	}
	if len(args) == 0 || args[0] != "probe" {
		usage()
		return exitFailed
	}
	fs := flag.NewFlagSet("gpu probe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		usage()
		fs.PrintDefaults()
	}
	asJSON := fs.Bool("json", false, "print JSON instead of text")
	visible := fs.String("visible", "", "GPUs to read, CUDA_VISIBLE_DEVICES style: indices and GPU UUIDs, comma-separated (default all)")
	pidList := fs.String("pid", "", "engine PIDs, comma-separated: read only the GPUs running one of them")
	verbose := fs.Bool("v", false, "log at debug level to stderr")
	if err := parseQuiet(fs, args[1:]); err != nil {
		return exitFailed
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "whyslow gpu probe: unexpected argument %q\n", fs.Arg(0))
		return exitFailed
	}
	pids, err := parsePIDs(*pidList)
	if err != nil {
		fmt.Fprintf(stderr, "whyslow gpu probe: %v\n", err)
		return exitFailed
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelDebug
	}
	opts := gpu.Options{
		Visible: *visible,
		Logger:  slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})),
	}
	if len(pids) > 0 {
		opts.EnginePIDs = func() []int { return pids }
	}
	res, err := gpu.Probe(ctx, opts)
	if err != nil {
		fmt.Fprintf(stderr, "whyslow gpu probe: %v\n", err)
		return exitFailed
	}
	if *asJSON {
		err = res.WriteJSON(stdout)
	} else {
		err = res.WriteText(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "whyslow gpu probe: write: %v\n", err)
		return exitFailed
	}
	return exitOK
}

// parsePIDs parses a comma-separated list of process ids.
func parsePIDs(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []int
	for i, tok := range strings.Split(s, ",") {
		tok = strings.TrimSpace(tok)
		n, err := strconv.Atoi(tok)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("--pid %q: entry %d %q is not a process id", s, i+1, tok)
		}
		out = append(out, n)
	}
	return out, nil
}
