package rules

import (
	"strings"
	"testing"
)

const shapeMap = `
engine: trtllm
detect: count(trtllm_e2e_count{ {{.Selector}} })
shapes:
  - name: full
    title: every family
    detect: count(trtllm_running{ {{.Selector}} })
  - name: five
    title: renamed, two families
    detect: count(e2e_count{engine_type!="", {{.Selector}} })
    owns: trtllm_
    exports: [trtllm_e2e, trtllm_errors_total]
    match: 'engine_type!=""'
    rename: {trtllm_: ""}
signals:
  requests: {title: Requests, unit: requests, expr: 'sum(increase(trtllm_e2e_count{ {{.Selector}} }[{{.Window}}]))'}
  running: {title: Running, unit: requests, expr: 'sum(trtllm_running{ {{.Selector}} }) or sum(trtllm_active{ {{.Selector}} })'}
  samples: {title: Samples, unit: count, expr: 'count(trtllm_running{ {{.Selector}} }) or count(trtllm_e2e_count{ {{.Selector}} })'}
  errors: {title: Errors, unit: fraction, expr: '(sum(rate(trtllm_errors_total[{{.Window}}])) or vector(0)) / sum(rate(trtllm_e2e_count[{{.Window}}]))'}
  fallback_only: {title: Fallback, unit: fraction, expr: '(sum(rate(trtllm_prompt_total[{{.Window}}])) or vector(0)) / sum(rate(trtllm_e2e_count[{{.Window}}]))'}
  gpu: {title: GPU, unit: MHz, expr: 'max(gpu_clock{pod=~".+"}){{.Join "trtllm_e2e_count"}}'}
  queued: {title: Queued, unit: requests, expr: 'sum(trtllm_e2e_count{ {{.Selector}} }) unless sum(trtllm_waiting{ {{.Selector}} })'}
`

// TestShapes: a shape maps a signal when one way through its `or`
// branches reads only families it exports (a constant fallback does not
// count), drops the branches over families it lacks, renames the engine's
// selectors and adds its matchers; another exporter's series are never
// the engine's to lack.
func TestShapes(t *testing.T) {
	rs, err := Parse(File{Name: "m.yaml", Data: []byte(shapeMap)})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs.Shapes) != 2 || rs.Shapes[0].Shape().Name != "full" || rs.Shapes[1].Shape().Name != "five" {
		t.Fatalf("shapes %+v", rs.Shapes)
	}
	full, five := rs.Shapes[0], rs.Shapes[1]
	if len(full.Signals) != len(rs.Signals) || full.Signal("running") == nil {
		t.Errorf("full shape maps %d of %d signals", len(full.Signals), len(rs.Signals))
	}
	for _, n := range []string{"running", "fallback_only"} {
		if five.Signal(n) != nil {
			t.Errorf("five maps %s, which needs a family it lacks", n)
		}
	}
	for n, want := range map[string]string{
		"requests": `sum(increase(e2e_count{engine_type!="",job="x"}[5m]))`,
		"samples":  `count(e2e_count{engine_type!="",job="x"})`,
		"errors":   `(sum(rate(errors_total{engine_type!=""}[5m])) or vector(0)) / sum(rate(e2e_count{engine_type!=""}[5m]))`,
		"gpu":      `max(gpu_clock{pod=~".+"}) and on (pod) e2e_count{engine_type!="",job="x"}`,
		"queued":   `sum(e2e_count{engine_type!="",job="x"})`,
	} {
		s := five.Signal(n)
		if s == nil {
			t.Errorf("five does not map %s", n)
			continue
		}
		q, err := s.Render(`job="x"`, "5m", nil)
		if err != nil {
			t.Fatal(err)
		}
		if q != want {
			t.Errorf("%s renders\n  %s\nwant\n  %s", n, q, want)
		}
	}
	if q, _ := full.Signal("running").Render(`job="x"`, "5m", nil); !strings.Contains(q, "trtllm_active") {
		t.Errorf("the full shape keeps every branch: %s", q)
	}
	// Each shape's ruleset is a finished copy: its own detect, the same walk.
	if five.Detect == nil || five.Detect.Expr == rs.Detect.Expr || five.Verdict.MinScore != rs.Verdict.MinScore {
		t.Errorf("five's detect %v, min score %v", five.Detect, five.Verdict.MinScore)
	}
}

func TestShapeErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"  - name: a\n    detect: count(x)\n    exports: [x]\n", "need owns"},
		{"  - name: a\n", "missing detect"},
		{"  - name: A-b\n    detect: count(x)\n", "name must match"},
		{"  - name: a\n    detect: count(x)\n  - name: a\n    detect: count(x)\n", "duplicate shape"},
		{"  - name: a\n    detect: count(x)\n    owns: x_\n    match: 'a=='\n", "match:"},
	} {
		src := "engine: vllm\nsignals:\n  s: {title: S, unit: count, expr: 'count(x)'}\nshapes:\n" + tc.yaml
		_, err := Parse(File{Name: "m.yaml", Data: []byte(src)})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.yaml, err, tc.want)
		}
	}
}

// TestShapeTargets: a shape's target labels (Ray Serve's ReplicaId) join
// every grouping and matching over the target labels, in the scope's
// expressions and per target, and never the GPU join (on the pod alone:
// another exporter's series carry no ReplicaId).
func TestShapeTargets(t *testing.T) {
	const m = `
engine: vllm
detect: count(vllm:running{ {{.Selector}} })
shapes:
  - name: ray
    title: Ray
    detect: count(ray_vllm_running{ {{.Selector}} })
    owns: 'vllm:'
    rename: {'vllm:': ray_vllm_}
    targets: [ReplicaId]
signals:
  running: {title: Running, unit: requests, expr: 'sum {{.By}} (vllm:running{ {{.Selector}} })'}
  targets: {title: Targets, unit: count, expr: 'count(count by ({{.Target}}) (vllm:running{ {{.Selector}} }))'}
  kv: {title: KV, unit: fraction, expr: 'sum(sum by ({{.Target}}) (vllm:running{ {{.Selector}} }) * on({{.Target}}) max by ({{.Target}}) (vllm:kv{ {{.Selector}} }))'}
  gpu: {title: GPU, unit: MHz, expr: 'max(gpu_clock){{.Join "vllm:running"}}'}
`
	rs, err := Parse(File{Name: "m.yaml", Data: []byte(m)})
	if err != nil {
		t.Fatal(err)
	}
	ray := rs.Shapes[0]
	for name, want := range map[string]string{
		"targets": `count by (pod, instance, target, ReplicaId) (ray_vllm_running{model_name="a"})`,
		"kv":      `on (pod, instance, target, ReplicaId)`,
		"gpu":     `and on (pod) ray_vllm_running{model_name="a"}`,
	} {
		q, err := ray.Signal(name).Render(`model_name="a"`, "5m", nil)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(q, want) {
			t.Errorf("%s: %s\nwant it to contain %s", name, q, want)
		}
		if name == "gpu" && strings.Contains(q, "ReplicaId") {
			t.Errorf("gpu join groups by ReplicaId: %s", q)
		}
	}
	q, err := ray.Signal("running").Render(`model_name="a"`, "5m", []string{"pod", "instance"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(q, "by (pod, instance, ReplicaId)") {
		t.Errorf("per target: %s", q)
	}
	// The map's own form is untouched.
	q, _ = rs.Signal("targets").Render(`model_name="a"`, "5m", nil)
	if strings.Contains(q, "ReplicaId") {
		t.Errorf("the map's form groups by ReplicaId: %s", q)
	}
}
