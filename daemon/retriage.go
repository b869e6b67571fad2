package daemon

import (
	"context"
	"math"
	"strings"
	"time"

	"github.com/prometheus/common/model"

	"github.com/whyslow/whyslow/diagnose"
	"github.com/whyslow/whyslow/verdict"
)

// Re-triage of an unchanged scope: when a detected scope has had no sample
// since its incident's last triage and the other inputs are the same
// (retriageKey), the cycle keeps that verdict, with this cycle's data gaps
// (whyslow_triage_runs_total{result="reused"}).
//
// The kept verdict keeps its own time. A triage at the later time would
// read the same samples through windows shifted past the newest one: fewer
// samples in the incident window, the baseline window over other history;
// a verdict about a stretch without data, not a fresher one.
//
// "No sample since" is read from the series of the rulesets' detect
// expressions (one query per cycle): a target's scrape writes all its
// series at once. Not seen: another scrape's series (a GPU exporter's, in
// with the next engine sample) and samples written behind the newest one
// (backfill).

// lastTriage is what an open incident's last detector triage was made of.
type lastTriage struct {
	key retriageKey
	raw *verdict.Verdict // as triagePrepared returned it: no data gaps
}

// retriageKey is a triage's inputs but its time: equal keys, same verdict.
type retriageKey struct {
	incident string        // its ID: a scope's next incident starts afresh
	req      TriageRequest // prepared; At and Shared zero
	learning string
	newest   int64 // the scope's newest sample, unix ms
	spans    uint64
}

// newestSamples returns the newest sample time of a detected scope's
// engine series (unix ms), by incident key: false for a key the detector
// did not report this cycle (its scope is not one of the detector's label
// sets), for a scope without such series, and for every key when the
// query fails.
func (d *Daemon) newestSamples(ctx context.Context, cfg Config, at time.Time, keys []string, detected map[string]bool) func(key string) (int64, bool) {
	none := func(string) (int64, bool) { return 0, false }
	wanted := false
	for _, k := range keys {
		wanted = wanted || detected[k]
	}
	if !wanted {
		return none
	}
	rss, err := d.opts.Maps.For(cfg.Engine)
	if err != nil {
		return none
	}
	dc := d.detector.Config()
	vec, _, err := d.metrics.Query(ctx, diagnose.NewestSamplesExpr(rss, dc.Selector, dc.GroupBy), at)
	if err != nil {
		d.log.Warn("Reading the scopes' newest samples failed; every open incident is triaged", "err", err)
		return none
	}
	// By the group labels' values, in GroupBy order.
	byGroup := make(map[string]int64, len(vec))
	groups := make([][]string, 0, len(vec))
	for _, s := range vec {
		f := float64(s.Value)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			continue
		}
		vals := make([]string, len(dc.GroupBy))
		for i, l := range dc.GroupBy {
			vals[i] = string(s.Metric[model.LabelName(l)])
		}
		k := strings.Join(vals, "\xff")
		if _, ok := byGroup[k]; !ok {
			groups = append(groups, vals)
		}
		byGroup[k] = max(byGroup[k], int64(math.Round(f*1000)))
	}
	return func(key string) (int64, bool) {
		if !detected[key] {
			return 0, false
		}
		in, _ := d.tracker.Get(key)
		want := make([]string, len(dc.GroupBy))
		all := true
		for i, l := range dc.GroupBy {
			v, ok := in.Scope.Labels[l]
			want[i], all = v, all && ok
		}
		if all {
			ts, ok := byGroup[strings.Join(want, "\xff")]
			return ts, ok
		}
		// A scope key leaves out a label its series lack, so its selector
		// also matches the groups that have one: the newest of them all.
		var newest int64
		found := false
		for _, vals := range groups {
			match := true
			for i, l := range dc.GroupBy {
				if v, ok := in.Scope.Labels[l]; ok && vals[i] != v {
					match = false
					break
				}
			}
			if match {
				newest, found = max(newest, byGroup[strings.Join(vals, "\xff")]), true
			}
		}
		return newest, found
	}
}

// spansSeen is Options.SpansSeen, 0 without one.
func (d *Daemon) spansSeen() uint64 {
	if d.opts.SpansSeen == nil {
		return 0
	}
	return d.opts.SpansSeen()
}
