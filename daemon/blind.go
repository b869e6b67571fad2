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

// engineQuery is an instant query that counts the series one engine is
// known by.
type engineQuery struct {
	engine, expr string
}

// engineSeriesQueries are the instant queries that count the series an
// engine is known by: each map's request counts (detect.HistorySeries),
// read whatever the scope. An engine without such series has no query.
func engineSeriesQueries(maps *rulesets.Maps) []engineQuery {
	engines, err := detect.ReadEngines(maps.Files())
	if err != nil {
		return nil // the detector refused them at start already
	}
	var out []engineQuery
	for _, e := range engines {
		for _, s := range detect.HistorySeries([]detect.Engine{e}) {
			out = append(out, engineQuery{engine: e.Name, expr: "count(" + strings.ReplaceAll(s, "$sel", "") + ")"})
		}
	}
	return out
}

// checkEngineSeries counts the engine series the source holds at at, sets
// whyslow_engine_series_found, and keeps the blind problem (logged once
// when it starts, once when it ends) while there are none. It runs only
// after a successful scrape: a source that is down is a problem of its own.
// What it finds narrows the sidecar's detector (narrowDetector).
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
	held := map[string]bool{}
	for _, q := range d.engineQueries {
		v, _, err := d.metrics.Query(ctx, q.expr, at)
		if err != nil {
			failed++
			held[q.engine] = true // not ruled out: no answer is no evidence
			continue
		}
		for _, s := range v {
			found += float64(s.Value)
			if s.Value > 0 {
				held[q.engine] = true
			}
		}
	}
	if failed == len(d.engineQueries) {
		return // no answer is no evidence of blindness
	}
	d.engineChecked = at
	d.holdEngines(held)
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

// holdEngines adds the engines a check found (or could not rule out) to
// those the store holds, and narrows the detector when they are new. The
// set only grows: an engine seen once keeps being read, so a restart of
// its target never leaves a gap in detection.
func (d *Daemon) holdEngines(held map[string]bool) {
	grew := d.enginesHeld == nil
	if grew {
		d.enginesHeld = map[string]bool{}
		// An engine whose map names no request series cannot be found
		// (detect.HistorySeries): it is never ruled out.
		queried := map[string]bool{}
		for _, q := range d.engineQueries {
			queried[q.engine] = true
		}
		for _, e := range d.opts.Maps.Engines() {
			if !queried[e] {
				d.enginesHeld[e] = true
			}
		}
	}
	for e := range held {
		if !d.enginesHeld[e] {
			d.enginesHeld[e], grew = true, true
		}
	}
	if grew {
		d.narrowDetector(d.Config())
	}
}

// narrowDetector makes the detector read the engines the store holds.
// Every engine's names in the detector's `or` cost CPU on each cycle, but
// only a sidecar can drop some: it reads the configured engine (the
// default, vllm, when none is set) and every engine its engine check
// found series of, so a sidecar left at the default but scraping SGLang
// still detects SGLang. Until a check has answered, and for a fleet
// daemon (engine auto: each scope may be any engine), it reads them all.
func (d *Daemon) narrowDetector(cfg Config) {
	if cfg.Fleet() || cfg.Engine == "auto" || d.enginesHeld == nil {
		d.detector.ReadOnly(nil)
		return
	}
	names := []string{cfg.Engine}
	for e := range d.enginesHeld {
		names = append(names, e)
	}
	d.detector.ReadOnly(names)
	d.log.Debug("Detection reads the series of the engines the store holds", "engines", d.detector.Reads())
}
