package accuracy

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/whyslow/whyslow/rulesets"
	"github.com/whyslow/whyslow/verdict"
)

var (
	calibrate    = flag.Bool("accuracy.calibrate", false, "TestCalibrate: fit the confidence calibration on training draws")
	calibrateOut = flag.String("accuracy.calibrate-out", "", "TestCalibrate: also write this run's points as CSV to this file")
	calibrateIn  = flag.String("accuracy.calibrate-in", "", "TestCalibrate: comma-separated CSV files of earlier runs (-accuracy.calibrate-out) to pool with this run's points")
)

// calPoint is one reported cause: the logs of its score and of its share of
// the candidates' scores, its rank, its model, and whether it is a truth
// cause.
type calPoint struct {
	model           string
	rank            int
	logScore, share float64
	right           bool
}

// TestCalibrate fits the rulebook's confidence calibration (verdict:
// confidence) by logistic regression of "this ranked cause is a truth
// cause" on ln(score) and ln(the score's share of all candidates), over the
// ranked causes of the training draws of every engine model, and prints the
// coefficients with the reliability they give on the same draws, per model.
// It runs only with -accuracy.calibrate; the reliability on draws it was not
// fitted on is TestGeneralization's (validation stream).
//
// The shipped coefficients pool two runs:
//
//	go test ./testbed/accuracy -run TestCalibrate -v -accuracy.calibrate -accuracy.wide-per=3 -accuracy.compound=10 -accuracy.calibrate-out=/tmp/cal17.csv
//	go test ./testbed/accuracy -run TestCalibrate -v -accuracy.calibrate -accuracy.wide-per=6 -accuracy.compound=20 -accuracy.train-seed=29 -accuracy.calibrate-in=/tmp/cal17.csv
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
		if !o.Scored() || o.Verdict.Status != verdict.StatusAnomaly || baselinePartlyCovered(o.Verdict) {
			continue
		}
		// The walk's share is of every candidate: the ranked causes and
		// those considered below the evidence bar.
		total := 0.0
		for _, c := range o.Verdict.Causes {
			total += c.Score
		}
		for _, c := range o.Verdict.Considered {
			total += c.Score
		}
		for i, c := range o.Verdict.Causes {
			if c.Score <= 0 || total <= 0 {
				continue
			}
			right := slices.Contains(o.Truth.Causes, c.ID)
			pts = append(pts, calPoint{model: o.Draw.Model, rank: i, logScore: math.Log(c.Score), share: math.Log(math.Min(1, c.Score/total)), right: right})
		}
	}
	if *calibrateOut != "" {
		var b strings.Builder
		b.WriteString("model,rank,log_score,log_share,right\n")
		for _, p := range pts {
			fmt.Fprintf(&b, "%s,%d,%.6f,%.6f,%t\n", p.model, p.rank, p.logScore, p.share, p.right)
		}
		if err := os.WriteFile(*calibrateOut, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range strings.Split(*calibrateIn, ",") {
		if name == "" {
			continue
		}
		more, err := readCalPoints(name)
		if err != nil {
			t.Fatal(err)
		}
		pts = append(pts, more...)
	}
	a, b, c := fitLogistic(pts)
	t.Logf("fitted on %d ranked causes (%d draws in this run): confidence: {log_score: %.3f, share: %.3f, offset: %.3f}", len(pts), len(outs), a, b, c)
	conf := func(p calPoint) float64 { return 1 / (1 + math.Exp(-(a*p.logScore + b*p.share + c))) }
	t.Logf("reliability of every ranked cause on the fitting draws:\n%s", reliability(pts, conf))
	for _, m := range list {
		var top []calPoint
		for _, p := range pts {
			if p.model == m.Name() && p.rank == 0 {
				top = append(top, p)
			}
		}
		t.Logf("%s, top causes:\n%s", m.Name(), reliability(top, conf))
	}
}

// readCalPoints reads the points a run wrote with -accuracy.calibrate-out.
func readCalPoints(name string) ([]calPoint, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	var pts []calPoint
	for i, line := range strings.Split(strings.TrimSpace(string(data)), "\n")[1:] {
		var p calPoint
		f := strings.Split(line, ",")
		if len(f) != 5 {
			return nil, fmt.Errorf("%s:%d: want 5 fields, got %d", name, i+2, len(f))
		}
		p.model = f[0]
		_, err1 := fmt.Sscan(f[1], &p.rank)
		_, err2 := fmt.Sscan(f[2], &p.logScore)
		_, err3 := fmt.Sscan(f[3], &p.share)
		_, err4 := fmt.Sscan(f[4], &p.right)
		if err := errors.Join(err1, err2, err3, err4); err != nil {
			return nil, fmt.Errorf("%s:%d: %v", name, i+2, err)
		}
		pts = append(pts, p)
	}
	return pts, nil
}

// baselinePartlyCovered reports a verdict whose confidences were lowered
// because data covers only part of its baseline window (diagnose's
// baselineCoverage): not what the calibration maps.
func baselinePartlyCovered(v *verdict.Verdict) bool {
	for _, g := range v.DataGaps {
		if g.Window == "baseline" && g.Signal == "samples" {
			return true
		}
	}
	return false
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

// reliability bins the predicted confidences: per bin, the share right
// and the mean stated confidence, and the ECE.
func reliability(pts []calPoint, conf func(calPoint) float64) string {
	var bins Bins
	for _, p := range pts {
		bins.Add(conf(p), p.right)
	}
	return fmt.Sprintf("%s; ECE %.3f", binsString(bins), ECE(bins))
}
