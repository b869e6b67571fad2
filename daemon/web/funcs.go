package web

import (
	"html/template"
	"math"
	"strconv"

	"github.com/whyslow/whyslow/notifiers/render"
)

// funcs are the templates' helpers: the geometry of the bars, which the
// view leaves as shares.
var funcs = template.FuncMap{
	"permille": permille,
	"offset":   offset,
	"barRect":  barRect,
}

// permille is a share of a 1000-unit-wide bar, clamped to [0, 1000].
func permille(share float64) string {
	return strconv.FormatFloat(1000*clampShare(share), 'f', 1, 64)
}

// offset is where part i of a stacked bar starts: the shares before it.
func offset(parts []render.RequestPartView, i int) string {
	sum := 0.0
	for _, p := range parts[:i] {
		sum += clampShare(p.Share)
	}
	return strconv.FormatFloat(1000*math.Min(sum, 1), 'f', 1, 64)
}

func clampShare(f float64) float64 {
	if math.IsNaN(f) || f < 0 {
		return 0
	}
	return math.Min(f, 1)
}

// shareBar is a share drawn from the axis of a bar spanning -100..100:
// right for a part that added time, left for one that took it away.
type shareBar struct {
	X, W     string
	Negative bool
}

// barRect is the bar of a share (nil for none).
func barRect(share float64) *shareBar {
	if math.IsNaN(share) || math.IsInf(share, 0) || share == 0 {
		return nil
	}
	w := math.Min(math.Abs(share), 1) * 100
	b := &shareBar{W: strconv.FormatFloat(w, 'f', 1, 64), X: "0"}
	if share < 0 {
		b.X, b.Negative = strconv.FormatFloat(-w, 'f', 1, 64), true
	}
	return b
}
