package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/model"

	"github.com/whyslow/whyslow/detect"
	"github.com/whyslow/whyslow/diagnose"
	"github.com/whyslow/whyslow/notifiers/render"
	"github.com/whyslow/whyslow/rulesets"
	"github.com/whyslow/whyslow/verdict"
)

// fleetConcurrency bounds the triages `why --group-by` runs at once.
const fleetConcurrency = 4

// defaultMaxScopes is --max-scopes: the anomalous scopes `why --group-by`
// triages (each is a hundred-odd queries); against 200,000 series, all of
// them gave no answer in 400 s (issue 26).
const defaultMaxScopes = 20

// notTriagedListed is how many untriaged scopes the one line names.
const notTriagedListed = 5

// rankedScope is one anomalous scope of `why --group-by`.
type rankedScope struct {
	Rank     int              `json:"rank"`
	Scope    verdict.Scope    `json:"scope"`
	Severity verdict.Severity `json:"severity"`
	// Triggers are the detector conditions that hold now, with their values.
	Triggers []string `json:"triggers"`
	// Change is how far the scope moved: the largest rise over the
	// baseline (value / baseline) or past an absolute bound (value /
	// above, below / value) among them.
	Change  float64          `json:"change"`
	Verdict *verdict.Verdict `json:"verdict,omitempty"`
	Error   string           `json:"error,omitempty"`
}

// fleetReport is `why --group-by`'s JSON output.
type fleetReport struct {
	At      time.Time `json:"at"`
	GroupBy []string  `json:"group_by"`
	// Window is the ranking's long window (its short one is half of it
	// with --window, else 1m), e.g. "2m".
	Window string `json:"window"`
	// Baseline is how far back from At the ranking's baseline window ends,
	// e.g. "1h"; with less history than asked for, the history there is
	// (Note says so), "" with too little for any.
	Baseline string `json:"baseline"`
	// Note says the baseline was shortened to the history, e.g. "baseline
	// 8m (learning: 10 of 60 minutes of history)"; each verdict then
	// carries its triage's own as a warning.
	Note      string        `json:"note,omitempty"`
	Scopes    int           `json:"scopes"`
	Anomalous []rankedScope `json:"anomalous"`
	// NotTriaged is the anomalous scopes past --max-scopes: ranked after
	// those in Anomalous, neither listed nor triaged; NotTriagedNote names
	// the first few.
	NotTriaged     int    `json:"not_triaged,omitempty"`
	NotTriagedNote string `json:"not_triaged_note,omitempty"`
	// Truncated says detection read only part of the series (the
	// detector's max_series), e.g. "query answers held 200000 series; the
	// first 100000 were read".
	Truncated string `json:"truncated,omitempty"`
}

// runWhyFleet implements `why --group-by`: the detector's triggers at one
// time over every scope (without their hold: a one-off look has no past
// cycles), the scopes where any condition holds ranked by severity and by
// how far they moved, and each one's verdict.
func runWhyFleet(ctx context.Context, f *whyFlags, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintf(stderr, "whyslow why: %v\n", err)
		return exitFailed
	}
	if f.scrape != "" || f.server != "" || (f.bundle == "") == (f.prometheus == "") {
		return fail(errors.New("--group-by needs exactly one of --prometheus URL or --bundle DIR"))
	}
	if f.output == "markdown" || f.output == "md" || f.chart != "" || f.traces.oneRequest() {
		return fail(errors.New("--group-by writes text or json (no --chart, markdown or single request)"))
	}
	format, err := render.ParseFormat(f.output)
	if err != nil {
		return fail(err)
	}
	opts, err := whyOptions(f)
	if err != nil {
		return fail(err)
	}
	var since time.Time
	if f.bundle != "" {
		b, st, stats, err := openBundle(ctx, f.bundle, f.maxSeries)
		if err != nil {
			return fail(err)
		}
		defer st.Close()
		applyIncident(&opts, b.Incident)
		if err := knownEngine(f.maps, filepath.Join(f.bundle, "incident.yaml")+": engine", opts.Engine); err != nil {
			return fail(err)
		}
		opts.Selector = f.selector // the bundle's scope is one of many here
		if opts.At.IsZero() {
			opts.At = stats.MaxTime
		}
		opts.Metrics, since = st, stats.MinTime
	} else {
		c, err := remoteClient(f)
		if err != nil {
			return fail(err)
		}
		if opts.At.IsZero() {
			opts.At = time.Now()
		}
		opts.Metrics = c
	}
	if f.maxScopes < 1 {
		return fail(fmt.Errorf("--max-scopes %d: want at least 1", f.maxScopes))
	}
	rep, err := rankFleet(ctx, opts, f.maps, splitList(f.groupBy), since, f.window, f.maxScopes)
	if err != nil {
		// One line, however many triages an interrupt stopped.
		return fail(unreachableCause(err))
	}
	if format == render.FormatJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		for i := range rep.Anomalous {
			if v := rep.Anomalous[i].Verdict; v != nil {
				rep.Anomalous[i].Verdict = render.Normalize(v)
			}
		}
		if err := enc.Encode(rep); err != nil {
			return fail(err)
		}
	} else {
		writeFleetText(stdout, rep, f)
	}
	if len(rep.Anomalous) > 0 {
		return exitCause
	}
	return exitOK
}

// rankFleet evaluates the default triggers by groupBy at opts.At and
// triages the scopes where one holds. The triggers compare window (their
// long window, the short one half of it; 0: the detector's 2m and 1m)
// with the baseline opts.Baseline back (0: 1h). The history starts at
// since (zero: asked of the source): with less than the baseline, the
// ranking and the triages compare with the history there is
// (detect.ChooseBaseline) and say so. The triggers read the detector's
// part of every engine map of maps (the shipped ones and --ruleset's).
//
// Only the first maxScopes anomalous scopes are triaged (NotTriaged counts
// the rest). An interrupt (ctx done) stops the triages not yet started and
// returns one error.
func rankFleet(ctx context.Context, opts diagnose.Options, maps *rulesets.Maps, groupBy []string, since time.Time, window time.Duration, maxScopes int) (*fleetReport, error) {
	// One look judges every scope the answers hold (no rotation over
	// cycles); the answers keep the detector's max_series.
	cfg := detect.DetectConfig{GroupBy: groupBy, Selector: opts.Selector, Baseline: opts.Baseline, MaxScopes: math.MaxInt32}
	if window > 0 {
		cfg.LongWindow, cfg.ShortWindow = window, (window / 2).Round(time.Millisecond)
	}
	cfg = cfg.WithDefaults()
	for i := range cfg.Triggers {
		cfg.Triggers[i].For = new(time.Duration) // no past cycles to hold over
	}
	triageWindow := opts.Window
	if triageWindow <= 0 {
		triageWindow = 5 * time.Minute // triage's default
	}
	if cfg.Baseline < max(cfg.LongWindow, triageWindow) {
		return nil, fmt.Errorf("--baseline %s is shorter than the window %s, so the windows overlap",
			model.Duration(cfg.Baseline), model.Duration(max(cfg.LongWindow, triageWindow)))
	}
	engines, err := detect.ReadEngines(maps.Files())
	if err != nil {
		return nil, err
	}
	det, err := detect.NewDetector(cfg, engines)
	if err != nil {
		return nil, err
	}
	if since.IsZero() {
		// A remote Prometheus: how much of the baseline it holds.
		from := opts.At.Add(-cfg.Baseline - max(cfg.LongWindow, triageWindow))
		if since, err = diagnose.HistoryStart(ctx, opts.Metrics, detect.HistorySeries(engines), opts.Selector, from, opts.At); err != nil {
			return nil, err
		}
	}
	dets, err := det.EvaluateSince(ctx, opts.Metrics, opts.At, since)
	if err != nil {
		return nil, err
	}
	if err := shippedRulesets(&opts); err != nil {
		return nil, err
	}
	choice := detect.ChooseBaseline(cfg.Baseline, cfg.LongWindow, since, opts.At)
	rep := &fleetReport{At: opts.At.UTC(), GroupBy: cfg.GroupBy, Window: model.Duration(cfg.LongWindow).String(),
		Note: choice.Note(), Scopes: len(dets)}
	if st := det.Stats(); st.Truncated > 0 {
		rep.Truncated = fmt.Sprintf("query answers held up to %d series; detection read the first %d of each", st.Series, cfg.MaxSeries)
	}
	if choice.Offset > 0 {
		rep.Baseline = model.Duration(choice.Offset).String()
	}
	// The triages compare with the history there is too (as the daemon's).
	tchoice := detect.ChooseBaseline(cfg.Baseline, triageWindow, since, opts.At)
	opts.Baseline = cfg.Baseline
	if tchoice.Offset > 0 {
		opts.Baseline = tchoice.Offset
	}
	byName := make(map[string]detect.Trigger, len(cfg.Triggers))
	for _, t := range cfg.Triggers {
		byName[t.Name] = t
	}
	for _, d := range dets {
		if !d.Firing {
			continue
		}
		r := rankedScope{Scope: d.Scope, Severity: d.Severity}
		for _, t := range d.Triggers {
			if t.State != detect.TriggerFiring {
				continue
			}
			r.Triggers = append(r.Triggers, triggerText(t, byName[t.Name]))
			r.Change = max(r.Change, moved(t, byName[t.Name]))
		}
		rep.Anomalous = append(rep.Anomalous, r)
	}
	sort.SliceStable(rep.Anomalous, func(i, j int) bool {
		a, b := rep.Anomalous[i], rep.Anomalous[j]
		if sa, sb := severityOrder(a.Severity), severityOrder(b.Severity); sa != sb {
			return sa > sb
		}
		if a.Change != b.Change {
			return a.Change > b.Change
		}
		return a.Scope.Selector < b.Scope.Selector
	})
	if n := len(rep.Anomalous) - maxScopes; n > 0 {
		rest := rep.Anomalous[maxScopes:]
		names := make([]string, 0, notTriagedListed)
		for _, r := range rest[:min(len(rest), notTriagedListed)] {
			names = append(names, r.Scope.Selector)
		}
		more := ""
		if n > notTriagedListed {
			more = ", …"
		}
		rep.NotTriaged = n
		rep.NotTriagedNote = fmt.Sprintf("%d more anomalous scopes not triaged (--max-scopes %d): %s%s", n, maxScopes, strings.Join(names, ", "), more)
		rep.Anomalous = slices.Clip(rep.Anomalous[:maxScopes])
	}
	var wg sync.WaitGroup
	slots := make(chan struct{}, fleetConcurrency)
	started := 0
	for i := range rep.Anomalous {
		rep.Anomalous[i].Rank = i + 1
	}
	for i := range rep.Anomalous {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		started++
		wg.Add(1)
		go func(r *rankedScope) {
			defer func() { <-slots; wg.Done() }()
			o := opts
			o.Selector = r.Scope.Selector
			v, err := diagnose.Run(ctx, o)
			if err != nil {
				r.Error = err.Error()
				return
			}
			if note := tchoice.Note(); note != "" {
				v.Warnings = append(v.Warnings, note)
			}
			r.Verdict = v
		}(&rep.Anomalous[i])
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("interrupted: %d of %d triages started, none printed: %w", started, len(rep.Anomalous), err)
	}
	return rep, nil
}

// moved is how far a firing trigger's short-window value is from where it
// would not fire: its ratio over the baseline, or over its absolute bound.
func moved(r detect.TriggerResult, t detect.Trigger) float64 {
	if r.Short == nil {
		return 0
	}
	v, out := *r.Short, 0.0
	if r.Baseline != nil && *r.Baseline > 0 {
		out = v / *r.Baseline
	}
	if t.Above != nil && *t.Above > 0 {
		out = max(out, v / *t.Above)
	}
	if t.Below != nil && v > 0 {
		out = max(out, *t.Below/v)
	}
	return out
}

// triggerUnit is the unit of a trigger's values: the built-in signals'
// own, else guessed from the name as the renderers guess it.
func triggerUnit(t detect.Trigger) string {
	switch t.Signal {
	case detect.SignalTTFTP95, detect.SignalTPOTP95:
		return render.UnitSeconds
	case detect.SignalSuccessRate:
		return render.UnitFraction
	case detect.SignalQueueGrowth:
		return "requests/s"
	}
	return render.GuessUnit(t.Name)
}

// triggerText is a firing trigger with its values in units, formatted as
// the verdicts below it format theirs: "ttft_p95 10m13s ×3772 (baseline
// 163 ms; fires at ×2)", "success_rate 91.2% (fires below 98%)".
func triggerText(r detect.TriggerResult, t detect.Trigger) string {
	u := triggerUnit(t)
	v := r.Short
	if v == nil {
		v = r.Long
	}
	if v == nil {
		return r.Name + ": " + r.Reason
	}
	s := r.Name + " " + render.FormatValue(*v, u)
	var why []string
	if r.Baseline != nil && *r.Baseline > 0 && t.Ratio > 0 {
		s += " " + render.FormatRatio(*v / *r.Baseline)
		why = append(why, "baseline "+render.FormatValue(*r.Baseline, u))
	}
	switch {
	case t.Below != nil && *v < *t.Below:
		why = append(why, "fires below "+render.FormatValue(*t.Below, u))
	case t.Above != nil && *v > *t.Above:
		why = append(why, "fires above "+render.FormatValue(*t.Above, u))
	case t.Ratio > 0:
		f := "fires at " + render.FormatRatio(t.Ratio)
		if t.MeanRatio > 0 {
			f += ", mean at " + render.FormatRatio(t.MeanRatio)
		}
		why = append(why, f)
	}
	if len(why) > 0 {
		s += " (" + strings.Join(why, "; ") + ")"
	}
	return s
}

func severityOrder(s verdict.Severity) int {
	switch s {
	case verdict.SeverityCritical:
		return 2
	case verdict.SeverityWarning:
		return 1
	}
	return 0
}

func writeFleetText(w io.Writer, rep *fleetReport, f *whyFlags) {
	base := rep.Baseline
	if base == "" {
		base = "none"
	}
	fmt.Fprintf(w, "%d of %d scopes (by %s) anomalous at %s (window %s, baseline %s)\n", len(rep.Anomalous)+rep.NotTriaged, rep.Scopes,
		strings.Join(rep.GroupBy, ", "), rep.At.Format(time.RFC3339), rep.Window, base)
	if rep.Note != "" {
		fmt.Fprintf(w, "note: %s\n", rep.Note)
	}
	if rep.Truncated != "" {
		fmt.Fprintf(w, "note: %s\n", rep.Truncated)
	}
	for _, r := range rep.Anomalous {
		cause := "-"
		if r.Verdict != nil && len(r.Verdict.Causes) > 0 {
			c := r.Verdict.Causes[0]
			cause = fmt.Sprintf("%s %.0f%%", c.ID, 100*c.Confidence)
		}
		fmt.Fprintf(w, "%3d  %-8s  %s  %s  [%s]\n", r.Rank, r.Severity, r.Scope.Selector, cause, strings.Join(r.Triggers, "; "))
	}
	if rep.NotTriagedNote != "" {
		fmt.Fprintln(w, rep.NotTriagedNote)
	}
	for _, r := range rep.Anomalous {
		fmt.Fprintf(w, "\n── %d. %s ──\n", r.Rank, r.Scope.Selector)
		if r.Error != "" {
			fmt.Fprintf(w, "triage failed: %s\n", r.Error)
			continue
		}
		_ = render.Render(w, r.Verdict, render.FormatText, render.Options{Explain: f.explain, Color: f.color})
	}
}
