package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/whyslow/whyslow/daemon"
	"github.com/whyslow/whyslow/notifiers"
	"github.com/whyslow/whyslow/notifiers/render"
	"github.com/whyslow/whyslow/verdict"
)

func init() {
	register(command{name: "replay", summary: "run the daemon's detect → incident → notify loop over a past interval and print what it would have sent", run: runReplay})
}

// replayFlags are the flags of `whyslow replay`.
type replayFlags struct {
	config   string
	from, to string
	step     time.Duration
	groupBy  string
	output   string
	source   whyFlags // --bundle, --prometheus and its auth flags, as why has them
}

func runReplay(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f replayFlags
	fs.StringVar(&f.source.bundle, "bundle", "", "incident bundle `DIR` to replay (metrics.om, incident.yaml)")
	registerMaxSeries(fs, &f.source.maxSeries)
	fs.StringVar(&f.source.prometheus, "prometheus", "", "Prometheus-compatible query API base `URL` holding the interval")
	fs.StringVar(&f.config, "config", "", "daemon config `FILE` whose detect, incidents, triage and engine settings to replay with (default: the built-in defaults)")
	fs.StringVar(&f.from, "from", "", "start of the interval, RFC 3339 (with --bundle default: an hour after its first sample, once the baseline exists)")
	fs.StringVar(&f.to, "to", "", "end of the interval, RFC 3339 (with --bundle default: its last sample)")
	fs.DurationVar(&f.step, "step", 0, "time between cycles (default the config's interval: 15s with --prometheus, 5s with --bundle)")
	fs.StringVar(&f.groupBy, "group-by", "", "scope labels, comma-separated (detect.group_by; default the config's, model_name)")
	fs.StringVar(&f.output, "output", "text", "output format: text (one line per notification) or json (one object per line)")
	fs.DurationVar(&f.source.timeout, "timeout", 30*time.Second, "timeout for remote queries")
	fs.StringVar(&f.source.token, "bearer-token", "", "bearer token for --prometheus (or env WHYSLOW_BEARER_TOKEN)")
	fs.StringVar(&f.source.basicUser, "basic-user", "", "basic-auth user for --prometheus")
	fs.StringVar(&f.source.basicPass, "basic-password", "", "basic-auth password for --prometheus (or env WHYSLOW_BASIC_PASSWORD)")
	if code, done := parseFlags(fs, args, stdout); done {
		return code
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "whyslow replay: "+format+"\n", a...)
		return exitFailed
	}
	if fs.NArg() > 0 {
		return fail("unexpected argument %q", fs.Arg(0))
	}
	if (f.source.bundle == "") == (f.source.prometheus == "") {
		return fail("give exactly one of --bundle DIR or --prometheus URL")
	}
	if f.output != "text" && f.output != "json" {
		return fail("unknown output format %q (want text or json)", f.output)
	}
	var cfg daemon.Config
	if f.config != "" {
		c, err := loadConfigFile(f.config)
		if err != nil {
			return fail("%v", err)
		}
		cfg = c
	}
	if f.groupBy != "" {
		cfg.Detect.GroupBy = splitList(f.groupBy)
	}
	o := daemon.ReplayOptions{Config: cfg, Step: f.step}
	var err error
	if o.From, err = parseTimeFlag("--from", f.from); err != nil {
		return fail("%v", err)
	}
	if o.To, err = parseTimeFlag("--to", f.to); err != nil {
		return fail("%v", err)
	}
	if f.source.prometheus != "" {
		if o.From.IsZero() || o.To.IsZero() {
			return fail("--prometheus needs --from and --to")
		}
		c, err := remoteClient(&f.source)
		if err != nil {
			return fail("%v", err)
		}
		o.Metrics = c
		// A fleet's defaults: its interval and each scope's own engine.
		o.Config.Source.Prometheus = &daemon.PrometheusSource{URL: f.source.prometheus}
		o.Config.EngineURLs = nil
	} else {
		b, st, stats, err := openBundle(ctx, f.source.bundle, f.source.maxSeries)
		if err != nil {
			return fail("%v", err)
		}
		defer st.Close()
		// A DataSpanner: a replay over no data says where the data lies, as why does.
		o.Metrics, o.HistoryStart = st, stats.MinTime
		if o.Config.Engine == "" && b.Incident != nil && b.Incident.Engine != "" {
			o.Config.Engine = b.Incident.Engine
		}
		if o.From.IsZero() {
			o.From = stats.MinTime.Add(o.Config.WithDefaults().Detect.Baseline)
		}
		if o.To.IsZero() {
			o.To = stats.MaxTime
		}
	}
	asJSON := f.output == "json"
	o.OnNotification = func(n *notifiers.Notification) { printReplayed(stdout, n, asJSON) }
	res, err := daemon.Replay(ctx, o)
	if err != nil {
		return fail("%v", unreachableCause(err))
	}
	if res.NoData != nil {
		// Nothing was replayed: "0 notifications" is no all-clear.
		return fail("the interval holds no engine data: %s", res.NoData.Message)
	}
	if !asJSON {
		opened := 0
		for _, n := range res.Notifications {
			if n.Kind == notifiers.TransitionOpen {
				opened++
			}
		}
		fmt.Fprintf(stdout, "replayed %s..%s: %d cycles, %d queries, %d notifications, %d incidents opened\n",
			o.From.UTC().Format(time.RFC3339), o.To.UTC().Format(time.RFC3339), res.Cycles, res.Queries, len(res.Notifications), opened)
	}
	if res.Failed > 0 {
		fmt.Fprintf(stderr, "whyslow replay: %d of %d cycles failed to detect (the others ran); the last: %v\n", res.Failed, res.Cycles, unreachableCause(res.LastError))
	}
	if len(res.Notifications) > 0 {
		return exitCause
	}
	return exitOK
}

func parseTimeFlag(name, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s %q: want RFC 3339, e.g. 2026-01-01T10:00:00Z", name, s)
	}
	return t, nil
}

// replayedLine is one notification of a replay, as JSON.
type replayedLine struct {
	At         time.Time        `json:"at"`
	Kind       string           `json:"kind"`
	IncidentID string           `json:"incident_id"`
	Scope      string           `json:"scope"`
	Severity   verdict.Severity `json:"severity"`
	Cause      string           `json:"cause,omitempty"`
	Confidence *float64         `json:"confidence,omitempty"`
	Verdict    *verdict.Verdict `json:"verdict"`
}

func printReplayed(w io.Writer, n *notifiers.Notification, asJSON bool) {
	v := n.Verdict
	line := replayedLine{At: n.CreatedAt.UTC(), Kind: string(n.Kind), IncidentID: n.IncidentID, Scope: v.Scope.Selector, Severity: v.Severity, Verdict: render.Normalize(v)}
	if len(v.Causes) > 0 {
		c := v.Causes[0]
		line.Cause, line.Confidence = c.ID, &c.Confidence
	}
	if asJSON {
		b, err := json.Marshal(line)
		if err == nil {
			fmt.Fprintf(w, "%s\n", b)
		}
		return
	}
	cause := "-"
	if line.Cause != "" {
		cause = fmt.Sprintf("%s %.0f%%", line.Cause, 100**line.Confidence)
	}
	fmt.Fprintf(w, "%s  %-8s %s  %s  %s  %s\n", line.At.Format(time.RFC3339), strings.ToUpper(line.Kind), line.Scope, line.Severity, cause, render.Summary(v))
}
