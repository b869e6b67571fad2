package diagnose

import (
	"fmt"
	"strings"

	"github.com/whyslow/whyslow/rules"
	"github.com/whyslow/whyslow/verdict"
)

// The levels at which the baseline window already shows an incident's
// signature. They are the levels the rulebook's mechanism rules treat as
// saturated (kv_cache_pressure ramps KV peak over 0.85–0.97 and counts
// preemptions from 0.05/s; queue_saturation reads a growing backlog): a
// baseline at them is no "normal" to compare with.
const (
	degradedKVPeak      = 0.95 // KV cache usage, fullest target
	degradedPreemptions = 0.05 // preemptions/s
	degradedGrowth      = 0.05 // requests/s the backlog grows by
)

// degradedBaseline says whether the baseline window already shows KV cache
// saturation, preemptions or a growing queue (a daemon that learnt its
// baseline during a slow-burning incident), or nil. A missing signal is
// no sign either way.
func degradedBaseline(base map[string]float64, opts *Options) *verdict.DegradedBaseline {
	var signs []string
	if kv, ok := base["kv_usage_peak"]; ok && kv >= degradedKVPeak {
		signs = append(signs, "KV cache peak "+rules.FormatPercent(kv))
	}
	if p, ok := base["preemption_rate"]; ok && p >= degradedPreemptions {
		signs = append(signs, rules.FormatNumber(p)+" preemptions/s")
	}
	if g, ok := base["inflight_growth"]; ok && g >= degradedGrowth {
		if w, ok := base["waiting_last"]; !ok || w >= 1 {
			signs = append(signs, "the queue growing by "+rules.FormatNumber(g)+" req/s")
		}
	}
	if len(signs) == 0 {
		return nil
	}
	advice := "compare with an earlier baseline (--baseline) that was healthy"
	if opts.Daemon {
		advice = "no earlier window to compare with here: set triage.baseline to a time that was healthy"
	}
	return &verdict.DegradedBaseline{Signs: signs, Message: fmt.Sprintf(
		"degraded baseline: the baseline window already shows %s, so ratios against it understate the incident; %s",
		strings.Join(signs, ", "), advice)}
}
