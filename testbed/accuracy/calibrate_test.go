package accuracy

import (
	"context"
	"flag"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/whyslow/whyslow/rulesets"
)

var calibrate = flag.Bool("accuracy.calibrate", false, "TestCalibrate: fit the confidence calibration on training draws")

// calPoint is one reported cause: the logs of its score and of its share of
// the verdict's causes, and whether it is a truth cause.
type calPoint struct {
	logScore, share float64
	right           bool
}

// TestCalibrate fits the rulebook's confidence calibration (verdict:
// confidence) by logistic regression of "this ranked cause is a truth
// cause" on ln(score) and ln(the score's share), over the ranked causes of the
// training draws of both models, and prints the coefficients with the
// reliability table they give on the same draws. It runs only with
// -accuracy.calibrate; the reliability on draws it was not fitted on is
// TestGeneralization's (validation stream).
//
//	go test ./testbed/accuracy -run TestCalibrate -v -accuracy.calibrate -accuracy.wide-per=3 -accuracy.compound=10
func TestCalibrate(t *testing.T) {
	if !*calibrate {
		t.Skip("no -accuracy.calibrate")
	}
	rss, err := rulesets.All()
	if err != nil {
		t.Fatal(err)
	}
	list, byName := models(t)
	per, comp := max(1, *widePer), max(0, *compoundN)
	plan := drawPlan{seed: uint64(*trainSeed), per: per, compound: comp, wide: true}
	outs, err := runDraws(context.Background(), byName, plan.draws(list, 1), rss, *parallelWide, false)
	if err != nil {
		t.Fatal(err)
	}
	var pts []calPoint
	for _, o := range outs {
		if !o.Scored() {
			continue
		}
		total := 0.0
		for _, c := range o.Verdict.Causes {
			total += c.Score
		}
		for _, c := range o.Verdict.Causes {
			if c.Score <= 0 || total <= 0 {
				continue
			}
			right := false
			for _, tc := range o.Truth.Causes {
				right = right || tc == c.ID
			}
			pts = append(pts, calPoint{logScore: math.Log(c.Score), share: math.Log(math.Min(1, c.Score/total)), right: right})
		}
	}
	a, b, c := fitLogistic(pts)
	t.Logf("fitted on %d ranked causes of %d draws: confidence: {log_score: %.3f, share: %.3f, offset: %.3f}", len(pts), len(outs), a, b, c)
	t.Logf("reliability on the fitting draws:\n%s", reliability(pts, func(p calPoint) float64 {
		return 1 / (1 + math.Exp(-(a*p.logScore + b*p.share + c)))
	}))
}

// fitLogistic fits σ(a·x + b·y + c) to the points by Newton's method.
func fitLogistic(pts []calPoint) (a, b, c float64) {
	w := [3]float64{}
	for iter := 0; iter < 50; iter++ {
		var g [3]float64
		var h [3][3]float64
		for _, p := range pts {
			x := [3]float64{p.logScore, p.share, 1}
			z := w[0]*x[0] + w[1]*x[1] + w[2]*x[2]
			q := 1 / (1 + math.Exp(-z))
			y := 0.0
			if p.right {
				y = 1
			}
			for i := 0; i < 3; i++ {
				g[i] += (q - y) * x[i]
				for j := 0; j < 3; j++ {
					h[i][j] += q * (1 - q) * x[i] * x[j]
				}
			}
		}
		// A little ridge keeps the fit finite when a class separates.
		for i := 0; i < 3; i++ {
			h[i][i] += 1e-3
			g[i] += 1e-3 * w[i]
		}
		d := solve3(h, g)
		for i := range w {
			w[i] -= d[i]
		}
	}
	return w[0], w[1], w[2]
}

// solve3 solves h·x = g by Cramer's rule.
func solve3(h [3][3]float64, g [3]float64) [3]float64 {
	det := func(m [3][3]float64) float64 {
		return m[0][0]*(m[1][1]*m[2][2]-m[1][2]*m[2][1]) - m[0][1]*(m[1][0]*m[2][2]-m[1][2]*m[2][0]) +
			m[0][2]*(m[1][0]*m[2][1]-m[1][1]*m[2][0])
	}
	d := det(h)
	var x [3]float64
	if d == 0 {
		return x
	}
	for i := 0; i < 3; i++ {
		m := h
		for r := 0; r < 3; r++ {
			m[r][i] = g[r]
		}
		x[i] = det(m) / d
	}
	return x
}

// reliability bins the predicted confidences and shows the share right per bin.
func reliability(pts []calPoint, conf func(calPoint) float64) string {
	var n, right [10]int
	for _, p := range pts {
		b := min(9, int(conf(p)*10))
		n[b]++
		if p.right {
			right[b]++
		}
	}
	var s strings.Builder
	for i := range n {
		if n[i] > 0 {
			fmt.Fprintf(&s, "  confidence [%.1f, %.1f): %3d causes, %5.1f%% right\n", float64(i)/10, float64(i+1)/10, n[i], pct(right[i], n[i]))
		}
	}
	return s.String()
}
