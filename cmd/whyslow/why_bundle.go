package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/whyslow/whyslow/collectors/bundle"
	"github.com/whyslow/whyslow/collectors/store"
	"github.com/whyslow/whyslow/diagnose"
)

// Look-back margins for bundleKeep.
const (
	// keepLookback is kept before each window for the queries evaluated at
	// its end: the longest literal range in the rulesets is [5m] (the
	// window-long ranges, [{{.Window}}], are the window itself), and an
	// instant selector looks back 5 min (staleness), so 10 min covers a
	// rate() at the window's start with room to spare.
	keepLookback = 10 * time.Minute
	// keepTraceLead is kept before the incident window when traces are
	// correlated: the slow requests are looked for from 10 min before the
	// window (triage's traceLookback) and their pods' metrics are queried
	// from a minute before the earliest one's start; an hour covers
	// requests far slower than any engine lets run.
	keepTraceLead = time.Hour
)

// bundleKeep returns the windows a `why --bundle` triage with opts reads
// (opts as the incident.yaml fills them), or nil, to keep everything, when
// the incident time is not known before loading. Each window is widened by
// keepLookback, by the lead-in the --html page and the --chart show before
// it (chart.LeadIn: as long as the window, 5 min to 1 h), and by the rate
// window of the --chart (chart.Options: 4 steps of window/120; over one
// continuous span, of span/240, within keepLookback); these are kept
// whether or not --html and --chart are given, which costs little. What
// lies between the windows is not kept: a continuous chart breaks its
// curves there.
func bundleKeep(opts diagnose.Options) []bundle.Window {
	if opts.At.IsZero() {
		return nil
	}
	window, baseline := opts.Window, opts.Baseline
	if window <= 0 {
		window = 5 * time.Minute // triage's default
	}
	if baseline <= 0 {
		baseline = time.Hour // triage's default
	}
	lead := keepLookback + min(max(window, 5*time.Minute), time.Hour) + window/30
	incLead := lead
	if opts.Traces != nil {
		incLead += keepTraceLead
	}
	at := opts.At
	return []bundle.Window{
		{From: at.Add(-window - incLead), To: at},
		{From: at.Add(-baseline - window - lead), To: at.Add(-baseline)},
	}
}

// registerMaxSeries adds --max-series, the series a bundle may load.
func registerMaxSeries(fs *flag.FlagSet, dst *int) {
	fs.IntVar(dst, "max-series", bundle.DefaultMaxSeries, "the most series a --bundle may load (about 4 KiB of memory each; 0: no limit)")
}

// openBundleKeep is openBundle loading only the samples inside the windows
// keep returns for the bundle (read once its incident.yaml is parsed); a
// nil keep, or nil windows, load everything.
func openBundleKeep(ctx context.Context, dir string, maxSeries int, keep func(*bundle.Bundle) []bundle.Window) (*bundle.Bundle, *store.Store, bundle.LoadStats, error) {
	b, err := bundle.Load(dir)
	if err != nil {
		return nil, nil, bundle.LoadStats{}, err
	}
	o := bundle.LoadOptions{MaxSeries: maxSeries}
	if maxSeries == 0 {
		o.MaxSeries = -1 // --max-series 0: no limit
	}
	if keep != nil {
		o.Keep = keep(b)
	}
	st, err := store.Open(store.Options{LoadThenQuery: true})
	if err != nil {
		return nil, nil, bundle.LoadStats{}, fmt.Errorf("embedded store: %w", err)
	}
	stats, err := b.LoadMetricsWith(ctx, st, o)
	if err != nil {
		st.Close()
		var le *bundle.SeriesLimitError
		if errors.As(err, &le) {
			err = fmt.Errorf("%w (--max-series %d raises the limit; each series takes about 4 KiB of memory)", err, 2*le.Limit)
		}
		return nil, nil, bundle.LoadStats{}, err
	}
	return b, st, stats, nil
}
