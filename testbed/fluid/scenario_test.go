package fluid

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
)

// x is incident over baseline of one observed mean.
func x(o Observed, get func(Window) float64) float64 { return ratio(get(o.Incident), get(o.Baseline)) }

var (
	ttftOf = func(w Window) float64 { return w.TTFTMean }
	itlOf  = func(w Window) float64 { return w.ITLMean }
	e2eOf  = func(w Window) float64 { return w.E2EMean }
	arrOf  = func(w Window) float64 { return w.ArrivalRate }
	pfOf   = func(w Window) float64 { return w.PrefillTokensPerStep }
	kvOf   = func(w Window) float64 { return w.KVTokensPerRunning }
	outOf  = func(w Window) float64 { return w.OutsideMean }
)

// mechanisms are the per-scenario truths, checked on truth.yaml's observed
// (the model's internals), written out here rather than reusing verify.
var mechanisms = map[string]func(t *testing.T, b *Bundle){
	"arrival_surge": func(t *testing.T, b *Bundle) {
		o := b.Truth.Observed
		want(t, x(o, arrOf) >= 1.1, "arrivals x%.2f", x(o, arrOf))
		want(t, x(o, ttftOf) >= 1.3 || x(o, itlOf) >= 1.2, "ttft x%.2f itl x%.2f", x(o, ttftOf), x(o, itlOf))
	},
	"capacity_loss": func(t *testing.T, b *Bundle) {
		o := b.Truth.Observed
		want(t, b.in.stopped >= 1, "no replica stopped")
		want(t, steadyArrivals(o), "arrivals x%.2f, want steady", x(o, arrOf))
		want(t, x(o, ttftOf) >= 1.3 || x(o, itlOf) >= 1.2, "ttft x%.2f itl x%.2f", x(o, ttftOf), x(o, itlOf))
		// the survivors absorb the traffic: more arrivals per serving replica
		n := len(b.in.repArr)
		live := b.in.repArr[0]
		want(t, live[1] > live[0]*float64(n)/float64(n-b.in.stopped)*0.8, "replica 0 arrivals %v", live)
	},
	"long_prompt_burst": func(t *testing.T, b *Bundle) {
		o := b.Truth.Observed
		want(t, x(o, pfOf) >= 1.1, "prefill/step x%.2f", x(o, pfOf))
		want(t, steadyArrivals(o), "arrivals x%.2f, want steady", x(o, arrOf))
		want(t, x(o, ttftOf) >= 1.3 || x(o, itlOf) >= 1.2, "ttft x%.2f itl x%.2f", x(o, ttftOf), x(o, itlOf))
		p := b.in.p
		want(t, p.promptQuantile(0.9, 1) < p.lim.budget, "base p90 prompt past the budget")
	},
	"prompt_shift": func(t *testing.T, b *Bundle) {
		o := b.Truth.Observed
		p := b.in.p
		want(t, p.promptQuantile(0.9, p.faults[0].knob) > p.lim.budget, "incident p90 prompt within the budget")
		want(t, p.promptQuantile(0.9, 1) < p.lim.budget, "baseline p90 prompt past the budget")
		want(t, x(o, pfOf) >= 1.3 && x(o, ttftOf) >= 1.3, "prefill/step x%.2f ttft x%.2f", x(o, pfOf), x(o, ttftOf))
		want(t, steadyArrivals(o), "arrivals x%.2f, want steady", x(o, arrOf))
	},
	"kv_pressure": func(t *testing.T, b *Bundle) {
		o := b.Truth.Observed
		want(t, o.Incident.PreemptionRate >= 0.02 && o.Baseline.PreemptionRate < 0.2*o.Incident.PreemptionRate,
			"preemptions %.3f/s (baseline %.3f/s)", o.Incident.PreemptionRate, o.Baseline.PreemptionRate)
		want(t, steadyArrivals(o), "arrivals x%.2f, want steady", x(o, arrOf))
	},
	"context_growth": func(t *testing.T, b *Bundle) {
		o := b.Truth.Observed
		want(t, x(o, kvOf) >= 2, "kv/running x%.2f", x(o, kvOf))
		want(t, x(o, pfOf) < 1.5, "prefill/step x%.2f", x(o, pfOf))
		want(t, x(o, itlOf) > 1.1, "itl x%.2f", x(o, itlOf))
		want(t, o.Incident.PreemptionRate <= 0.02*o.Incident.ArrivalRate, "preemptions %.3f/s", o.Incident.PreemptionRate)
	},
	"gpu_throttle": func(t *testing.T, b *Bundle) {
		o := b.Truth.Observed
		want(t, o.Incident.ClockFactor < 0.97 && o.Baseline.ClockFactor > 0.999, "clock %.3f → %.3f",
			o.Baseline.ClockFactor, o.Incident.ClockFactor)
		want(t, x(o, itlOf) >= 1.15, "itl x%.2f", x(o, itlOf))
		a := b.Truth.ITLAttribution
		want(t, a.Clock > 0 && a.Clock >= 0.3*a.Total, "attribution %+v", a)
	},
	"prefix_cache_loss": func(t *testing.T, b *Bundle) {
		o := b.Truth.Observed
		want(t, x(o, pfOf) >= 1.2 && x(o, ttftOf) >= 1.2, "prefill/step x%.2f ttft x%.2f", x(o, pfOf), x(o, ttftOf))
		want(t, steadyArrivals(o), "arrivals x%.2f, want steady", x(o, arrOf))
	},
	"error_burst": func(t *testing.T, b *Bundle) {
		o := b.Truth.Observed
		want(t, o.Incident.ErrorRate >= 0.025 && o.Incident.ErrorRate <= 0.3 && o.Baseline.ErrorRate == 0,
			"error rate %.3f → %.3f", o.Baseline.ErrorRate, o.Incident.ErrorRate)
	},
	"router_skew": func(t *testing.T, b *Bundle) {
		o := b.Truth.Observed
		hot := b.in.rep[0]
		share := b.in.repArr[0][1] / sum(b.in.repArr, 1)
		base := b.in.repArr[0][0] / sum(b.in.repArr, 0)
		want(t, share > 1.3*base, "hot share %.2f (baseline %.2f)", share, base)
		want(t, ratio(hot[1].TTFTMean, hot[0].TTFTMean) >= 1.3 || ratio(hot[1].ITLMean, hot[0].ITLMean) >= 1.2,
			"hot replica ttft %.3f→%.3f", hot[0].TTFTMean, hot[1].TTFTMean)
		want(t, steadyArrivals(o), "arrivals x%.2f, want steady", x(o, arrOf))
	},
	"frontend_delay": func(t *testing.T, b *Bundle) {
		o := b.Truth.Observed
		want(t, x(o, outOf) >= 2, "outside x%.2f", x(o, outOf))
		d := o.Incident.TTFTMean - o.Baseline.TTFTMean
		dOut := o.Incident.OutsideMean - o.Baseline.OutsideMean
		want(t, d > 0 && dOut >= 0.7*d, "outside +%.3fs of ttft +%.3fs", dOut, d)
	},
}

// hardNegative is every hard negative's truth: healthy, latency within x1.25.
func hardNegative(t *testing.T, b *Bundle) {
	o := b.Truth.Observed
	for _, m := range []struct {
		name string
		get  func(Window) float64
	}{{"ttft", ttftOf}, {"itl", itlOf}, {"e2e", e2eOf}} {
		want(t, x(o, m.get) <= 1.25 && x(o, m.get) >= 0.8, "%s mean x%.3f", m.name, x(o, m.get))
	}
	want(t, len(b.Truth.Causes) == 0 && b.Truth.Band == "none" && b.Truth.Magnitude == 0, "truth %v %s", b.Truth.Causes, b.Truth.Band)
	if b.Truth.Scenario == "healthy_burst" {
		want(t, b.in.lateWait <= 2*b.in.baseWait+4, "queue %.0f in the last 2 minutes", b.in.lateWait)
	}
	if b.Truth.Scenario == "diurnal_growth" {
		want(t, x(o, arrOf) >= 1.1, "arrivals x%.2f, want growth", x(o, arrOf))
	}
}

// steadyArrivals allows 15% plus three Poisson standard deviations of the
// baseline window's count.
func steadyArrivals(o Observed) bool {
	n := o.Baseline.ArrivalRate * 300
	return math.Abs(x(o, arrOf)-1) <= 0.15+3/math.Sqrt(math.Max(n, 1))
}

func want(t *testing.T, ok bool, format string, args ...any) {
	t.Helper()
	if !ok {
		t.Errorf(format, args...)
	}
}

// cached records each (options) once per test binary: several tests look
// at the same bundles.
var cached sync.Map

func recorded(t *testing.T, opts Options) *Bundle {
	t.Helper()
	key := fmt.Sprintf("%+v", opts)
	if b, ok := cached.Load(key); ok {
		return b.(*Bundle)
	}
	b, err := Record(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	cached.Store(key, b)
	return b
}

// TestScenarios records every catalogue scenario (moderate and wide draws)
// and checks its mechanism in the model's own measurements.
func TestScenarios(t *testing.T) {
	seeds := []int64{1, 2}
	wideSeeds := []int64{7}
	if testing.Short() {
		seeds, wideSeeds = []int64{1}, nil
	}
	for _, sc := range Scenarios() {
		sc := sc
		t.Run(sc.Name, func(t *testing.T) {
			t.Parallel()
			type run struct {
				seed int64
				wide bool
			}
			var runs []run
			for _, s := range seeds {
				runs = append(runs, run{s, false})
			}
			for _, s := range wideSeeds {
				runs = append(runs, run{s, true})
			}
			for _, r := range runs {
				b := recorded(t, Options{Scenario: sc.Name, Seed: r.seed, Wide: r.wide, Trim: true})
				tr := b.Truth
				if !slices.Equal(tr.Causes, sc.Causes) && !(len(tr.Causes) == 0 && len(sc.Causes) == 0) {
					t.Errorf("causes %v, want %v", tr.Causes, sc.Causes)
				}
				if len(sc.Causes) == 0 {
					hardNegative(t, b)
					continue
				}
				if tr.Band != band(tr.Magnitude, false) || tr.Magnitude < 0 || tr.Magnitude > 1 {
					t.Errorf("magnitude %.3f band %s", tr.Magnitude, tr.Band)
				}
				if !r.wide && (tr.Magnitude < 0.45 || tr.Magnitude > 0.85) {
					t.Errorf("moderate draw with magnitude %.3f", tr.Magnitude)
				}
				mechanisms[sc.Name](t, b)
			}
		})
	}
}

// TestMagnitudeMonotone checks that each fault's knob moves one way with
// the magnitude, on one instance.
func TestMagnitudeMonotone(t *testing.T) {
	// knobs that shrink as the fault grows
	down := map[string]bool{"gpu_throttle": true}
	for _, sc := range Scenarios() {
		if len(sc.Causes) == 0 {
			continue
		}
		defs, err := lookup(sc.Name)
		if err != nil {
			t.Fatal(err)
		}
		prev := 0.0
		for i, m := range []float64{0, 0.25, 0.5, 0.75, 1} {
			p, err := prepare(Options{Scenario: sc.Name, Seed: 3}, defs, 3, 3, 0, recordConfig{m: m})
			if err != nil {
				t.Fatal(err)
			}
			k := p.faults[0].knob
			if sc.Name == "capacity_loss" {
				k = p.faults[0].knob2 // the survivors' load; the replica count is its rounding
			}
			if down[sc.Name] {
				k = -k
			}
			if i > 0 && k < prev-1e-9 {
				t.Errorf("%s: knob falls from %.4g to %.4g at m=%.2f", sc.Name, prev, k, m)
			}
			prev = k
		}
	}
}

// TestMagnitudeSeverity checks the ends of the scale on a few faults: m=0
// reaches an alarm, m=1 is far past it.
func TestMagnitudeSeverity(t *testing.T) {
	if testing.Short() {
		t.Skip("records several instances")
	}
	for _, tc := range []struct {
		name     string
		get      func(Window) float64
		lo, hi   float64 // at m=0: the alarm band
		severeAt float64 // at m=1: at least
	}{
		{"gpu_throttle", itlOf, 1.15, 2.2, 2.2},
		{"frontend_delay", ttftOf, 1.3, 3, 10},
		{"arrival_surge", nil, 1.2, 4, 10}, // TTFT or ITL, whichever moves
		{"prefix_cache_loss", ttftOf, 1.2, 3, 1.6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, m := range []float64{0, 1} {
				b, err := record(context.Background(), Options{Scenario: tc.name, Seed: 2, Trim: true}, recordConfig{m: m})
				if err != nil {
					t.Fatal(err)
				}
				o := b.Truth.Observed
				r := max(x(o, ttftOf), x(o, itlOf))
				if tc.get != nil {
					r = x(o, tc.get)
				}
				if m == 0 && (r < tc.lo || r > tc.hi) {
					t.Errorf("m=0: x%.2f, want %.2f..%.2f", r, tc.lo, tc.hi)
				}
				if m == 1 && r < tc.severeAt {
					t.Errorf("m=1: x%.2f, want >= %.2f", r, tc.severeAt)
				}
			}
		})
	}
}

func TestCompound(t *testing.T) {
	pairs := []string{"arrival_surge+gpu_throttle", "kv_pressure+frontend_delay", "context_growth+error_burst"}
	if testing.Short() {
		pairs = pairs[:1]
	}
	for _, name := range pairs {
		t.Run(name, func(t *testing.T) {
			b := recorded(t, Options{Scenario: name, Seed: 4, Trim: true})
			parts := strings.Split(name, "+")
			var want []string
			for _, p := range parts {
				for _, sc := range Scenarios() {
					if sc.Name == p {
						want = append(want, sc.Causes...)
					}
				}
			}
			got := append([]string(nil), b.Truth.Causes...)
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("causes %v, want %v", b.Truth.Causes, want)
			}
			if b.Truth.Scenario != name {
				t.Errorf("scenario %q", b.Truth.Scenario)
			}
		})
	}
}

func TestLookup(t *testing.T) {
	for _, bad := range []string{"nope", "healthy+arrival_surge", "kv_pressure+context_growth", "gpu_throttle+gpu_throttle",
		"a+b+c", "router_skew+arrival_surge"} {
		if _, err := lookup(bad); err == nil {
			t.Errorf("lookup(%q) accepted", bad)
		}
	}
	pairs := CompoundPairs()
	if len(pairs) != 36-len(contradict) {
		t.Errorf("%d pairs", len(pairs))
	}
	for _, p := range pairs {
		if _, err := lookup(p); err != nil {
			t.Errorf("lookup(%q): %v", p, err)
		}
	}
	if _, err := Record(context.Background(), Options{}); err == nil {
		t.Error("Record without a scenario")
	}
	if _, err := Record(context.Background(), Options{Scenario: "healthy", Names: "v2"}); err == nil {
		t.Error("Record with names v2")
	}
	if _, err := Record(context.Background(), Options{Scenario: "healthy", GPUSeries: "nvml"}); err == nil {
		t.Error("Record with gpu series nvml")
	}
	ids := map[string]bool{"queue_saturation": true, "capacity_loss": true, "prefill_contention": true,
		"chunked_prefill_mismatch": true, "kv_cache_pressure": true, "memory_bandwidth_saturation": true,
		"gpu_throttling": true, "prefix_cache_regression": true, "request_errors": true, "load_imbalance": true,
		"outside_engine": true}
	for _, sc := range Scenarios() {
		for _, c := range sc.Causes {
			if !ids[c] {
				t.Errorf("%s: cause %q not in the contract", sc.Name, c)
			}
		}
	}
}
