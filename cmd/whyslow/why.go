package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/whyslow/whyslow/collectors/bundle"
	"github.com/whyslow/whyslow/collectors/store"
	"github.com/whyslow/whyslow/diagnose"
	"github.com/whyslow/whyslow/notifiers/render"
	"github.com/whyslow/whyslow/query"
	"github.com/whyslow/whyslow/rules"
	"github.com/whyslow/whyslow/rulesets"
	"github.com/whyslow/whyslow/verdict"
)

func init() {
	register(command{name: "why", summary: "triage one scope now: ranked root causes with evidence and the fix", run: runWhy})
}

// whyFlags are the flags of `whyslow why`.
type whyFlags struct {
	bundle     string
	maxSeries  int
	scrape     string
	prometheus string
	server     string
	selector   string
	at         string
	window     time.Duration
	baseline   time.Duration
	sample     time.Duration
	engine     string
	gpu        string
	output     string
	explain    bool
	rulesets   stringList
	slos       stringList
	timeout    time.Duration
	token      string
	basicUser  string
	basicPass  string
	color      bool
	chart      string
	html       htmlFile   // why_html.go
	groupBy    string     // why_fleet.go
	maxScopes  int        // why_fleet.go
	traces     traceFlags // why_traces.go
	predict    bool       // whatif.go

	// maps are the engine maps of this run, the shipped ones and those of
	// --ruleset, built once by whyOptions for every reader: the chart, the
	// pages, the fleet's detector.
	maps *rulesets.Maps
}

func (f *whyFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.bundle, "bundle", "", "incident bundle `DIR` to replay (metrics.om, incident.yaml)")
	registerMaxSeries(fs, &f.maxSeries)
	fs.StringVar(&f.scrape, "scrape", "", "engine /metrics `URL[,URL]` to sample directly (no Prometheus)")
	fs.StringVar(&f.prometheus, "prometheus", "", "Prometheus-compatible query API base `URL` (Prometheus, Thanos, Mimir, VictoriaMetrics)")
	fs.StringVar(&f.server, "server", "", "a running whyslow daemon's base `URL`: ask it to triage (POST /api/v1/triage)")
	fs.StringVar(&f.selector, "selector", "", "PromQL label matchers for the scope, without braces (e.g. model_name=\"llama\")")
	fs.StringVar(&f.at, "at", "", "end of the incident window, RFC 3339 (default now, or the bundle's incident.yaml)")
	fs.DurationVar(&f.window, "window", 0, "incident window length (default 5m, or the bundle's)")
	fs.DurationVar(&f.baseline, "baseline", 0, "offset back from --at to the baseline window (default 1h, or the bundle's)")
	fs.DurationVar(&f.sample, "sample", 20*time.Second, "with --scrape: how long to sample the engine")
	fs.StringVar(&f.engine, "engine", "auto", "engine: "+rulesets.OneOf(append([]string{"auto"}, rulesets.Engines...)...))
	fs.StringVar(&f.gpu, "gpu", "", "GPU class when the source does not say (e.g. H100, A100, H200)")
	fs.StringVar(&f.output, "output", "text", "output format: text, json or markdown")
	fs.BoolVar(&f.explain, "explain", false, "show every signal value and rule outcome behind the verdict")
	fs.Var(&f.rulesets, "ruleset", "ruleset `FILE` to use instead of the shipped one (repeatable)")
	fs.Var(&f.slos, "slo", "an SLO bound on the incident window that makes it an anomaly on its own, e.g. 'ttft_p95 > 2s' or 'success_rate < 99%' (repeatable)")
	fs.DurationVar(&f.timeout, "timeout", 30*time.Second, "timeout for remote queries")
	fs.StringVar(&f.token, "bearer-token", "", "bearer token for --prometheus or --server (or env WHYSLOW_BEARER_TOKEN)")
	fs.StringVar(&f.basicUser, "basic-user", "", "basic-auth user for --prometheus")
	fs.StringVar(&f.basicPass, "basic-password", "", "basic-auth password for --prometheus (or env WHYSLOW_BASIC_PASSWORD)")
	fs.BoolVar(&f.color, "color", false, "colour text output")
	fs.StringVar(&f.chart, "chart", "", "also write a PNG chart of TTFT/ITL p95, KV-cache usage, queue depth, request rate and preemptions to `FILE`")
	fs.Var(&f.html, "html", "also write the verdict page (causes, attribution, curves) as one self-contained HTML `FILE`")
	fs.StringVar(&f.groupBy, "group-by", "", "rank every scope by these labels (comma-separated, e.g. namespace,model_name) and triage each anomalous one")
	fs.IntVar(&f.maxScopes, "max-scopes", defaultMaxScopes, "with --group-by: the most anomalous scopes triaged, the furthest from their baseline or bound first (the rest are named in one line)")
	fs.BoolVar(&f.predict, "predict", false, "also predict what the usual fixes would do (the model of 'whyslow whatif'; JSON: predicted)")
	f.traces.register(fs)
}

func runWhy(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("why", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f whyFlags
	f.register(fs)
	if err := parseQuiet(fs, args); err != nil {
		return exitFailed
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "whyslow why: unexpected argument %q\n", fs.Arg(0))
		return exitFailed
	}
	if f.traces.oneRequest() {
		return runWhyRequest(ctx, &f, stdout, stderr)
	}
	if f.groupBy != "" {
		return runWhyFleet(ctx, &f, stdout, stderr)
	}
	format, err := render.ParseFormat(f.output)
	if err != nil {
		fmt.Fprintf(stderr, "whyslow why: %v\n", err)
		return exitFailed
	}
	v, err := whyVerdict(ctx, &f, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "whyslow why: %s\n", render.EscapeLines(err.Error()))
		return exitFailed
	}
	if err := render.Render(stdout, v, format, render.Options{Explain: f.explain, Color: f.color, Indent: true}); err != nil {
		fmt.Fprintf(stderr, "whyslow why: render: %v\n", err)
		return exitFailed
	}
	return verdictExit(v, stderr)
}

// verdictExit maps a verdict to the CLI's exit code.
func verdictExit(v *verdict.Verdict, stderr io.Writer) int {
	switch v.Status {
	case verdict.StatusAnomaly:
		return exitCause
	case verdict.StatusHealthy:
		return exitOK
	}
	reason := "not enough data to judge"
	if v.InsufficientReason != nil && v.InsufficientReason.Message != "" {
		reason = v.InsufficientReason.Message
	} else if len(v.DataGaps) > 0 {
		reason = v.DataGaps[0].Signal + ": " + v.DataGaps[0].Reason
	}
	fmt.Fprintf(stderr, "whyslow why: insufficient data: %s\n", render.Escape(reason))
	return exitFailed
}

// whyVerdict opens the chosen source and triages it.
func whyVerdict(ctx context.Context, f *whyFlags, stderr io.Writer) (*verdict.Verdict, error) {
	sources := 0
	for _, s := range []string{f.bundle, f.scrape, f.prometheus, f.server} {
		if s != "" {
			sources++
		}
	}
	if sources != 1 {
		return nil, errors.New("give exactly one source: --bundle DIR, --scrape URL, --prometheus URL or --server URL")
	}
	opts, err := whyOptions(f)
	if err != nil {
		return nil, err
	}
	switch {
	case f.bundle != "":
		return whyBundle(ctx, f.bundle, f.maxSeries, opts, f.maps, f.finish)
	case f.server != "":
		return whyServer(ctx, f, opts)
	case f.prometheus != "":
		return whyPrometheus(ctx, f, opts)
	default:
		return whyScrape(ctx, f, opts)
	}
}

// whyOptions are the triage options the flags ask for, with the rulesets
// and the traces source.
func whyOptions(f *whyFlags) (diagnose.Options, error) {
	opts := diagnose.Options{
		Window:   f.window,
		Baseline: f.baseline,
		Selector: f.selector,
		Engine:   f.engine,
		GPU:      f.gpu,
		Explain:  f.explain,
	}
	if f.gpu != "" {
		opts.GPUSource = "--gpu"
	}
	if f.at != "" {
		at, err := time.Parse(time.RFC3339, f.at)
		if err != nil {
			return opts, fmt.Errorf("--at %q: want RFC 3339 (e.g. 2026-01-01T10:00:00Z)", f.at)
		}
		opts.At = at
	}
	for _, s := range f.slos {
		slo, err := diagnose.ParseSLO(s)
		if err != nil {
			return opts, fmt.Errorf("--slo: %w", err)
		}
		opts.SLOs = append(opts.SLOs, slo)
	}
	if err := checkChartPath(f.chart); err != nil {
		return opts, err
	}
	if err := loadRulesets(&opts, f.rulesets); err != nil {
		return opts, err
	}
	f.maps = rulesets.Shipped().WithUser(append(opts.Rulesets, opts.Ruleset)...)
	if err := knownEngine(f.maps, "--engine", opts.Engine); err != nil {
		return opts, err
	}
	tr, err := openTraces(f)
	if err != nil {
		return opts, err
	}
	opts.Traces = tr
	return opts, nil
}

// loadRulesets puts either the user's rulesets or the shipped ones into opts.
func loadRulesets(opts *diagnose.Options, files []string) error {
	if len(files) > 0 {
		if opts.Engine != "" && opts.Engine != "auto" {
			rs, err := rulesets.Load(opts.Engine, files...)
			if err != nil {
				return fmt.Errorf("ruleset: %w", err)
			}
			opts.Ruleset = rs
			return nil
		}
		rss, err := rulesets.LoadAll(files...)
		if err != nil {
			return fmt.Errorf("ruleset: %w", err)
		}
		if len(rss) == 1 {
			opts.Ruleset = rss[0]
		} else {
			opts.Rulesets = rss
		}
		return nil
	}
	// The shipped ones are compiled when the triage runs (shippedRulesets),
	// once the engine is known: a bundle's incident.yaml may name it.
	return nil
}

// knownEngine fails, naming the maps loaded, for an engine (from where:
// a flag, incident.yaml) that none of them names; "" and auto pass.
func knownEngine(maps *rulesets.Maps, where, engine string) error {
	if engine == "" || engine == "auto" || maps.Knows(engine) {
		return nil
	}
	return fmt.Errorf("%s: %w", where, maps.Unknown(engine))
}

// shippedRulesets fills in the shipped rulesets the engine needs when no
// user ruleset was given: one engine's, or all three to detect it.
func shippedRulesets(opts *diagnose.Options) error {
	if opts.Ruleset != nil || len(opts.Rulesets) > 0 {
		return nil
	}
	shipped := rulesets.Shipped()
	rss, err := shipped.For(opts.Engine)
	if err != nil {
		return fmt.Errorf("shipped rulesets: %w", err)
	}
	opts.Rulesets = rss
	if engine := opts.Engine; engine != "" && engine != "auto" {
		opts.OtherEngines = func() []*rules.Ruleset { return shipped.Others(engine) }
	}
	return nil
}

// checkChartPath fails early, before any query, when --chart names a file
// in a directory that does not exist.
func checkChartPath(path string) error {
	if path == "" {
		return nil
	}
	dir := filepath.Dir(path)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("--chart %s: directory %s does not exist", path, dir)
	}
	return nil
}

// finishFunc runs after the triage while its metrics source is still open.
type finishFunc func(ctx context.Context, m query.Metrics, v *verdict.Verdict) error

// finish writes the --html and --chart files, if asked for.
func (f *whyFlags) finish(ctx context.Context, m query.Metrics, v *verdict.Verdict) error {
	if f.predict {
		if err := predictFixes(ctx, f, m, v); err != nil {
			return err
		}
	}
	if err := f.html.write(ctx, m, v, f.maps); err != nil {
		return err
	}
	if f.chart == "" {
		return nil
	}
	return writeChart(ctx, m, v, f.chart, f.maps)
}

// triageThen runs the triage and then finish (when set) on the same source.
func triageThen(ctx context.Context, opts diagnose.Options, finish finishFunc) (*verdict.Verdict, error) {
	if err := shippedRulesets(&opts); err != nil {
		return nil, err
	}
	v, err := diagnose.Run(ctx, opts)
	if err != nil || finish == nil {
		return v, err
	}
	if err := finish(ctx, opts.Metrics, v); err != nil {
		return nil, err
	}
	return v, nil
}

// openBundle loads all of a bundle's metrics into a fresh embedded store
// (as `whyslow replay --bundle` needs); the caller closes the store.
// openBundleKeep loads only some windows.
func openBundle(ctx context.Context, dir string, maxSeries int) (*bundle.Bundle, *store.Store, bundle.LoadStats, error) {
	return openBundleKeep(ctx, dir, maxSeries, nil)
}

// whyBundle replays an incident bundle through the embedded store. When the
// incident time is known before loading (incident.yaml or --at), only the
// windows the triage reads are loaded (bundleKeep); a verdict of
// insufficient data, whose diagnosis searches all the data, is then redone
// over the whole bundle.
func whyBundle(ctx context.Context, dir string, maxSeries int, opts diagnose.Options, maps *rulesets.Maps, finish finishFunc) (*verdict.Verdict, error) {
	keep := func(b *bundle.Bundle) []bundle.Window {
		o := opts
		applyIncident(&o, b.Incident)
		return bundleKeep(o)
	}
	for {
		b, st, stats, err := openBundleKeep(ctx, dir, maxSeries, keep)
		if err != nil {
			return nil, err
		}
		o := opts
		applyIncident(&o, b.Incident)
		if o.At.IsZero() {
			// No incident.yaml time: the end of the recorded data is the natural "now".
			o.At = stats.MaxTime
		}
		o.Metrics = st
		err = knownEngine(maps, filepath.Join(dir, "incident.yaml")+": engine", o.Engine)
		if err == nil {
			err = shippedRulesets(&o)
		}
		if err != nil {
			st.Close()
			return nil, err
		}
		v, err := diagnose.Run(ctx, o)
		if keep != nil && stats.Skipped > 0 && (err != nil || v.Status == verdict.StatusInsufficientData) {
			st.Close()
			keep = nil
			continue
		}
		if err == nil && finish != nil {
			err = finish(ctx, o.Metrics, v)
		}
		st.Close()
		if err != nil {
			return nil, err
		}
		return v, nil
	}
}

// applyIncident fills options the user did not set from the bundle's incident.yaml.
func applyIncident(opts *diagnose.Options, in *bundle.Incident) {
	if in == nil {
		return
	}
	if opts.At.IsZero() {
		opts.At = in.At
	}
	if opts.Window == 0 {
		opts.Window = in.Window
	}
	if opts.Baseline == 0 {
		opts.Baseline = in.Baseline
	}
	if opts.Selector == "" {
		opts.Selector = in.Selector
	}
	if (opts.Engine == "" || opts.Engine == "auto") && in.Engine != "" {
		opts.Engine = in.Engine
	}
	if opts.GPU == "" && in.GPU != "" {
		opts.GPU, opts.GPUSource = in.GPU, "incident.yaml"
	}
	opts.Scheduler = schedulerOf(in.Scheduler)
}

// schedulerOf converts the bundle's scheduler block to the rules' view.
func schedulerOf(s bundle.Scheduler) rules.Scheduler {
	if s.ChunkedPrefill == nil && s.MaxNumBatchedTokens == 0 && s.MaxNumSeqs == 0 {
		return rules.Scheduler{}
	}
	out := rules.Scheduler{
		Known:               true,
		MaxNumBatchedTokens: s.MaxNumBatchedTokens,
		MaxNumSeqs:          s.MaxNumSeqs,
		Source:              "incident",
	}
	if s.ChunkedPrefill != nil {
		out.ChunkedPrefill = *s.ChunkedPrefill
	}
	return out
}
