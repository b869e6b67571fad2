package whatif

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/whyslow/whyslow/diagnose"
	"github.com/whyslow/whyslow/query"
	"github.com/whyslow/whyslow/rules"
	"github.com/whyslow/whyslow/verdict"
)

// Canonical signals the model reads (rulesets/rulebook.yaml names).
const (
	sigArrival    = "arrival_rate"
	sigPromptMean = "prompt_len_mean"
	sigPromptP90  = "prompt_len_p90"
	sigPromptP99  = "prompt_len_p99"
	sigPromptP999 = "prompt_len_p999"
	sigGenMean    = "gen_len_mean"
	sigHit        = "prefix_hit_rate"
	sigTargets    = "serving_targets"
	sigRunning    = "running"
	sigRunPeak    = "running_peak"
	sigWaiting    = "waiting"
	sigKVPerRun   = "kv_per_running"
	sigCtx        = "decode_ctx_tokens"
	sigBatch      = "decode_batch"
	sigPrefillTPS = "prefill_tps"
	sigPromptTPS  = "prompt_tps"
	sigGenTPS     = "gen_tps"
	sigTTFTP95    = "ttft_p95"
	sigITLP95     = "tpot_p95"
	sigTTFTMean   = "ttft_mean"
	sigITLMean    = "tpot_mean"
	sigQueueMean  = "queue_mean"
	sigPrefill    = "prefill_mean"
	sigClock      = "sm_clock_frac"
	sigSpread     = "rate_spread"
	sigWaitSpread = "waiting_spread"
	sigRunSpread  = "running_spread"
)

// fitSignals are evaluated per sub-window for the step-time fit.
var fitSignals = []string{sigITLMean, sigBatch, sigCtx, sigPrefillTPS, sigPromptTPS, sigHit, sigTargets, sigClock}

// Window is one window's signal values; a signal not in it is missing.
type Window map[string]float64

// get returns a signal's value and whether it was measured.
func (w Window) get(name string) (float64, bool) {
	v, ok := w[name]
	return v, ok && !math.IsNaN(v) && !math.IsInf(v, 0)
}

// Inputs are what the model is fitted to.
type Inputs struct {
	Engine    string
	GPU       string
	Scheduler rules.Scheduler
	// Base and Inc are the baseline's and the incident's whole windows.
	Base, Inc Window
	// Obs are the sub-windows of both windows the step time is fitted on.
	Obs []Window
	// Buckets are the le bounds of the TTFT and inter-token histograms
	// (by signal: ttft_p95, tpot_p95), nil where unknown: a replay's p95
	// is read through them to compare with the observed one.
	Buckets map[string][]float64
	// PromptLes and PromptCounts are the incident window's prompt-length
	// histogram (bounds, and observations per bucket with the one past
	// the last bound), nil where not exported.
	PromptLes, PromptCounts []float64
}

// Source is where Read gets the sub-window observations.
type Source struct {
	Metrics  query.Metrics
	Ruleset  *rules.Ruleset
	Selector string
	// SubWindow is the sub-window length (default 1m).
	SubWindow time.Duration
}

// Read builds the inputs from a verdict triaged with Explain and, when src
// has a Metrics, the sub-window observations. sched is the scheduler the
// incident ran (resolved by the caller, see Scheduler).
func Read(ctx context.Context, v *verdict.Verdict, sched rules.Scheduler, src Source) (*Inputs, error) {
	if len(v.Signals) == 0 {
		return nil, fmt.Errorf("whatif: the verdict carries no signal values (triage it with Explain)")
	}
	in := &Inputs{Engine: v.Engine, Scheduler: sched, Base: Window{}, Inc: Window{}}
	if v.GPU != nil {
		in.GPU = v.GPU.Class
	}
	for _, s := range v.Signals {
		if s.Now != nil {
			in.Inc[s.Name] = *s.Now
		}
		if s.Baseline != nil {
			in.Base[s.Name] = *s.Baseline
		}
	}
	if src.Metrics == nil || src.Ruleset == nil {
		return in, nil
	}
	in.Buckets = map[string][]float64{}
	win := promDuration(v.Incident.End.Sub(v.Incident.Start))
	for _, name := range []string{sigTTFTP95, sigITLP95} {
		if les := diagnose.BucketLayout(ctx, src.Metrics, src.Ruleset, name, src.Selector, win, v.Incident.End); len(les) > 0 {
			in.Buckets[name] = les
		}
	}
	in.PromptLes, in.PromptCounts = diagnose.BucketCounts(ctx, src.Metrics, src.Ruleset, sigPromptP90, src.Selector, win, v.Incident.End)
	sub := src.SubWindow
	if sub <= 0 {
		sub = time.Minute
	}
	for _, w := range []verdict.Window{v.Baseline, v.Incident} {
		for end := w.End; !end.Add(-sub).Before(w.Start); end = end.Add(-sub) {
			obs := Window{}
			for _, name := range fitSignals {
				s := src.Ruleset.Signal(name)
				if s == nil {
					continue
				}
				expr, err := s.Render(src.Selector, promDuration(sub), nil)
				if err != nil {
					continue
				}
				vec, _, err := src.Metrics.Query(ctx, expr, end)
				if err != nil {
					if ctx.Err() != nil {
						return nil, ctx.Err()
					}
					continue
				}
				if len(vec) == 1 {
					obs[name] = float64(vec[0].Value)
				}
			}
			in.Obs = append(in.Obs, obs)
		}
	}
	return in, nil
}

// promDuration writes d as PromQL does (1m, 90s).
func promDuration(d time.Duration) string {
	if d%time.Minute == 0 {
		return fmt.Sprintf("%dm", int(d/time.Minute))
	}
	return fmt.Sprintf("%ds", int(d/time.Second))
}

// MissingError says which series a prediction needs and the source lacks.
type MissingError struct {
	// What is what could not be predicted ("the step-time fit", a fix's name).
	What   string
	Series []string
	// Short, when no series is missing, says the windows held too few
	// observations of them ("2 sub-windows, the fit needs 4").
	Short string
}

func (e *MissingError) Error() string {
	if len(e.Series) == 0 && e.Short != "" {
		return fmt.Sprintf("no prediction: the windows are too short (%s) for %s", e.Short, e.What)
	}
	s := append([]string(nil), e.Series...)
	sort.Strings(s)
	return fmt.Sprintf("no prediction: missing series %s (needed by %s)", strings.Join(s, ", "), e.What)
}

// need checks that each window has the named signals.
func need(what string, names []string, ws ...Window) error {
	var miss []string
	for _, n := range names {
		for _, w := range ws {
			if _, ok := w.get(n); !ok {
				miss = append(miss, n)
				break
			}
		}
	}
	if len(miss) > 0 {
		return &MissingError{What: what, Series: miss}
	}
	return nil
}
