package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/whyslow/whyslow/collectors/bundle"
	"github.com/whyslow/whyslow/collectors/store"
	"github.com/whyslow/whyslow/testbed/fleettest"
	"github.com/whyslow/whyslow/verdict"
)

// stallEngine is a synthEngine that also exports vllm:num_requests_running
// (a series of the rulesets' detect expressions, so its scope has a newest
// sample) and can stall: answer without a new sample, as a target does
// between two of its Prometheus's scrapes.
type stallEngine struct {
	*synthEngine
	stalled atomic.Bool
}

func (e *stallEngine) Scrape(ctx context.Context, at time.Time) []ScrapeResult {
	if e.stalled.Load() {
		return []ScrapeResult{{Target: "synth"}}
	}
	res := e.synthEngine.Scrape(ctx, at)
	if res[0].Err != nil {
		return res
	}
	app := e.st.Appender(ctx)
	ls := labels.FromStrings("__name__", "vllm:num_requests_running", "model_name", "m", "pod", "p0")
	if _, err := app.Append(0, ls, at.UnixMilli(), 4); err != nil {
		panic(err)
	}
	if err := app.Commit(); err != nil {
		panic(err)
	}
	return res
}

// flakyTarget is a second engine target that answers until down is set.
type flakyTarget struct{ down atomic.Bool }

func (f *flakyTarget) Scrape(context.Context, time.Time) []ScrapeResult {
	if f.down.Load() {
		return []ScrapeResult{{Target: "other", Err: errors.New("connection refused")}}
	}
	return []ScrapeResult{{Target: "other"}}
}

// openStalled runs a harness over a stallEngine (and a flaky second
// target) to an open incident, stalls the engine and ticks once: from then
// on no sample is new.
func openStalled(t *testing.T, cfg Config, spans *atomic.Uint64) (*harness, *stallEngine, *flakyTarget) {
	t.Helper()
	var eng *stallEngine
	other := &flakyTarget{}
	h := newHarnessWith(t, cfg, func(o *Options) {
		eng = &stallEngine{synthEngine: &synthEngine{st: o.Metrics.(*store.Store)}}
		o.Scraper = multiScraper{eng, other}
		if spans != nil {
			o.SpansSeen = spans.Load
		}
	})
	h.ticks(t, 15*12)
	eng.setSlow(true)
	h.tri.cause = "kv_cache_pressure"
	for i := 0; i < 10 && len(h.d.Incidents()) == 0; i++ {
		h.ticks(t, 1)
	}
	h.ticks(t, 2)
	if got := h.ob.kinds(); got != "open:kv_cache_pressure" {
		t.Fatalf("notifications before the stall: %q", got)
	}
	eng.stalled.Store(true)
	return h, eng, other
}

func (h *harness) reused() float64 {
	return testutil.ToFloat64(h.d.stats.triageRuns.WithLabelValues("detector", "reused"))
}

func (h *harness) runs() int {
	h.tri.mu.Lock()
	defer h.tri.mu.Unlock()
	return h.tri.runs
}

func (h *harness) verdict(t *testing.T) *verdict.Verdict {
	t.Helper()
	v, ok := h.d.Verdict(`model_name="m"`)
	if !ok {
		t.Fatal("no verdict")
	}
	return v
}

func TestRetriageReusesUnchangedScope(t *testing.T) {
	h, eng, _ := openStalled(t, testConfig(), nil)
	runs, last := h.runs(), h.now
	h.ticks(t, 3)
	if got := h.runs(); got != runs {
		t.Errorf("no sample new: triaged %d times, want none", got-runs)
	}
	if got := h.reused(); got != 3 {
		t.Errorf("reused %v verdicts, want 3", got)
	}
	// The kept verdict is of the time it was made; nothing is news.
	if v := h.verdict(t); !v.At.Equal(last) {
		t.Errorf("verdict at %s, want %s (the last triage)", v.At, last)
	}
	if got := h.ob.kinds(); got != "open:kv_cache_pressure" {
		t.Errorf("notifications while reusing: %q", got)
	}
	in := h.d.Incidents()[0]
	if in.Verdict == nil || in.TopCause != "kv_cache_pressure" {
		t.Errorf("incident %+v", in)
	}

	eng.stalled.Store(false)
	h.ticks(t, 1)
	if got := h.runs(); got != runs+1 {
		t.Errorf("after a new sample: triaged %d times, want 1", got-runs)
	}
	if v := h.verdict(t); !v.At.Equal(h.now) {
		t.Errorf("verdict at %s, want %s", v.At, h.now)
	}
}

func TestRetriageAfterConfigChange(t *testing.T) {
	on := true
	tests := []struct {
		name string
		edit func(c *Config)
	}{
		{"window", func(c *Config) { c.Triage.Window = 2 * time.Minute }},
		{"baseline", func(c *Config) { c.Triage.Baseline = 5 * time.Minute }},
		{"scheduler", func(c *Config) {
			c.Scheduler = SchedulerConfig{ChunkedPrefill: &on, MaxNumBatchedTokens: 2048, MaxNumSeqs: 256}
		}},
		{"gpu", func(c *Config) { c.GPU.Class = "H100" }},
		{"engine", func(c *Config) { c.Engine = "auto" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig()
			h, _, _ := openStalled(t, cfg, nil)
			h.ticks(t, 1)
			runs := h.runs()
			if runs == 0 || h.reused() != 1 {
				t.Fatalf("%d runs, %v reused before the reload", runs, h.reused())
			}
			tt.edit(&cfg)
			if err := h.d.Reload(cfg, nil, nil); err != nil {
				t.Fatal(err)
			}
			h.ticks(t, 1)
			if got := h.runs(); got != runs+1 {
				t.Errorf("after the reload: triaged %d times, want 1", got-runs)
			}
		})
	}
}

func TestRetriageAfterNewSpans(t *testing.T) {
	var spans atomic.Uint64
	h, _, _ := openStalled(t, testConfig(), &spans)
	h.ticks(t, 1)
	runs := h.runs()
	spans.Add(1)
	h.ticks(t, 1)
	if got := h.runs(); got != runs+1 {
		t.Errorf("after a new span: triaged %d times, want 1", got-runs)
	}
	h.ticks(t, 1)
	if got := h.runs(); got != runs+1 {
		t.Errorf("no span new since: triaged %d times, want 1", got-runs)
	}
}

func TestRetriageKeepsGapsCurrent(t *testing.T) {
	h, _, other := openStalled(t, testConfig(), nil)
	h.ticks(t, 1)
	runs := h.runs()
	hasGap := func() bool {
		for _, g := range h.verdict(t).DataGaps {
			if strings.Contains(g.Reason, "engine target other down since") {
				return true
			}
		}
		return false
	}
	other.down.Store(true)
	h.ticks(t, 1)
	if !hasGap() {
		t.Errorf("reused verdict lacks the down target: %+v", h.verdict(t).DataGaps)
	}
	other.down.Store(false)
	h.ticks(t, 1)
	if hasGap() {
		t.Errorf("reused verdict keeps a target that is back: %+v", h.verdict(t).DataGaps)
	}
	if got := h.runs(); got != runs {
		t.Errorf("triaged %d times, want none (every verdict reused)", got-runs)
	}
}

// TestCycleVerdictsMatchPlainTriage runs two daemons over the same fleet:
// one as shipped (the cycle's queries over every scope shared), one whose
// triages get no Shared, and wants the same verdicts, byte for byte, every
// cycle. The slowed scopes' verdicts are insufficient_data (their
// end-to-end latency is not exported), so the diagnosis's shared queries
// run.
func TestCycleVerdictsMatchPlainTriage(t *testing.T) {
	ctx := context.Background()
	at := time.Date(2026, 1, 1, 2, 0, 0, 0, time.UTC)
	var om bytes.Buffer
	windows := [][2]time.Time{{at.Add(-time.Hour - 10*time.Minute), at.Add(-time.Hour + time.Minute)}, {at.Add(-10 * time.Minute), at}}
	if err := fleettest.WriteFleet(&om, 5, 3, windows); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := bundle.ReadMetrics(ctx, "fleet.om", om.Bytes(), st); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Listen: "127.0.0.1:0", OTLP: OTLPDisabled(), Engine: "vllm"}
	cfg.Detect.GroupBy = []string{"namespace", "model_name"}
	newDaemon := func(plain bool) (*Daemon, *QueryCounter) {
		counted := CountQueries(st)
		tri, err := TriageWith(counted, nil, cfg.Engine)
		if err != nil {
			t.Fatal(err)
		}
		if plain {
			shipped := tri
			tri = func(ctx context.Context, req TriageRequest) (*verdict.Verdict, error) {
				req.Shared = nil
				return shipped(ctx, req)
			}
		}
		d, err := New(Options{Config: cfg, Metrics: counted, Scraper: replayScraper{}, Triage: tri, Outbox: &replayOutbox{},
			Receivers: []string{"log"}, OwnHistory: true, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		return d, counted
	}
	shipped, sq := newDaemon(false)
	plain, pq := newDaemon(true)
	compared, insufficient := 0, 0
	for tt := at.Add(-5 * time.Minute); !tt.After(at); tt = tt.Add(15 * time.Second) {
		s0, p0 := sq.Queries(), pq.Queries()
		for _, d := range []*Daemon{shipped, plain} {
			if err := d.Tick(ctx, tt); err != nil {
				t.Fatal(err)
			}
		}
		for _, in := range plain.Incidents() {
			want, _ := plain.Verdict(in.Scope.Selector)
			got, ok := shipped.Verdict(in.Scope.Selector)
			if want == nil || !ok {
				t.Fatalf("%s at %s: verdicts %v %v", in.Key, tt, want, got)
			}
			wj, _ := json.Marshal(want)
			gj, _ := json.Marshal(got)
			if !bytes.Equal(gj, wj) {
				t.Errorf("%s at %s: verdict differs\n got %s\nwant %s", in.Key, tt, gj, wj)
			}
			compared++
			if want.Status == verdict.StatusInsufficientData {
				insufficient++
			}
		}
		if len(plain.Incidents()) > 1 && sq.Queries()-s0 >= pq.Queries()-p0 {
			t.Errorf("at %s: %d queries shipped, %d plain: nothing shared", tt, sq.Queries()-s0, pq.Queries()-p0)
		}
	}
	if compared == 0 || insufficient == 0 {
		t.Fatalf("%d verdicts compared, %d insufficient", compared, insufficient)
	}
	if got := testutil.ToFloat64(shipped.stats.triageRuns.WithLabelValues("detector", "reused")); got != 0 {
		t.Errorf("%v verdicts reused: every cycle has new samples", got)
	}
}
