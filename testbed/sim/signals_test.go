package sim

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"
	"go.yaml.in/yaml/v3"
)

// omSeries is one parsed series.
type omSeries struct {
	name   string
	labels labels.Labels
	ts     []int64
	vals   []float64
}

// omData is a parsed OpenMetrics file.
type omData struct {
	types  map[string]string // family name -> type
	series map[string]*omSeries
	byName map[string][]*omSeries
}

// parseOM parses OpenMetrics text with Prometheus's own parser.
func parseOM(data []byte) (*omData, error) {
	p := textparse.NewOpenMetricsParser(data, labels.NewSymbolTable())
	d := &omData{types: map[string]string{}, series: map[string]*omSeries{}, byName: map[string][]*omSeries{}}
	for {
		et, err := p.Next()
		if errors.Is(err, io.EOF) {
			return d, nil
		}
		if err != nil {
			return nil, err
		}
		switch et {
		case textparse.EntryType:
			n, t := p.Type()
			d.types[string(n)] = string(t)
		case textparse.EntrySeries:
			b, ts, v := p.Series()
			if ts == nil {
				return nil, fmt.Errorf("sample %s without timestamp", b)
			}
			var l labels.Labels
			p.Labels(&l)
			key := l.String()
			s := d.series[key]
			if s == nil {
				s = &omSeries{name: l.Get("__name__"), labels: l}
				d.series[key] = s
				d.byName[s.name] = append(d.byName[s.name], s)
			}
			if n := len(s.ts); n > 0 && s.ts[n-1] >= *ts {
				return nil, fmt.Errorf("series %s: timestamps not increasing", key)
			}
			s.ts = append(s.ts, *ts)
			s.vals = append(s.vals, v)
		}
	}
}

// valueAt is the last sample at or before t (ms) within 5 minutes.
func (s *omSeries) valueAt(t int64) (float64, bool) {
	i := sort.Search(len(s.ts), func(i int) bool { return s.ts[i] > t }) - 1
	if i < 0 || t-s.ts[i] > 5*60*1000 {
		return 0, false
	}
	return s.vals[i], true
}

// increase over (from, to] summed over the series matching name; by le
// when bucket is set.
func (d *omData) increaseBy(name, by string, from, to int64) map[string]float64 {
	out := map[string]float64{}
	for _, s := range d.byName[name] {
		a, ok1 := s.valueAt(from)
		b, ok2 := s.valueAt(to)
		if !ok1 || !ok2 {
			continue
		}
		out[s.labels.Get(by)] += b - a
	}
	return out
}

// quantile of a classic histogram from bucket increases, interpolated
// linearly inside the bucket as histogram_quantile does.
func quantileFromBuckets(q float64, inc map[string]float64) float64 {
	type b struct{ le, n float64 }
	var bs []b
	for le, n := range inc {
		v := math.Inf(1)
		if le != "+Inf" {
			fmt.Sscan(le, &v)
		}
		bs = append(bs, b{v, n})
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
	if len(bs) == 0 || bs[len(bs)-1].n <= 0 {
		return math.NaN()
	}
	rank := q * bs[len(bs)-1].n
	prevLe, prevN := 0.0, 0.0
	for _, x := range bs {
		if x.n >= rank {
			if math.IsInf(x.le, 1) {
				return prevLe
			}
			if x.n == prevN {
				return x.le
			}
			return prevLe + (x.le-prevLe)*(rank-prevN)/(x.n-prevN)
		}
		prevLe, prevN = x.le, x.n
	}
	return prevLe
}

// meanOver averages the samples of each matching series in [from, to] and
// combines them with agg ("sum" or "max" or "avg").
func (d *omData) meanOver(name string, from, to int64, agg string) float64 {
	var per []float64
	for _, s := range d.byName[name] {
		sum, n := 0.0, 0
		for i, t := range s.ts {
			if t >= from && t <= to {
				sum += s.vals[i]
				n++
			}
		}
		if n > 0 {
			per = append(per, sum/float64(n))
		}
	}
	if len(per) == 0 {
		return math.NaN()
	}
	r := per[0]
	switch agg {
	case "sum", "avg":
		r = 0
		for _, v := range per {
			r += v
		}
		if agg == "avg" {
			r /= float64(len(per))
		}
	case "max":
		for _, v := range per {
			r = math.Max(r, v)
		}
	}
	return r
}

func sumMap(m map[string]float64) float64 {
	s := 0.0
	for _, v := range m {
		s += v
	}
	return s
}

// windowSignals are the key signals of one window.
type windowSignals struct {
	ttftP95, itlP95, queue, kv, preemptRate, dram, hitRate, success, smClock float64
}

func signalsFor(d *omData, end time.Time, win time.Duration) windowSignals {
	to := end.UnixMilli()
	from := end.Add(-win).UnixMilli()
	var s windowSignals
	s.ttftP95 = quantileFromBuckets(0.95, d.increaseBy("vllm:time_to_first_token_seconds_bucket", "le", from, to))
	itl := "vllm:inter_token_latency_seconds_bucket"
	if len(d.byName[itl]) == 0 {
		itl = "vllm:time_per_output_token_seconds_bucket"
	}
	s.itlP95 = quantileFromBuckets(0.95, d.increaseBy(itl, "le", from, to))
	s.queue = d.meanOver("vllm:num_requests_waiting", from, to, "sum")
	kv := "vllm:kv_cache_usage_perc"
	if len(d.byName[kv]) == 0 {
		kv = "vllm:gpu_cache_usage_perc"
	}
	s.kv = d.meanOver(kv, from, to, "max")
	s.preemptRate = sumMap(d.increaseBy("vllm:num_preemptions_total", "", from, to)) / win.Seconds()
	s.dram = d.meanOver("whyslow_gpu_dram_bandwidth_utilization", from, to, "avg")
	hits := sumMap(d.increaseBy("vllm:prefix_cache_hits_total", "", from, to))
	q := sumMap(d.increaseBy("vllm:prefix_cache_queries_total", "", from, to))
	s.hitRate = hits / q
	fin := d.increaseBy("vllm:request_success_total", "finished_reason", from, to)
	// A client abort is no failure of the engine (docs/engines.md §2.4).
	s.success = (sumMap(fin) - fin["error"]) / sumMap(fin)
	s.smClock = d.meanOver("whyslow_gpu_sm_clock_mhz", from, to, "avg")
	return s
}

func readBundleMetrics(t testing.TB, dir string) []byte {
	t.Helper()
	if b, err := os.ReadFile(filepath.Join(dir, "metrics.om")); err == nil {
		return b
	}
	f, err := os.Open(filepath.Join(dir, "metrics.om.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func fmtSig(v float64, unit string) string {
	if math.IsNaN(v) {
		return "–"
	}
	switch unit {
	case "s":
		if v < 1 {
			return fmt.Sprintf("%.0fms", v*1000)
		}
		return fmt.Sprintf("%.2fs", v)
	case "%":
		return fmt.Sprintf("%.0f%%", v*100)
	case "r":
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

// signalTable renders baseline → incident for one bundle as a markdown row.
func signalRow(name string, cause string, base, inc windowSignals) string {
	pair := func(a, b float64, unit string) string { return fmtSig(a, unit) + " → " + fmtSig(b, unit) }
	if cause == "" {
		cause = "(healthy)"
	}
	return fmt.Sprintf("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |", name, cause,
		pair(base.ttftP95, inc.ttftP95, "s"), pair(base.itlP95, inc.itlP95, "s"), pair(base.queue, inc.queue, ""),
		pair(base.kv, inc.kv, "%"), pair(base.preemptRate, inc.preemptRate, "r"), pair(base.dram, inc.dram, "%"),
		pair(base.hitRate, inc.hitRate, "%"), pair(base.success, inc.success, "%"), pair(base.smClock, inc.smClock, ""))
}

const signalHeader = "| scenario | cause | TTFT p95 | ITL p95 | queue | KV usage | preempt/s | DRAM util | prefix hit | success | SM MHz |\n" +
	"|---|---|---|---|---|---|---|---|---|---|---|"

func bundleSignals(t testing.TB, metrics []byte, inc Incident) (base, now windowSignals) {
	t.Helper()
	base, now, err := incidentSignals(metrics, inc)
	if err != nil {
		t.Fatal(err)
	}
	return base, now
}

// incidentSignals is bundleSignals returning its error.
func incidentSignals(metrics []byte, inc Incident) (base, now windowSignals, err error) {
	d, err := parseOM(metrics)
	if err != nil {
		return base, now, fmt.Errorf("parse: %w", err)
	}
	return signalsFor(d, inc.At.Add(-inc.Baseline), inc.Window), signalsFor(d, inc.At, inc.Window), nil
}

// TestTestdataSignals loads every committed bundle and checks that its
// injected cause shows at onset against the baseline; with -v it prints the
// signal table.
func TestTestdataSignals(t *testing.T) {
	root := filepath.Join("..", "..", "testdata", "incidents")
	dirs, _ := filepath.Glob(filepath.Join(root, "*"))
	if len(dirs) == 0 {
		t.Skip("no bundles under testdata/incidents (run go generate ./testbed/sim)")
	}
	var rows []string
	for _, dir := range dirs {
		var inc Incident
		var tr Truth
		for _, f := range []struct {
			name string
			v    any
		}{{"incident.yaml", &inc}, {"truth.yaml", &tr}} {
			b, err := os.ReadFile(filepath.Join(dir, f.name))
			if err != nil {
				t.Fatal(err)
			}
			if err := yaml.Unmarshal(b, f.v); err != nil {
				t.Fatalf("%s/%s: %v", dir, f.name, err)
			}
		}
		if inc.Engine != "" && inc.Engine != "vllm" {
			continue // SGLang / TRT-LLM names: telemetry_engines_test.go and testbed/accuracy cover them
		}
		base, now := bundleSignals(t, readBundleMetrics(t, dir), inc)
		cause := ""
		if len(tr.Causes) > 0 {
			cause = tr.Causes[0]
		}
		rows = append(rows, signalRow(tr.Scenario, cause, base, now))
		t.Run(tr.Scenario, func(t *testing.T) { checkCauseShows(t, tr.Scenario, cause, base, now) })
	}
	t.Logf("signals, baseline → incident window:\n%s\n%s", signalHeader, strings.Join(rows, "\n"))
}

// checkCauseShows asserts the mechanism's signature for a cause.
func checkCauseShows(t *testing.T, scenario, cause string, b, n windowSignals) {
	t.Helper()
	fail := func(what string) { t.Errorf("%s: %s (baseline %+v, incident %+v)", cause, what, b, n) }
	if b.preemptRate > 0 {
		fail("baseline has preemptions")
	}
	if b.success < 0.98 {
		fail("baseline success below 98%")
	}
	switch cause {
	case "":
		if n.preemptRate > 0 || n.success < 0.98 || n.queue > 20 {
			fail("healthy incident window is not healthy")
		}
	case "queue_saturation":
		if n.queue < 10*math.Max(b.queue, 1) || n.ttftP95 < 3*b.ttftP95 {
			fail("queue and TTFT did not grow")
		}
	case "prefill_contention", "chunked_prefill_mismatch":
		if n.ttftP95 < 2*b.ttftP95 {
			fail("TTFT did not grow")
		}
	case "kv_cache_pressure":
		if n.preemptRate <= 0 || n.kv < 0.9 {
			fail("no preemptions at a full pool")
		}
	case "memory_bandwidth_saturation":
		if scenario == "context_growth" {
			// Longer contexts, not a busier replica: KV grows, steps slow.
			if n.kv < 2*b.kv || n.itlP95 < 1.1*b.itlP95 || n.preemptRate > 0 {
				fail("context did not grow the KV read per step")
			}
			break
		}
		if n.dram < 0.78 || n.itlP95 < 1.2*b.itlP95 || n.preemptRate > 0 {
			fail("decode not bandwidth bound")
		}
	case "gpu_throttling":
		if n.smClock > 0.7*b.smClock || n.itlP95 < 1.3*b.itlP95 {
			fail("clocks did not drop or steps did not slow")
		}
	case "prefix_cache_regression":
		if n.hitRate > 0.5*b.hitRate || n.ttftP95 < 1.2*b.ttftP95 {
			fail("hit rate did not fall")
		}
	case "request_errors":
		if n.success > 0.95 {
			fail("success rate did not fall")
		}
	case "capacity_loss":
		if n.ttftP95 < 1.5*b.ttftP95 {
			fail("TTFT did not grow on the remaining replicas")
		}
	case "load_imbalance":
		if n.ttftP95 < 3*b.ttftP95 {
			fail("hot replica TTFT did not grow")
		}
	case "outside_engine":
		if n.ttftP95 < b.ttftP95+0.4 || n.queue > 5*math.Max(b.queue, 1) {
			fail("TTFT did not grow outside the engine")
		}
	}
}

// TestScenarioSignals records every scenario at a few seeds in memory and
// checks its signature; it is the guard on seed-randomised instances.
func TestScenarioSignals(t *testing.T) {
	if testing.Short() {
		t.Skip("records every scenario")
	}
	seeds := []int64{1}
	if os.Getenv("WHYSLOW_SIM_SEEDS") != "" {
		seeds = nil
		for _, f := range strings.Split(os.Getenv("WHYSLOW_SIM_SEEDS"), ",") {
			var s int64
			fmt.Sscan(f, &s)
			seeds = append(seeds, s)
		}
	}
	var rows []string
	for _, sc := range Scenarios() {
		for _, seed := range seeds {
			r := recordTrimmed(t, sc.Name, seed)
			base, now, tr := r.base, r.now, r.truth
			rows = append(rows, signalRow(fmt.Sprintf("%s/%d", sc.Name, seed), sc.Cause, base, now)+
				fmt.Sprintf(" %v %v rep=%v load=%v", tr.Params["model"], tr.Params["gpu"], tr.Params["replicas"], tr.Params["baseline_load"]))
			t.Run(fmt.Sprintf("%s/%d", sc.Name, seed), func(t *testing.T) { checkCauseShows(t, sc.Name, sc.Cause, base, now) })
		}
	}
	t.Logf("\n%s\n%s", signalHeader, strings.Join(rows, "\n"))
}
