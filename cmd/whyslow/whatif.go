package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/whyslow/whyslow/collectors/bundle"
	"github.com/whyslow/whyslow/notifiers/render"
	"github.com/whyslow/whyslow/query"
	"github.com/whyslow/whyslow/rulesets"
	"github.com/whyslow/whyslow/verdict"
	"github.com/whyslow/whyslow/whatif"
)

func init() {
	register(command{name: "whatif", summary: "predict what a fix would do: the engine fitted to a bundle, replayed with the fix", run: runWhatif})
}

// whatifFlags are the flags of `whyslow whatif`.
type whatifFlags struct {
	bundle    string
	maxSeries int
	selector  string
	at        string
	window    time.Duration
	baseline  time.Duration
	engine    string
	gpu       string
	output    string
	sweep     string

	fix whatif.Fix
}

func (f *whatifFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.bundle, "bundle", "", "incident bundle `DIR` (metrics.om, incident.yaml); required")
	registerMaxSeries(fs, &f.maxSeries)
	fs.StringVar(&f.selector, "selector", "", "PromQL label matchers for the scope, without braces (default the bundle's)")
	fs.StringVar(&f.at, "at", "", "end of the incident window, RFC 3339 (default the bundle's incident.yaml)")
	fs.DurationVar(&f.window, "window", 0, "incident window length (default 5m, or the bundle's)")
	fs.DurationVar(&f.baseline, "baseline", 0, "offset back from --at to the baseline window (default 1h, or the bundle's)")
	fs.StringVar(&f.engine, "engine", "auto", "engine: "+rulesets.OneOf(append([]string{"auto"}, rulesets.Engines...)...))
	fs.StringVar(&f.gpu, "gpu", "", "GPU class when the bundle does not say (e.g. H100, A100, H200)")
	fs.StringVar(&f.output, "output", "text", "output format: text or json")
	fs.StringVar(&f.sweep, "sweep", "", "one row per value: `NAME=A..B` with NAME replicas (step 1), max-num-batched-tokens, max-num-seqs or prompt-cap (doubling)")
	fs.IntVar(&f.fix.Replicas, "replicas", 0, "fix: this many serving replicas")
	fs.Float64Var(&f.fix.ReplicasFactor, "replicas-factor", 0, "fix: the serving replicas times this")
	fs.IntVar(&f.fix.MaxNumBatchedTokens, "max-num-batched-tokens", 0, "fix: the per-step token budget (SGLang --chunked-prefill-size, TensorRT-LLM max_num_tokens)")
	fs.IntVar(&f.fix.MaxNumSeqs, "max-num-seqs", 0, "fix: the most running requests per replica (SGLang --max-running-requests, TensorRT-LLM max_batch_size)")
	fs.Float64Var(&f.fix.KVFactor, "kv-factor", 0, "fix: the KV pool times this (gpu_memory_utilization and the like)")
	fs.BoolVar(&f.fix.RestorePrefix, "restore-prefix", false, "fix: the baseline's prefix-cache hit rate back")
	fs.BoolVar(&f.fix.RestoreClock, "restore-clocks", false, "fix: the baseline's GPU clocks back")
	fs.BoolVar(&f.fix.Rebalance, "rebalance", false, "fix: even routing across the replicas")
	fs.IntVar(&f.fix.PromptCap, "prompt-cap", 0, "fix: prompts truncated to this many tokens at the gateway")
}

// whatifUsage prints the command's usage.
func whatifUsage(fs *flag.FlagSet) func() {
	return func() {
		w := fs.Output()
		fmt.Fprintln(w, "usage: whyslow whatif --bundle DIR [fix flags] [--sweep NAME=A..B] [--output text|json]")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Fits the engine to the bundle's incident (arrivals, prompt and output lengths, step time,")
		fmt.Fprintln(w, "KV pool, scheduler) and replays it with the fix. Without a fix flag, every catalogued fix")
		fmt.Fprintln(w, "the data supports is predicted. Exit 0: predictions printed; 2: bad flags, an unreadable")
		fmt.Fprintln(w, "bundle, or no prediction (the missing series are named).")
		fmt.Fprintln(w)
		fs.PrintDefaults()
	}
}

func runWhatif(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("whatif", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f whatifFlags
	f.register(fs)
	fs.Usage = whatifUsage(fs)
	if code, done := parseFlags(fs, args, stdout); done {
		return code
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "whyslow whatif: "+format+"\n", a...)
		return exitFailed
	}
	if fs.NArg() > 0 {
		return fail("unexpected argument %q", fs.Arg(0))
	}
	if f.bundle == "" {
		return fail("--bundle DIR is required")
	}
	if f.output != "text" && f.output != "json" {
		return fail("--output %q: want text or json", f.output)
	}
	if f.fix.Replicas < 0 || f.fix.ReplicasFactor < 0 || f.fix.MaxNumBatchedTokens < 0 || f.fix.MaxNumSeqs < 0 || f.fix.KVFactor < 0 || f.fix.PromptCap < 0 {
		return fail("a fix flag is negative")
	}
	fixes, err := whatifFixes(f.fix, f.sweep)
	if err != nil {
		return fail("%v", err)
	}
	wf := whyFlags{bundle: f.bundle, maxSeries: f.maxSeries, selector: f.selector, at: f.at, window: f.window,
		baseline: f.baseline, engine: f.engine, gpu: f.gpu}
	opts, err := whyOptions(&wf)
	if err != nil {
		return fail("%s", render.EscapeLines(err.Error()))
	}
	opts.Explain = true
	b, err := bundle.Load(f.bundle)
	if err != nil {
		return fail("%v", err)
	}
	given := schedulerOf(bundle.Scheduler{})
	if b.Incident != nil {
		given = schedulerOf(b.Incident.Scheduler)
	}
	var model *whatif.Model
	build := func(ctx context.Context, m query.Metrics, v *verdict.Verdict) error {
		rss, err := wf.maps.For(v.Engine)
		if err != nil {
			return err
		}
		model, err = whatif.FromVerdict(ctx, m, rss[0], v, given)
		return err
	}
	if _, err := whyBundle(ctx, f.bundle, f.maxSeries, opts, wf.maps, build); err != nil {
		var me *whatif.MissingError
		if errors.As(err, &me) {
			return fail("%s", me.Error())
		}
		return fail("%s", render.EscapeLines(err.Error()))
	}
	if fixes == nil {
		fixes = whatif.Catalogue(whatif.Fix{MaxNumBatchedTokens: model.In.Scheduler.MaxNumBatchedTokens, MaxNumSeqs: model.In.Scheduler.MaxNumSeqs})
	}
	report := whatifReport{Model: model}
	for _, fx := range fixes {
		p, err := model.Predict(fx)
		if err != nil {
			report.Declined = append(report.Declined, declined{Fix: fx.String(), Reason: err.Error()})
			continue
		}
		report.Predictions = append(report.Predictions, p)
	}
	if f.fix == (whatif.Fix{}) && f.sweep == "" {
		// the catalogue: best predicted TTFT p95 first, unless none helps
		sort.SliceStable(report.Predictions, func(i, j int) bool {
			return report.Predictions[i].TTFTP95.Median < report.Predictions[j].TTFTP95.Median
		})
		report.NoneHelps = model.NoneHelps(report.Predictions)
	}
	if len(report.Predictions) == 0 {
		for _, d := range report.Declined {
			fmt.Fprintf(stderr, "whyslow whatif: %s: %s\n", d.Fix, d.Reason)
		}
		return exitFailed
	}
	if f.output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(report.json()); err != nil {
			return fail("%v", err)
		}
		return exitOK
	}
	report.text(stdout)
	return exitOK
}

// whatifFixes is the fixes to predict: the flags' fix, one per sweep
// value on top of it, or without either the catalogue.
func whatifFixes(base whatif.Fix, sweep string) ([]whatif.Fix, error) {
	if sweep == "" {
		if base != (whatif.Fix{}) {
			return []whatif.Fix{base}, nil
		}
		return nil, nil // the catalogue, once the scheduler is known
	}
	name, rng, ok := strings.Cut(sweep, "=")
	lo, hi, ok2 := strings.Cut(rng, "..")
	a, err1 := strconv.Atoi(lo)
	b, err2 := strconv.Atoi(hi)
	if !ok || !ok2 || err1 != nil || err2 != nil || a < 1 || b < a {
		return nil, fmt.Errorf("--sweep %q: want NAME=A..B with 1 ≤ A ≤ B, e.g. replicas=2..8", sweep)
	}
	var out []whatif.Fix
	step := func(x int) int { return 2 * x }
	set := func(f *whatif.Fix, x int) {}
	switch name {
	case "replicas":
		step = func(x int) int { return x + 1 }
		set = func(f *whatif.Fix, x int) { f.Replicas, f.ReplicasFactor = x, 0 }
	case "max-num-batched-tokens":
		set = func(f *whatif.Fix, x int) { f.MaxNumBatchedTokens = x }
	case "max-num-seqs":
		set = func(f *whatif.Fix, x int) { f.MaxNumSeqs = x }
	case "prompt-cap":
		set = func(f *whatif.Fix, x int) { f.PromptCap = x }
	default:
		return nil, fmt.Errorf("--sweep %q: NAME is one of replicas, max-num-batched-tokens, max-num-seqs, prompt-cap", sweep)
	}
	for x := a; x <= b; x = step(x) {
		fx := base
		set(&fx, x)
		out = append(out, fx)
		if len(out) > 32 {
			return nil, fmt.Errorf("--sweep %q: more than 32 rows", sweep)
		}
	}
	return out, nil
}

type declined struct {
	Fix    string `json:"fix"`
	Reason string `json:"reason"`
}

// whatifReport is what the command prints.
type whatifReport struct {
	Model       *whatif.Model
	Predictions []*whatif.Prediction
	Declined    []declined
	// NoneHelps is the catalogue's "no catalogued fix is predicted to
	// help: …", "" when one does or fixes were given.
	NoneHelps string
}

func (r whatifReport) text(w io.Writer) {
	m := r.Model
	in := m.In
	fmt.Fprintf(w, "engine %s, scheduler max_num_batched_tokens %d, max_num_seqs %d (%s)\n", in.Engine,
		in.Scheduler.MaxNumBatchedTokens, in.Scheduler.MaxNumSeqs, in.Scheduler.Source)
	fmt.Fprintf(w, "fit: %s\n", m.Fit)
	fmt.Fprintf(w, "calibration: %s\n\n", m.Quality())
	fmt.Fprintf(w, "%-30s %-32s %-28s %s\n", "", "TTFT p95", "inter-token p95", "throughput")
	fmt.Fprintf(w, "%-30s %-32s %-28s %s\n", "observed (incident)", secs(m.Observed.TTFTP95), secs(m.Observed.ITLP95), tps(m.Observed.Throughput))
	fmt.Fprintf(w, "%-30s %-32s %-28s %s\n", "model (incident, no change)", secs(m.Incident.TTFTP95), secs(m.Incident.ITLP95), tps(m.Incident.Throughput))
	for _, p := range r.Predictions {
		fmt.Fprintf(w, "%-30s %-32s %-28s %s\n", p.Fix.String(),
			withRange(p.TTFTP95, secs, m.Incident.TTFTP95), withRange(p.ITLP95, secs, m.Incident.ITLP95),
			tps(p.Throughput.Median))
	}
	fmt.Fprintln(w, "\n(changes are against the model of the incident; ranges over 3 replay seeds)")
	if r.NoneHelps != "" {
		fmt.Fprintf(w, "\n%s\n", r.NoneHelps)
	}
	for _, p := range r.Predictions {
		if p.Trade != "" {
			fmt.Fprintf(w, "\n%s %s", p.Fix.String(), p.Trade)
		}
	}
	for _, d := range r.Declined {
		fmt.Fprintf(w, "\n%s: %s", d.Fix, d.Reason)
	}
	fmt.Fprintln(w)
}

// withRange writes a predicted value, its change from the observed one
// and, when the seeds disagree by 5% or more, its range.
func withRange(r whatif.Range, f func(float64) string, observed float64) string {
	s := f(r.Median)
	if observed > 0 {
		s += fmt.Sprintf(" %+.0f%%", 100*(r.Median/observed-1))
	}
	if r.Median > 0 && (r.High-r.Low)/r.Median >= 0.05 {
		s += " (" + f(r.Low) + "–" + f(r.High) + ")"
	}
	return s
}

func secs(x float64) string {
	switch {
	case math.IsNaN(x) || math.IsInf(x, 0):
		return "—"
	case x >= 1:
		return fmt.Sprintf("%.2fs", x)
	}
	return fmt.Sprintf("%.0fms", 1000*x)
}

func tps(x float64) string { return fmt.Sprintf("%.0f tok/s", x) }

type rangeJSON struct {
	Median float64 `json:"median"`
	Low    float64 `json:"low"`
	High   float64 `json:"high"`
}

type predictionJSON struct {
	Fix        string    `json:"fix"`
	TTFTP95    rangeJSON `json:"ttft_p95_seconds"`
	ITLP95     rangeJSON `json:"inter_token_p95_seconds"`
	Throughput rangeJSON `json:"throughput_tokens_per_second"`
	Trade      string    `json:"trade,omitempty"`
}

type whatifJSON struct {
	Engine              string           `json:"engine"`
	MaxNumBatchedTokens int              `json:"max_num_batched_tokens"`
	MaxNumSeqs          int              `json:"max_num_seqs"`
	SchedulerSource     string           `json:"scheduler_source"`
	Fit                 string           `json:"fit"`
	FitR2               float64          `json:"fit_r2"`
	Calibration         string           `json:"calibration"`
	PoorFit             bool             `json:"poor_fit"`
	Observed            predictionJSON   `json:"observed"`
	Incident            predictionJSON   `json:"model_incident"`
	Predictions         []predictionJSON `json:"predictions"`
	Declined            []declined       `json:"declined,omitempty"`
	NoneHelps           string           `json:"none_helps,omitempty"`
}

func (r whatifReport) json() whatifJSON {
	m := r.Model
	one := func(x float64) rangeJSON { return rangeJSON{whatif.Round4(x), whatif.Round4(x), whatif.Round4(x)} }
	rg := func(x whatif.Range) rangeJSON {
		return rangeJSON{whatif.Round4(x.Median), whatif.Round4(x.Low), whatif.Round4(x.High)}
	}
	out := whatifJSON{Engine: m.In.Engine, MaxNumBatchedTokens: m.In.Scheduler.MaxNumBatchedTokens,
		MaxNumSeqs: m.In.Scheduler.MaxNumSeqs, SchedulerSource: m.In.Scheduler.Source, Fit: m.Fit.String(),
		FitR2: whatif.Round4(m.Fit.R2), Calibration: m.Quality(), PoorFit: m.Poor(),
		Observed: predictionJSON{Fix: "none (observed)", TTFTP95: one(m.Observed.TTFTP95), ITLP95: one(m.Observed.ITLP95),
			Throughput: one(m.Observed.Throughput)},
		Incident: predictionJSON{Fix: "none (model)", TTFTP95: one(m.Incident.TTFTP95), ITLP95: one(m.Incident.ITLP95),
			Throughput: one(m.Incident.Throughput)},
		Declined: r.Declined, NoneHelps: r.NoneHelps}
	for _, p := range r.Predictions {
		out.Predictions = append(out.Predictions, predictionJSON{Fix: p.Fix.String(), TTFTP95: rg(p.TTFTP95),
			ITLP95: rg(p.ITLP95), Throughput: rg(p.Throughput), Trade: p.Trade})
	}
	return out
}

// predictFixes fills v.Predicted (why --predict): whatif.ForVerdict on
// the same source, with the bundle's scheduler when it has one. Missing
// series are said in the verdict, not an error.
func predictFixes(ctx context.Context, f *whyFlags, m query.Metrics, v *verdict.Verdict) error {
	if v.Status == verdict.StatusInsufficientData || v.Engine == "" {
		v.Predicted = &verdict.Predicted{Missing: "no prediction: the triage had too little data"}
		return nil
	}
	rss, err := f.maps.For(v.Engine)
	if err != nil {
		return err
	}
	given := schedulerOf(bundle.Scheduler{})
	if f.bundle != "" {
		if b, err := bundle.Load(f.bundle); err == nil && b.Incident != nil {
			given = schedulerOf(b.Incident.Scheduler)
		}
	}
	p, err := whatif.ForVerdict(ctx, m, rss, v, given)
	if err != nil {
		return fmt.Errorf("--predict: %w", err)
	}
	v.Predicted = p
	return nil
}
