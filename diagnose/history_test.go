package diagnose

import (
	"context"
	"testing"
	"time"

	"github.com/whyslow/whyslow/detect"
	"github.com/whyslow/whyslow/query/querytest"
	"github.com/whyslow/whyslow/rulesets"
)

// TestHistoryStart: the first sample of an engine series in the range, to
// one step; the range's start when the history begins earlier; zero when
// the range holds none, or none of the selector's.
func TestHistoryStart(t *testing.T) {
	m := querytest.Range{Metrics: querytest.New(t, `load 5s
  vllm:time_to_first_token_seconds_count{model_name="m"} _x24 0+10x96
  unrelated_total 0+1x200
`)}
	ctx := context.Background()
	engines, err := detect.ReadEngines(rulesets.Shipped().Files())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Unix(0, 0)
	for _, tc := range []struct {
		name     string
		selector string
		from, to time.Duration
		want     time.Duration // -1: zero time
	}{
		{"starts inside", "", 0, 10 * time.Minute, 2 * time.Minute},
		{"starts before", "", 5 * time.Minute, 10 * time.Minute, 5 * time.Minute},
		{"other scope", `model_name="x"`, 0, 10 * time.Minute, -1},
		{"before the history", "", 0, time.Minute, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := HistoryStart(ctx, m, detect.HistorySeries(engines), tc.selector, start.Add(tc.from), start.Add(tc.to))
			if err != nil {
				t.Fatal(err)
			}
			if tc.want < 0 {
				if !got.IsZero() {
					t.Errorf("history starts %s, want none", got.Sub(start))
				}
				return
			}
			if d := got.Sub(start) - tc.want; got.IsZero() || d < 0 || d > time.Second {
				t.Errorf("history starts %s, want %s", got.Sub(start), tc.want)
			}
		})
	}
}
