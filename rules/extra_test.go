package rules

import "testing"

func TestMergeEvidence(t *testing.T) {
	rs, err := Parse(File{Name: "causes.yaml", Data: []byte(causesYAML)}, File{Name: "good.yaml", Data: []byte(goodYAML)})
	if err != nil {
		t.Fatal(err)
	}
	// Anomalous TTFT, 6 waiting (queue_saturation 2), KV 95% (kv 3).
	facts := Facts{Now: map[string]float64{"ttft": 2, "kv": 0.95, "waiting": 6}, Base: map[string]float64{"ttft": 1, "kv": 0.9, "waiting": 0}}
	cases := []struct {
		name     string
		extra    []ExtraEvidence
		causes   []string
		ruledOut []string
		errors   int
	}{
		{name: "nothing", causes: []string{"kv_cache_pressure", "queue_saturation"}},
		{name: "evidence re-ranks", extra: []ExtraEvidence{{Cause: "queue_saturation", Rule: "traces.x", Weight: 2, Text: "t"}},
			causes: []string{"queue_saturation", "kv_cache_pressure"}},
		{name: "rule out", extra: []ExtraEvidence{{Cause: "kv_cache_pressure", Rule: "traces.y", Text: "no", RuleOut: true},
			{Cause: "kv_cache_pressure", Rule: "traces.z", Weight: 5, Text: "ignored"}},
			causes: []string{"queue_saturation"}, ruledOut: []string{"kv_cache_pressure"}},
		{name: "unknown cause", extra: []ExtraEvidence{{Cause: "nope", Rule: "traces.w", Weight: 9}},
			causes: []string{"kv_cache_pressure", "queue_saturation"}, errors: 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := rs.Walk(facts)
			rs.MergeEvidence(out, "correlate", "Correlate", "summary", c.extra)
			var got []string
			for _, sc := range out.Causes {
				got = append(got, sc.Cause.ID)
			}
			if len(got) != len(c.causes) {
				t.Fatalf("causes %v, want %v", got, c.causes)
			}
			for i := range got {
				if got[i] != c.causes[i] {
					t.Errorf("causes %v, want %v", got, c.causes)
				}
			}
			var ro []string
			for _, r := range out.RuledOut {
				ro = append(ro, r.Cause.ID)
			}
			if len(ro) != len(c.ruledOut) || len(ro) > 0 && ro[0] != c.ruledOut[0] {
				t.Errorf("ruled out %v, want %v", ro, c.ruledOut)
			}
			if len(out.Errors) != c.errors {
				t.Errorf("errors %v", out.Errors)
			}
			last := out.Steps[len(out.Steps)-1]
			if last.Step.Name != "correlate" || last.Summary != "summary" || len(last.Rules) != len(c.extra)-c.errors {
				t.Errorf("step %+v", last)
			}
		})
	}
}
