// Package accuracy scores the triage against the engine model: it records
// freshly drawn scenario instances, loads each into a fresh embedded store,
// runs the triage at the bundle's time and compares the ranked causes with the
// instance's truth. It is test and benchmark support only.
package accuracy

import (
	"context"
	"fmt"
	"time"

	"github.com/whyslow/whyslow/collectors/bundle"
	"github.com/whyslow/whyslow/collectors/store"
	"github.com/whyslow/whyslow/diagnose"
	"github.com/whyslow/whyslow/query"
	"github.com/whyslow/whyslow/rules"
	"github.com/whyslow/whyslow/testbed/sim"
	"github.com/whyslow/whyslow/verdict"
)

// Case is one scenario instance to draw.
type Case struct {
	Scenario  string
	Seed      int64
	Names     string // "v1" or "v0"
	GPUSeries string // "whyslow", "dcgm", "both" or "none"
}

// String names the case for test output.
func (c Case) String() string {
	return fmt.Sprintf("%s/seed=%d/%s/gpu=%s", c.Scenario, c.Seed, c.Names, c.GPUSeries)
}

// Result is the triage of one case against its truth.
type Result struct {
	Case    Case
	Truth   []string
	Verdict *verdict.Verdict
	// Params are the drawn instance's parameters (model, GPU, ...), for reports.
	Params map[string]any
	Load   time.Duration
	Triage time.Duration
}

// Top returns the verdict's top cause id, or the status when there is none.
func (r *Result) Top() string {
	if len(r.Verdict.Causes) > 0 {
		return r.Verdict.Causes[0].ID
	}
	return string(r.Verdict.Status)
}

// InTop reports whether any truth cause is among the first n ranked causes.
func (r *Result) InTop(n int) bool {
	for i, c := range r.Verdict.Causes {
		if i >= n {
			break
		}
		for _, t := range r.Truth {
			if c.ID == t {
				return true
			}
		}
	}
	return false
}

// Correct reports top-1 correctness; a healthy instance is correct when not reported as an anomaly.
func (r *Result) Correct(n int) bool {
	if len(r.Truth) == 0 {
		return r.Verdict.Status != verdict.StatusAnomaly
	}
	return r.InTop(n)
}

// Record draws the case's bundle.
func Record(ctx context.Context, c Case) (*sim.Bundle, error) {
	return sim.Record(ctx, sim.Options{Scenario: c.Scenario, Seed: c.Seed, Names: c.Names, GPUSeries: c.GPUSeries})
}

// Load opens a fresh in-memory store holding the bundle's metrics.
func Load(ctx context.Context, b *sim.Bundle) (*store.Store, error) {
	st, err := store.Open(store.Options{})
	if err != nil {
		return nil, err
	}
	if _, err := bundle.ReadMetrics(ctx, "metrics.om", b.Metrics, st); err != nil {
		st.Close()
		return nil, err
	}
	return st, nil
}

// Options returns the triage options a bundle implies.
func Options(b *sim.Bundle, m query.Metrics, rss []*rules.Ruleset) diagnose.Options {
	inc := b.Incident
	return diagnose.Options{
		Metrics:  m,
		Rulesets: rss,
		Engine:   "auto",
		At:       inc.At,
		Window:   inc.Window,
		Baseline: inc.Baseline,
		Selector: inc.Selector,
		GPU:      inc.GPU,
		Scheduler: rules.Scheduler{
			Known:               inc.Scheduler.MaxNumBatchedTokens > 0,
			ChunkedPrefill:      inc.Scheduler.ChunkedPrefill,
			MaxNumBatchedTokens: inc.Scheduler.MaxNumBatchedTokens,
			MaxNumSeqs:          inc.Scheduler.MaxNumSeqs,
			Source:              "incident",
		},
	}
}

// Run records, loads and triages one case.
func Run(ctx context.Context, c Case, rss []*rules.Ruleset, explain bool) (*Result, error) {
	b, err := Record(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c, err)
	}
	t0 := time.Now()
	st, err := Load(ctx, b)
	if err != nil {
		return nil, fmt.Errorf("%s: load: %w", c, err)
	}
	defer st.Close()
	t1 := time.Now()
	opts := Options(b, st, rss)
	opts.Explain = explain
	v, err := diagnose.Run(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: triage: %w", c, err)
	}
	return &Result{Case: c, Truth: b.Truth.Causes, Verdict: v, Params: b.Truth.Params, Load: t1.Sub(t0), Triage: time.Since(t1)}, nil
}
