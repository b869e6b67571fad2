package diagnose

import (
	"context"
	"strings"
	"time"

	"github.com/whyslow/whyslow/query"
)

// historySteps is how many steps HistoryStart's range query takes: the
// start it finds is exact to (to - from) / historySteps (5 s over an hour).
const historySteps = 720

// HistoryStart is when the engines' history in m starts, searched between
// from and to (selector: extra label matchers, without braces; series:
// the series whose presence marks an engine's history, with $sel for the
// selector's matchers: detect.HistorySeries), for a
// source that does not know its own range (a remote Prometheus): from
// when any engine series has samples from from on, the zero time when
// none has any in the range. With ChooseBaseline it shrinks a baseline to
// the history a fresh Prometheus holds.
func HistoryStart(ctx context.Context, m query.Metrics, series []string, selector string, from, to time.Time) (time.Time, error) {
	if !to.After(from) {
		return time.Time{}, nil
	}
	sel := ""
	if selector != "" {
		sel = selector + ","
	}
	parts := make([]string, len(series))
	for i, s := range series {
		parts[i] = "count(" + strings.ReplaceAll(s, "$sel", sel) + ")"
	}
	step := max(time.Second, (to.Sub(from) / historySteps).Round(time.Second))
	mat, _, err := m.QueryRange(ctx, strings.Join(parts, " or "), from, to, step)
	if err != nil {
		return time.Time{}, err
	}
	var first time.Time
	for _, ss := range mat {
		for _, p := range ss.Values {
			if t := p.Timestamp.Time(); first.IsZero() || t.Before(first) {
				first = t
			}
		}
	}
	return first, nil
}
