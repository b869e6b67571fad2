package accuracy

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/whyslow/whyslow/collectors/bundle"
	"github.com/whyslow/whyslow/collectors/spanstore"
	"github.com/whyslow/whyslow/collectors/store"
	"github.com/whyslow/whyslow/collectors/tracequery"
	"github.com/whyslow/whyslow/diagnose"
	"github.com/whyslow/whyslow/rules"
	"github.com/whyslow/whyslow/rulesets"
	"github.com/whyslow/whyslow/testbed/sim"
	"github.com/whyslow/whyslow/testbed/simtrace"
	"github.com/whyslow/whyslow/verdict"
)

var (
	tracesPer  = flag.Int("accuracy.traces.per", 0, "instances per scenario for TestAccuracyTraces (default 2, 1 with -short)")
	tracesSeed = flag.Int64("accuracy.traces.seed", 7, "seed for drawing TestAccuracyTraces' instance seeds (0: time-based)")
	// tracesPerWindow bounds the traced requests per window, as a tracing
	// sampler would.
	tracesPerWindow = flag.Int("accuracy.traces.sample", 2000, "traced requests kept per window")
	tracesHealthy   = flag.Bool("accuracy.traces.healthy", false, "TestAccuracyTraces: run the instances of the scenarios without a cause too (a false alarm is logged, never scored)")
)

// tracedResult is one instance triaged without and with its traces.
type tracedResult struct {
	without, with *Result
	requests      int
}

// runTraced records one case with its requests, and triages it twice: from
// the metrics alone and with the spans of the incident and baseline windows
// (llm-d gateway in front of vLLM) served from a span store.
func runTraced(ctx context.Context, c Case, rss []*rules.Ruleset) (*tracedResult, error) {
	var recs simtrace.Records
	b, err := sim.Record(ctx, sim.Options{Scenario: c.Scenario, Seed: c.Seed, Names: c.Names, GPUSeries: c.GPUSeries, OnRequest: recs.Add})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c, err)
	}
	kept := simtrace.Sample(recs.List, simtrace.BundleWindows(b.Incident), *tracesPerWindow)
	batch := simtrace.New(simtrace.Options{Seed: c.Seed, Gateway: true})
	for _, r := range kept {
		batch.Add(r)
	}
	spans, err := batch.Spans()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c, err)
	}
	ss, err := spanstore.New(spanstore.Options{})
	if err != nil {
		return nil, err
	}
	ss.Append(spans)

	st, err := Load(ctx, b)
	if err != nil {
		return nil, fmt.Errorf("%s: load: %w", c, err)
	}
	defer st.Close()
	out := &tracedResult{requests: len(kept)}
	for _, traces := range []diagnose.Traces{nil, ss} {
		opts := Options(b, st, rss)
		opts.Traces = traces
		opts.Explain = *verboseCase
		v, err := diagnose.Run(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("%s: triage: %w", c, err)
		}
		r := &Result{Case: c, Truth: b.Truth.Causes, Verdict: v, Params: b.Truth.Params}
		if traces == nil {
			out.without = r
		} else {
			out.with = r
		}
	}
	return out, nil
}

// TestAccuracyTraces draws instances of every scenario with traces, triages
// each with and without them and reports top-1 both ways. With traces,
// outside_engine and prefill_contention instances must be ranked right.
// The scenarios without a cause are drawn but run only with
// -accuracy.traces.healthy (a false alarm on one is logged, not scored).
//
//	go test ./testbed/accuracy -run TestAccuracyTraces -v -accuracy.traces.per=6 -accuracy.traces.seed=0
func TestAccuracyTraces(t *testing.T) {
	skipInShort(t)
	rss, err := rulesets.All()
	if err != nil {
		t.Fatal(err)
	}
	seed := *tracesSeed
	if seed == 0 {
		seed = rand.Int64()
	}
	per := *tracesPer
	if per == 0 {
		per = 2
		if testing.Short() {
			per = 1
		}
	}
	t.Logf("traces accuracy seed %d, %d per scenario (rerun with -accuracy.traces.seed=%d)", seed, per, seed)
	r := rand.New(rand.NewPCG(uint64(seed), 2))
	var cs []Case
	for _, s := range sim.Scenarios() {
		for i := 0; i < per; i++ {
			c := Case{Scenario: s.Name, Seed: r.Int64N(1 << 40), Names: []string{"v1", "v0"}[i%2], GPUSeries: "whyslow"}
			// A healthy instance is drawn (the seed stream, and so the
			// scored instances, stay the same) but run only when asked:
			// nothing is scored on it, and whether a window is an anomaly
			// is the metrics' call, whose false alarms TestGeneralization
			// fails on.
			if s.Cause != "" || *tracesHealthy {
				cs = append(cs, c)
			}
		}
	}
	ctx := context.Background()
	results := make([]*tracedResult, len(cs))
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 2)
	for i, c := range cs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			results[i], errs[i] = runTraced(ctx, c, rss)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}

	var scored, top1Without, top1With, traced int
	confusion := map[string]map[string]int{}
	for _, tr := range results {
		traced += tr.requests
		truth := "healthy"
		if len(tr.with.Truth) > 0 {
			truth = strings.Join(tr.with.Truth, "+")
		}
		if confusion[truth] == nil {
			confusion[truth] = map[string]int{}
		}
		confusion[truth][tr.with.Top()]++
		if len(tr.with.Truth) == 0 {
			if tr.with.Verdict.Status == verdict.StatusAnomaly {
				t.Logf("FALSE ALARM %s: %s", tr.with.Case, summary(tr.with))
			}
			continue
		}
		scored++
		w, wo := tr.with.Correct(1), tr.without.Correct(1)
		if wo {
			top1Without++
		}
		if w {
			top1With++
		}
		switch {
		case !w && wo:
			t.Logf("LOST WITH TRACES %s truth=%v: %s", tr.with.Case, tr.with.Truth, summary(tr.with))
		case !w:
			t.Logf("MISS %s truth=%v: %s", tr.with.Case, tr.with.Truth, summary(tr.with))
		case !wo:
			t.Logf("FIXED BY TRACES %s truth=%v: without %s", tr.with.Case, tr.with.Truth, summary(tr.without))
		}
		// Traces add evidence; whether the window is an anomaly is the
		// metrics' call, so only anomalies are held to the ranking.
		for _, must := range []string{"outside_engine", "prefill_contention"} {
			if tr.with.Truth[0] == must && !w && tr.with.Verdict.Status == verdict.StatusAnomaly {
				t.Errorf("%s: with traces, %s is not ranked first: %s", tr.with.Case, must, summary(tr.with))
			}
		}
		if len(tr.with.Verdict.Requests) == 0 {
			t.Logf("%s: no traced request finished in the incident window", tr.with.Case)
		}
	}
	t.Logf("\nwith traces:\n%s", table(confusion))
	t.Logf("instances %d (anomalous %d), %d traced requests: top-1 without traces %.1f%%, with traces %.1f%%",
		len(results), scored, traced, pct(top1Without, scored), pct(top1With, scored))
}

// TestBundlesWithTraces triages the committed bundles that carry traces
// with them and checks that the traces' evidence is there and agrees.
func TestBundlesWithTraces(t *testing.T) {
	rss, err := rulesets.All()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		dir, cause, rule string
	}{
		{"frontend_delay", "outside_engine", "traces.time_outside_engine_grew"},
		{"long_prompt_burst", "prefill_contention", "traces.long_prefill_stalls_first_tokens"},
		{"router_skew", "load_imbalance", "traces.one_pod_slow"},
	}
	ctx := context.Background()
	for _, c := range cases {
		t.Run(c.dir, func(t *testing.T) {
			dir := filepath.Join("..", "..", "testdata", "incidents", c.dir)
			b, err := bundle.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			path, err := tracequery.BundleTraces(dir)
			if err != nil || path == "" {
				t.Fatalf("no traces in %s: %v", dir, err)
			}
			tf, err := tracequery.OpenJSONL(path)
			if err != nil {
				t.Fatal(err)
			}
			st, err := store.Open(store.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if _, err := b.LoadMetrics(ctx, st); err != nil {
				t.Fatal(err)
			}
			inc := b.Incident
			opts := diagnose.Options{Metrics: st, Rulesets: rss, At: inc.At, Window: inc.Window, Baseline: inc.Baseline,
				Selector: inc.Selector, Engine: inc.Engine, GPU: inc.GPU, Traces: tf}
			if s := inc.Scheduler; s.MaxNumBatchedTokens > 0 {
				opts.Scheduler = rules.Scheduler{Known: true, ChunkedPrefill: s.ChunkedPrefill != nil && *s.ChunkedPrefill,
					MaxNumBatchedTokens: s.MaxNumBatchedTokens, MaxNumSeqs: s.MaxNumSeqs, Source: "incident"}
			}
			v, err := diagnose.Run(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			if len(v.Causes) == 0 || v.Causes[0].ID != c.cause {
				t.Fatalf("top cause %v, want %s", causeIDs(v), c.cause)
			}
			found := false
			for _, e := range v.Causes[0].Evidence {
				if e.Step == "correlate" && e.Rule == c.rule {
					found = e.Now != nil && e.Text != ""
					t.Logf("%s: %s", e.Rule, e.Text)
				}
			}
			if !found {
				t.Errorf("no %s evidence with numbers: %+v", c.rule, v.Causes[0].Evidence)
			}
			if len(v.Requests) == 0 || v.Requests[0].Context == nil {
				t.Errorf("slowest requests without pod context: %+v", v.Requests)
			}
			hasStep := false
			for _, s := range v.Steps {
				hasStep = hasStep || s.Name == "correlate"
			}
			if !hasStep {
				t.Errorf("no correlate step in %+v", v.Steps)
			}
		})
	}
}

func causeIDs(v *verdict.Verdict) []string {
	var out []string
	for _, c := range v.Causes {
		out = append(out, fmt.Sprintf("%s:%.1f", c.ID, c.Score))
	}
	return out
}
