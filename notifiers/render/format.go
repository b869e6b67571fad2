package render

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/whyslow/whyslow/internal/format"
	"github.com/whyslow/whyslow/verdict"
)

// Units the renderers understand (the `unit` field of a headline
// comparison, an evidence, a target or an explained signal). Plain rate
// units such as "req/s", "tokens/s" or "preemptions/s" (anything ending in
// "/s") are rates: the number, then the unit ("4.65 req/s"). Anything else
// is printed after the number as given.
const (
	UnitSeconds        = "seconds"          // also "s"
	UnitFraction       = "fraction"         // 0–1, shown as %; also "percentunit"
	UnitPercent        = "percent"          // 0–100, shown as %; also "%"
	UnitRatio          = "ratio"            // a multiple, shown as ×
	UnitBytes          = "bytes"            // shown as KiB, MiB, GiB
	UnitBytesPerSecond = "bytes_per_second" // shown as KiB/s, MiB/s, GiB/s
	UnitPerSecond      = "per_second"       // a rate of events, shown as 4.65/s
	UnitCount          = "count"            // a plain count, shown as the bare number
)

// FormatValue renders v in unit u for a human: seconds as ms below 1 s,
// fractions as %, ratios as ×, bytes in binary units, rates as "4.65/s" or
// "4.65 req/s", other numbers with three significant digits followed by the
// unit. A NaN (no value) is "n/a".
func FormatValue(v float64, u string) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return format.Number(v)
	}
	switch strings.ToLower(u) {
	case "seconds", "second", "s":
		return FormatSeconds(v)
	case "fraction", "percentunit":
		return percent(v * 100)
	case "percent", "%":
		return percent(v)
	case "ratio", "x", "×":
		return FormatRatio(v)
	case "bytes", "byte", "b":
		return bytesHuman(v, "")
	case "bytes_per_second", "b/s", "bytes/s":
		return bytesHuman(v, "/s")
	case "per_second", "/s", "1/s":
		return num(v) + "/s"
	case "", "count":
		return num(v)
	}
	return num(v) + " " + u
}

// percent renders p%, keeping two decimals between 99 and 100 where success
// rates live (99.71% and 99.97% differ for an SLO).
func percent(p float64) string {
	if p > 99 && p < 100 {
		s := strconv.FormatFloat(p, 'f', 2, 64)
		if s == "100.00" {
			s = "99.99"
		}
		return strings.TrimRight(strings.TrimRight(s, "0"), ".") + "%"
	}
	return num(p) + "%"
}

// FormatSeconds renders a duration in seconds, the one way every
// rendering does (internal/format.Seconds): "43.1 ms", "9.28 s", "1m17s",
// "4h47m".
func FormatSeconds(s float64) string { return format.Seconds(s) }

// FormatRatio renders a multiple as ×N (×7.8, ×1.05, ×12).
func FormatRatio(r float64) string {
	if math.IsNaN(r) {
		return "n/a"
	}
	if math.IsInf(r, 0) {
		return "×" + FormatValue(r, "")
	}
	return "×" + num(r)
}

// num prints a number with three significant digits (format.Number).
func num(v float64) string { return format.Number(v) }

func bytesHuman(v float64, suffix string) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	i := 0
	for math.Abs(v) >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return num(v) + " " + units[i] + suffix
}

// optValue renders an optional value, "n/a" when missing.
func optValue(v *float64, unit string) string {
	if v == nil {
		return "n/a"
	}
	return FormatValue(*v, unit)
}

// GuessUnit returns the unit of a signal from its name, for values that carry
// no unit of their own (evidence and explained signals). It recognises the
// naming habits of the rulesets and of Prometheus: *_seconds and latency
// names are seconds; usage, utilisation, hit-rate and *_ratio/*_perc names are
// fractions; *_bytes are bytes. Anything else has no unit.
func GuessUnit(signal string) string {
	s := strings.ToLower(signal)
	tok := map[string]bool{}
	for _, t := range strings.FieldsFunc(s, func(r rune) bool { return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9') }) {
		tok[t] = true
	}
	switch {
	case strings.HasSuffix(s, "_bytes_per_second"):
		return UnitBytesPerSecond
	case strings.HasSuffix(s, "_bytes"):
		return UnitBytes
	case strings.HasSuffix(s, "_seconds"), tok["ttft"], tok["tpot"], tok["itl"], tok["latency"],
		tok["e2e"], strings.Contains(s, "queue_time"):
		return UnitSeconds
	case tok["usage"], tok["perc"], tok["utilization"], tok["ratio"], tok["busy"], tok["active"],
		tok["fraction"], strings.Contains(s, "hit_rate"), strings.Contains(s, "success_rate"):
		return UnitFraction
	}
	return ""
}

// units maps signal names to units: the verdict's headline units, for
// values that carry no unit of their own (verdicts from producers before
// the unit fields); GuessUnit after that.
type units map[string]string

func unitsOf(v *verdict.Verdict) units {
	u := make(units, len(v.Headline))
	for _, c := range v.Headline {
		if c.Unit != "" {
			u[c.Signal] = c.Unit
		}
	}
	return u
}

// of returns the unit of a value: its own unit when it has one, else the
// headline unit of its signal, else GuessUnit.
func (u units) of(own, signal string) string {
	if own != "" {
		return own
	}
	if x, ok := u[signal]; ok {
		return x
	}
	return GuessUnit(signal)
}

// comparisonTitle is the human name of a headline row.
func comparisonTitle(c verdict.Comparison) string {
	if c.Title != "" {
		return c.Title
	}
	return c.Signal
}

// timeFmt renders an instant in UTC to the second.
func timeFmt(t time.Time) string {
	if t.IsZero() {
		return "n/a"
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

// windowFmt renders a window as "start → end (length)", dropping the date of
// the end when it is the same day.
func windowFmt(w verdict.Window) string {
	if w.Label != "" {
		return w.Label
	}
	if w.Start.IsZero() && w.End.IsZero() {
		return "n/a"
	}
	s, e := w.Start.UTC(), w.End.UTC()
	end := e.Format("2006-01-02 15:04:05")
	if s.Year() == e.Year() && s.YearDay() == e.YearDay() {
		end = e.Format("15:04:05")
	}
	return s.Format("2006-01-02 15:04:05") + " → " + end + " UTC (" + shortDur(e.Sub(s)) + ")"
}

// shortDur renders a window's length as every duration is rendered
// (format.Duration): 5m, 1h, 1h30m.
func shortDur(d time.Duration) string { return format.Duration(d) }

// ScopeText renders the scope selector in braces, or "{} (all series)"
// when empty.
func ScopeText(s verdict.Scope) string {
	if s.Selector == "" {
		return "{} (all series)"
	}
	return "{" + s.Selector + "}"
}

// EngineLine names the engine and, where it has several shipped forms, the
// one the triage read: "trtllm (trtllm-serve ≤1.1, unprefixed names)".
func EngineLine(v *verdict.Verdict) string {
	if v.EngineShape == nil || v.EngineShape.Title == "" {
		return v.Engine
	}
	return v.Engine + " (" + v.EngineShape.Title + ")"
}
