package rulesets

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/whyslow/whyslow/query/querytest"
	"github.com/whyslow/whyslow/rules"
)

// TestGPUScopeKeepsResults evaluates each GPU signal of the vLLM map for a
// scope that names its namespace, as rendered ({{.GPUScope}} and
// {{.DCGMScope}} select the namespace's counters) and with those matchers
// taken out (the whole fleet's counters, left to the join), over a fleet
// whose namespaces repeat pod names, and wants the same answers: the
// restriction only skips counters the join drops. whyslow's counters and
// dcgm-exporter's are checked apart, so each branch decides.
func TestGPUScopeKeepsResults(t *testing.T) {
	rs, err := Default("vllm")
	if err != nil {
		t.Fatal(err)
	}
	for _, exporter := range []string{"whyslow", "dcgm"} {
		prefix := map[string]string{"whyslow": "whyslow_gpu_", "dcgm": "DCGM_FI_"}[exporter]
		t.Run(exporter, func(t *testing.T) { checkGPUScope(t, rs, gpuFleet(exporter), prefix) })
	}
}

// gpuFleet is two namespaces' vLLM pods (vllm-0 and vllm-1 in each) with
// one exporter's GPU counters, the other namespace's GPUs busier.
func gpuFleet(exporter string) string {
	var load strings.Builder
	load.WriteString("load 15s\n")
	for i, ns := range []string{"ns", "other"} {
		for _, pod := range []string{"vllm-0", "vllm-1"} {
			k := i + 1
			fmt.Fprintf(&load, "  vllm:num_requests_running{namespace=%q, model_name=\"m\", pod=%q} 4+0x40\n", ns, pod)
			if exporter == "dcgm" {
				writeDCGM(&load, ns, pod, k)
				continue
			}
			// whyslow's counters carry the pod's namespace.
			for _, m := range []string{"whyslow_gpu_dram_bandwidth_utilization", "whyslow_gpu_sm_active", "whyslow_gpu_utilization"} {
				fmt.Fprintf(&load, "  %s{namespace=%q, pod=%q, gpu=\"0\"} 0.%d+0x40\n", m, ns, pod, 3*k)
			}
			fmt.Fprintf(&load, "  whyslow_gpu_sm_clock_mhz{namespace=%q, pod=%q, gpu=\"0\"} %d+0x40\n", ns, pod, 1000+100*k)
			fmt.Fprintf(&load, "  whyslow_gpu_sm_clock_max_mhz{namespace=%q, pod=%q, gpu=\"0\"} 1980+0x40\n", ns, pod)
			fmt.Fprintf(&load, "  whyslow_gpu_temperature_celsius{namespace=%q, pod=%q, gpu=\"0\"} %d+0x40\n", ns, pod, 60+10*k)
			fmt.Fprintf(&load, "  whyslow_gpu_clock_throttle_active{namespace=%q, pod=%q, gpu=\"0\", reason=\"hw_slowdown\"} %d+0x40\n", ns, pod, i)
		}
	}
	return load.String()
}

// writeDCGM writes dcgm-exporter's counters of one pod: the pod's
// namespace in exported_namespace (its own namespace is the exporter's),
// or, for vllm-1, without exported labels (a per-pod exporter's own).
func writeDCGM(load *strings.Builder, ns, pod string, k int) {
	labels := fmt.Sprintf("namespace=\"gpu-operator\", exported_namespace=%q, exported_pod=%q", ns, pod)
	if pod == "vllm-1" {
		labels = fmt.Sprintf("namespace=%q, pod=%q", ns, pod)
	}
	for _, m := range []string{"DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_SM_ACTIVE"} {
		fmt.Fprintf(load, "  %s{%s, gpu=\"1\"} 0.%d+0x40\n", m, labels, 2*k+int(pod[len(pod)-1]-'0'))
	}
	fmt.Fprintf(load, "  DCGM_FI_DEV_SM_CLOCK{%s, gpu=\"1\"} %d+0x40\n", labels, 1200+100*k)
	fmt.Fprintf(load, "  DCGM_FI_DEV_GPU_UTIL{%s, gpu=\"1\"} %d+0x40\n", labels, 50*k)
	fmt.Fprintf(load, "  DCGM_FI_DEV_GPU_TEMP{%s, gpu=\"1\"} %d+0x40\n", labels, 55+10*k)
	fmt.Fprintf(load, "  DCGM_FI_DEV_THERMAL_VIOLATION{%s, gpu=\"1\"} 0+%de9x40\n", labels, 3*k)
	fmt.Fprintf(load, "  DCGM_FI_DEV_POWER_VIOLATION{%s, gpu=\"1\"} 0+%de9x40\n", labels, k)
}

// checkGPUScope compares the signals that read counters named prefix.
func checkGPUScope(t *testing.T, rs *rules.Ruleset, load, prefix string) {
	m := querytest.New(t, load)
	at := time.Unix(0, 0).Add(10 * time.Minute)
	selector := `namespace="ns", model_name="m"`
	unscoped := strings.NewReplacer(`{namespace="ns"}`, "", `,namespace="ns"}`, "}", `{exported_namespace=~"ns|"}`, "")
	checked := 0
	for _, name := range []string{"dram_bw", "sm_active", "sm_clock", "sm_clock_frac", "throttled", "gpu_temp"} {
		s := rs.Signal(name)
		if s == nil {
			t.Fatalf("vllm has no signal %s", name)
		}
		for _, targets := range [][]string{nil, {"pod"}} {
			expr, err := s.Render(selector, "5m", targets)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(expr, prefix) {
				continue
			}
			whole := unscoped.Replace(expr)
			if whole == expr || strings.Contains(whole, "exported_namespace=~") || strings.Count(whole, `namespace="ns"`) != strings.Count(whole, "{namespace=\"ns\", model_name=\"m\"}") {
				t.Errorf("%s %v: not the restriction this test takes out: %s", name, targets, expr)
				continue
			}
			got, _, err := m.Query(context.Background(), expr, at)
			if err != nil {
				t.Fatalf("%s: %v", expr, err)
			}
			want, _, err := m.Query(context.Background(), whole, at)
			if err != nil {
				t.Fatalf("%s: %v", whole, err)
			}
			if got.String() != want.String() || len(got) == 0 {
				t.Errorf("%s %v: restricted %v, whole fleet %v", name, targets, got, want)
			}
			checked++
		}
	}
	t.Logf("%d queries compared", checked)
}
