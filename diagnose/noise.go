package diagnose

import (
	"context"
	"math"
	"time"

	"github.com/prometheus/common/model"

	"github.com/whyslow/whyslow/rules"
)

// The anomaly gate compares the incident's latency statistics with the
// baseline's own variability, not with fixed floors: each noise signal
// (rules.Signal.Noise: TTFT and inter-token percentiles and means) is also
// evaluated over noiseSubWindows sub-windows that tile the baseline window,
// and the spread of its logarithm across them says how much the statistic
// moves on its own.
const (
	// noiseSubWindows is how many sub-windows tile the baseline window; the
	// sub-window is never shorter than noiseMinSub (four 15 s scrapes).
	noiseSubWindows = 5
	noiseMinSub     = time.Minute
	// noiseMinValid is the fewest sub-windows with enough requests for the
	// spread to count; with fewer the statistic's variability is unknown
	// (no z key) and the gate falls back to its fixed ratio bars.
	noiseMinValid = 3
	// noiseMinRequests is the fewest finished requests a sub-window needs
	// for its statistics to count.
	noiseMinRequests = 20
	// noiseFloor is the least standard deviation of ln(statistic) a
	// sub-window is taken to have: bucket interpolation can give equal values
	// in every sub-window, which would make any change infinitely
	// significant.
	noiseFloor = 0.03
)

// noiseSub returns the sub-window length and count for a window, or 0 when
// the window is too short to split.
func noiseSub(window time.Duration) (time.Duration, int) {
	sub := max(window/noiseSubWindows, noiseMinSub)
	k := int(window / sub)
	if k < noiseMinValid {
		return 0, 0
	}
	return sub, k
}

// spread is a noise signal's variability: the standard deviation of
// ln(value) across n baseline sub-windows.
type spread struct {
	sd float64
	n  int
}

// baselineNoise evaluates the ruleset's noise signals over the sub-windows
// of the baseline window ending at baseAt and returns, per signal, the
// standard deviation of ln(value) across the sub-windows that had at least
// noiseMinRequests requests (floored at noiseFloor), with the sub-window
// length. Signals with too few such sub-windows are left out, and so are
// signals without a value in both windows (noiseZ has nothing to compare:
// a scope without data costs no sub-window queries).
func baselineNoise(ctx context.Context, opts *Options, rs *rules.Ruleset, baseAt time.Time, now, base map[string]float64) (map[string]spread, time.Duration) {
	sub, k := noiseSub(opts.Window)
	reqSig := rs.Signal("requests")
	if k == 0 || reqSig == nil {
		return nil, 0
	}
	subStr := model.Duration(sub).String()
	sigs := []*rules.Signal{reqSig}
	for _, s := range rs.Signals {
		_, inNow := now[s.Name]
		_, inBase := base[s.Name]
		if s.Noise && inNow && inBase {
			sigs = append(sigs, s)
		}
	}
	if len(sigs) == 1 {
		return nil, 0
	}
	qs := make([][]*signalQuery, len(sigs))
	var all []*signalQuery
	for i, s := range sigs {
		expr, err := s.Render(opts.Selector, subStr, nil)
		if err != nil {
			return nil, 0
		}
		for j := range k {
			q := &signalQuery{signal: s, expr: expr, at: baseAt.Add(-time.Duration(j) * sub), window: "baseline noise"}
			qs[i] = append(qs[i], q)
			all = append(all, q)
		}
	}
	runQueries(ctx, opts.Metrics, all, opts.Concurrency)
	enough := make([]bool, k)
	for j, q := range qs[0] {
		n, ok := scalar(q.result)
		enough[j] = q.err == nil && ok && n >= noiseMinRequests
	}
	out := map[string]spread{}
	for i, s := range sigs[1:] {
		var logs []float64
		for j, q := range qs[i+1] {
			if !enough[j] || q.err != nil {
				continue
			}
			if v, ok := scalar(q.result); ok && v > 0 {
				logs = append(logs, math.Log(v))
			}
		}
		if len(logs) < noiseMinValid {
			continue
		}
		out[s.Name] = spread{sd: math.Max(noiseFloor, stddev(logs)), n: len(logs)}
	}
	return out, sub
}

// noiseZ turns the sub-window spreads into the z map the rules read: for
// each noise signal x present in both windows, ln(now.x/base.x) over the
// standard deviation of that difference (both windows are noisy: each has
// the sub-window variance scaled down by how many sub-windows it spans); for
// x_recent, the window's last minutes against base.x the same way. The
// spread comes from a handful of sub-windows, so the ratio is a Student t
// with n−1 degrees of freedom; z is its normal equivalent (the normal
// quantile of the same tail probability), so that z > 3 means as rare as
// three standard deviations whatever n was.
func noiseZ(sigma map[string]spread, sub, window time.Duration, now, base map[string]float64) map[string]float64 {
	z := map[string]float64{}
	if sub <= 0 {
		return z
	}
	recent := min(window, rules.RecentWindow)
	per := func(d time.Duration) float64 { return sub.Seconds() / d.Seconds() }
	for name, sp := range sigma {
		b, ok := base[name]
		if !ok || b <= 0 {
			continue
		}
		if n, ok := now[name]; ok && n > 0 {
			z[name] = normalOfT(math.Log(n/b)/(sp.sd*math.Sqrt(2*per(window))), sp.n-1)
		}
		if n, ok := now[name+"_recent"]; ok && n > 0 {
			z[name+"_recent"] = normalOfT(math.Log(n/b)/(sp.sd*math.Sqrt(per(recent)+per(window))), sp.n-1)
		}
	}
	return z
}

// normalOfT maps a Student t value with dof degrees of freedom to the
// standard normal value of the same tail probability. Closed forms for 2, 3
// and 4 degrees of freedom (noiseMinValid−1 to noiseSubWindows−1); t itself
// for more.
func normalOfT(t float64, dof int) float64 {
	if t < 0 {
		return -normalOfT(-t, dof)
	}
	var tail float64 // P(T > t)
	switch dof {
	case 2:
		tail = 0.5 * (1 - t/math.Sqrt(t*t+2))
	case 3:
		x := t / math.Sqrt(3)
		tail = 0.5 - (x/(1+x*x)+math.Atan(x))/math.Pi
	case 4:
		u := 1 + t*t/4
		tail = 0.5 - 3.0/8*(t/math.Sqrt(u))*(1-t*t/(12*u))
	default:
		return t
	}
	if tail <= 0 {
		return 8.5 // beyond float64's reach of the tail: as rare as can be said
	}
	return math.Sqrt2 * math.Erfcinv(2*tail)
}

// stddev is the sample standard deviation.
func stddev(xs []float64) float64 {
	if len(xs) < 2 {
		return 0
	}
	mean := 0.0
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	ss := 0.0
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	return math.Sqrt(ss / float64(len(xs)-1))
}
