package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/whyslow/whyslow/collectors/bundle"
	"github.com/whyslow/whyslow/daemon/demo"
	"github.com/whyslow/whyslow/diagnose"
	"github.com/whyslow/whyslow/notifiers/render"
	"github.com/whyslow/whyslow/rulesets"
	"github.com/whyslow/whyslow/testbed/sim"
	"github.com/whyslow/whyslow/verdict"
)

func init() {
	register(command{name: "demo", summary: "run an incident in the built-in engine model and triage it (nothing to install)", run: runDemo})
}

// defaultDemoScenario is the incident the demo shows when none is named.
const defaultDemoScenario = "prompt_shift"

// liveProgress is printed to stderr as `demo --live` starts: the daemon then
// plays about 1.5 simulated hours before its first notification.
const liveProgress = "whyslow demo: sampling the engine model for about 25s (1.5 hours of simulated time: " +
	"the baseline hour, the incident, the fix)…"

// runDemo implements `whyslow demo`. Its exit codes are why's: 0 healthy,
// 1 a cause found (with --live: the daemon opened an incident), 2 failed or
// not enough data.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	scenario := fs.String("scenario", defaultDemoScenario, "engine-model scenario to run (see 'whyslow sim list')")
	seed := fs.Int64("seed", 1, "random seed of the scenario instance")
	output := fs.String("output", "text", "output format: text, json or markdown")
	explain := fs.Bool("explain", false, "show every signal value and rule outcome behind the verdict")
	keep := fs.String("keep", "", "also write the recorded incident bundle to `DIR` (replay it with 'whyslow why --bundle DIR')")
	live := fs.Bool("live", false, "play the incident live to the daemon (detect, notify, resolve) instead of triaging its recorded bundle")
	if code, done := parseFlags(fs, args, stdout); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "whyslow demo: unexpected argument %q\n", fs.Arg(0))
		return exitFailed
	}
	if *live {
		// The full loop: the daemon watches the engine model on simulated time,
		// opens the incident with its verdict and prints the resolve.
		fmt.Fprintln(stderr, liveProgress)
		out, err := demo.Play(ctx, stdout, demo.Options{Scenario: *scenario, Seed: *seed, Format: *output})
		if err != nil {
			fmt.Fprintf(stderr, "whyslow demo: %v\n", err)
			return exitFailed
		}
		if out.Opened {
			return exitCause
		}
		return exitOK
	}
	format, err := render.ParseFormat(*output)
	if err != nil {
		fmt.Fprintf(stderr, "whyslow demo: %v\n", err)
		return exitFailed
	}
	v, truth, err := demoVerdict(ctx, *scenario, *seed, *keep, *explain)
	if err != nil {
		fmt.Fprintf(stderr, "whyslow demo: %v\n", err)
		return exitFailed
	}
	if format == render.FormatText {
		fmt.Fprintf(stdout, "Engine model: scenario %q, seed %d (%s). Triaging %s..%s against the hour before.\n\n",
			*scenario, *seed, describeParams(truth.Params), v.Incident.Start.Format("15:04"), v.Incident.End.Format("15:04"))
	}
	if err := render.Render(stdout, v, format, render.Options{Explain: *explain, Indent: true}); err != nil {
		fmt.Fprintf(stderr, "whyslow demo: render: %v\n", err)
		return exitFailed
	}
	if format == render.FormatText {
		fmt.Fprintf(stdout, "\nGround truth: %s\n", truthLine(truth, v))
		fmt.Fprintf(stdout, "Watch the daemon detect, notify and resolve it: whyslow demo --live --scenario %s\n", *scenario)
	}
	return demoExit(v, stderr)
}

// demoExit maps the verdict to why's exit code, and says why in demo's
// name when there was not enough data.
func demoExit(v *verdict.Verdict, stderr io.Writer) int {
	var msg strings.Builder
	code := verdictExit(v, &msg)
	if msg.Len() > 0 {
		fmt.Fprint(stderr, strings.Replace(msg.String(), "whyslow why:", "whyslow demo:", 1))
	}
	return code
}

// demoVerdict records the scenario into a bundle directory and replays it
// through the same path as 'whyslow why --bundle'.
func demoVerdict(ctx context.Context, scenario string, seed int64, keep string, explain bool) (*verdict.Verdict, sim.Truth, error) {
	b, err := sim.Record(ctx, sim.Options{Scenario: scenario, Seed: seed, Trim: true})
	if err != nil {
		return nil, sim.Truth{}, err
	}
	dir := keep
	if dir == "" {
		tmp, err := os.MkdirTemp("", "whyslow-demo-")
		if err != nil {
			return nil, sim.Truth{}, err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	if err := b.WriteDir(dir, false); err != nil {
		return nil, sim.Truth{}, fmt.Errorf("write bundle: %w", err)
	}
	opts := diagnose.Options{Engine: "auto", Explain: explain}
	if err := loadRulesets(&opts, nil); err != nil {
		return nil, sim.Truth{}, err
	}
	v, err := whyBundle(ctx, dir, bundle.DefaultMaxSeries, opts, rulesets.Shipped(), nil)
	return v, b.Truth, err
}

func describeParams(p map[string]any) string {
	var parts []string
	for _, k := range []string{"model", "gpu", "replicas", "engine"} {
		if v, ok := p[k]; ok {
			parts = append(parts, fmt.Sprintf("%s %v", k, v))
		}
	}
	if len(parts) == 0 {
		return "default parameters"
	}
	return strings.Join(parts, ", ")
}

func truthLine(t sim.Truth, v *verdict.Verdict) string {
	if len(t.Causes) == 0 {
		return fmt.Sprintf("nothing was injected (healthy); whyslow says %s", v.Status)
	}
	for _, c := range v.Causes {
		if c.ID == t.Causes[0] {
			return fmt.Sprintf("injected %s at %s; whyslow ranked it #%d", t.Causes[0], t.Onset.Format("15:04"), c.Rank)
		}
	}
	return fmt.Sprintf("injected %s at %s; whyslow did not rank it", t.Causes[0], t.Onset.Format("15:04"))
}
