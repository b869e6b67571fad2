package diagnose

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/whyslow/whyslow/rules"
	"github.com/whyslow/whyslow/verdict"
)

var sloRe = regexp.MustCompile(`^\s*([a-z_][a-z0-9_]*)\s*([<>])\s*([0-9.eE+-]+[a-zµ]*%?)\s*$`)

// ParseSLO reads "SIGNAL > BOUND" or "SIGNAL < BOUND". A bound is a number,
// a duration for a latency signal ("2s", "150ms"), or a percentage
// ("99%", read as 0.99).
func ParseSLO(s string) (verdict.SLO, error) {
	m := sloRe.FindStringSubmatch(s)
	if m == nil {
		return verdict.SLO{}, fmt.Errorf("slo %q: want SIGNAL > BOUND or SIGNAL < BOUND (e.g. ttft_p95 > 2s, success_rate < 99%%)", s)
	}
	out := verdict.SLO{Signal: m[1], Op: m[2], Text: strings.TrimSpace(s)}
	raw := m[3]
	switch {
	case strings.HasSuffix(raw, "%"):
		f, err := strconv.ParseFloat(strings.TrimSuffix(raw, "%"), 64)
		if err != nil {
			return verdict.SLO{}, fmt.Errorf("slo %q: bound %q: %v", s, raw, err)
		}
		out.Bound = f / 100
	default:
		if f, err := strconv.ParseFloat(raw, 64); err == nil {
			out.Bound = f
			break
		}
		d, err := time.ParseDuration(raw)
		if err != nil {
			return verdict.SLO{}, fmt.Errorf("slo %q: bound %q is neither a number, a duration (2s, 150ms) nor a percentage", s, raw)
		}
		out.Bound = d.Seconds()
	}
	return out, nil
}

// checkSLOs validates the SLOs against the ruleset (each names a declared
// signal the engine maps) and returns those the incident window breached.
func checkSLOs(slos []verdict.SLO, rs *rules.Ruleset, now map[string]float64) ([]verdict.SLOBreach, error) {
	var out []verdict.SLOBreach
	for _, s := range slos {
		sig := rs.Signal(s.Signal)
		if sig == nil {
			if rs.Declared(s.Signal) != nil {
				// Declared but this engine does not export it: a gap, not
				// a breach and not an error.
				continue
			}
			return nil, fmt.Errorf("triage: slo %q: unknown signal %q", s.Text, s.Signal)
		}
		v, ok := now[s.Signal]
		if !ok {
			continue
		}
		if (s.Op == ">" && v > s.Bound) || (s.Op == "<" && v < s.Bound) {
			out = append(out, verdict.SLOBreach{SLO: s, Value: v, Unit: sig.Unit})
		}
	}
	return out, nil
}

// sloPhase is the phase an SLO-only anomaly is in: prefill for TTFT bounds,
// decode for inter-token ones, both for both.
func sloPhase(bs []verdict.SLOBreach) verdict.Phase {
	var ttft, itl bool
	for _, b := range bs {
		ttft = ttft || strings.HasPrefix(b.Signal, "ttft_")
		itl = itl || strings.HasPrefix(b.Signal, "tpot_")
	}
	switch {
	case ttft && itl:
		return verdict.PhaseBoth
	case ttft:
		return verdict.PhasePrefill
	case itl:
		return verdict.PhaseDecode
	}
	return verdict.PhaseNone
}
