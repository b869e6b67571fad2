package reqsim

import (
	"bytes"
	"context"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/whyslow/whyslow/collectors/bundle"
	"github.com/whyslow/whyslow/collectors/store"
)

var engines = []string{"vllm", "sglang", "trtllm"}

func record(t *testing.T, o Options) *Bundle {
	t.Helper()
	b, err := Record(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestIndependentImports checks the package shares no code with the other
// two engine models: it imports nothing from testbed/sim or testbed/fluid.
func TestIndependentImports(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files: %v", err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if strings.Contains(path, "testbed/sim") || strings.Contains(path, "testbed/fluid") {
				t.Errorf("%s imports %s: reqsim must be written independently of testbed/sim and testbed/fluid", name, path)
			}
		}
	}
}

func TestDeterminism(t *testing.T) {
	o := Options{Scenario: "errors", Seed: 7, Names: "v1", GPUSeries: "both", Wide: true}
	a, b := record(t, o), record(t, o)
	if !bytes.Equal(a.Metrics, b.Metrics) {
		t.Error("the same seed rendered different expositions")
	}
	if !reflect.DeepEqual(a.Truth, b.Truth) {
		t.Errorf("the same seed gave different truths:\n%+v\n%+v", a.Truth, b.Truth)
	}
	o.Seed = 8
	if c := record(t, o); bytes.Equal(a.Metrics, c.Metrics) {
		t.Error("different seeds rendered the same exposition")
	}
}

func TestConservation(t *testing.T) {
	for i, sc := range []string{"replica_loss", "rolling_restart", "kv_pressure"} {
		b := record(t, Options{Scenario: sc, Seed: int64(3 + i), Engine: engines[i]})
		tr := b.Truth
		if tr.Arrived == 0 || tr.Arrived != tr.Finished+tr.InFlight+tr.Lost {
			t.Errorf("%s: arrived %d != finished %d + in flight %d + lost %d", sc, tr.Arrived, tr.Finished, tr.InFlight, tr.Lost)
		}
		if sc != "replica_loss" && sc != "rolling_restart" && tr.Lost != 0 {
			t.Errorf("%s: %d requests lost without a replica stopping", sc, tr.Lost)
		}
	}
}

// TestScenarioEffects checks every scenario moves what it should, each on
// one engine (cycled) at seed 1.
func TestScenarioEffects(t *testing.T) {
	for i, sc := range scenarios {
		eng := engines[i%len(engines)]
		t.Run(sc.Name+"/"+eng, func(t *testing.T) {
			b := record(t, Options{Scenario: sc.Name, Seed: 1, Engine: eng, GPUSeries: "whyslow"})
			base, inc := b.Truth.Base, b.Truth.Inc
			ttft, itl := inc.TTFTP95/base.TTFTP95, inc.ITLP95/base.ITLP95
			t.Logf("ttft p95 ×%.2f (mean ×%.2f), itl p95 ×%.2f (mean ×%.2f), errors %.3f, requests %d→%d",
				ttft, inc.TTFT/base.TTFT, itl, inc.ITL/base.ITL, inc.ErrorRate, base.Requests, inc.Requests)
			if base.Requests < 500 || inc.Requests < 300 {
				t.Errorf("too few requests: %d, %d", base.Requests, inc.Requests)
			}
			if base.ITL < 0.008 || base.ITL > 0.06 {
				t.Errorf("baseline inter-token latency %.4f s is not a plausible decode step", base.ITL)
			}
			if len(sc.Causes) == 0 {
				if ttft > 1.25 || itl > 1.25 || inc.ErrorRate > 0.01 {
					t.Errorf("healthy negative moved: ttft p95 ×%.2f, itl p95 ×%.2f, errors %.3f", ttft, itl, inc.ErrorRate)
				}
				return
			}
			switch sc.Name {
			case "errors":
				if inc.ErrorRate < 0.03 {
					t.Errorf("error rate %.3f", inc.ErrorRate)
				}
				return
			case "slow_frontend":
				if inc.Outside < base.Outside+0.1 || ttft < 1.3 || itl > 1.15 {
					t.Errorf("outside %.3f→%.3f, ttft p95 ×%.2f, itl p95 ×%.2f", base.Outside, inc.Outside, ttft, itl)
				}
				return
			case "replica_loss", "clock_throttle":
				if ttft < 1.15 || itl < 1.3 {
					t.Errorf("ttft p95 ×%.2f, itl p95 ×%.2f: want both up", ttft, itl)
				}
				return
			}
			if ttft < 1.3 && itl < 1.3 {
				t.Errorf("fault did not move TTFT or ITL p95 by 1.3×: ×%.2f, ×%.2f", ttft, itl)
			}
		})
	}
}

// TestExpositionLoads loads each engine's exposition into the embedded
// store as the harness does.
func TestExpositionLoads(t *testing.T) {
	for i, eng := range engines {
		names := []string{"v1", "v0"}[i%2]
		gpus := []string{"whyslow", "dcgm", "both"}[i]
		b := record(t, Options{Scenario: "rolling_restart", Seed: 11, Engine: eng, Names: names, GPUSeries: gpus})
		st, err := store.Open(store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ls, err := bundle.ReadMetrics(context.Background(), "metrics.om", b.Metrics, st)
		st.Close()
		if err != nil {
			t.Fatalf("%s: %v", eng, err)
		}
		if ls.Samples == 0 || ls.MaxTime.After(b.At) || ls.MaxTime.Before(b.At.Add(-time.Minute)) {
			t.Errorf("%s: %d samples, %v–%v, at %v", eng, ls.Samples, ls.MinTime, ls.MaxTime, b.At)
		}
		prefix := map[string]string{"vllm": "vllm:", "sglang": "sglang:", "trtllm": "trtllm_"}[eng]
		if !bytes.Contains(b.Metrics, []byte("\n"+prefix)) {
			t.Errorf("%s: no %s series", eng, prefix)
		}
	}
}

// TestOmittedFamilies checks a dropped family is absent and recorded.
func TestOmittedFamilies(t *testing.T) {
	for seed := int64(1); seed < 100; seed++ {
		o := Options{Scenario: "prefix_loss", Seed: seed, Engine: "vllm"}
		p, err := newPlan(o)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range p.omitted {
			if f == famPrefix {
				b := record(t, o)
				if bytes.Contains(b.Metrics, []byte("vllm:prefix_cache_hits")) {
					t.Error("prefix-cache counters exported though omitted")
				}
				names, _ := b.Truth.Params["omitted_families"].([]string)
				if !slices.Contains(names, "vllm:prefix_cache_hits_total") {
					t.Errorf("omitted_families %v does not name the prefix-cache counters", names)
				}
				if b.Truth.Unobservable == "" {
					t.Error("prefix_loss without the prefix-cache counters is not marked unobservable")
				}
				return
			}
		}
	}
	t.Skip("no seed dropped the prefix-cache counters")
}

// BenchmarkRecord is one instance's recording (go test -bench Record
// -benchtime 6x ./testbed/reqsim).
func BenchmarkRecord(b *testing.B) {
	for _, sc := range []string{"steady_busy", "replica_loss", "kv_pressure"} {
		b.Run(sc, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := Record(context.Background(), Options{Scenario: sc, Seed: int64(i + 1), Wide: true, GPUSeries: "both"}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestTailOnlySlowdown pins a subtle replica loss whose inter-token p95
// moves while the means barely do: the shape a dashboard of means misses.
func TestTailOnlySlowdown(t *testing.T) {
	b := record(t, Options{Scenario: "replica_loss", Seed: 53, Wide: true, Names: "v1", GPUSeries: "none"})
	base, inc := b.Truth.Base, b.Truth.Inc
	t.Logf("%s %s: ttft mean ×%.2f p95 ×%.2f, itl mean ×%.2f p95 ×%.2f", b.Engine, b.Truth.Band,
		inc.TTFT/base.TTFT, inc.TTFTP95/base.TTFTP95, inc.ITL/base.ITL, inc.ITLP95/base.ITLP95)
	if inc.ITLP95 < 1.4*base.ITLP95 || inc.ITL > 1.3*base.ITL || inc.TTFT > 1.3*base.TTFT {
		t.Error("not a tail-only slowdown")
	}
}

// A Fix changes the engine, never the traffic the fault sends: the
// long_prompts cap was read from the budget at run time, so a budget fix
// shortened the long prompts it was meant to serve.
func TestFixKeepsTheTraffic(t *testing.T) {
	for _, sc := range []string{"long_prompts", "prompt_shift", "kv_pressure", "arrival_surge"} {
		o := Options{Scenario: sc, Seed: 0x28013, Engine: "sglang", Wide: true}
		p, err := newPlan(o)
		if err != nil {
			t.Fatal(err)
		}
		want := p.inc(segLen, p.base)
		for _, f := range []Fix{{MaxNumBatchedTokens: p.budget / 4}, {MaxNumBatchedTokens: 2 * p.budget}, {MaxNumSeqs: 32}, {KVFactor: 2}, {ReplicasFactor: 2}} {
			q, err := newPlan(o)
			if err != nil {
				t.Fatal(err)
			}
			f.apply(q)
			if got := q.inc(segLen, q.base); got != want {
				t.Errorf("%s with %+v: traffic %+v, want %+v", sc, f, got, want)
			}
		}
	}
}
