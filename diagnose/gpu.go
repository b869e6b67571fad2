package diagnose

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/whyslow/whyslow/query"
	"github.com/whyslow/whyslow/rules"
	"github.com/whyslow/whyslow/verdict"
)

// gpuMemoryGiB maps a GPU class to its memory, for the engines' scheduler
// defaults (docs/engines.md §2.10 and §3.5 key them on memory size and name).
var gpuMemoryGiB = []struct {
	match string
	gib   float64
}{
	// Most specific first: a match is a substring of the class.
	{"a100-40", 40}, {"a100-80", 80}, {"a100", 80}, {"a800", 80},
	{"h100-nvl", 94}, {"h100", 80}, {"h800", 80}, {"gh200", 96}, {"h200", 141}, {"h20", 96},
	{"gb200", 186}, {"gb300", 288}, {"b200", 180}, {"b100", 180}, {"b300", 288},
	{"mi300x", 192}, {"mi300", 192}, {"mi325", 256}, {"mi355", 288},
	{"l40s", 48}, {"l40", 48}, {"l4", 24}, {"a10g", 24}, {"a10", 24}, {"a30", 24}, {"a40", 48}, {"a6000", 48},
	{"t4", 16}, {"v100", 32}, {"rtx 4090", 24}, {"4090", 24}, {"5090", 32},
}

// GPUMemoryGiB returns the memory of a GPU class such as "H100" or
// "NVIDIA A100-SXM4-40GB", or 0 when the class is unknown.
func GPUMemoryGiB(class string) float64 {
	c := strings.ToLower(class)
	c = strings.ReplaceAll(c, "_", "-")
	if strings.Contains(c, "a100") && strings.Contains(c, "40g") {
		return 40
	}
	for _, g := range gpuMemoryGiB {
		if strings.Contains(c, g.match) {
			return g.gib
		}
	}
	return 0
}

// gpuClassTokens maps a token of a GPU product name to its class. Tokens
// match whole words of the name (split at anything that is not a letter
// or digit), so "h20" never matches "H200" nor "l4" "L40S".
var gpuClassTokens = map[string]string{
	"h100": "H100", "h200": "H200", "gh200": "GH200", "h20": "H20", "h800": "H800",
	"b100": "B100", "b200": "B200", "b300": "B300", "gb200": "GB200", "gb300": "GB300",
	"a100": "A100", "a800": "A800", "a10": "A10", "a10g": "A10G", "a30": "A30", "a40": "A40", "a6000": "A6000",
	"l4": "L4", "l40": "L40", "l40s": "L40S", "t4": "T4", "v100": "V100",
	"4090": "RTX 4090", "5090": "RTX 5090",
	"mi300x": "MI300X", "mi300a": "MI300A", "mi325x": "MI325X", "mi355x": "MI355X",
}

// NormalizeGPUClass turns a GPU product name as NVML and dcgm-exporter
// report it into the class the rulesets key on: "NVIDIA H100 80GB HBM3" →
// "H100", "NVIDIA H100 NVL" → "H100-NVL", "NVIDIA A100-SXM4-40GB" →
// "A100-40GB", "NVIDIA A100 80GB PCIe" → "A100-80GB", "NVIDIA H200" →
// "H200", "NVIDIA L40S" → "L40S". A class is returned unchanged ("H100",
// "A100-40GB"). It returns "" for a name it does not recognise.
func NormalizeGPUClass(name string) string {
	toks := strings.FieldsFunc(strings.ToLower(name), func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9')
	})
	has := func(ws ...string) bool {
		for _, t := range toks {
			for _, w := range ws {
				if t == w {
					return true
				}
			}
		}
		return false
	}
	for _, t := range toks {
		class, ok := gpuClassTokens[t]
		if !ok {
			continue
		}
		switch class {
		case "A100":
			switch {
			case has("40gb", "40g"):
				return "A100-40GB"
			case has("80gb", "80g"):
				return "A100-80GB"
			}
		case "H100":
			if has("nvl") {
				return "H100-NVL"
			}
		}
		return class
	}
	return ""
}

// gpuSeries are the GPU counters whose model label names the GPU: the
// whyslow NVML collector's (label model) and dcgm-exporter's (label
// modelName). Both collectors always export an SM clock.
const (
	gpuModelWhyslow = "whyslow_gpu_sm_clock_mhz"
	gpuModelDCGM    = "DCGM_FI_DEV_SM_CLOCK"
)

// gpuModelExpr counts the GPUs of each model over the window. With a
// selector the GPUs are restricted to the pods in scope (joined on the
// target label to the known engines' series with one per target: their
// running-requests gauges, then the series of shapes without one);
// without one every GPU counts.
func gpuModelExpr(known []rules.EngineSeries, selector, target, window string) string {
	// dcgm-exporter scraped with honor_labels false (its Helm chart's
	// default) carries the workload's pod as exported_pod.
	gpus := fmt.Sprintf(`last_over_time(%s[%s]) or label_replace(last_over_time(%s[%s]), "pod", "$1", "exported_pod", "(.+)")`,
		gpuModelWhyslow, window, gpuModelDCGM, window)
	if strings.TrimSpace(selector) == "" {
		return fmt.Sprintf("count by (model, modelName) (%s)", gpus)
	}
	var running, others []string
	for _, e := range known {
		running, others = append(running, e.Running...), append(others, e.Targets...)
	}
	parts := make([]string, 0, len(running)+len(others))
	for _, f := range append(running, others...) {
		name, extra, _ := strings.Cut(f, "{")
		if extra = strings.TrimSuffix(extra, "}"); extra != "" {
			extra += ", "
		}
		parts = append(parts, name+"{"+extra+selector+"}")
	}
	scope := strings.Join(parts, " or ")
	return fmt.Sprintf("count by (model, modelName) ((%s) and on (%s) (%s))", gpus, target, scope)
}

// gpuInference is what the GPU counters said about the GPU class.
type gpuInference struct {
	class *verdict.GPUClass
	// unknown lists product names NormalizeGPUClass did not recognise.
	unknown  []string
	warnings []string
}

// inferGPU reads the GPU class of the scope's pods from the model label of
// their GPU counters (one instant query at the end of the incident window).
// When several classes serve the scope, the most common wins and the detail
// says so. A failed query or no GPU counters leave the class unknown.
func inferGPU(ctx context.Context, m query.Metrics, known []rules.EngineSeries, selector, target, window string, at time.Time) gpuInference {
	var inf gpuInference
	vec, warns, err := m.Query(ctx, gpuModelExpr(known, selector, target, window), at)
	inf.warnings = warns
	if err != nil {
		return inf
	}
	type seen struct {
		gpus   float64
		labels []string // `model="NVIDIA H100 80GB HBM3"` as read
		dcgm   bool
		nvml   bool
	}
	byClass := map[string]*seen{}
	unknown := map[string]bool{}
	for _, s := range vec {
		n := float64(s.Value)
		if math.IsNaN(n) || n <= 0 {
			continue
		}
		label, name := "model", string(s.Metric["model"])
		if name == "" {
			label, name = "modelName", string(s.Metric["modelName"])
		}
		if name == "" {
			continue
		}
		class := NormalizeGPUClass(name)
		if class == "" {
			unknown[name] = true
			continue
		}
		c := byClass[class]
		if c == nil {
			c = &seen{}
			byClass[class] = c
		}
		c.gpus += n
		c.labels = append(c.labels, fmt.Sprintf("%s=%q", label, name))
		if label == "model" {
			c.nvml = true
		} else {
			c.dcgm = true
		}
	}
	for name := range unknown {
		inf.unknown = append(inf.unknown, name)
	}
	sort.Strings(inf.unknown)
	if len(byClass) == 0 {
		return inf
	}
	classes := make([]string, 0, len(byClass))
	for c := range byClass {
		classes = append(classes, c)
	}
	sort.Slice(classes, func(i, j int) bool {
		a, b := byClass[classes[i]], byClass[classes[j]]
		if a.gpus != b.gpus {
			return a.gpus > b.gpus
		}
		return classes[i] < classes[j]
	})
	best := byClass[classes[0]]
	sort.Strings(best.labels)
	var series []string
	if best.nvml {
		series = append(series, "whyslow_gpu_*")
	}
	if best.dcgm {
		series = append(series, "DCGM_FI_*")
	}
	detail := fmt.Sprintf("%s on the %s series of %s", strings.Join(dedup(best.labels), ", "),
		strings.Join(series, " and "), plural(int(best.gpus), "GPU"))
	if strings.TrimSpace(selector) != "" {
		detail += " serving the scope"
	}
	if len(classes) > 1 {
		var others []string
		for _, c := range classes[1:] {
			others = append(others, fmt.Sprintf("%s on %s", c, plural(int(byClass[c].gpus), "GPU")))
		}
		detail += "; also " + strings.Join(others, ", ") + ": the scheduler defaults assume the most common class"
	}
	inf.class = &verdict.GPUClass{Class: classes[0], Source: verdict.GPUSourceMetrics, Detail: detail}
	return inf
}

// gpuGapReason is the data-gap reason when the scheduler settings are
// unknown, saying why the GPU class is unknown.
func gpuGapReason(inf gpuInference) string {
	why := "GPU class unknown"
	if len(inf.unknown) > 0 {
		q := make([]string, len(inf.unknown))
		for i, n := range inf.unknown {
			q[i] = fmt.Sprintf("%q", n)
		}
		why = "GPU model " + strings.Join(q, ", ") + " not recognised"
	}
	return "scheduler settings unknown (no incident settings, " + why + "): token-budget rules skipped"
}

func dedup(ss []string) []string {
	out := ss[:0:0]
	for i, s := range ss {
		if i == 0 || s != ss[i-1] {
			out = append(out, s)
		}
	}
	return out
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// gpuMaxSMClockMHz is the lowest maximum (boost) SM clock among the variants
// of a GPU class (NVIDIA product specifications: H100 PCIe 1755, SXM 1980),
// so that a slower variant running at full clock never reads as throttled.
var gpuMaxSMClockMHz = map[string]float64{
	"H100": 1755, "H100-NVL": 1785, "H200": 1980, "GH200": 1980, "H800": 1755,
	"A100": 1410, "A100-40GB": 1410, "A100-80GB": 1410, "A800": 1410,
	"L40S": 2520, "L40": 2490, "L4": 2040, "A10": 1695, "A10G": 1710, "T4": 1590, "V100": 1380,
}

// clockFracFromClass fills sm_clock_frac from the SM clock and the GPU
// class's maximum where no collector exports the maximum (dcgm-exporter's
// default counters have the clock but not its maximum). Without it a
// clock drop needs a baseline window, which a bare `--scrape` has not got.
func clockFracFromClass(now, base map[string]float64, class string) {
	maxMHz := gpuMaxSMClockMHz[class]
	if maxMHz == 0 {
		return
	}
	for _, m := range []map[string]float64{now, base} {
		if _, ok := m["sm_clock_frac"]; ok {
			continue
		}
		if c, ok := m["sm_clock"]; ok && c > 0 {
			m["sm_clock_frac"] = c / maxMHz
		}
	}
}
