package diagnose

import (
	"context"
	"strings"
	"time"

	"github.com/whyslow/whyslow/query"
)

// historySeries are the series whose presence marks an engine's history:
// the request counts the detector's built-in triggers read.
var historySeries = []string{
	"vllm:time_to_first_token_seconds_count{$sel}",
	"sglang:time_to_first_token_seconds_count{$sel}",
	"trtllm_time_to_first_token_seconds_count{$sel}",
	`time_to_first_token_seconds_count{$sel engine_type!=""}`,
	"vllm:request_success_total{$sel}",
	"sglang:num_requests_total{$sel}",
	"trtllm_request_success_total{$sel}",
}

// historySteps is how many steps HistoryStart's range query takes: the
// start it finds is exact to (to - from) / historySteps (5 s over an hour).
const historySteps = 720

// HistoryStart is when the engines' history in m starts, searched between
// from and to (selector: extra label matchers, without braces), for a
// source that does not know its own range (a remote Prometheus): from
// when any engine series has samples from from on, the zero time when
// none has any in the range. With ChooseBaseline it shrinks a baseline to
// the history a fresh Prometheus holds.
func HistoryStart(ctx context.Context, m query.Metrics, selector string, from, to time.Time) (time.Time, error) {
	if !to.After(from) {
		return time.Time{}, nil
	}
	sel := ""
	if selector != "" {
		sel = selector + ","
	}
	parts := make([]string, len(historySeries))
	for i, s := range historySeries {
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
