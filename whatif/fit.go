package whatif

import (
	"fmt"
	"math"
)

// StepModel is a step's cost at full clock, seconds:
// Fixed + PerPrefillToken·prefill tokens + PerDecode·decodes + PerContextToken·context tokens.
type StepModel struct {
	Fixed, PerPrefillToken, PerDecode, PerContextToken float64
}

// Seconds is the cost of a step at clock factor clock (1: full clock).
func (m StepModel) Seconds(prefill, decodes, context int, clock float64) float64 {
	return (m.Fixed + m.PerPrefillToken*float64(prefill) + m.PerDecode*float64(decodes) + m.PerContextToken*float64(context)) / clock
}

// Fit is a fitted step model and how well it fits.
type Fit struct {
	Model StepModel
	// N is the observations fitted; R2 the share of the gaps' variance the
	// model explains (0 when they do not vary); RelRMS the root mean square
	// of the relative residuals.
	N          int
	R2, RelRMS float64
	// ClockKnown says the observations carried the GPU clock.
	ClockKnown bool
}

func (f Fit) String() string {
	return fmt.Sprintf("step = %.2f ms + %.1f µs/prefill token + %.3f ms/decode + %.2f ns/context token (n=%d, R² %.2f, rms %.0f%%)",
		f.Model.Fixed*1e3, f.Model.PerPrefillToken*1e6, f.Model.PerDecode*1e3, f.Model.PerContextToken*1e9, f.N, f.R2, 100*f.RelRMS)
}

// minFitObs is the fewest sub-windows the step-time fit runs on (four
// coefficients).
const minFitObs = 4

// fitNames are the series the fit needs in each observation.
var fitNames = []string{sigITLMean, sigBatch, sigCtx, sigTargets}

// FitStep fits the step model to the observations: each one's mean
// inter-token gap (× its clock fraction, when every observation has one)
// on the prefill tokens computed during one gap, the decode batch and
// the context those decodes read. Observations missing a series are
// skipped; fewer than four usable ones is a MissingError naming what the
// sub-windows lacked most.
func FitStep(obs []Window) (Fit, error) {
	clockKnown := len(obs) > 0
	for _, o := range obs {
		if _, ok := o.get(sigClock); !ok {
			clockKnown = false
		}
	}
	x, y, lacking := fitRows(obs, clockKnown)
	if len(y) < minFitObs {
		var miss []string
		for n := range lacking {
			miss = append(miss, n)
		}
		if len(miss) == 0 && len(obs) > 0 {
			// every sub-window had every series: there were too few of
			// them (a young incident's window), not a missing series
			return Fit{}, &MissingError{What: "the step-time fit",
				Short: fmt.Sprintf("%d sub-windows with every series, the fit needs %d", len(y), minFitObs)}
		}
		if len(miss) == 0 {
			miss = fitNames
		}
		return Fit{}, &MissingError{What: "the step-time fit", Series: miss}
	}
	return fitQuality(x, y, nnls(x, y), clockKnown), nil
}

// fitRows are the observations' regressor rows and gaps, and how many
// observations lacked each series.
func fitRows(obs []Window, clockKnown bool) (x [][]float64, y []float64, lacking map[string]int) {
	lacking = map[string]int{}
	for _, o := range obs {
		row, gap, miss := regressors(o, clockKnown)
		if len(miss) > 0 {
			for _, m := range miss {
				lacking[m]++
			}
			continue
		}
		x = append(x, row)
		y = append(y, gap)
	}
	return x, y, lacking
}

// refitWithPrefill fits the step model again with the prefill cost per
// token held at perPrefill: the other three coefficients take what the
// gaps leave (the sub-windows' mean gaps stay fitted as well as they
// can be). f must come from FitStep on obs.
func refitWithPrefill(obs []Window, f Fit, perPrefill float64) Fit {
	x, y, _ := fitRows(obs, f.ClockKnown)
	rest := make([][]float64, len(x))
	left := make([]float64, len(y))
	for i, row := range x {
		rest[i] = []float64{row[0], row[2], row[3]}
		left[i] = y[i] - perPrefill*row[1]
	}
	b := nnls(rest, left)
	return fitQuality(x, y, []float64{b[0], perPrefill, b[1], b[2]}, f.ClockKnown)
}

// fitQuality is the fit of coefficients beta to the rows x and gaps y.
func fitQuality(x [][]float64, y []float64, beta []float64, clockKnown bool) Fit {
	f := Fit{Model: StepModel{Fixed: beta[0], PerPrefillToken: beta[1], PerDecode: beta[2], PerContextToken: beta[3]},
		N: len(y), ClockKnown: clockKnown}
	var mean float64
	for _, v := range y {
		mean += v
	}
	mean /= float64(len(y))
	var ssr, sst, rel float64
	for i, row := range x {
		p := dot(beta, row)
		ssr += (y[i] - p) * (y[i] - p)
		sst += (y[i] - mean) * (y[i] - mean)
		rel += ((p - y[i]) / y[i]) * ((p - y[i]) / y[i])
	}
	if sst > 0 {
		f.R2 = 1 - ssr/sst
	}
	f.RelRMS = math.Sqrt(rel / float64(len(y)))
	return f
}

// regressors turns one observation into a row (1, prefill tokens per gap,
// decode batch, context tokens per step) and its gap at full clock.
func regressors(o Window, clockKnown bool) (row []float64, gap float64, missing []string) {
	vals := map[string]float64{}
	for _, n := range fitNames {
		v, ok := o.get(n)
		if !ok {
			missing = append(missing, n)
		}
		vals[n] = v
	}
	pre, ok := prefillRate(o)
	if !ok {
		missing = append(missing, sigPrefillTPS)
	}
	if len(missing) > 0 || vals[sigTargets] < 1 || vals[sigITLMean] <= 0 {
		if len(missing) == 0 {
			missing = []string{sigITLMean}
		}
		return nil, 0, missing
	}
	gap = vals[sigITLMean]
	if clockKnown {
		c, _ := o.get(sigClock)
		gap *= c
	}
	perRep := pre / vals[sigTargets]
	b := vals[sigBatch]
	return []float64{1, perRep * vals[sigITLMean], b, b * vals[sigCtx]}, gap, nil
}

// prefillRate is the prompt tokens computed per second (not served from the
// prefix cache): prefill_tps, or prompt_tps × (1 − prefix_hit_rate).
func prefillRate(w Window) (float64, bool) {
	if v, ok := w.get(sigPrefillTPS); ok {
		return v, true
	}
	p, ok1 := w.get(sigPromptTPS)
	h, ok2 := w.get(sigHit)
	if ok1 && ok2 {
		return p * (1 - h), true
	}
	return 0, false
}

func dot(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// nnls solves min ‖Xβ − y‖², β ≥ 0, by cyclic coordinate descent on the
// normal equations (columns scaled to unit norm first); a handful of
// regressors converges in a few hundred sweeps.
func nnls(x [][]float64, y []float64) []float64 {
	k := len(x[0])
	scale := make([]float64, k)
	for j := 0; j < k; j++ {
		for _, row := range x {
			scale[j] += row[j] * row[j]
		}
		scale[j] = math.Sqrt(scale[j])
		if scale[j] == 0 {
			scale[j] = 1
		}
	}
	g := make([][]float64, k) // XᵀX over the scaled columns
	xy := make([]float64, k)
	for i := 0; i < k; i++ {
		g[i] = make([]float64, k)
		for j := 0; j < k; j++ {
			for _, row := range x {
				g[i][j] += row[i] / scale[i] * row[j] / scale[j]
			}
		}
		for r, row := range x {
			xy[i] += row[i] / scale[i] * y[r]
		}
	}
	b := make([]float64, k)
	for sweep := 0; sweep < 5000; sweep++ {
		moved := 0.0
		for j := 0; j < k; j++ {
			if g[j][j] == 0 {
				continue
			}
			r := xy[j]
			for i := 0; i < k; i++ {
				if i != j {
					r -= g[j][i] * b[i]
				}
			}
			nb := math.Max(0, r/g[j][j])
			moved = math.Max(moved, math.Abs(nb-b[j]))
			b[j] = nb
		}
		if moved < 1e-12 {
			break
		}
	}
	for j := range b {
		b[j] /= scale[j]
	}
	return b
}
