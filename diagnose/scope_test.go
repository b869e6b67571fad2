package diagnose

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/whyslow/whyslow/query/querytest"
	"github.com/whyslow/whyslow/rulesets"
	"github.com/whyslow/whyslow/verdict"
)

func TestScopeModels(t *testing.T) {
	m := querytest.New(t, `load 5s
  vllm:num_requests_running{model_name="llama-8b",pod="a"} 1+0x20
  vllm:num_requests_running{model_name="llama-70b",pod="b"} 1+0x20
  sglang:num_running_reqs{model_name="qwen",pod="c"} 1+0x20
  vllm:num_requests_waiting{pod="d"} 1+0x20
  http_requests_total{model_name="other",pod="e"} 1+0x20
`)
	at := time.Unix(60, 0)
	tests := []struct {
		selector string
		want     string
		warn     bool
	}{
		{"", "llama-70b,llama-8b,qwen", true},
		{`model_name="llama-8b"`, "llama-8b", false},
		{`{pod=~"a|b"}`, "llama-70b,llama-8b", true},
		{`pod="d"`, "", false},
		{`pod="none"`, "", false},
	}
	for _, tc := range tests {
		t.Run(tc.selector, func(t *testing.T) {
			got, err := ScopeModels(context.Background(), m, rulesets.Series(), tc.selector, at)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(got, ",") != tc.want {
				t.Errorf("models %v, want %s", got, tc.want)
			}
			w := MixedModelsWarning(tc.selector, got)
			if (w != "") != tc.warn {
				t.Errorf("warning %q, want one: %v", w, tc.warn)
			}
			if tc.warn && !strings.Contains(w, "mixes") {
				t.Errorf("warning %q", w)
			}
		})
	}
	v := &verdict.Verdict{Scope: verdict.Scope{Selector: ""}, At: at}
	CheckMixedModels(context.Background(), m, rulesets.Series(), v)
	CheckMixedModels(context.Background(), m, rulesets.Series(), v)
	if len(v.Warnings) != 1 || !strings.Contains(v.Warnings[0], "mixes 3 models (llama-70b, llama-8b, qwen)") {
		t.Errorf("warnings %q", v.Warnings)
	}
}
