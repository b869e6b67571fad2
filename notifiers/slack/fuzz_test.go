package slack

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql/parser"
)

// FuzzParseCommandText: whatever a user types after /whyslow, parsing never
// panics, and an accepted scope is valid PromQL label matchers and an
// accepted window is within bounds.
func FuzzParseCommandText(f *testing.F) {
	for _, s := range []string{"", "15m", "llama 1h", `model_name="x",namespace="prod" 30m`, "namespace=prod,pod=~vllm-.*",
		`{job="a"}`, "a=b,c", `x="unterminated`, "1d 2h", "help", "ü=1", "a=`b`"} {
		f.Add(s)
	}
	p := parser.NewParser(parser.Options{})
	f.Fuzz(func(t *testing.T, text string) {
		scope, w, err := ParseCommandText(text, 5*time.Minute, 24*time.Hour)
		if err != nil {
			return
		}
		if w <= 0 || w > 24*time.Hour {
			t.Fatalf("window %v out of bounds for %q", w, text)
		}
		if scope == "" {
			return
		}
		if _, err := p.ParseMetricSelector("{" + scope + "}"); err != nil {
			t.Fatalf("accepted scope %q from %q does not parse: %v", scope, text, err)
		}
		if strings.ContainsAny(scope, "\n") {
			t.Fatalf("scope %q has a newline", scope)
		}
	})
}
