package rules

import (
	"strings"
	"testing"
)

// sharedGPU is a `shared:` file: one GPU counter joined on each map's gpu_join.
const sharedGPU = `
shared:
  z: max(avg_over_time(gpu_util[{{.Window}}]){{.GPUJoin}})
`

// TestSharedSignals: a map gets the shared expressions, joined on its own
// gpu_join; a map that writes the signal itself keeps its own; a map without
// gpu_join leaves a signal that joins on it a gap.
func TestSharedSignals(t *testing.T) {
	parseShared := func(mapDoc string) *Ruleset {
		t.Helper()
		rs, err := Parse(File{Name: "causes.yaml", Data: []byte(bookCauses)}, File{Name: "book.yaml", Data: []byte(book)},
			File{Name: "gpu.yaml", Data: []byte(sharedGPU)}, File{Name: "map.yaml", Data: []byte(mapDoc)})
		if err != nil {
			t.Fatal(err)
		}
		return rs
	}
	const joined = "engine: e\ngpu_join: e:running\nsignals:\n  x: sum(e:x{ {{.Selector}} })\n"

	rs := parseShared(joined)
	z := rs.Signal("z")
	if z == nil || z.Pos.File != "gpu.yaml" || z.Engine != "e" {
		t.Fatalf("shared z = %+v, want mapped from gpu.yaml for engine e", z)
	}
	for _, tc := range []struct{ selector, want string }{
		{`model_name="m"`, `max(avg_over_time(gpu_util[5m]) and on(pod) e:running{model_name="m"})`},
		{"", `max(avg_over_time(gpu_util[5m]))`},
	} {
		if q, err := z.Render(tc.selector, "5m", nil); err != nil || q != tc.want {
			t.Errorf("Render(%q) = %q, %v; want %q", tc.selector, q, err, tc.want)
		}
	}

	own := parseShared(joined + "  z: max(my_gpu{ {{.Selector}} })\n").Signal("z")
	if own == nil || own.Pos.File != "map.yaml" {
		t.Errorf("a map's own z = %+v, want the map's", own)
	}

	gap := parseShared("engine: e\nsignals:\n  x: sum(e:x{ {{.Selector}} })\n")
	if gap.Signal("z") != nil || len(gap.Unmapped) != 2 {
		t.Errorf("without gpu_join: z mapped %v, unmapped %d; want a gap", gap.Signal("z") != nil, len(gap.Unmapped))
	}
}

// TestSharedErrors: every problem of the construct is an error at its
// file:line:col.
func TestSharedErrors(t *testing.T) {
	for _, tc := range []struct {
		name, shared, mapDoc, want string
	}{
		{"bad join", sharedGPU, "engine: e\ngpu_join: 'e running'\n", `map.yaml:2:11: gpu_join: "e running" is not a metric name`},
		{"join without map", sharedGPU, "engine: e\nsignals:\n  x: sum(e:x{ {{.Selector}} }){{.GPUJoin}}\n", `map.yaml:3:6: signal "x": template: `},
		{"not a string", "shared:\n  z: {expr: x}\n", "engine: e\ngpu_join: e:running\n", `gpu.yaml:2:6: shared signal "z": expected a PromQL expression, got a mapping`},
		{"duplicate", sharedGPU + "  z: max(x)\n", "engine: e\ngpu_join: e:running\n", `gpu.yaml:4:3: shared signal "z": duplicate shared signal (first at gpu.yaml:3:3)`},
		{"undeclared", "shared:\n  nope: max(x{{.GPUJoin}})\n", "engine: e\ngpu_join: e:running\n", `gpu.yaml:2:3: signal "nope": not a declared signal`},
		{"bad PromQL", "shared:\n  z: max(x{{.GPUJoin}}\n", "engine: e\ngpu_join: e:running\n", `gpu.yaml:2:6: signal "z": PromQL: `},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(File{Name: "causes.yaml", Data: []byte(bookCauses)}, File{Name: "book.yaml", Data: []byte(book)},
				File{Name: "gpu.yaml", Data: []byte(tc.shared)}, File{Name: "map.yaml", Data: []byte(tc.mapDoc)})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}
