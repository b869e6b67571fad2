package render

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/whyslow/whyslow/verdict"
)

// TestPoolContextLine: the pool context is one line after the answer in
// text and Markdown, and a pool_context object in JSON; a verdict without
// one renders none.
func TestPoolContextLine(t *testing.T) {
	f := func(x float64) *float64 { return &x }
	v := tracesVerdict()
	v.PoolContext = &verdict.PoolContext{Pool: "x", Rows: []verdict.Comparison{
		{Signal: "pool_queue_mean", Unit: "requests", Now: f(12), Baseline: f(1.5), Source: "endpoint_picker"},
		{Signal: "pool_kv_usage_mean", Unit: "fraction", Now: f(0.94), Baseline: f(0.4), Source: "endpoint_picker"},
		{Signal: "pool_ready_pods", Unit: "count", Now: f(4), Baseline: f(4), Source: "endpoint_picker"},
	}}
	want := `Pool context (endpoint picker, pool "x"): average queue 12 (baseline 1.5), KV 94% (baseline 40%), 4 ready pods`
	if got := PoolContextLine(v); got != want {
		t.Errorf("line %q\nwant %q", got, want)
	}
	for _, fm := range []Format{FormatText, FormatMarkdown} {
		var buf bytes.Buffer
		if err := Render(&buf, v, fm, Options{}); err != nil {
			t.Fatal(err)
		}
		out := strings.Join(strings.Fields(buf.String()), " ")
		i, j := strings.Index(out, "Pool context"), strings.Index(out, "Scope")
		if j < 0 {
			j = strings.Index(out, "scope:")
		}
		if i < 0 || j < 0 || i > j {
			t.Errorf("%s: no pool line before the scope:\n%s", fm, buf.String())
		}
	}
	var buf bytes.Buffer
	if err := JSON(&buf, v, Options{}); err != nil {
		t.Fatal(err)
	}
	var back struct {
		PoolContext *verdict.PoolContext `json:"pool_context"`
	}
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil || back.PoolContext == nil || len(back.PoolContext.Rows) != 3 ||
		back.PoolContext.Rows[0].Source != "endpoint_picker" {
		t.Errorf("JSON pool_context %+v (%v):\n%s", back.PoolContext, err, buf.String())
	}

	v.PoolContext = nil
	buf.Reset()
	if err := Render(&buf, v, FormatText, Options{}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "Pool context") || PoolContextLine(v) != "" {
		t.Errorf("a line without pool context:\n%s", buf.String())
	}
}
