package fluid

import (
	"bytes"
	"context"
	"go/parser"
	"go/token"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/whyslow/whyslow/collectors/bundle"
	"github.com/whyslow/whyslow/collectors/store"
)

func TestWriteDirLoadsAndQueries(t *testing.T) {
	b := recorded(t, Options{Scenario: "arrival_surge", Seed: 1, Trim: true})
	for _, gz := range []bool{false, true} {
		dir := t.TempDir()
		if err := b.WriteDir(dir, gz); err != nil {
			t.Fatal(err)
		}
		name := "metrics.om"
		if gz {
			name += ".gz"
		}
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
		bd, err := bundle.Load(dir)
		if err != nil {
			t.Fatalf("bundle.Load: %v", err)
		}
		inc := bd.Incident
		if inc == nil {
			t.Fatal("incident.yaml not read")
		}
		if !inc.At.Equal(b.Incident.At) || inc.Window != 5*time.Minute || inc.Baseline != time.Hour ||
			inc.Engine != "vllm" || inc.GPU != b.Incident.GPU || inc.Selector != b.Incident.Selector {
			t.Errorf("incident.yaml read back as %+v", inc)
		}
		if inc.Scheduler.ChunkedPrefill == nil || !*inc.Scheduler.ChunkedPrefill ||
			inc.Scheduler.MaxNumBatchedTokens != b.Incident.Scheduler.MaxNumBatchedTokens ||
			inc.Scheduler.MaxNumSeqs != b.Incident.Scheduler.MaxNumSeqs {
			t.Errorf("scheduler read back as %+v", inc.Scheduler)
		}
		data, err := bd.ReadMetricsFile()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(data, b.Metrics) {
			t.Fatal("metrics file differs from Bundle.Metrics")
		}
	}

	st, err := store.Open(store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	stats, err := bundle.ReadMetrics(context.Background(), "metrics.om", b.Metrics, st)
	if err != nil {
		t.Fatalf("ReadMetrics: %v", err)
	}
	if stats.Format != bundle.FormatOpenMetrics {
		t.Errorf("format %v", stats.Format)
	}
	scrape := time.Duration(b.in.p.scrape * float64(time.Second))
	if stats.MaxTime.After(b.Incident.At) || !stats.MaxTime.After(b.Incident.At.Add(-scrape)) {
		t.Errorf("last sample %v, want within a scrape before the incident's end %v", stats.MaxTime, b.Incident.At)
	}
	// Trim keeps the baseline window with its look-back and no earlier
	base0 := b.Incident.At.Add(-b.Incident.Baseline - b.Incident.Window - 5*time.Minute)
	if stats.MinTime.Before(base0.Add(-time.Second)) || stats.MinTime.After(base0.Add(scrape)) {
		t.Errorf("first sample %v, want about %v", stats.MinTime, base0)
	}
	sel := b.Incident.Selector
	mean := func(at time.Time) float64 {
		q := `sum(rate(vllm:time_to_first_token_seconds_sum{` + sel + `}[5m])) / sum(rate(vllm:time_to_first_token_seconds_count{` + sel + `}[5m]))`
		v, _, err := st.Query(context.Background(), q, at)
		if err != nil {
			t.Fatalf("query: %v", err)
		}
		if len(v) != 1 {
			t.Fatalf("query %s: %d results", q, len(v))
		}
		return float64(v[0].Value)
	}
	at := b.Incident.At
	inc, base := mean(at), mean(at.Add(-time.Hour))
	o := b.Truth.Observed
	// the exposition tells the same story as the internals
	if inc/base < 2 || math.Abs(base-o.Baseline.TTFTMean) > 0.5*o.Baseline.TTFTMean {
		t.Errorf("PromQL TTFT mean %.4f → %.4f, internals %.4f → %.4f", base, inc, o.Baseline.TTFTMean, o.Incident.TTFTMean)
	}
	v, _, err := st.Query(context.Background(), `histogram_quantile(0.95, sum by (le) (rate(vllm:inter_token_latency_seconds_bucket{`+sel+`}[5m])))`, at)
	if err != nil || len(v) != 1 || !(float64(v[0].Value) > 0) {
		t.Errorf("ITL p95: %v %v", v, err)
	}
	v, _, err = st.Query(context.Background(), `count(vllm:num_requests_running{`+sel+`})`, at)
	if err != nil || len(v) != 1 || int(v[0].Value) != b.in.p.replicas {
		t.Errorf("targets: %v %v, want %d", v, err, b.in.p.replicas)
	}
}

// TestCapacityLossSeriesEnd checks that a stopped replica's series end.
func TestCapacityLossSeriesEnd(t *testing.T) {
	b, err := record(context.Background(), Options{Scenario: "capacity_loss", Seed: 1, Trim: true},
		recordConfig{m: -1, mutate: func(p *plan) { p.replicas = max(p.replicas, 3) }})
	if err != nil {
		t.Fatal(err)
	}
	f := b.in.p.faults[0]
	n := b.in.p.replicas
	stopped := map[string]bool{}
	for i := n - int(f.knob); i < n; i++ {
		stopped[b.in.p.podName(i)] = true
	}
	got := parseOM(t, b.Metrics)
	at := b.Incident.At.UnixMilli()
	scrape := int64(b.in.p.scrape * 1000)
	seen := 0
	for _, s := range got.series {
		if s.lset.Get("__name__") != "vllm:num_requests_running" {
			continue
		}
		seen++
		pod := s.lset.Get("pod")
		end := s.ts[len(s.ts)-1]
		switch {
		case stopped[pod] && f.mode == "gone" && end > at-scrape:
			t.Errorf("stopped pod %s still exports at the end", pod)
		case stopped[pod] && f.mode == "idle" && (end <= at-scrape || s.vals[len(s.vals)-1] != 0):
			t.Errorf("idle pod %s: last sample %v at %d", pod, s.vals[len(s.vals)-1], end)
		case !stopped[pod] && (end <= at-scrape || end > at):
			t.Errorf("pod %s: last sample at %d, incident ends %d", pod, end, at)
		}
	}
	if seen != n {
		t.Errorf("%d replicas export, want %d", seen, n)
	}
}

func TestTruthYAML(t *testing.T) {
	b := recorded(t, Options{Scenario: "context_growth", Seed: 1, Trim: true})
	data, err := b.TruthYAML()
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"scenario", "seed", "causes", "onset", "magnitude", "band", "params", "observed", "itl_attribution"} {
		if _, ok := doc[k]; !ok {
			t.Errorf("truth.yaml lacks %s", k)
		}
	}
	if len(doc) != 9 {
		t.Errorf("truth.yaml has %d keys", len(doc))
	}
	if doc["onset"] != "2026-01-01T01:15:00Z" {
		t.Errorf("onset %v", doc["onset"])
	}
	obs := doc["observed"].(map[string]any)
	keys := strings.Fields(`ttft_mean queue_mean prefill_mean outside_mean itl_mean e2e_mean arrival_rate running_mean
		kv_tokens_per_running prefill_tokens_per_step step_time_mean clock_factor error_rate preemption_rate`)
	for _, w := range []string{"baseline", "incident"} {
		m := obs[w].(map[string]any)
		if len(m) != len(keys) {
			t.Errorf("observed.%s has %d keys", w, len(m))
		}
		for _, k := range keys {
			if _, ok := m[k]; !ok {
				t.Errorf("observed.%s lacks %s", w, k)
			}
		}
	}
	attr := doc["itl_attribution"].(map[string]any)
	for _, k := range []string{"batch", "context", "prefill", "clock", "total"} {
		if _, ok := attr[k]; !ok {
			t.Errorf("itl_attribution lacks %s", k)
		}
	}
	params := doc["params"].(map[string]any)
	if _, ok := params["omitted_families"]; !ok {
		t.Error("params lack omitted_families")
	}
	inc, err := b.IncidentYAML()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bundle.ParseIncident("incident.yaml", inc); err != nil {
		t.Errorf("incident.yaml: %v", err)
	}
}

func TestDeterministic(t *testing.T) {
	opts := Options{Scenario: "kv_pressure+frontend_delay", Seed: 9, Wide: true, Trim: true}
	a, err := Record(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Record(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	ta, _ := a.TruthYAML()
	tb, _ := b.TruthYAML()
	if !bytes.Equal(a.Metrics, b.Metrics) || !bytes.Equal(ta, tb) {
		t.Fatal("same options, different bundles")
	}
	opts.Seed++
	c, err := Record(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(a.Metrics, c.Metrics) {
		t.Fatal("different seeds, same bundle")
	}
}

func TestAttribution(t *testing.T) {
	c := newCostModel(models["8B"], gpuClasses["H100"], 1, perturbation{1, 1, 1, 1})
	base := Window{RunningMean: 40, KVTokensPerRunning: 1200, PrefillTokensPerStep: 60, ClockFactor: 1}
	inc := base
	inc.ClockFactor = 0.6
	a := attribute(&c, base, inc)
	if a.Batch != 0 || a.Context != 0 || a.Prefill != 0 || a.Clock <= 0 {
		t.Errorf("clock only: %+v", a)
	}
	inc = Window{RunningMean: 70, KVTokensPerRunning: 5000, PrefillTokensPerStep: 90, ClockFactor: 0.8}
	a = attribute(&c, base, inc)
	step := func(w Window) float64 {
		return c.step(w.RunningMean, w.RunningMean*w.KVTokensPerRunning, w.PrefillTokensPerStep, w.ClockFactor)
	}
	if d := step(inc) - step(base); math.Abs(a.Total-d) > 1e-12 || math.Abs(a.Batch+a.Context+a.Prefill+a.Clock-d) > 1e-12 {
		t.Errorf("total %.6g, parts %+v, step change %.6g", a.Total, a, d)
	}
	if a.Context <= a.Prefill {
		t.Errorf("5000-token contexts should dominate: %+v", a)
	}
}

// TestPromtool runs promtool's OpenMetrics backfill on a bundle.
func TestPromtool(t *testing.T) {
	bin, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not on PATH")
	}
	b := recorded(t, Options{Scenario: "arrival_surge", Seed: 1, Trim: true})
	dir := t.TempDir()
	file := filepath.Join(dir, "metrics.om")
	if err := os.WriteFile(file, b.Metrics, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "tsdb", "create-blocks-from", "openmetrics", file, filepath.Join(dir, "data")).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool: %v\n%s", err, out)
	}
	entries, err := os.ReadDir(filepath.Join(dir, "data"))
	if err != nil || len(entries) == 0 {
		t.Fatalf("promtool wrote no blocks: %v\n%s", err, out)
	}
}

// TestIndependent checks that the package shares nothing with testbed/sim.
func TestIndependent(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if strings.Contains(p, "testbed/sim") {
				t.Errorf("%s imports %s", f, p)
			}
		}
	}
}
