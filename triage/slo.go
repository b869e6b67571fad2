package triage

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/whyslow/whyslow/rules"
)

// SLO is a bound a user sets on one signal of the incident window, e.g.
// "ttft_p95 > 2s": when the window's value crosses it, the verdict is an
// anomaly whatever the baseline says (a slowdown that crept in over weeks
// has no baseline to stand out from, but it still breaks the promise).
type SLO struct {
	// Signal is a rulebook signal name (ttft_p95, tpot_p95, e2e_p95,
	// success_rate, ...).
	Signal string `json:"signal"`
	// Op is ">" (breached above Bound) or "<" (breached below it).
	Op    string  `json:"op"`
	Bound float64 `json:"bound"`
	// Text is the bound as written.
	Text string `json:"text"`
}

// SLOBreach is an SLO the incident window crossed.
type SLOBreach struct {
	SLO
	Value float64 `json:"value"`
	Unit  string  `json:"unit,omitempty"`
}

var sloRe = regexp.MustCompile(`^\s*([a-z_][a-z0-9_]*)\s*([<>])\s*([0-9.eE+-]+[a-zµ]*%?)\s*$`)

// ParseSLO reads "SIGNAL > BOUND" or "SIGNAL < BOUND". A bound is a number,
// a duration for a latency signal ("2s", "150ms"), or a percentage
// ("99%", read as 0.99).
func ParseSLO(s string) (SLO, error) {
	m := sloRe.FindStringSubmatch(s)
	if m == nil {
		return SLO{}, fmt.Errorf("slo %q: want SIGNAL > BOUND or SIGNAL < BOUND (e.g. ttft_p95 > 2s, success_rate < 99%%)", s)
	}
	out := SLO{Signal: m[1], Op: m[2], Text: strings.TrimSpace(s)}
	raw := m[3]
	switch {
	case strings.HasSuffix(raw, "%"):
		f, err := strconv.ParseFloat(strings.TrimSuffix(raw, "%"), 64)
		if err != nil {
			return SLO{}, fmt.Errorf("slo %q: bound %q: %v", s, raw, err)
		}
		out.Bound = f / 100
	default:
		if f, err := strconv.ParseFloat(raw, 64); err == nil {
			out.Bound = f
			break
		}
		d, err := time.ParseDuration(raw)
		if err != nil {
			return SLO{}, fmt.Errorf("slo %q: bound %q is neither a number, a duration (2s, 150ms) nor a percentage", s, raw)
		}
		out.Bound = d.Seconds()
	}
	return out, nil
}

// checkSLOs validates the SLOs against the ruleset (each names a declared
// signal the engine maps) and returns those the incident window breached.
func checkSLOs(slos []SLO, rs *rules.Ruleset, now map[string]float64) ([]SLOBreach, error) {
	var out []SLOBreach
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
			out = append(out, SLOBreach{SLO: s, Value: v, Unit: sig.Unit})
		}
	}
	return out, nil
}

// sloPhase is the phase an SLO-only anomaly is in: prefill for TTFT bounds,
// decode for inter-token ones, both for both.
func sloPhase(bs []SLOBreach) Phase {
	var ttft, itl bool
	for _, b := range bs {
		ttft = ttft || strings.HasPrefix(b.Signal, "ttft_")
		itl = itl || strings.HasPrefix(b.Signal, "tpot_")
	}
	switch {
	case ttft && itl:
		return PhaseBoth
	case ttft:
		return PhasePrefill
	case itl:
		return PhaseDecode
	}
	return PhaseNone
}
