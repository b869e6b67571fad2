package accuracy

import (
	"context"
	"fmt"
	"time"

	"github.com/whyslow/whyslow/daemon"
	"github.com/whyslow/whyslow/detect"
	"github.com/whyslow/whyslow/diagnose"
	"github.com/whyslow/whyslow/rules"
	"github.com/whyslow/whyslow/rulesets"
	"github.com/whyslow/whyslow/testbed/sim"
	"github.com/whyslow/whyslow/verdict"
)

// EarlyResult is the daemon's view of one case: when its detector fired and
// the verdicts of the first triages of the incident it opened.
type EarlyResult struct {
	Case  Case
	Truth []string
	// Params are the drawn instance's parameters.
	Params map[string]any
	// Onset is when the injected cause started; Fired when the detector
	// fired (zero when it never did before the recording ended).
	Onset, Fired time.Time
	// Triggers are the detector triggers firing at Fired.
	Triggers []string
	// PendingAtOnset are the triggers whose condition already held at the
	// onset, before the injected cause could show: detector noise.
	PendingAtOnset []string
	// Verdicts are the triages at Fired + k scrape intervals, k = 0, 1, …:
	// at least Triages of them, more while none names a cause, up to the
	// tracker's OpenWait.
	Verdicts []*verdict.Verdict
}

// Intervals is how many scrape intervals after the onset the detector fired
// (-1 when it never fired).
func (r *EarlyResult) Intervals(step time.Duration) int {
	if r.Fired.IsZero() {
		return -1
	}
	return int(r.Fired.Sub(r.Onset) / step)
}

// AtOpen returns the verdict the daemon notifies when the incident opens:
// the first one that names a cause (the tracker waits up to OpenWait for
// one, incident.Tracker.Record), or the last when none does (the tracker then
// notifies without a cause). Its index is returned too; nil when the
// detector never fired.
func (r *EarlyResult) AtOpen() (*verdict.Verdict, int) {
	for i, v := range r.Verdicts {
		if v.Status == verdict.StatusAnomaly && len(v.Causes) > 0 {
			return v, i
		}
	}
	if len(r.Verdicts) == 0 {
		return nil, -1
	}
	return r.Verdicts[len(r.Verdicts)-1], len(r.Verdicts) - 1
}

// Top returns a verdict's top cause id, or its status when it has none, or
// "no_detection" when v is nil.
func Top(v *verdict.Verdict) string {
	if v == nil {
		return "no_detection"
	}
	if len(v.Causes) > 0 {
		return v.Causes[0].ID
	}
	return string(v.Status)
}

// RightTop reports whether v's top cause is one of truth.
func RightTop(v *verdict.Verdict, truth []string) bool {
	if v == nil || len(v.Causes) == 0 {
		return false
	}
	for _, t := range truth {
		if v.Causes[0].ID == t {
			return true
		}
	}
	return false
}

// EarlyOptions configures RunEarly. Zero values take the daemon's defaults
// (daemon.Config{}.WithDefaults()).
type EarlyOptions struct {
	// Config is the daemon configuration whose scrape interval, detector,
	// triage windows and engine are replayed.
	Config daemon.Config
	// Triages is how many triages to run from the fire time on, one per
	// scrape interval (default 4: fire time + 0..3 intervals). While none
	// names a cause more run, up to the tracker's OpenWait, as the daemon
	// waits that long for a verdict with a cause before it notifies.
	Triages int
	// Explain asks the triages for every signal and rule outcome.
	Explain bool
}

// RunEarly records the case at the daemon's scrape interval, replays the
// daemon's detector over the recording from the onset on, one evaluation
// per scrape interval, and when it first fires triages the scope exactly as
// the daemon does while the incident is young (Daemon.Tick in
// daemon/daemon.go): at the evaluation time, over the detector's
// short window plus the incident's age (daemon.IncidentWindow), against the
// triage baseline, with the configured engine, scheduler settings and GPU
// class (none by default). Healthy cases run too: a detector that fires on one is
// reported with the verdicts that follow. One difference remains: the
// recording's series carry a pod label per replica, which the daemon's
// scraped series may lack (then every replica reads as one target).
func RunEarly(ctx context.Context, c Case, rss []*rules.Ruleset, o EarlyOptions) (*EarlyResult, error) {
	cfg := o.Config.WithDefaults()
	n := o.Triages
	if n <= 0 {
		n = 4
	}
	b, err := sim.Record(ctx, sim.Options{Scenario: c.Scenario, Seed: c.Seed, Names: c.Names, GPUSeries: c.GPUSeries, ScrapeInterval: cfg.ScrapeInterval})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c, err)
	}
	st, err := Load(ctx, b)
	if err != nil {
		return nil, fmt.Errorf("%s: load: %w", c, err)
	}
	defer st.Close()
	engines, err := detect.ReadEngines(rulesets.Shipped().Files())
	if err != nil {
		return nil, err
	}
	det, err := detect.NewDetector(cfg.Detect, engines)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c, err)
	}
	res := &EarlyResult{Case: c, Truth: b.Truth.Causes, Params: b.Truth.Params, Onset: b.Truth.Onset}
	step := cfg.ScrapeInterval
	wait := int(cfg.Incidents.OpenWait / step)
	// The recording ends at the bundle's `at`; the triages after the fire
	// time need data up to max(n-1, wait) intervals later.
	end := b.Incident.At.Add(-time.Duration(max(n-1, wait)) * step)
	var scope detect.Detection
	// The first evaluation is at the onset: a condition already holding
	// then is noise the detector caught before the cause began (reported
	// as PendingAtOnset); the `for` hold counts from there.
	for at := res.Onset; !at.After(end); at = at.Add(step) {
		dets, err := det.Evaluate(ctx, st, at)
		if err != nil {
			return nil, fmt.Errorf("%s: detect at %s: %w", c, at.Format(time.RFC3339), err)
		}
		for _, d := range dets {
			if at.Equal(res.Onset) {
				for _, tr := range d.Triggers {
					if tr.State != detect.TriggerInactive {
						res.PendingAtOnset = append(res.PendingAtOnset, tr.Name)
					}
				}
			}
			if d.Firing {
				scope = d
				break
			}
		}
		if scope.Firing {
			res.Fired, res.Triggers = at, scope.FiringTriggers()
			break
		}
	}
	if res.Fired.IsZero() {
		return res, nil
	}
	gpu, gpuSource := cfg.GPU.Class, ""
	if gpu != "" {
		gpuSource = "config"
	}
	named := false
	for k := 0; k < n || (!named && k <= wait); k++ {
		at := res.Fired.Add(time.Duration(k) * step)
		v, err := diagnose.Run(ctx, diagnose.Options{
			Metrics: st, Rulesets: rss, Engine: cfg.Engine, Selector: scope.Scope.Selector,
			At: at, Window: daemon.IncidentWindow(cfg, at.Sub(res.Fired)), Baseline: cfg.Triage.Baseline,
			Scheduler: cfg.Scheduler.Rules(), GPU: gpu, GPUSource: gpuSource, Explain: o.Explain,
		})
		if err != nil {
			return nil, fmt.Errorf("%s: triage at %s: %w", c, at.Format(time.RFC3339), err)
		}
		res.Verdicts = append(res.Verdicts, v)
		named = named || (v.Status == verdict.StatusAnomaly && len(v.Causes) > 0)
	}
	return res, nil
}
