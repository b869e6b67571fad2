package render

import (
	"fmt"
	"strings"

	"github.com/whyslow/whyslow/verdict"
)

// PoolContextLine is the endpoint picker's pool averages in one line, so
// that on-call sees whether the whole pool is saturated or only this
// replica: `Pool context (endpoint picker, pool "x"): average queue 12
// (baseline 1.5), KV 94% (baseline 40%), 4 ready pods`. "" without one.
func PoolContextLine(v *verdict.Verdict) string {
	pc := v.PoolContext
	if pc == nil || len(pc.Rows) == 0 {
		return ""
	}
	var parts []string
	for _, r := range pc.Rows {
		val := func(x *float64) string {
			switch {
			case x == nil:
				return "n/a"
			case r.Unit == "fraction":
				return FormatValue(*x, r.Unit)
			default:
				return num(*x)
			}
		}
		now := val(r.Now)
		switch r.Signal {
		case "pool_queue_mean":
			now = "average queue " + now
		case "pool_kv_usage_mean":
			now = "KV " + now
		case "pool_ready_pods":
			now += " ready pods"
		default:
			now = titleOr(r.Title, r.Signal) + " " + now
		}
		// Ready pods that did not change need no baseline.
		if r.Signal != "pool_ready_pods" || r.Baseline == nil || r.Now == nil || *r.Baseline != *r.Now {
			now += " (baseline " + val(r.Baseline) + ")"
		}
		parts = append(parts, now)
	}
	return fmt.Sprintf("Pool context (endpoint picker, pool %q): %s", pc.Pool, strings.Join(parts, ", "))
}
