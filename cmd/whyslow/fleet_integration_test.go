package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/whyslow/whyslow/testbed/fleettest"
	"github.com/whyslow/whyslow/testbed/promtest"
	"github.com/whyslow/whyslow/testbed/sim"
)

// fleetScopes is the fleet of TestFleetReplay: four faulty deployments on
// the three engines' metrics, five healthy ones (so the four, opening
// together, are under half the fleet: separate faults, not one shared
// cause). The TensorRT-LLM deployments run the vLLM scheduler model with
// trtllm-serve's names: the healthy scenarios' load is drawn within the
// vLLM scheduler's capacity, and the TensorRT-LLM scheduler model queues
// on their bursts (TTFT ×40), which is a slowdown, not a healthy scope.
var fleetScopes = []fleettest.Scope{
	{Namespace: "chat", Options: sim.Options{Scenario: "prompt_shift", Seed: 1}},
	{Namespace: "search", Options: sim.Options{Scenario: "kv_pressure", Seed: 1, Policy: "sglang"}},
	{Namespace: "code", Options: sim.Options{Scenario: "gpu_throttle", Seed: 1, Telemetry: "trtllm"}},
	{Namespace: "batch", Options: sim.Options{Scenario: "arrival_surge", Seed: 1}},
	{Namespace: "agents", Options: sim.Options{Scenario: "healthy", Seed: 1}},
	{Namespace: "rag", Options: sim.Options{Scenario: "healthy", Seed: 2, Policy: "sglang"}},
	{Namespace: "eval", Options: sim.Options{Scenario: "healthy", Seed: 3, Telemetry: "trtllm"}},
	{Namespace: "tools", Options: sim.Options{Scenario: "healthy_busy", Seed: 1}},
	{Namespace: "vision", Options: sim.Options{Scenario: "healthy", Seed: 4}},
}

// TestFleetReplay backfills nine engine-model deployments into a real
// Prometheus and checks that `whyslow replay` over the incidents' hour
// opens exactly one incident per faulty scope, naming its injected cause,
// and none for the healthy ones; and that `why --group-by` at the
// incidents' end ranks the same scopes.
// fleetHangGuard bounds a fleet integration test (backfilling with promtool,
// a real Prometheus, the triages) only against a hang: on a busy 2-core
// machine TestFleetReplay's promtool was killed by a 5-minute bound while
// still working.
const fleetHangGuard = 20 * time.Minute

func TestFleetReplay(t *testing.T) {
	fleettest.SkipUnlessAvailable(t)
	ctx, cancel := context.WithTimeout(context.Background(), fleetHangGuard)
	defer cancel()
	fleet, err := fleettest.Build(ctx, t.TempDir(), fleetScopes)
	if err != nil {
		t.Fatal(err)
	}
	prom := promtest.StartWithData(ctx, t, fleet.DataDir)
	want := map[string]string{} // namespace → injected cause
	var at time.Time
	for _, sc := range fleet.Scopes {
		if len(sc.Truth.Causes) > 0 {
			want[sc.Namespace] = sc.Truth.Causes[0]
		}
		at = sc.Incident.At
	}
	onset := fleet.Scopes[0].Truth.Onset

	var out, errb bytes.Buffer
	args := []string{"replay", "--prometheus", prom, "--group-by", "namespace,model_name", "--output", "json",
		"--from", onset.Add(-10 * time.Minute).Format(time.RFC3339), "--to", at.Format(time.RFC3339)}
	start := time.Now()
	code := dispatch(ctx, args, &out, &errb)
	if errb.Len() > 0 {
		t.Errorf("replay stderr: %s", errb.String())
	}
	t.Logf("replay of %s in %s", at.Sub(onset.Add(-10*time.Minute)), time.Since(start).Round(time.Millisecond))
	if code != exitCause {
		t.Fatalf("replay exit %d, want %d\nstderr: %s\nstdout: %s", code, exitCause, errb.String(), out.String())
	}
	opened := map[string][]replayedLine{}
	causes := map[string]string{} // namespace → the last notified cause
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var l replayedLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("replay line %q: %v", line, err)
		}
		ns := l.Verdict.Scope.Labels["namespace"]
		if l.Kind == "open" {
			opened[ns] = append(opened[ns], l)
		}
		if l.Cause != "" {
			causes[ns] = l.Cause
		}
		t.Logf("%s %-7s %-8s %s %s", l.At.Format("15:04:05"), l.Kind, ns, l.Cause, fmtConf(l.Confidence))
	}
	for _, sc := range fleet.Scopes {
		got := opened[sc.Namespace]
		cause, faulty := want[sc.Namespace]
		switch {
		case !faulty && len(got) > 0:
			t.Errorf("healthy scope %s (%s) opened %d incidents (first at %s, %s)", sc.Namespace, sc.Options.Scenario, len(got), got[0].At, got[0].Cause)
		case faulty && len(got) != 1:
			t.Errorf("faulty scope %s (%s) opened %d incidents, want 1", sc.Namespace, sc.Options.Scenario, len(got))
		case faulty && causes[sc.Namespace] != cause:
			t.Errorf("scope %s: last notified cause %q, injected %q", sc.Namespace, causes[sc.Namespace], cause)
		case faulty:
			t.Logf("scope %s: opened %s after the onset with %s", sc.Namespace, got[0].At.Sub(onset), got[0].Cause)
		}
	}

	out.Reset()
	errb.Reset()
	code = dispatch(ctx, []string{"why", "--prometheus", prom, "--group-by", "namespace,model_name", "--output", "json",
		"--at", at.Format(time.RFC3339)}, &out, &errb)
	if code != exitCause {
		t.Fatalf("why --group-by exit %d\nstderr: %s", code, errb.String())
	}
	var rep fleetReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Scopes != len(fleetScopes) {
		t.Errorf("why --group-by saw %d scopes, want %d", rep.Scopes, len(fleetScopes))
	}
	ranked := map[string]bool{}
	for _, r := range rep.Anomalous {
		ns := r.Scope.Labels["namespace"]
		ranked[ns] = true
		top := ""
		if r.Verdict != nil && len(r.Verdict.Causes) > 0 {
			top = r.Verdict.Causes[0].ID
		}
		t.Logf("#%d %s %s %s change ×%.3g", r.Rank, r.Severity, ns, top, r.Change)
		if want[ns] == "" {
			t.Errorf("why --group-by ranked healthy scope %s", ns)
		} else if top != want[ns] {
			t.Errorf("why --group-by: scope %s top cause %q, injected %q", ns, top, want[ns])
		}
	}
	for ns := range want {
		if !ranked[ns] {
			t.Errorf("why --group-by did not rank faulty scope %s", ns)
		}
	}
}

func fmtConf(c *float64) string {
	if c == nil {
		return ""
	}
	return fmt.Sprintf("%.2f", *c)
}

// TestFleetGPUJoinByNamespace: two deployments in different namespaces
// whose pods have the same name (as two StatefulSets' vllm-0 do), one with
// its GPUs throttled. Each scope's triage reads its own GPUs only: the
// GPU counters join the engine's series on namespace and pod.
func TestFleetGPUJoinByNamespace(t *testing.T) {
	fleettest.SkipUnlessAvailable(t)
	ctx, cancel := context.WithTimeout(context.Background(), fleetHangGuard)
	defer cancel()
	fleet, err := fleettest.Build(ctx, t.TempDir(), []fleettest.Scope{
		{Namespace: "hot", StatefulSet: "vllm", Options: sim.Options{Scenario: "gpu_throttle", Seed: 1, Replicas: 1}},
		{Namespace: "cool", StatefulSet: "vllm", Options: sim.Options{Scenario: "healthy", Seed: 1, Replicas: 1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	at := fleet.Scopes[0].Incident.At
	prom := promtest.StartWithData(ctx, t, fleet.DataDir)
	clock := map[string]float64{}
	for _, sc := range fleet.Scopes {
		var out, errb bytes.Buffer
		sel := fmt.Sprintf(`namespace=%q`, sc.Namespace)
		code := dispatch(ctx, []string{"why", "--prometheus", prom, "--selector", sel, "--at", at.Format(time.RFC3339),
			"--explain", "--output", "json"}, &out, &errb)
		if code == exitFailed {
			t.Fatalf("why %s: exit %d: %s", sel, code, errb.String())
		}
		var v struct {
			Signals []struct {
				Name string   `json:"name"`
				Now  *float64 `json:"now"`
			} `json:"signals"`
		}
		if err := json.Unmarshal(out.Bytes(), &v); err != nil {
			t.Fatal(err)
		}
		for _, s := range v.Signals {
			if s.Name == "sm_clock_frac" && s.Now != nil {
				clock[sc.Namespace] = *s.Now
			}
		}
	}
	t.Logf("SM clock / max clock: %v", clock)
	if c, ok := clock["hot"]; !ok || c > 0.9 {
		t.Errorf("throttled scope's SM clock fraction %v (present %v), want below 0.9", c, ok)
	}
	if c, ok := clock["cool"]; !ok || c < 0.95 {
		t.Errorf("healthy scope's SM clock fraction %v (present %v): it read the other namespace's GPUs", c, ok)
	}
}
