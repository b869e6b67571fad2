package daemon

import (
	"context"
	"strings"
	"time"

	"github.com/whyslow/whyslow/detect"
	"github.com/whyslow/whyslow/rulesets"
)

// problemBlind is the readiness problem of a source that answers but
// holds no series of a known engine: a daemon pointed at the wrong
// /metrics (or a Prometheus that does not scrape the engine) would be
// ready, scraping successfully, and never see an incident.
const problemBlind = "engine_series"

// blindMessage is the problem and its fix, for /readyz and the log: the
// engines are those of the loaded maps (the user's included).
func blindMessage(maps *rulesets.Maps) string {
	return "no series of a known engine (" + strings.Join(maps.Engines(), ", ") + ") in what the daemon reads: " +
		"point engine_urls at the engine's own /metrics (vLLM's API server port, SGLang's, TensorRT-LLM's), " +
		"or source.prometheus at a Prometheus that scrapes it"
}

// engineRecheck is how often a daemon that found engine series looks
// again (while blind it looks every cycle).
const engineRecheck = time.Minute

// engineSeriesQueries are the instant queries that count the series an
// engine is known by: each map's request counts (detect.HistorySeries),
// read whatever the scope.
func engineSeriesQueries(maps *rulesets.Maps) []string {
	engines, err := detect.ReadEngines(maps.Files())
	if err != nil {
		return nil // the detector refused them at start already
	}
	var out []string
	for _, s := range detect.HistorySeries(engines) {
		out = append(out, "count("+strings.ReplaceAll(s, "$sel", "")+")")
	}
	return out
}

// checkEngineSeries counts the engine series the source holds at at, sets
// whyslow_engine_series_found, and keeps the blind problem (logged once
// when it starts, once when it ends) while there are none. It runs only
// after a successful scrape: a source that is down is a problem of its own.
func (d *Daemon) checkEngineSeries(ctx context.Context, at time.Time) {
	if !d.scraped.Load() || len(d.engineQueries) == 0 {
		return
	}
	d.viewMu.RLock()
	_, blind := d.problems[problemBlind]
	d.viewMu.RUnlock()
	if !blind && !d.engineChecked.IsZero() && at.Sub(d.engineChecked) < engineRecheck && !at.Before(d.engineChecked) {
		return
	}
	found, failed := 0.0, 0
	for _, q := range d.engineQueries {
		v, _, err := d.metrics.Query(ctx, q, at)
		if err != nil {
			failed++
			continue
		}
		for _, s := range v {
			found += float64(s.Value)
		}
	}
	if failed == len(d.engineQueries) {
		return // no answer is no evidence of blindness
	}
	d.engineChecked = at
	d.stats.setEngineSeries(found)
	if found == 0 {
		if msg := blindMessage(d.opts.Maps); d.setProblem(problemBlind, msg) {
			d.log.Error("No engine series found", "fix", msg)
		}
		return
	}
	d.engineSeen = true
	if d.clearProblem(problemBlind) {
		d.log.Info("Engine series found", "series", found)
	}
}
