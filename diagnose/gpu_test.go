package diagnose

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/whyslow/whyslow/rules"
	"github.com/whyslow/whyslow/rulesets"
	"github.com/whyslow/whyslow/verdict"
)

func TestNormalizeGPUClass(t *testing.T) {
	tests := map[string]string{
		"NVIDIA H100 80GB HBM3":          "H100",
		"NVIDIA H100 PCIe":               "H100",
		"NVIDIA H100 NVL":                "H100-NVL",
		"NVIDIA H200":                    "H200",
		"NVIDIA H200 NVL":                "H200",
		"NVIDIA GH200 480GB":             "GH200",
		"NVIDIA H20":                     "H20",
		"NVIDIA A100-SXM4-40GB":          "A100-40GB",
		"NVIDIA A100-PCIE-40GB":          "A100-40GB",
		"NVIDIA A100-SXM4-80GB":          "A100-80GB",
		"NVIDIA A100 80GB PCIe":          "A100-80GB",
		"NVIDIA B200":                    "B200",
		"NVIDIA GB200":                   "GB200",
		"NVIDIA L40S":                    "L40S",
		"NVIDIA L40":                     "L40",
		"NVIDIA L4":                      "L4",
		"NVIDIA A10G":                    "A10G",
		"Tesla T4":                       "T4",
		"Tesla V100-SXM2-32GB":           "V100",
		"NVIDIA GeForce RTX 4090":        "RTX 4090",
		"AMD Instinct MI300X":            "MI300X",
		"H100":                           "H100",
		"a100-40gb":                      "A100-40GB",
		"NVIDIA RTX 6000 Ada Generation": "",
		"":                               "",
	}
	for in, want := range tests {
		t.Run(in, func(t *testing.T) {
			got := NormalizeGPUClass(in)
			if got != want {
				t.Errorf("NormalizeGPUClass(%q) = %q, want %q", in, got, want)
			}
			if got != "" && GPUMemoryGiB(got) == 0 {
				t.Errorf("GPUMemoryGiB(%q) = 0: every class NormalizeGPUClass returns needs a memory size", got)
			}
		})
	}
}

func TestGPUMemoryGiB(t *testing.T) {
	tests := map[string]float64{
		"H100": 80, "H100-NVL": 94, "H200": 141, "GH200": 96, "H20": 96, "A100-40GB": 40, "A100-80GB": 80,
		"A100": 80, "B200": 180, "GB200": 186, "L40S": 48, "L4": 24, "NVIDIA A100-SXM4-40GB": 40, "unknown": 0,
	}
	for in, want := range tests {
		if got := GPUMemoryGiB(in); got != want {
			t.Errorf("GPUMemoryGiB(%q) = %v, want %v", in, got, want)
		}
	}
}

// gpuFake answers the GPU model query (and nothing else) with a vector.
type gpuFake struct {
	expr string
	vec  model.Vector
	err  error
	got  []string
}

func (g *gpuFake) Query(_ context.Context, expr string, _ time.Time) (model.Vector, []string, error) {
	g.got = append(g.got, expr)
	if g.err != nil {
		return nil, nil, g.err
	}
	if expr == g.expr {
		return g.vec, nil, nil
	}
	return nil, nil, nil
}

func (g *gpuFake) QueryRange(context.Context, string, time.Time, time.Time, time.Duration) (model.Matrix, []string, error) {
	return nil, nil, errors.New("not used")
}

func gpuSample(label, name string, n float64) *model.Sample {
	return &model.Sample{Metric: model.Metric{model.LabelName(label): model.LabelValue(name)}, Value: model.SampleValue(n)}
}

func TestInferGPU(t *testing.T) {
	const sel = `model_name="llama"`
	tests := []struct {
		name       string
		selector   string
		vec        model.Vector
		err        error
		class      string
		detail     []string
		unknown    string
		wantNoJoin bool
	}{
		{name: "nvml model label", selector: sel, vec: model.Vector{gpuSample("model", "NVIDIA H200", 8)},
			class: "H200", detail: []string{`model="NVIDIA H200"`, "whyslow_gpu_*", "8 GPUs serving the scope"}},
		{name: "dcgm modelName label", selector: sel, vec: model.Vector{gpuSample("modelName", "NVIDIA H100 80GB HBM3", 2)},
			class: "H100", detail: []string{`modelName="NVIDIA H100 80GB HBM3"`, "DCGM_FI_*", "2 GPUs"}},
		{name: "both collectors", selector: sel, vec: model.Vector{gpuSample("model", "NVIDIA A100-SXM4-40GB", 1), gpuSample("modelName", "NVIDIA A100-SXM4-40GB", 1)},
			class: "A100-40GB", detail: []string{"whyslow_gpu_* and DCGM_FI_*"}},
		{name: "mixed fleet, most common wins", selector: sel,
			vec:   model.Vector{gpuSample("model", "NVIDIA A100-SXM4-80GB", 4), gpuSample("model", "NVIDIA H100 80GB HBM3", 8)},
			class: "H100", detail: []string{"also A100-80GB on 4 GPUs"}},
		{name: "no selector, every GPU", vec: model.Vector{gpuSample("model", "NVIDIA L40S", 1)},
			class: "L40S", detail: []string{"1 GPU"}, wantNoJoin: true},
		{name: "unrecognised model", selector: sel, vec: model.Vector{gpuSample("model", "Mystery Accelerator 9000", 1)},
			unknown: "Mystery Accelerator 9000"},
		{name: "no GPU counters", selector: sel},
		{name: "query fails", selector: sel, err: errors.New("boom")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expr := gpuModelExpr(rulesets.Series(), tt.selector, "pod", "5m")
			m := &gpuFake{expr: expr, vec: tt.vec, err: tt.err}
			inf := inferGPU(context.Background(), m, rulesets.Series(), tt.selector, "pod", "5m", at)
			if len(m.got) != 1 {
				t.Errorf("%d queries, want one", len(m.got))
			}
			if strings.Contains(expr, "and on (pod)") == tt.wantNoJoin {
				t.Errorf("expr %q: join to the scope's pods wrong", expr)
			}
			if tt.class == "" {
				if inf.class != nil {
					t.Errorf("class = %+v, want none", inf.class)
				}
			} else {
				if inf.class == nil || inf.class.Class != tt.class || inf.class.Source != verdict.GPUSourceMetrics {
					t.Fatalf("class = %+v, want %s from metrics", inf.class, tt.class)
				}
				for _, d := range tt.detail {
					if !strings.Contains(inf.class.Detail, d) {
						t.Errorf("detail %q lacks %q", inf.class.Detail, d)
					}
				}
			}
			if tt.unknown != "" && (len(inf.unknown) != 1 || inf.unknown[0] != tt.unknown ||
				!strings.Contains(gpuGapReason(inf), tt.unknown)) {
				t.Errorf("unknown = %v, gap %q", inf.unknown, gpuGapReason(inf))
			}
		})
	}
}

// TestRunInfersGPU checks that Run, given no GPU class, reads it from the
// GPU counters, uses it for the scheduler defaults and says where it came
// from; and that a given class is used as is.
func TestRunInfersGPU(t *testing.T) {
	rs, err := rulesets.Default("vllm")
	if err != nil {
		t.Fatal(err)
	}
	base := baseline()
	m := newFake(t, rs, base, base, nil)
	gpuExpr := gpuModelExpr(rulesets.Series(), "", "pod", "5m")
	m.vals[gpuExpr] = map[time.Time]model.Vector{at: {gpuSample("model", "NVIDIA H200", 8)}}

	v, err := Run(context.Background(), Options{Metrics: m, Rulesets: []*rules.Ruleset{rs}, At: at})
	if err != nil {
		t.Fatal(err)
	}
	if v.GPU == nil || v.GPU.Class != "H200" || v.GPU.Source != verdict.GPUSourceMetrics || !strings.Contains(v.GPU.Detail, `model="NVIDIA H200"`) {
		t.Errorf("GPU = %+v, want H200 from the metrics", v.GPU)
	}
	for _, g := range v.DataGaps {
		if g.Signal == "scheduler" {
			t.Errorf("scheduler gap with an inferred GPU: %+v", g)
		}
	}

	v, err = Run(context.Background(), Options{Metrics: m, Rulesets: []*rules.Ruleset{rs}, At: at, GPU: "A100", GPUSource: "--gpu"})
	if err != nil {
		t.Fatal(err)
	}
	if v.GPU == nil || *v.GPU != (verdict.GPUClass{Class: "A100", Source: verdict.GPUSourceGiven, Detail: "--gpu"}) {
		t.Errorf("given GPU = %+v", v.GPU)
	}

	delete(m.vals, gpuExpr)
	v, err = Run(context.Background(), Options{Metrics: m, Rulesets: []*rules.Ruleset{rs}, At: at})
	if err != nil {
		t.Fatal(err)
	}
	gap := false
	for _, g := range v.DataGaps {
		gap = gap || g.Signal == "scheduler" && strings.Contains(g.Reason, "GPU class unknown")
	}
	if v.GPU != nil || !gap {
		t.Errorf("no GPU counters: GPU = %+v, gaps %+v", v.GPU, v.DataGaps)
	}
}

// TestClockFracFromClass: dcgm-exporter's default counters give the SM
// clock but not its maximum; the GPU class's lowest boost clock stands in,
// so a throttled clock shows without a baseline window (a bare --scrape),
// and a slower variant at its full clock is not read as throttled.
func TestClockFracFromClass(t *testing.T) {
	now, base := map[string]float64{"sm_clock": 1410}, map[string]float64{}
	clockFracFromClass(now, base, "H100")
	if f := now["sm_clock_frac"]; f < 0.79 || f > 0.81 {
		t.Errorf("H100 at 1410 MHz: sm_clock_frac %v, want 1410/1755", f)
	}
	if _, ok := base["sm_clock_frac"]; ok {
		t.Error("a baseline without an SM clock got a clock fraction")
	}
	now = map[string]float64{"sm_clock": 1755}
	clockFracFromClass(now, base, "H100")
	if now["sm_clock_frac"] < 1 {
		t.Errorf("an H100 PCIe at full boost reads %v of its maximum", now["sm_clock_frac"])
	}
	now = map[string]float64{"sm_clock": 900, "sm_clock_frac": 0.95}
	clockFracFromClass(now, base, "H100")
	if now["sm_clock_frac"] != 0.95 {
		t.Error("the collector's own maximum was overwritten")
	}
	now = map[string]float64{"sm_clock": 900}
	clockFracFromClass(now, base, "MI300X")
	if _, ok := now["sm_clock_frac"]; ok {
		t.Error("a class without a known clock got a fraction")
	}
}
