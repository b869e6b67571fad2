// Package format holds the one way whyslow writes a number, a duration and
// a multiple for people, so that a verdict's evidence, chain, table,
// attribution, Slack message, page and chart all say "1m17s" for the same
// 77.45 seconds. It imports nothing of the module: the rules (evidence
// templates), the diagnosis (chains) and the renderers all use it.
package format

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// Number prints v with three significant digits, without exponent for the
// magnitudes monitoring deals with and without trailing zeros: 12345,
// 9.28, 0.0123.
func Number(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	if math.IsInf(v, 0) {
		if v > 0 {
			return "+Inf"
		}
		return "-Inf"
	}
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	a := math.Abs(v)
	var prec int
	switch {
	case a >= 100:
		prec = 0
	case a >= 10:
		prec = 1
	case a >= 1:
		prec = 2
	case a >= 0.001:
		prec = 2 - int(math.Floor(math.Log10(a)))
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
	s := strconv.FormatFloat(v, 'f', prec, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// Seconds renders a duration given in seconds: "850 µs", "43.1 ms",
// "9.28 s" below a minute (three significant digits), then "1m17s"
// (to the second), "4h47m" (to the minute, from an hour) and "3d4h" (to
// the hour, from two days); whole units drop their zero part ("2m",
// "1h"). NaN is "n/a".
func Seconds(s float64) string {
	a := math.Abs(s)
	switch {
	case math.IsNaN(s):
		return "n/a"
	case math.IsInf(s, 0):
		return Number(s)
	case a == 0:
		return "0 s"
	case a < 1e-3:
		return Number(s*1e6) + " µs"
	case a < 1:
		// 999.7 ms rounds to "1e+03 ms" with three digits: say 1 s.
		if math.Round(a*1e3) >= 1000 {
			return sign(s) + "1 s"
		}
		return Number(s*1e3) + " ms"
	case a < 59.95:
		return Number(s) + " s"
	case a >= math.MaxInt64/float64(time.Second):
		// Past what a time.Duration holds (~292 years): days, unrounded.
		return strconv.FormatFloat(s/86400, 'g', 3, 64) + " d"
	}
	return sign(s) + Duration(time.Duration(math.Round(a))*time.Second)
}

func sign(s float64) string {
	if s < 0 {
		return "-"
	}
	return ""
}

// Duration renders a duration of a minute or more as Seconds does ("1m17s",
// "4h47m", "3d4h"); below a minute it is Seconds of it.
func Duration(d time.Duration) string {
	if d < 0 {
		return "-" + Duration(-max(d, -math.MaxInt64)) // -MinInt64 is MinInt64
	}
	if d < time.Minute {
		return Seconds(d.Seconds())
	}
	switch {
	case d < time.Hour:
		d = d.Round(time.Second)
		return pair(int(d/time.Minute), "m", int(d%time.Minute/time.Second), "s")
	case d < 48*time.Hour:
		d = d.Round(time.Minute)
		return pair(int(d/time.Hour), "h", int(d%time.Hour/time.Minute), "m")
	}
	d = d.Round(time.Hour)
	return pair(int(d/(24*time.Hour)), "d", int(d%(24*time.Hour)/time.Hour), "h")
}

// pair is "4h47m", or "4h" when the second part is zero; a rounding that
// carried into the larger unit ("60s") is printed as it came ("1h" stays
// correct because the caller rounded the whole duration first).
func pair(a int, au string, b int, bu string) string {
	if b == 0 {
		return strconv.Itoa(a) + au
	}
	return strconv.Itoa(a) + au + strconv.Itoa(b) + bu
}

// Ratio renders a multiple as ×N with three significant digits (×7.77,
// ×1133, ×0.625).
func Ratio(r float64) string {
	if math.IsNaN(r) {
		return "n/a"
	}
	return "×" + Number(r)
}
