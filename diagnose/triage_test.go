package diagnose

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/whyslow/whyslow/query/querytest"
	"github.com/whyslow/whyslow/rules"
	"github.com/whyslow/whyslow/rulesets"
	"github.com/whyslow/whyslow/verdict"
)

// fakeMetrics answers instant queries from a map of (signal, window) values,
// keyed by the rendered expression and time.
type fakeMetrics struct {
	vals map[string]map[time.Time]model.Vector
	err  error
}

func (f *fakeMetrics) Query(_ context.Context, expr string, at time.Time) (model.Vector, []string, error) {
	if f.err != nil {
		return nil, nil, f.err
	}
	return f.vals[expr][at], []string{"fake warning"}, nil
}

func (f *fakeMetrics) QueryRange(context.Context, string, time.Time, time.Time, time.Duration) (model.Matrix, []string, error) {
	return nil, nil, errors.New("not used")
}

var at = time.Unix(1700000000, 0)

// newFake renders the ruleset's signals and stores the given values (now, base).
func newFake(t *testing.T, rs *rules.Ruleset, now, base map[string]float64, targets map[string]map[string]float64) *fakeMetrics {
	t.Helper()
	f := &fakeMetrics{vals: map[string]map[time.Time]model.Vector{}}
	put := func(expr string, ts time.Time, v model.Vector) {
		if f.vals[expr] == nil {
			f.vals[expr] = map[time.Time]model.Vector{}
		}
		f.vals[expr][ts] = v
	}
	for _, s := range rs.Signals {
		expr, err := s.Render("", "5m", nil)
		if err != nil {
			t.Fatal(err)
		}
		if v, ok := now[s.Name]; ok {
			put(expr, at, model.Vector{{Value: model.SampleValue(v)}})
		}
		if v, ok := base[s.Name]; ok {
			put(expr, at.Add(-time.Hour), model.Vector{{Value: model.SampleValue(v)}})
		}
		if tv, ok := targets[s.Name]; ok {
			texpr, _ := s.Render("", "5m", rules.DefaultTargetLabels)
			var vec model.Vector
			for pod, v := range tv {
				vec = append(vec, &model.Sample{Metric: model.Metric{"pod": model.LabelValue(pod)}, Value: model.SampleValue(v)})
			}
			put(texpr, at, vec)
		}
	}
	if rs.Detect != nil {
		expr, _ := rs.Detect.Render("", "5m", nil)
		if len(now) > 0 {
			put(expr, at, model.Vector{{Value: 2}})
		}
	}
	return f
}

func baseline() map[string]float64 {
	return map[string]float64{
		"samples": 20, "requests": 1000, "targets": 2, "ttft_mean": 0.2, "ttft_p95": 0.4, "tpot_mean": 0.02, "tpot_p95": 0.03,
		"e2e_mean": 5, "queue_mean": 0.02, "prefill_mean": 0.15, "decode_mean": 4.8, "request_rate": 3, "success_rate": 1,
		"kv_usage": 0.2, "kv_usage_peak": 0.3, "preemption_rate": 0, "waiting": 0.1, "running": 20, "running_peak": 15,
		"prompt_len_mean": 1000, "prompt_len_p90": 2000, "prompt_len_p99": 4000, "prompt_len_p999": 6000, "prefill_tps": 2000,
		"gen_len_mean": 200, "prompt_tps": 3000, "gen_tps": 600, "prefix_hit_rate": 0.3, "ttft_spread": 1.05, "waiting_spread": 1, "rate_spread": 1,
		"started_rate": 3, "arrival_rate": 3,
	}
}

func with(m map[string]float64, kv ...any) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i].(string)] = kv[i+1].(float64)
	}
	return out
}

func TestRun(t *testing.T) {
	rs, err := rulesets.Default("vllm")
	if err != nil {
		t.Fatal(err)
	}
	base := baseline()
	tests := []struct {
		name     string
		now      map[string]float64
		targets  map[string]map[string]float64
		status   verdict.Status
		phase    verdict.Phase
		severity verdict.Severity
		top      string
	}{
		{"healthy", base, nil, verdict.StatusHealthy, verdict.PhaseNone, verdict.SeverityNone, ""},
		{"kv wall", with(base, "ttft_mean", 2.0, "queue_mean", 1.5, "tpot_mean", 0.05, "kv_usage", 0.95, "kv_usage_peak", 1.0, "preemption_rate", 0.5, "waiting", 30.0),
			map[string]map[string]float64{"kv_usage": {"a": 0.95, "b": 0.3}, "ttft_p95": {"a": 0.4, "b": 0.41}}, verdict.StatusAnomaly, verdict.PhaseBoth, verdict.SeverityWarning, "kv_cache_pressure"},
		{"errors", with(base, "ttft_mean", 0.8, "success_rate", 0.9), nil, verdict.StatusAnomaly, verdict.PhasePrefill, verdict.SeverityCritical, "request_errors"},
		{"no data", nil, nil, verdict.StatusInsufficientData, verdict.PhaseNone, verdict.SeverityNone, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b map[string]float64
			if tt.now != nil {
				b = base
			}
			m := newFake(t, rs, tt.now, b, tt.targets)
			v, err := Run(context.Background(), Options{Metrics: m, Rulesets: []*rules.Ruleset{rs}, At: at, GPU: "H100", Explain: true})
			if err != nil {
				t.Fatal(err)
			}
			if v.Status != tt.status || v.Phase != tt.phase || v.Severity != tt.severity {
				t.Errorf("status/phase/severity = %s/%s/%s, want %s/%s/%s", v.Status, v.Phase, v.Severity, tt.status, tt.phase, tt.severity)
			}
			top := ""
			if len(v.Causes) > 0 {
				top = v.Causes[0].ID
			}
			if top != tt.top {
				t.Errorf("top cause = %q, want %q (causes %+v)", top, tt.top, v.Causes)
			}
			if tt.now != nil {
				if len(v.Headline) == 0 || v.Headline[0].Now == nil {
					t.Errorf("headline without numbers: %+v", v.Headline)
				}
				if len(v.Warnings) != 1 {
					t.Errorf("warnings = %v", v.Warnings)
				}
			}
			if tt.targets != nil && (len(v.Targets) != 2 || v.Targets[0].Labels["pod"] != "a") {
				t.Errorf("targets = %+v", v.Targets)
			}
		})
	}
}

func TestImbalanced(t *testing.T) {
	tests := []struct {
		name string
		vals []float64 // worst first
		unit string
		want bool
	}{
		{"agreeing pods", []float64{0.41, 0.40, 0.39}, "seconds", false},
		{"one slow pod", []float64{2.5, 0.4, 0.39}, "seconds", true},
		{"tiny absolute gap", []float64{0.004, 0.001}, "seconds", false},
		{"fraction within noise", []float64{0.12, 0.09}, "fraction", false},
		{"fraction apart", []float64{0.95, 0.3}, "fraction", true},
		{"rates apart", []float64{7.6, 0.6, 0.6}, "req/s", true},
		{"idle others", []float64{3, 0, 0}, "requests", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := make([]verdict.Target, len(tt.vals))
			for i, v := range tt.vals {
				ts[i] = verdict.Target{Value: v}
			}
			if got := imbalanced(ts, tt.unit); got != tt.want {
				t.Errorf("imbalanced(%v, %s) = %v, want %v", tt.vals, tt.unit, got, tt.want)
			}
		})
	}
}

func TestRunErrors(t *testing.T) {
	rs, err := rulesets.Default("vllm")
	if err != nil {
		t.Fatal(err)
	}
	down := &fakeMetrics{err: errors.New("connection refused")}
	if _, err := Run(context.Background(), Options{Metrics: down, Ruleset: rs, At: at}); !errors.Is(err, ErrNoData) {
		t.Errorf("unreachable source: err = %v", err)
	}
	if _, err := Run(context.Background(), Options{Metrics: down, Ruleset: rs, At: at, Selector: `pod=`}); err == nil {
		t.Error("bad selector accepted")
	}
	if _, err := Run(context.Background(), Options{Metrics: down, Ruleset: rs}); err == nil {
		t.Error("missing time accepted")
	}
}

// TestHeadlineShowsMeans checks that every latency quantile of the
// headline has its mean on the next row: the evidence quotes the means.
func TestHeadlineShowsMeans(t *testing.T) {
	rs, err := rulesets.Default("vllm")
	if err != nil {
		t.Fatal(err)
	}
	base := baseline()
	v := run(t, rs, with(base, "tpot_mean", 0.036, "tpot_p95", 0.0303), base)
	var order []string
	for _, c := range v.Headline {
		order = append(order, c.Signal)
	}
	got := strings.Join(order, ",")
	if !strings.Contains(got, "ttft_p95,ttft_mean,") || !strings.Contains(got, "tpot_p95,tpot_mean,") {
		t.Fatalf("headline %s: want each p95 followed by its mean", got)
	}
	for _, c := range v.Headline {
		if c.Signal == "tpot_mean" && (c.Ratio == nil || *c.Ratio < 1.79 || *c.Ratio > 1.81) {
			t.Errorf("tpot_mean row %+v, want ×1.8", c)
		}
	}
}

// TestConsideredBelowBar checks that candidates below the evidence bar are
// listed with their scores, never among the ranked causes.
func TestConsideredBelowBar(t *testing.T) {
	rs, err := rulesets.Default("vllm")
	if err != nil {
		t.Fatal(err)
	}
	base := baseline()
	// Longer prompts, more computed: prefill contention gets a little
	// support, under MinSupport.
	now := with(base, "ttft_mean", 2.0, "queue_mean", 1.0, "prefill_mean", 0.9, "prompt_len_p90", 2600.0, "prefill_tps", 2600.0,
		"request_rate", 3.3, "prefix_hit_rate", 0.2)
	v := run(t, rs, now, base)
	if v.Status != verdict.StatusAnomaly {
		t.Fatalf("status %s", v.Status)
	}
	if len(v.Considered) == 0 {
		t.Fatalf("nothing considered below the bar; causes %+v", v.Causes)
	}
	ranked := map[string]bool{}
	for _, c := range v.Causes {
		ranked[c.ID] = true
	}
	for _, c := range v.Considered {
		if ranked[c.ID] || c.Score <= 0 || c.Score >= rs.Verdict.MinScore || c.Title == "" {
			t.Errorf("considered %+v (ranked %v, min_score %g)", c, ranked[c.ID], rs.Verdict.MinScore)
		}
	}
}

// TestCoarseBucket checks when a quantile is marked as estimated inside a
// coarse bucket: wider than half its lower bound.
func TestCoarseBucket(t *testing.T) {
	les := []float64{0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1}
	for _, tc := range []struct {
		v    float64
		want string
	}{
		{0.238, "0.1–0.25"}, // the 100 ± 10 ms TTFT read as 238 ms
		{0.07, ""},          // 60–80 ms: 20 ms wide, a third of 60
		{0.6, ""},           // 0.5–0.75: exactly half
		{0.005, "0–0.01"},   // the first bucket starts at 0
		{3, ""},             // beyond the last finite bound
		{0.25, "0.1–0.25"},  // on a bound: the bucket below it
	} {
		got := ""
		if b := coarseBucket(les, &tc.v); b != nil {
			got = fmt.Sprintf("%g–%g", b.Lower, b.Upper)
		}
		if got != tc.want {
			t.Errorf("coarseBucket(%g) = %q, want %q", tc.v, got, tc.want)
		}
	}
	if coarseBucket(les, nil) != nil {
		t.Error("no value, yet a bucket")
	}
}

// TestHeadlineBucket checks, over real PromQL, that a TTFT p95 interpolated
// in the 100–250 ms bucket says so: 100 requests of about 100 ms read as
// ≈242 ms.
func TestHeadlineBucket(t *testing.T) {
	rs, err := rulesets.Default("vllm")
	if err != nil {
		t.Fatal(err)
	}
	load := steadyVLLMLoad
	m := querytest.Range{Metrics: querytest.New(t, load)}
	v, err := Run(context.Background(), Options{Metrics: m, Ruleset: rs, At: time.Unix(0, 0).Add(90 * time.Minute), GPU: "H100"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range v.Headline {
		if c.Signal != "ttft_p95" {
			continue
		}
		if c.Now == nil || c.NowBucket == nil || c.NowBucket.Lower != 0.1 || c.NowBucket.Upper != 0.25 {
			t.Fatalf("ttft_p95 %+v: want a value in the 0.1–0.25 bucket, marked", c)
		}
		if c.BaselineBucket == nil {
			t.Errorf("baseline value not marked: %+v", c)
		}
		return
	}
	t.Fatalf("no ttft_p95 in the headline: %+v", v.Headline)
}
