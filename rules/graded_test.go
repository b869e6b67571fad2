package rules

import (
	"math"
	"strings"
	"testing"
)

const bookCauses = `
causes:
  - id: a
    title: A
    remediation: [fix a]
  - id: b
    title: B
    remediation:
      - {text: raise the budget, knob: budget, direction: up}
    engine_remediation:
      sglang: [sglang fix b]
    chain:
      - {signal: x, label: x grew, min: 1.2}
  - id: c
    title: C
    remediation: [fix c]
  - id: unexplained
    title: Unexplained
    remediation: [look closer]
`

const book = `
signals:
  x: {title: X, unit: ratio}
  y: {title: Y, unit: seconds}
  z: {title: Z, unit: fraction, zero_is_gap: true, group: gpu}
verdict:
  anomaly: '"x" in ratio && ratio.x > 1.5'
  min_score: 2
  fallback: unexplained
steps:
  - name: s
    rules:
      - name: graded
        cause: a
        grade: 'logramp(ratio.x, 1.0, 4.0)'
        weight: 4
        evidence: 'x rose {{ratio .Ratio.x}}'
      - name: gated
        cause: b
        when: '"y" in now'
        grade: 'ramp(now.y, 0, 10)'
        weight: 2
        evidence: 'y is {{seconds .Now.y}}'
      - name: against_a
        cause: a
        rule_out: true
        when: '"z" in now'
        grade: 'now.z'
        evidence: 'z is {{percent .Now.z}}'
      - name: tiny
        cause: c
        grade: 'attr.?itl_clock.orValue(0.0)'
        weight: 1
        evidence: 'clock {{percent .Attr.itl_clock}}'
`

const vllmMap = `
engine: vllm
signals:
  x: sum(rate(vllm:prompt_tokens_total{ {{.Selector}} }[{{.Window}}]))
  z: max(vllm:kv_cache_usage_perc{ {{.Selector}} })
`

func parseBook(t *testing.T, docs ...string) (*Ruleset, error) {
	t.Helper()
	files := []File{{Name: "causes.yaml", Data: []byte(bookCauses)}, {Name: "book.yaml", Data: []byte(book)}}
	for i, d := range docs {
		files = append(files, File{Name: []string{"map.yaml", "extra.yaml"}[i], Data: []byte(d)})
	}
	return Parse(files...)
}

func TestRulebookAndSignalMap(t *testing.T) {
	rs, err := parseBook(t, vllmMap)
	if err != nil {
		t.Fatal(err)
	}
	var mapped, unmapped []string
	for _, s := range rs.Signals {
		mapped = append(mapped, s.Name)
	}
	for _, s := range rs.Unmapped {
		unmapped = append(unmapped, s.Name)
	}
	if strings.Join(mapped, ",") != "x,z" || strings.Join(unmapped, ",") != "y" {
		t.Errorf("mapped %v, unmapped %v; want [x z], [y]", mapped, unmapped)
	}
	if s := rs.Signal("x"); s == nil || s.Title != "X" || s.Unit != "ratio" || s.Engine != "vllm" || s.Pos.File != "map.yaml" || s.DeclPos.File != "book.yaml" {
		t.Errorf("signal x = %+v", s)
	}
	if rs.Signal("y") != nil || rs.Declared("y") == nil {
		t.Error("y must be declared but not evaluated")
	}
	if z := rs.Declared("z"); !z.ZeroIsGap || z.Group != "gpu" {
		t.Errorf("z = %+v", z)
	}
	if !DeclaresEngine([]byte(vllmMap)) || DeclaresEngine([]byte(book)) || DeclaresEngine([]byte("{{")) {
		t.Error("DeclaresEngine")
	}
	if f := rs.Cause("b").FixesFor("sglang"); len(f) != 1 || f[0].Text != "sglang fix b" {
		t.Errorf("sglang fixes = %+v", f)
	}
	if f := rs.Cause("b").FixesFor("vllm"); len(f) != 1 || f[0].Knob != "budget" || f[0].Direction != "up" {
		t.Errorf("vllm fixes = %+v", f)
	}
	if c := rs.Cause("b").Chain; len(c) != 1 || c[0].Signal != "x" || c[0].Show != "ratio" || c[0].Min != 1.2 {
		t.Errorf("chain = %+v", c)
	}
}

func TestRulebookErrors(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want string
	}{
		{"undeclared mapping", vllmMap + "  xx: sum(up)\n", `map.yaml:6:3: signal "xx": not a declared signal`},
		{"unknown attr key", strings.Replace(vllmMap, "engine: vllm", "engine: vllm\nsteps:\n  - name: t\n    rules:\n      - {name: r, cause: a, grade: 'attr.?itl_clok.orValue(0.0)', weight: 1, evidence: e}", 1),
			`unknown attribution key "itl_clok"`},
		{"grade not a number", strings.Replace(vllmMap, "engine: vllm", "engine: vllm\nsteps:\n  - name: t\n    rules:\n      - {name: r, cause: a, grade: '\"x\"', weight: 1, evidence: e}", 1),
			"grade: CEL: result must be a number"},
		{"no when nor grade", strings.Replace(vllmMap, "engine: vllm", "engine: vllm\nsteps:\n  - name: t\n    rules:\n      - {name: r, cause: a, weight: 1, evidence: e}", 1),
			"missing when (or grade)"},
		{"duplicate mapping", vllmMap + "  x: sum(up)\n", `duplicate signal (first mapped at map.yaml:4:6)`},
		{"bad direction", strings.Replace(vllmMap, "engine: vllm", "engine: vllm\ncauses:\n  - {id: d, title: D, remediation: [{text: t, knob: k, direction: sideways}]}", 1),
			`direction: want up or down, got "sideways"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseBook(t, tt.doc)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestUnknownChainLink(t *testing.T) {
	rs, err := parseBook(t, strings.Replace(vllmMap, "engine: vllm", "engine: vllm\ncauses:\n  - {id: d, title: D, remediation: [t], chain: [{signal: nope}]}", 1))
	if err != nil {
		t.Fatal(err)
	}
	if len(rs.UnknownChainLinks) != 1 || !strings.Contains(rs.UnknownChainLinks[0], `map.yaml:4:49: cause 1: chain: signal "nope" is not declared`) {
		t.Errorf("unknown chain links = %q", rs.UnknownChainLinks)
	}
}

func TestRamps(t *testing.T) {
	tests := []struct {
		got, want float64
	}{
		{Ramp(0.5, 0, 1), 0.5}, {Ramp(-1, 0, 1), 0}, {Ramp(2, 0, 1), 1}, {Ramp(0.25, 1, 0), 0.75},
		{Ramp(math.NaN(), 0, 1), 0}, {Ramp(1, 1, 1), 1}, {Ramp(0.9, 1, 1), 0},
		{LogRamp(2, 1, 4), 0.5}, {LogRamp(0, 1, 4), 0}, {LogRamp(math.Inf(1), 1, 4), 1}, {LogRamp(0.5, 1, 0.25), 0.5},
	}
	for i, tt := range tests {
		if math.Abs(tt.got-tt.want) > 1e-9 {
			t.Errorf("case %d: got %v, want %v", i, tt.got, tt.want)
		}
	}
}

// TestGradedWalk checks that evidence grows with how far a signal moved
// (no cliff at a threshold), that counter-evidence scales a score down and
// rules a cause out only when little is left, that an anomaly reports up to
// three supported causes below min_score, and that an anomaly with no
// support at all gets the fallback cause.
func TestGradedWalk(t *testing.T) {
	rs, err := parseBook(t, vllmMap)
	if err != nil {
		t.Fatal(err)
	}
	score := func(f Facts, id string) float64 {
		out := rs.Walk(f)
		for _, c := range out.Candidates {
			if c.Cause.ID == id {
				return c.Score
			}
		}
		return 0
	}
	f := func(x float64) Facts {
		return Facts{Now: map[string]float64{"x": x}, Base: map[string]float64{"x": 1}}
	}
	prev := 0.0
	for _, x := range []float64{1.5, 1.9, 1.99, 2.01, 2.5, 3.9} {
		s := score(f(x), "a")
		if s <= prev {
			t.Errorf("score at ratio %.2f = %.3f, not above %.3f", x, s, prev)
		}
		prev = s
	}
	if d := score(f(2.01), "a") - score(f(1.99), "a"); d > 0.05 {
		t.Errorf("a 1%% move changed the score by %.3f: a cliff", d)
	}
	if s := score(f(4), "a"); math.Abs(s-4) > 1e-9 {
		t.Errorf("full grade score = %v, want 4", s)
	}

	half := Facts{Now: map[string]float64{"x": 4, "z": 0.5}, Base: map[string]float64{"x": 1}}
	out := rs.Walk(half)
	if len(out.Causes) == 0 || out.Causes[0].Cause.ID != "a" || math.Abs(out.Causes[0].Score-2) > 1e-9 || len(out.Causes[0].Against) != 1 {
		t.Fatalf("half counter-evidence: causes %+v", out.Causes)
	}
	out = rs.Walk(Facts{Now: map[string]float64{"x": 4, "z": 0.95}, Base: map[string]float64{"x": 1}})
	if len(out.RuledOut) != 1 || out.RuledOut[0].Cause.ID != "a" {
		t.Errorf("ruled out = %+v, want a", out.RuledOut)
	}
	if out.Causes[0].Cause.ID != "unexplained" {
		t.Errorf("with a ruled out and nothing else, causes = %+v, want the fallback", out.Causes)
	}

	// a: 4 × logramp(1.6) ≈ 1.36, b: 2 × 0.1, c: 1 × 0.3; min_score 2.
	out = rs.Walk(Facts{Now: map[string]float64{"x": 1.6, "y": 1}, Base: map[string]float64{"x": 1},
		Attr: map[string]float64{AttrITLClock: 0.3}})
	var ids []string
	for _, c := range out.Causes {
		ids = append(ids, c.Cause.ID)
		if c.Confidence <= 0 || c.Confidence > 1 {
			t.Errorf("%s confidence %v", c.Cause.ID, c.Confidence)
		}
	}
	if strings.Join(ids, ",") != "a,c,b" {
		t.Errorf("causes %v, want [a c b]: three supported causes even below min_score", ids)
	}
	if !(out.Causes[0].Confidence > out.Causes[1].Confidence && out.Causes[1].Confidence > out.Causes[2].Confidence) {
		t.Errorf("confidences not in rank order: %+v", out.Causes)
	}
	if out := rs.Walk(Facts{Now: map[string]float64{"x": 1.2}, Base: map[string]float64{"x": 1}}); len(out.Causes) != 0 {
		t.Errorf("healthy window reported %+v", out.Causes)
	}
}

func TestCalibration(t *testing.T) {
	c := Calibration{LogScore: 1, Share: 3, Offset: -2.5, Defined: true}
	prev := 0.0
	for _, s := range []float64{0.1, 1, 3, 10} {
		p := c.of(s, 10)
		if p <= prev || p >= 1 {
			t.Errorf("confidence(%v) = %v, not increasing in (0,1)", s, p)
		}
		prev = p
	}
	if got := (Calibration{LogScore: 1, Share: 3, Offset: -2.5, Defined: true}).of(0.1, 0.1); got > 0.1 {
		t.Errorf("a lone candidate with little evidence got confidence %v", got)
	}
	if (Calibration{}).of(2, 4) != 0.5 {
		t.Error("uncalibrated confidence is the score's share")
	}
}

// TestCheckDefaultsFindsVeto: a neutral default inside a factor that vetoes
// the cause when traffic rose is caught; declared, it passes; a default at
// the factor's lowest value is safe without a declaration; a rule that fires
// only at thousands of tokens is searched there too.
func TestCheckDefaultsFindsVeto(t *testing.T) {
	for _, tc := range []struct {
		name, grade, safe string
		bad               bool
	}{
		{"veto default", `ramp(ratio.tpot_mean, 1.2, 1.5) * ramp(ratio.?arrival_rate.orValue(1.0), 1.25, 1.1)`, "", true},
		{"declared", `ramp(ratio.tpot_mean, 1.2, 1.5) * ramp(ratio.?arrival_rate.orValue(1.0), 1.25, 1.1)`, "\n        safe_defaults: {arrival_rate: 'a reason'}", false},
		{"lowest default", `ramp(ratio.tpot_mean, 1.2, 1.5) * ramp(now.?preemption_rate.orValue(0.0), 0.01, 0.1)`, "", false},
		// Fires only for prompts that moved from thousands of tokens to past
		// a budget of 8192: the search must reach large baselines.
		{"large values", `ramp(now.prompt_len_p90 / 8192.0, 0.9, 1.4) * logramp(ratio.prompt_len_p90, 1.4, 2.5)
          * ramp(now.prompt_len_p90 * (1.0 - now.?prefix_hit_rate.orValue(0.0)) / 8192.0, 0.4, 0.7)`, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := `signals:
  tpot_mean: {title: t, unit: seconds}
  arrival_rate: {title: a, unit: req/s}
  preemption_rate: {title: p, unit: preemptions/s}
  prompt_len_p90: {title: l, unit: tokens}
  prefix_hit_rate: {title: h, unit: fraction}
verdict: {anomaly: 'true'}
causes:
  - {id: gpu_throttling, title: t, description: d, remediation: [f]}
steps:
  - name: s
    rules:
      - name: r
        cause: gpu_throttling
        grade: '` + tc.grade + `'` + tc.safe + `
        weight: 1
        evidence: e
`
			rs, err := Parse(File{Name: "x.yaml", Data: []byte(doc)})
			if err != nil {
				t.Fatal(err)
			}
			errs := rs.CheckDefaults()
			if (len(errs) > 0) != tc.bad {
				t.Fatalf("CheckDefaults = %v, want bad=%v", errs, tc.bad)
			}
			if tc.bad && !strings.HasPrefix(errs[0].Error(), "x.yaml:") {
				t.Errorf("error without position: %v", errs[0])
			}
		})
	}
}
