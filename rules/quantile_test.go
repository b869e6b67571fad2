package rules

import (
	"strings"
	"testing"
)

// TestQuantile: {{.Quantile}} writes the histogram quantile the maps
// spelled out before, for the scope and per target, over one family or
// several read with `or`; a misuse is a template error at the signal's
// file:line:col.
func TestQuantile(t *testing.T) {
	const ttft = `histogram_quantile(0.9, sum {{.By "le"}} (rate(vllm:time_to_first_token_seconds_bucket{ {{.Selector}} }[{{.Window}}])))`
	for _, tc := range []struct{ helper, written string }{
		{`{{.Quantile 0.9 .Window "vllm:time_to_first_token_seconds"}}`, ttft},
		{`{{.Quantile 0.999 .Recent "a:x"}}`, `histogram_quantile(0.999, sum {{.By "le"}} (rate(a:x_bucket{ {{.Selector}} }[{{.Recent}}])))`},
		{`{{.Quantile 0.5 .Window "a:new" "a:old"}}`, "histogram_quantile(0.5, sum {{.By \"le\"}} (\n" +
			"  rate(a:new_bucket{ {{.Selector}} }[{{.Window}}])\n" +
			"  or rate(a:old_bucket{ {{.Selector}} }[{{.Window}}])))"},
	} {
		helper, written := signalOf(t, tc.helper), signalOf(t, tc.written)
		for _, targets := range [][]string{nil, {"pod"}} {
			for _, sel := range []string{"", `namespace="ns", model_name="m"`} {
				got, err := helper.Render(sel, "10m", targets)
				want, err2 := written.Render(sel, "10m", targets)
				if err != nil || err2 != nil || got != want {
					t.Errorf("%s {%s} %v:\n got %q %v\nwant %q %v", tc.helper, sel, targets, got, err, want, err2)
				}
			}
		}
	}

	for _, tc := range []struct{ expr, want string }{
		{`{{.Quantile 0.95 .Window "vllm:time_to_first_token_seconds_bucket"}}`, `give the histogram's family, "vllm:time_to_first_token_seconds"`},
		{`{{.Quantile 1.5 .Window "x"}}`, "quantile 1.5 is outside [0, 1]"},
		{`{{.Quantile 0.95 .Window}}`, "no histogram given"},
	} {
		_, err := parse(t, strings.Replace(goodYAML, ttft, "'"+tc.expr+"'", 1))
		if err == nil || !strings.Contains(err.Error(), "a.yaml:8:11: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want a.yaml:8:11 and %q", tc.expr, err, tc.want)
		}
	}
}

// signalOf is goodYAML's ttft signal with expr in place of its PromQL.
func signalOf(t *testing.T, expr string) *Signal {
	t.Helper()
	const ttft = `histogram_quantile(0.9, sum {{.By "le"}} (rate(vllm:time_to_first_token_seconds_bucket{ {{.Selector}} }[{{.Window}}])))`
	folded := ">-\n      " + strings.ReplaceAll(expr, "\n", "\n      ")
	rs, err := parse(t, strings.Replace(goodYAML, ttft, folded, 1))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return rs.Signal("ttft")
}
