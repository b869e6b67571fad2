package rules

import (
	"errors"
	"os"
	"strings"
	"testing"
)

const causesYAML = `
causes:
  - id: queue_saturation
    title: Queue
    remediation: [add replicas]
  - id: kv_cache_pressure
    title: KV
    remediation: [raise memory]
`

const goodYAML = `
engine: vllm
detect: count(vllm:num_requests_running{ {{.Selector}} })
signals:
  ttft:
    unit: seconds
    targets: true
    expr: histogram_quantile(0.9, sum {{.By "le"}} (rate(vllm:time_to_first_token_seconds_bucket{ {{.Selector}} }[{{.Window}}])))
  kv:
    unit: fraction
    expr: max(vllm:kv_cache_usage_perc{ {{.Selector}} })
  waiting:
    title: Waiting
    expr: sum(vllm:num_requests_waiting{ {{.Selector}} })
verdict:
  anomaly: '"ttft" in ratio && ratio.ttft > 1.5'
  insufficient: '!("ttft" in now)'
  prefill: '"ttft" in ratio && ratio.ttft > 1.5'
  headline: [ttft]
steps:
  - name: kv_cache
    summary: 'KV {{percent .Now.kv}}'
    rules:
      - name: kv_full
        cause: kv_cache_pressure
        when: '"kv" in now && now.kv > 0.9'
        weight: 3
        signal: kv
        evidence: 'KV at {{percent .Now.kv}}'
      - name: kv_room
        cause: kv_cache_pressure
        rule_out: true
        when: '"kv" in now && now.kv < 0.5'
        evidence: 'KV only {{percent .Now.kv}}'
      - name: queued
        cause: queue_saturation
        when: 'has(now.waiting) && now.waiting > 5.0'
        weight: 2
        evidence: '{{num .Now.waiting}} waiting'
`

func parse(t *testing.T, docs ...string) (*Ruleset, error) {
	t.Helper()
	files := []File{{Name: "causes.yaml", Data: []byte(causesYAML)}}
	for i, d := range docs {
		files = append(files, File{Name: []string{"a.yaml", "b.yaml"}[i], Data: []byte(d)})
	}
	return Parse(files...)
}

func TestParseGood(t *testing.T) {
	rs, err := parse(t, goodYAML)
	if err != nil {
		t.Fatal(err)
	}
	if rs.Engine != "vllm" || len(rs.Signals) != 3 || len(rs.Steps) != 1 || len(rs.Causes) != 2 {
		t.Fatalf("unexpected ruleset: %+v", rs)
	}
	scope, err := rs.Signal("ttft").Render(`job="x"`, "5m", nil)
	if err != nil || !strings.Contains(scope, `by (le)`) || !strings.Contains(scope, `[5m]`) {
		t.Errorf("scope render = %q, %v", scope, err)
	}
	per, _ := rs.Signal("ttft").Render("", "5m", []string{"pod"})
	if !strings.Contains(per, "by (le, pod)") {
		t.Errorf("per-target render = %q", per)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want []string // substrings, each must appear in some error
	}{
		{"unknown key", strings.Replace(goodYAML, "    unit: seconds\n", "    unit: seconds\n    colour: red\n", 1), []string{`a.yaml:7:5: signal "ttft": unknown key "colour"`}},
		{"undeclared CEL", strings.Replace(goodYAML, `'"kv" in now && now.kv > 0.9'`, `'nwo.kv > 0.9'`, 1), []string{`step "kv_cache", rule "kv_full": CEL: undeclared reference to 'nwo'`}},
		{"unknown signal", strings.Replace(goodYAML, `now.waiting > 5.0`, `now.wating > 5.0`, 1), []string{`CEL: unknown signal "wating"`}},
		{"not bool", strings.Replace(goodYAML, `'"kv" in now && now.kv > 0.9'`, `'now.kv + 1.0'`, 1), []string{"result must be bool"}},
		{"bad promql", strings.Replace(goodYAML, `max(vllm:kv_cache_usage_perc{ {{.Selector}} })`, `max(vllm:kv_cache_usage_perc{ {{.Selector}} }`, 1), []string{`signal "kv": PromQL:`}},
		{"bad template", strings.Replace(goodYAML, `'KV at {{percent .Now.kv}}'`, `'KV at {{percent .Now.kv}'`, 1), []string{"evidence: template:"}},
		{"unknown cause", strings.Replace(goodYAML, "cause: queue_saturation", "cause: queue_saturaton", 1), []string{`unknown cause "queue_saturaton"`}},
		{"weight and rule_out", strings.Replace(goodYAML, "        rule_out: true\n", "        rule_out: true\n        weight: 1\n", 1), []string{"either weight or rule_out"}},
		{"targets without by", strings.Replace(goodYAML, "{{.By \"le\"}}", "by (le)", 1), []string{"never uses {{.By"}},
		{"yaml syntax", "engine: [vllm\n", []string{"a.yaml:"}},
		{"old unit name", strings.Replace(goodYAML, "    unit: fraction\n", "    unit: per_second\n", 1), []string{`unit: unknown unit "per_second": use a plain rate unit`}},
		{"unknown unit", strings.Replace(goodYAML, "    unit: fraction\n", "    unit: furlongs\n", 1), []string{`unit: unknown unit "furlongs" (known: `}},
		{"phase outside the anomaly", strings.Replace(goodYAML, `prefill: '"ttft" in ratio && ratio.ttft > 1.5'`, `prefill: 'phase.prefill'`, 1), []string{`verdict: prefill: CEL: undeclared reference to 'phase'`}},
		{"optional not bool", strings.Replace(goodYAML, "    unit: fraction\n", "    unit: fraction\n    optional: maybe\n", 1), []string{"optional"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parse(t, tt.doc)
			if err == nil {
				t.Fatal("no error")
			}
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("error %T is not Errors", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("missing %q in:\n%v", w, err)
				}
			}
		})
	}
}

// TestThreeErrors checks that every problem of a file is reported at once, with positions.
func TestThreeErrors(t *testing.T) {
	data, err := os.ReadFile("testdata/three_errors.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Parse(File{Name: "causes.yaml", Data: []byte(causesYAML)}, File{Name: "three_errors.yaml", Data: data})
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("got %v", err)
	}
	want := []string{
		`three_errors.yaml:5:11: signal "ttft": PromQL:`,
		`three_errors.yaml:12:15: step "split", rule 1: CEL: undeclared reference to 'nwo'`,
		`three_errors.yaml:15:9: step "split", rule 1: unknown key "colour"`,
	}
	if len(es) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(es), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(es[i].Error(), w) {
			t.Errorf("error %d = %q, want prefix %q", i, es[i].Error(), w)
		}
	}
}

func TestWalk(t *testing.T) {
	rs, err := parse(t, goodYAML)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		now, base map[string]float64
		anomaly   bool
		causes    []string
		ruledOut  []string
	}{
		{"kv wall", map[string]float64{"ttft": 2, "kv": 0.95, "waiting": 10}, map[string]float64{"ttft": 0.5, "kv": 0.4, "waiting": 0}, true, []string{"kv_cache_pressure", "queue_saturation"}, nil},
		{"queue only", map[string]float64{"ttft": 2, "kv": 0.3, "waiting": 10}, map[string]float64{"ttft": 0.5, "kv": 0.3}, true, []string{"queue_saturation"}, []string{"kv_cache_pressure"}},
		{"healthy", map[string]float64{"ttft": 0.5, "kv": 0.95, "waiting": 10}, map[string]float64{"ttft": 0.5}, false, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := rs.Walk(Facts{Now: tt.now, Base: tt.base})
			if out.Anomaly != tt.anomaly {
				t.Errorf("anomaly = %v", out.Anomaly)
			}
			var got []string
			for _, c := range out.Causes {
				got = append(got, c.Cause.ID)
			}
			if strings.Join(got, ",") != strings.Join(tt.causes, ",") {
				t.Errorf("causes = %v, want %v", got, tt.causes)
			}
			var ro []string
			for _, r := range out.RuledOut {
				ro = append(ro, r.Cause.ID)
			}
			if strings.Join(ro, ",") != strings.Join(tt.ruledOut, ",") {
				t.Errorf("ruled out = %v, want %v", ro, tt.ruledOut)
			}
		})
	}
	out := rs.Walk(Facts{Now: map[string]float64{"ttft": 2, "kv": 0.95}, Base: map[string]float64{"ttft": 1}})
	if len(out.Causes) != 1 || out.Causes[0].Findings[0].Text != "KV at 95.0%" {
		t.Errorf("evidence = %+v", out.Causes)
	}
}

// TestAnomalyReadsPhase checks that the anomaly expression sees the
// results of prefill and decode as phase.prefill and phase.decode.
func TestAnomalyReadsPhase(t *testing.T) {
	doc := strings.Replace(goodYAML, `anomaly: '"ttft" in ratio && ratio.ttft > 1.5'`,
		`anomaly: 'phase.prefill && !phase.decode && now.?kv.orValue(0.0) < 0.99'`, 1)
	rs, err := parse(t, doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		ttft, kv float64
		want     bool
	}{{2, 0.5, true}, {1, 0.5, false}, {2, 0.995, false}} {
		out := rs.Walk(Facts{Now: map[string]float64{"ttft": tt.ttft, "kv": tt.kv}, Base: map[string]float64{"ttft": 1}})
		if out.Anomaly != tt.want || out.Prefill != (tt.ttft > 1.5) || len(out.Errors) > 0 {
			t.Errorf("ttft ×%g kv %g: anomaly %v prefill %v errors %v, want anomaly %v", tt.ttft, tt.kv, out.Anomaly, out.Prefill, out.Errors, tt.want)
		}
	}
}

func TestFormat(t *testing.T) {
	tests := []struct{ got, want string }{
		{FormatSeconds(0.0123), "12.3 ms"}, {FormatSeconds(0.0042), "4.2 ms"}, {FormatSeconds(2.345), "2.35 s"}, {FormatSeconds(250.0), "4m10s"},
		{FormatPercent(0.934), "93.4%"}, {FormatRatio(2.14), "2.1×"}, {FormatNumber(12345.6), "12346"}, {FormatNumber(0.01234), "0.0123"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(goodYAML))
	f.Add([]byte(causesYAML))
	f.Add([]byte("engine: vllm\nsignals:\n  x:\n    expr: '{{'\n"))
	f.Add([]byte("steps:\n  - name: a\n    rules:\n      - when: 'now.x >'\n"))
	f.Add([]byte(shapeMap))
	f.Add([]byte("engine: e\ngpu_join: e:running\nshared:\n  z: max(avg_over_time(g[{{.Window}}]){{.GPUJoin}})\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rs, err := Parse(File{Name: "causes.yaml", Data: []byte(causesYAML)}, File{Name: "f.yaml", Data: data})
		if err == nil && rs == nil {
			t.Fatal("nil ruleset without error")
		}
		if err != nil && rs != nil {
			t.Fatal("partial ruleset returned with error")
		}
	})
}

func TestRecentWindow(t *testing.T) {
	tests := []struct{ window, want string }{
		{"5m", "2m"}, {"1h", "2m"}, {"2m", "2m"}, {"1m", "1m"}, {"30s", "30s"}, {"bogus", "bogus"},
	}
	for _, tt := range tests {
		t.Run(tt.window, func(t *testing.T) {
			if got := recentOf(tt.window); got != tt.want {
				t.Errorf("recentOf(%q) = %q, want %q", tt.window, got, tt.want)
			}
		})
	}
	rs, err := parse(t, strings.Replace(goodYAML, "  waiting:\n", "  recent:\n    optional: true\n    expr: sum(rate(vllm:e2e_request_latency_seconds_count{ {{.Selector}} }[{{.Recent}}]))\n  waiting:\n", 1))
	if err != nil {
		t.Fatal(err)
	}
	s := rs.Signal("recent")
	if s == nil || !s.Optional {
		t.Fatalf("signal recent = %+v, want optional", s)
	}
	q, err := s.Render("", "10m", nil)
	if err != nil || !strings.Contains(q, "[2m]") {
		t.Errorf("Render = %q, %v; want a [2m] range", q, err)
	}
}
