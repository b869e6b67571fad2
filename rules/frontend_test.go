package rules

import (
	"strings"
	"testing"
)

// frontendYAML adds a frontend reading of goodYAML's ttft.
const frontendYAML = `
signals:
  client_ttft:
    title: TTFT, as the frontend sees it
    unit: seconds
    optional: true
    frontend_of: ttft
    expr: histogram_quantile(0.9, sum by (le) (rate(dynamo_frontend_time_to_first_token_seconds_bucket{ {{.Frontend}} }[{{.Window}}])))
`

// TestFrontendGate: the gate also judges the frontend's reading in place of
// the signal it stands for, so a slowdown only the frontend sees is an
// anomaly; the engine's own reading still decides alone without one, and
// the rules read both by name.
func TestFrontendGate(t *testing.T) {
	rs, err := parse(t, goodYAML, frontendYAML)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		now, base map[string]float64
		anomaly   bool
	}{
		{"engine moved", map[string]float64{"ttft": 2}, map[string]float64{"ttft": 1}, true},
		{"nothing moved", map[string]float64{"ttft": 1, "client_ttft": 1.2}, map[string]float64{"ttft": 1, "client_ttft": 1.2}, false},
		{"only the frontend moved", map[string]float64{"ttft": 1, "client_ttft": 2}, map[string]float64{"ttft": 1, "client_ttft": 1.2}, true},
		{"frontend without a baseline", map[string]float64{"ttft": 1, "client_ttft": 2}, map[string]float64{"ttft": 1}, false},
	} {
		out := rs.Walk(Facts{Now: c.now, Base: c.base})
		if out.Anomaly != c.anomaly || out.Prefill != c.anomaly || len(out.Errors) > 0 {
			t.Errorf("%s: anomaly %v prefill %v errors %v, want %v", c.name, out.Anomaly, out.Prefill, out.Errors, c.anomaly)
		}
		if got := out.Ratio["ttft"]; got != c.now["ttft"]/c.base["ttft"] {
			t.Errorf("%s: the rules' ratio.ttft %g is not the engine's", c.name, got)
		}
	}
	_, err = parse(t, goodYAML, strings.Replace(frontendYAML, "frontend_of: ttft", "frontend_of: tpot", 1))
	if err == nil || !strings.Contains(err.Error(), `frontend_of: "tpot" is not a declared engine signal`) {
		t.Errorf("frontend_of an undeclared signal: %v", err)
	}
}

// TestFrontendSelector: the scope's model becomes the frontend's `model`
// label and its namespace stays; the workers' own labels are dropped.
func TestFrontendSelector(t *testing.T) {
	for _, c := range []struct {
		selector, want string
		hasModel       bool
	}{
		{`model_name="m", namespace="ns", pod="p-0"`, `model="m",namespace="ns"`, true},
		{`model="a\"b"`, `model="a\"b"`, true},
		{`model_name=~"m.*", pod="p-0", instance="10.0.0.1:8000"`, "", false},
		{"", "", false},
	} {
		scope, err := ScopeLabels(c.selector)
		if err != nil {
			t.Fatal(err)
		}
		got, hasModel := FrontendSelector(scope)
		if got != c.want || hasModel != c.hasModel || (SignalData{Selector: c.selector}).Frontend() != c.want {
			t.Errorf("%s: %q %v, want %q %v", c.selector, got, hasModel, c.want, c.hasModel)
		}
	}
}

// TestSelectorHas checks the namespace test joins use, asked twice (the
// second answer is the cache's) and with the cache starting over.
func TestSelectorHas(t *testing.T) {
	for _, tc := range []struct {
		selector string
		want     bool
	}{
		{`namespace="a",model_name="m"`, true},
		{`model_name="m"`, false},
		{`namespace=~"a|b"`, false},
		{`namespace=""`, false},
		{`exported_namespace="a"`, false},
		{`namespace="a"`, true},
		{`namespace=`, false}, // does not parse
	} {
		for i := range 2 {
			if got := selectorHas(tc.selector, "namespace"); got != tc.want {
				t.Errorf("selectorHas(%q) call %d = %v, want %v", tc.selector, i+1, got, tc.want)
			}
		}
	}
	small := selectorCache{max: 2}
	for _, sel := range []string{"a", "b", "c"} {
		small.put(selectorLabel{sel, "namespace"}, labelValue{sel, true})
	}
	if _, ok := small.get(selectorLabel{"a", "namespace"}); ok || len(small.m) != 1 {
		t.Errorf("a full cache kept %d entries, want it started over", len(small.m))
	}
	if v, ok := small.get(selectorLabel{"c", "namespace"}); !ok || v.value != "c" {
		t.Errorf("the entry after starting over: %v %v", v, ok)
	}
}
