package sim

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// TestNarrowDrawsUnchanged checks that the narrow draw of every scenario
// that predates wide draws gives, for seed 1, the parameters (and, without
// -short, the metrics) it gave before.
func TestNarrowDrawsUnchanged(t *testing.T) {
	for _, s := range Scenarios() {
		want, ok := narrowSeed1[s.Name]
		if !ok {
			continue
		}
		t.Run(s.Name, func(t *testing.T) {
			p, err := newPlan(s.Name, 1)
			if err != nil {
				t.Fatal(err)
			}
			keys := make([]string, 0, len(p.params))
			for k := range p.params {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			var got []string
			for _, k := range keys {
				got = append(got, fmt.Sprintf("%s=%v", k, p.params[k]))
			}
			if g := strings.Join(got, " "); g != want.params {
				t.Errorf("params\n got %s\nwant %s", g, want.params)
			}
			if p.errorReason {
				t.Error("a narrow draw of an older scenario exposes finished_reason=\"error\"")
			}
			if testing.Short() {
				return
			}
			if g := recordTrimmed(t, s.Name, 1).metricsSHA256; g != want.metrics {
				t.Errorf("metrics sha256 %s, want %s", g, want.metrics)
			}
		})
	}
	if len(narrowSeed1) != 13 {
		t.Errorf("%d golden scenarios, want the 13 older ones", len(narrowSeed1))
	}
}

// ratio is b/a, +Inf when a is 0 and b is not.
func ratio(a, b float64) float64 {
	if a == 0 {
		if b == 0 {
			return 1
		}
		return math.Inf(1)
	}
	return b / a
}

// checkMechanism asserts, on the model's own statistics, that a scenario's
// mechanism holds and, from magnitude 0.34 on, that its main symptom is
// plainly visible.
func checkMechanism(t *testing.T, scenario string, m float64, tr Truth) {
	t.Helper()
	b, n := tr.Observed.Baseline, tr.Observed.Incident
	fail := func(what string, args ...any) {
		t.Errorf("%s (m=%.2f): %s\nbaseline %+v\nincident %+v", scenario, m, fmt.Sprintf(what, args...), b, n)
	}
	visible := m >= 0.34
	ttft, itl, e2e := ratio(b.TTFTMean, n.TTFTMean), ratio(b.ITLMean, n.ITLMean), ratio(b.E2EMean, n.E2EMean)
	if b.PreemptionRate > 0 || b.ErrorRate > 0 {
		fail("the baseline preempts or fails")
	}
	switch scenario {
	case "capacity_loss":
		if n.ServingReplicas >= b.ServingReplicas || ratio(b.ArrivalRatePerReplica, n.ArrivalRatePerReplica) < 1.15 {
			fail("no fewer serving replicas with more arrivals each")
		}
		if visible && ttft < 1.5 {
			fail("TTFT ×%.2f", ttft)
		}
	case "context_growth":
		if k, pf := ratio(b.KVTokensPerRunning, n.KVTokensPerRunning), ratio(b.PrefillTokensPerStep, n.PrefillTokensPerStep); k < 2 || pf >= 1.5 {
			fail("KV per running ×%.2f, prefill per step ×%.2f", k, pf)
		}
		if n.PreemptionRate > 0 || itl <= 1 || visible && itl < 1.15 {
			fail("ITL ×%.2f, %.2f preemptions/s", itl, n.PreemptionRate)
		}
	case "error_burst":
		if n.ErrorRate < 0.025 {
			fail("error rate %.3f", n.ErrorRate)
		}
	case "abort_storm":
		if n.AbortRate < 0.025 {
			fail("abort rate %.3f", n.AbortRate)
		}
	case "diurnal_growth", "new_tenant", "healthy":
		// A window's TTFT mean moves ±15% on its own in this model (healthy
		// windows: ×0.74–1.17): ITL and e2e hold ×1.25, TTFT gets that noise
		// on top.
		if ttft > 1.4 || itl > 1.25 || e2e > 1.25 {
			fail("latency means moved: TTFT ×%.2f ITL ×%.2f e2e ×%.2f", ttft, itl, e2e)
		}
		if scenario == "diurnal_growth" && ratio(b.ArrivalRate, n.ArrivalRate) < 1.05 {
			fail("arrivals did not rise")
		}
	case "arrival_surge":
		if ratio(b.ArrivalRate, n.ArrivalRate) < 1.1 || visible && ttft < 1.5 {
			fail("arrivals ×%.2f, TTFT ×%.2f", ratio(b.ArrivalRate, n.ArrivalRate), ttft)
		}
	case "long_prompt_burst", "prompt_shift", "router_skew":
		if visible && ttft < 1.5 {
			fail("TTFT ×%.2f", ttft)
		}
	case "kv_pressure":
		if visible && n.PreemptionRate == 0 {
			fail("no preemption")
		}
	case "bandwidth_bound":
		if visible && itl < 1.3 {
			fail("ITL ×%.2f", itl)
		}
	case "gpu_throttle":
		if n.ClockFactor > 0.9 || visible && itl < 1.25 {
			fail("clock %.2f, ITL ×%.2f", n.ClockFactor, itl)
		}
	case "prefix_cache_loss":
		if ratio(b.PrefillTokensPerStep, n.PrefillTokensPerStep) < 1.2 || visible && ttft < 1.5 {
			fail("prefill per step ×%.2f, TTFT ×%.2f", ratio(b.PrefillTokensPerStep, n.PrefillTokensPerStep), ttft)
		}
	case "frontend_delay":
		if n.OutsideMean-b.OutsideMean < 0.4*b.TTFTMean || visible && ttft < 1.5 {
			fail("outside +%.3fs, TTFT ×%.2f", n.OutsideMean-b.OutsideMean, ttft)
		}
	default:
		t.Fatalf("no mechanism check for %s", scenario)
	}
}

// mechanismCase is one draw whose mechanism is checked.
type mechanismCase struct {
	scenario string
	seed     int64
	m        float64 // 0: the narrow draw
	replicas int     // 0: as drawn; the wide ones are capped to keep the test fast
}

func (c mechanismCase) name() string {
	if c.m == 0 {
		return fmt.Sprintf("%s/narrow/%d", c.scenario, c.seed)
	}
	return fmt.Sprintf("%s/wide/%d/m=%.2f", c.scenario, c.seed, c.m)
}

// TestScenarioMechanisms records the newer scenarios (narrow and wide) and
// wide draws of the older ones and checks each mechanism in the truth's
// observed statistics.
func TestScenarioMechanisms(t *testing.T) {
	if testing.Short() {
		t.Skip("records about 50 instances")
	}
	var cases []mechanismCase
	for _, s := range []string{"capacity_loss", "context_growth", "error_burst", "diurnal_growth", "new_tenant"} {
		reps := 2
		if s == "capacity_loss" {
			reps = 3
		}
		cases = append(cases, mechanismCase{s, 1, 0, 0})
		for _, seed := range []int64{1, 2} {
			for _, m := range []float64{0.34, 1} {
				cases = append(cases, mechanismCase{s, seed, m, reps})
			}
		}
	}
	for _, s := range []string{"arrival_surge", "long_prompt_burst", "prompt_shift", "kv_pressure", "bandwidth_bound",
		"gpu_throttle", "prefix_cache_loss", "abort_storm", "router_skew", "frontend_delay", "healthy"} {
		reps := 2
		if s == "router_skew" {
			reps = 0 // its hot share is drawn for its replica count
		}
		for _, m := range []float64{0.34, 1} {
			cases = append(cases, mechanismCase{s, 3, m, reps})
		}
	}
	for _, c := range cases {
		t.Run(c.name(), func(t *testing.T) {
			t.Parallel()
			opt := Options{Scenario: c.scenario, Seed: c.seed, Wide: c.m > 0, Magnitude: c.m, Replicas: c.replicas,
				GPUSeries: "none", Trim: true}
			b, err := Record(t.Context(), opt)
			if err != nil {
				t.Fatal(err)
			}
			if c.m > 0 && len(b.Truth.Causes) > 0 && b.Truth.Magnitude != c.m {
				t.Errorf("magnitude %v, want %v", b.Truth.Magnitude, c.m)
			}
			checkMechanism(t, c.scenario, b.Truth.Magnitude, b.Truth)
			o := b.Truth.Observed
			t.Logf("%v %v ×%v: TTFT ×%.2f ITL ×%.2f e2e ×%.2f KV/run ×%.2f prefill/step ×%.2f arrivals/replica ×%.2f "+
				"preempt %.2f/s errors %.3f aborts %.3f serving %d→%d", b.Truth.Params["model"], b.Truth.Params["gpu"],
				b.Truth.Params["replicas"], ratio(o.Baseline.TTFTMean, o.Incident.TTFTMean),
				ratio(o.Baseline.ITLMean, o.Incident.ITLMean), ratio(o.Baseline.E2EMean, o.Incident.E2EMean),
				ratio(o.Baseline.KVTokensPerRunning, o.Incident.KVTokensPerRunning),
				ratio(o.Baseline.PrefillTokensPerStep, o.Incident.PrefillTokensPerStep),
				ratio(o.Baseline.ArrivalRatePerReplica, o.Incident.ArrivalRatePerReplica), o.Incident.PreemptionRate,
				o.Incident.ErrorRate, o.Incident.AbortRate, o.Baseline.ServingReplicas, o.Incident.ServingReplicas)
		})
	}
}

// TestCompounds records a few compound faults: both causes in the truth,
// the larger magnitude first, both mechanisms visible.
func TestCompounds(t *testing.T) {
	if testing.Short() {
		t.Skip("records compound instances")
	}
	for _, c := range []struct {
		a, b   string
		seed   int64
		ma, mb float64
	}{
		{"arrival_surge", "gpu_throttle", 1, 0.4, 0.6},
		{"error_burst", "prompt_shift", 2, 0.7, 0.5},
		{"frontend_delay", "context_growth", 2, 0.5, 0.5},
	} {
		name := c.a + "+" + c.b
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p, err := drawPlan(name, c.seed, true, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.causes) != 2 || len(p.magnitudes) != 2 || p.magnitudes[0] < p.magnitudes[1] || p.magnitude != p.magnitudes[0] {
				t.Errorf("causes %v magnitudes %v (%v)", p.causes, p.magnitudes, p.magnitude)
			}
			b, err := Record(t.Context(), Options{Scenario: name, Seed: c.seed, Wide: true, Magnitude: 0.5, Replicas: 2,
				GPUSeries: "none", Trim: true})
			if err != nil {
				t.Fatal(err)
			}
			da, _ := findScenario(c.a)
			db, _ := findScenario(c.b)
			if got := b.Truth.Causes; len(got) != 2 || !(got[0] == da.Cause && got[1] == db.Cause) {
				t.Errorf("causes %v, want [%s %s] (equal magnitudes keep the order)", got, da.Cause, db.Cause)
			}
			checkMechanism(t, c.a, 0.5, b.Truth)
			checkMechanism(t, c.b, 0.5, b.Truth)
		})
	}
}

func TestCompoundPairs(t *testing.T) {
	fault := map[string]bool{}
	for _, s := range Scenarios() {
		if s.Cause != "" {
			fault[s.Name] = true
		}
	}
	seen := map[string]bool{}
	for _, c := range CompoundPairs() {
		if !fault[c[0]] || !fault[c[1]] || c[0] == c[1] {
			t.Errorf("pair %v: not two fault scenarios", c)
		}
		da, _ := findScenario(c[0])
		db, _ := findScenario(c[1])
		if da.Cause == db.Cause {
			t.Errorf("pair %v: one cause twice", c)
		}
		key := c[0] + "+" + c[1]
		if seen[key] || seen[c[1]+"+"+c[0]] {
			t.Errorf("pair %v listed twice", c)
		}
		seen[key] = true
		if !ValidScenario(key) || !ValidScenario(c[1]+"+"+c[0]) {
			t.Errorf("%s not accepted", key)
		}
	}
	for _, bad := range []string{"kv_pressure+context_growth", "healthy+gpu_throttle", "a+b+c", "gpu_throttle+", "nope"} {
		if ValidScenario(bad) {
			t.Errorf("%q accepted", bad)
		}
	}
	for _, s := range Scenarios() {
		if strings.Contains(s.Name, "+") {
			t.Errorf("Scenarios lists compound %s", s.Name)
		}
	}
}

func TestBand(t *testing.T) {
	for _, c := range []struct {
		m    float64
		want string
	}{{0, "subtle"}, {0.33, "subtle"}, {0.34, "moderate"}, {0.66, "moderate"}, {0.67, "severe"}, {1, "severe"}} {
		if got := Band(c.m); got != c.want {
			t.Errorf("Band(%v) = %s, want %s", c.m, got, c.want)
		}
	}
}

// TestDrawMagnitudes checks the magnitude of every kind of draw without
// recording: in [0, 1], fixed when asked, and the knob monotone in it.
func TestDrawMagnitudes(t *testing.T) {
	for _, s := range Scenarios() {
		if testing.Short() && !(s.Name == "error_burst" || s.Name == "capacity_loss" || narrowSeed1[s.Name].params != "") {
			continue // the others size themselves with pilot runs
		}
		p, err := newPlan(s.Name, 2)
		if err != nil {
			t.Fatal(err)
		}
		if p.magnitude < 0 || p.magnitude > 1 || (s.Cause == "") != (p.magnitude == 0 && len(p.causes) == 0) {
			t.Errorf("%s narrow: magnitude %v causes %v", s.Name, p.magnitude, p.causes)
		}
	}
	knob := map[string]string{"gpu_throttle": "clock_factor", "error_burst": "error_probability",
		"abort_storm": "abort_probability", "prompt_shift": "prompt_mul", "frontend_delay": "frontend_delay_seconds"}
	for name, key := range knob {
		if testing.Short() && name == "frontend_delay" {
			continue
		}
		var prev float64
		for i, m := range []float64{0.1, 0.5, 0.9} {
			p, err := drawPlan(name, 4, true, m)
			if err != nil {
				t.Fatal(err)
			}
			v := paramF(p, key)
			// A hard negative (client aborts) has no cause, so no magnitude
			// in its truth; its knob still follows m.
			if got := paramF(p, "magnitude_"+name); got != m || (len(p.causes) > 0 && p.magnitude != m) {
				t.Errorf("%s: magnitude %v (truth %v), want %v", name, got, p.magnitude, m)
			}
			if i > 0 && (name == "gpu_throttle") != (v < prev) {
				t.Errorf("%s: %s %v at m=%v after %v: not monotone", name, key, v, m, prev)
			}
			prev = v
		}
	}
}

// TestWideDrawsRange draws many wide instances without recording and
// checks the ranges models.md asks for.
func TestWideDrawsRange(t *testing.T) {
	models, gpus, reps := map[string]bool{}, map[string]bool{}, map[int]bool{}
	for seed := int64(1); seed <= 16; seed++ {
		for _, name := range []string{"healthy", "error_burst", "abort_storm"} {
			p, err := drawPlan(name, seed, true, 0.5)
			if err != nil {
				t.Fatal(err)
			}
			models[p.cfg.model.name], gpus[p.cfg.gpu.class], reps[p.replicas] = true, true, true
			if p.load < 0.2-1e-9 || p.load > 0.9+1e-9 {
				t.Errorf("%s/%d: load %v", name, seed, p.load)
			}
			if p.cfg.mfu < 0.55*0.5 || p.cfg.mfu > 0.55*1.5 || p.cfg.bwEff > 0.98 || p.cfg.gpuMemUtil > 0.95 {
				t.Errorf("%s/%d: coefficients mfu %v bw %v mem %v", name, seed, p.cfg.mfu, p.cfg.bwEff, p.cfg.gpuMemUtil)
			}
			if !p.errorReason {
				t.Errorf("%s/%d: a wide draw without the error series", name, seed)
			}
		}
	}
	if len(models) != 2 || len(gpus) != 3 || len(reps) != 8 {
		t.Errorf("models %v gpus %v replicas %v", models, gpus, reps)
	}
	// Narrow draws of the older scenarios are not affected by wide ones.
	a, _ := newPlan("gpu_throttle", 5)
	_, _ = drawPlan("gpu_throttle", 5, true, 0.5)
	b, _ := newPlan("gpu_throttle", 5)
	if fmt.Sprint(a.params) != fmt.Sprint(b.params) {
		t.Error("a wide draw changed the narrow one")
	}
}

func TestAttributeITL(t *testing.T) {
	cfg := newEngineConfig(PolicyVLLM, modelSpecs["8B"], gpuSpecs["H100"], 0.9)
	base := WindowStats{RunningMean: 20, KVTokensPerRunning: 1500, PrefillTokensPerStep: 60, ClockFactor: 1}
	inc := WindowStats{RunningMean: 35, KVTokensPerRunning: 6000, PrefillTokensPerStep: 50, ClockFactor: 0.7}
	a := attributeITL(&cfg, base, inc)
	want := cfg.stepSecondsAt(35, 6000, 50, 0.7) - cfg.stepSecondsAt(20, 1500, 60, 1)
	if math.Abs(a.Total-want) > 1e-12 || math.Abs(a.Batch+a.Context+a.Prefill+a.Clock-a.Total) > 1e-12 {
		t.Errorf("attribution %+v does not add up to %v", a, want)
	}
	if a.Context <= 0 || a.Batch <= 0 || a.Clock <= 0 || a.Prefill > 0 {
		t.Errorf("signs: %+v", a)
	}
	// One driver moved: it takes all of the change.
	only := base
	only.ClockFactor = 0.5
	a = attributeITL(&cfg, base, only)
	if a.Batch != 0 || a.Context != 0 || a.Prefill != 0 || a.Clock != a.Total || a.Total <= 0 {
		t.Errorf("clock only: %+v", a)
	}
	// The evaluator is the engine's cost function: at integral drivers it
	// matches what itemCost and finish give for the same batch.
	s := stepCost{}
	for i := 0; i < 20; i++ {
		cfg.itemCost(&s, 1500, 1)
	}
	cfg.finish(&s, 1)
	if got := cfg.stepSecondsAt(20, 1500, 0, 1); math.Abs(got-s.seconds) > 1e-12 {
		t.Errorf("stepSecondsAt %v, engine %v", got, s.seconds)
	}
}

// TestTruthYAML round-trips the new truth fields through truth.yaml.
func TestTruthYAML(t *testing.T) {
	tr := Truth{Scenario: "a+b", Seed: 3, Causes: []string{"x", "y"}, Onset: time.Unix(1700000000, 0).UTC(),
		Magnitude: 0.7, Magnitudes: []float64{0.7, 0.2}, Band: "severe", Params: map[string]any{"k": 1},
		Observed:       Observed{Baseline: WindowStats{TTFTMean: 0.1, ServingReplicas: 3}, Incident: WindowStats{ITLMean: 0.02}},
		ITLAttribution: ITLAttribution{Batch: 0.001, Context: 0.002, Total: 0.003}}
	out, err := yaml.Marshal(tr)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"magnitude: 0.7", "band: severe", "observed:", "ttft_mean: 0.1", "kv_tokens_per_running:",
		"itl_attribution:", "context: 0.002"} {
		if !strings.Contains(string(out), k) {
			t.Errorf("truth.yaml lacks %q:\n%s", k, out)
		}
	}
	var back Truth
	if err := yaml.Unmarshal(out, &back); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(back) != fmt.Sprint(tr) {
		t.Errorf("round trip\n got %+v\nwant %+v", back, tr)
	}
	// Older truth files without the new keys still read.
	var old Truth
	if err := yaml.Unmarshal([]byte("scenario: healthy\nseed: 1\ncauses: []\nonset: \"2026-01-01T01:15:00Z\"\n"), &old); err != nil || old.Band != "" {
		t.Errorf("old truth: %v %+v", err, old)
	}
}

// TestCapacityLossSeries checks that a stopped replica's series end at the
// onset, like a pod that is gone, while the others go on.
func TestCapacityLossSeries(t *testing.T) {
	b, err := Record(context.Background(), Options{Scenario: "capacity_loss", Seed: 2, GPUSeries: "whyslow"})
	if err != nil {
		t.Fatal(err)
	}
	d, err := parseOM(b.Metrics)
	if err != nil {
		t.Fatal(err)
	}
	onset := b.Truth.Onset.UnixMilli()
	ended, going := map[string]bool{}, map[string]bool{}
	for _, s := range d.series {
		pod := s.labels.Get("pod")
		if s.ts[len(s.ts)-1] <= onset {
			ended[pod] = true
		} else {
			going[pod] = true
		}
	}
	stopped := b.Truth.Params["replicas_stopped"].(int)
	if len(ended) != stopped || len(going) != b.Truth.Params["replicas"].(int)-stopped {
		t.Errorf("pods ended %v, going %v; %d stopped", ended, going, stopped)
	}
	for pod := range ended {
		if going[pod] {
			t.Errorf("%s has series on both sides of the onset", pod)
		}
	}
	if b.Truth.Causes[0] != "capacity_loss" || b.Truth.Observed.Incident.ServingReplicas != b.Truth.Observed.Baseline.ServingReplicas-stopped {
		t.Errorf("truth %v, serving %d→%d", b.Truth.Causes, b.Truth.Observed.Baseline.ServingReplicas,
			b.Truth.Observed.Incident.ServingReplicas)
	}
}

// TestErrorSeries checks finished_reason="error" on the draws that model a
// release with it, and that V0 names fold failures into "abort".
func TestErrorSeries(t *testing.T) {
	for _, c := range []struct {
		names   string
		wantErr bool
	}{{"v1", true}, {"v0", false}} {
		t.Run(c.names, func(t *testing.T) {
			b, err := Record(context.Background(), Options{Scenario: "error_burst", Seed: 1, Names: c.names, Replicas: 1,
				GPUSeries: "none", Trim: true})
			if err != nil {
				t.Fatal(err)
			}
			d, err := parseOM(b.Metrics)
			if err != nil {
				t.Fatal(err)
			}
			inc := d.increaseBy("vllm:request_success_total", "finished_reason", b.Incident.At.Add(-b.Incident.Window).UnixMilli(),
				b.Incident.At.UnixMilli())
			if _, ok := inc["error"]; ok != c.wantErr {
				t.Fatalf("error series present %v, want %v (%v)", ok, c.wantErr, inc)
			}
			failed := inc["error"] + inc["abort"]
			if share := failed / sumMap(inc); share < 0.025 {
				t.Errorf("failed share %.3f in the incident window (%v)", share, inc)
			}
		})
	}
}

func TestWideDeterministic(t *testing.T) {
	if testing.Short() {
		t.Skip("records twice")
	}
	opt := Options{Scenario: "context_growth", Seed: 7, Wide: true, Replicas: 1, GPUSeries: "none", Trim: true}
	a, err := Record(context.Background(), opt)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Record(context.Background(), opt)
	if err != nil {
		t.Fatal(err)
	}
	if string(a.Metrics) != string(b.Metrics) || fmt.Sprint(a.Truth) != fmt.Sprint(b.Truth) {
		t.Error("two wide recordings with the same seed differ")
	}
}

// withoutFamily drops one metric family from an exposition: a family added
// to every bundle later (the API server's HTTP counter) leaves the draws
// themselves, which the hashes pin, as they were.
func withoutFamily(om []byte, name string) []byte {
	var out []byte
	for _, l := range bytes.SplitAfter(om, []byte("\n")) {
		if bytes.HasPrefix(l, []byte(name+"{")) || bytes.HasPrefix(l, []byte(name+"_total{")) ||
			bytes.HasPrefix(l, []byte("# HELP "+name+" ")) || bytes.HasPrefix(l, []byte("# TYPE "+name+" ")) {
			continue
		}
		out = append(out, l...)
	}
	return out
}
