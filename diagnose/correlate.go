package diagnose

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/whyslow/whyslow/requests"
	"github.com/whyslow/whyslow/rules"
	"github.com/whyslow/whyslow/span"
	"github.com/whyslow/whyslow/verdict"
)

// Step 4 of the walk with traces: correlate the slowest requests of the
// incident window with their pods' metrics, and merge what the requests
// show into the cause scores.

const (
	// traceWeightScale turns a correlation finding's weight (0–1) into a
	// score comparable with the ruleset's evidence weights (1–5).
	traceWeightScale = 4.0
	// correlateSlowest is how many requests are taken by e2e and by TTFT.
	correlateSlowest = 10
	// traceLookback is read before each window: the metrics' latency
	// histograms count requests when they finish, so a request that began
	// up to this long before the window and finished in it belongs to it.
	traceLookback  = 10 * time.Minute
	correlateTitle = "Correlate the slowest requests with their pods' metrics"
)

// correlation carries step 4's result from the walk to the verdict.
type correlation struct {
	requests []verdict.Request
	// evidence by cause and rule, to put the numbers back on the verdict's
	// evidence (the walk's findings carry text and weight only).
	evidence map[string]verdict.Evidence
	gaps     []verdict.DataGap
	warnings []string
}

// PodContextGauges sets q's engine gauges from the series of the known
// engines (rules.Ruleset.Known), in their order.
func PodContextGauges(q *requests.PodContextQuery, known []rules.EngineSeries) {
	for _, e := range known {
		q.KVUsage = append(q.KVUsage, e.KVUsage...)
		q.Waiting = append(q.Waiting, e.Waiting...)
		q.Running = append(q.Running, e.Running...)
	}
}

// correlate runs step 4 when opts.Traces is set: it reads the spans of the
// incident and baseline windows, builds the requests, joins the slowest to
// their pods' metrics, and merges the findings into the walk's outcome as
// the "correlate" step. It returns nil when there are no traces to read.
// Failures of the trace source become data gaps, never a failed triage.
func correlate(ctx context.Context, opts *Options, rs *rules.Ruleset, facts rules.Facts, out *rules.Outcome, v *verdict.Verdict) *correlation {
	if opts.Traces == nil {
		return nil
	}
	c := &correlation{evidence: map[string]verdict.Evidence{}}
	merge := func(summary string, extra []rules.ExtraEvidence) {
		rs.MergeEvidence(out, requests.CorrelateStep, correlateTitle, summary, extra)
	}
	scope, err := requests.NewScopeFilter(opts.Selector, opts.TargetLabels)
	if err != nil {
		// Run validated the selector already.
		c.gaps = append(c.gaps, verdict.DataGap{Signal: "traces", Window: "incident", Reason: err.Error()})
		merge("traces unavailable", nil)
		return c
	}
	reqs, err := tracedRequests(ctx, opts.Traces, v.Incident)
	if err != nil {
		c.gaps = append(c.gaps, verdict.DataGap{Signal: "traces", Window: "incident", Reason: "trace query failed: " + err.Error()})
		merge("traces unavailable", nil)
		return c
	}
	reqs = requests.InWindow(reqs, v.Incident)
	all := len(reqs)
	reqs = scope.Keep(reqs)
	if len(reqs) == 0 {
		reason, summary := "no traced llm_request span in the incident window", "no traced requests in the incident window"
		if all > 0 {
			reason = fmt.Sprintf("%d traced requests in the incident window, none of the scope {%s} "+
				"(by the spans' %s, %s or pod)", all, opts.Selector, span.AttrResponseModel, span.AttrRequestModel)
			summary = "no traced requests of the scope in the incident window"
		}
		c.gaps = append(c.gaps, verdict.DataGap{Signal: "traces", Window: "incident", Reason: reason})
		merge(summary, nil)
		return c
	}
	base, err := tracedRequests(ctx, opts.Traces, v.Baseline)
	if err != nil {
		c.gaps = append(c.gaps, verdict.DataGap{Signal: "traces", Window: "baseline", Reason: "trace query failed: " + err.Error()})
	}

	in := requests.CorrelationInput{
		Requests: reqs,
		Baseline: scope.Keep(requests.InWindow(base, v.Baseline)),
		Window:   v.Incident,
	}
	in.Slow = requests.SlowestRequests(in.Requests, v.Incident.Start.Add(-traceLookback), v.Incident.End, correlateSlowest)
	if out.Scheduler.Known && out.Scheduler.MaxNumBatchedTokens > 0 {
		in.LongPrompt = out.Scheduler.MaxNumBatchedTokens
	}
	// The engine's own TTFT quantile, for reconciling it with the spans'.
	for _, q := range []struct {
		signal string
		q      float64
	}{{"ttft_p95", 0.95}, {"ttft_p90", 0.9}, {"ttft_p99", 0.99}} {
		if ttft, ok := facts.Now[q.signal]; ok {
			in.ServerTTFT, in.ServerQuantile = &ttft, q.q
			break
		}
	}
	pods := map[string]bool{}
	for _, r := range in.Requests {
		if r.Pod != "" {
			pods[r.Pod] = true
		}
	}
	if len(pods) == 0 {
		// vLLM's tracer sets none of these itself; the deployment must.
		c.gaps = append(c.gaps, verdict.DataGap{Signal: "span_pod", Window: "incident",
			Reason: "the engine's spans carry no pod (resource attribute k8s.pod.name, service.instance.id or host.name), " +
				"so slow requests cannot be tied to a target: set OTEL_RESOURCE_ATTRIBUTES=k8s.pod.name=$(POD_NAME) on the engine, " +
				"or add the collector's k8sattributes processor (README, \"Traces\")"})
	}
	from := v.Incident.Start
	for _, r := range in.Slow {
		if r.EngineStart.Before(from) {
			from = r.EngineStart
		}
	}
	q := requests.PodContextQuery{Selector: opts.Selector, TargetLabel: opts.TargetLabels[0],
		Start: from.Add(-time.Minute), End: v.Incident.End}
	PodContextGauges(&q, rs.Known)
	for p := range pods {
		q.Pods = append(q.Pods, p)
	}
	slices.Sort(q.Pods)
	samples, warns, err := requests.PodContext(ctx, opts.Metrics, q)
	c.warnings = append(c.warnings, warns...)
	if err != nil {
		c.gaps = append(c.gaps, verdict.DataGap{Signal: "pod_context", Window: "incident", Reason: err.Error()})
	}
	in.PodSamples = samples

	res := requests.CorrelateRequests(in)
	c.requests = res.Requests
	var extra []rules.ExtraEvidence
	for _, id := range slices.Sorted(maps.Keys(res.Evidence)) {
		for _, e := range res.Evidence[id] {
			if rs.Cause(id) == nil {
				continue
			}
			w := math.Round(e.Weight*traceWeightScale*100) / 100
			extra = append(extra, rules.ExtraEvidence{Cause: id, Rule: e.Rule, Weight: w, Text: e.Text})
			e.Weight = w
			c.evidence[id+"/"+e.Rule] = e
		}
	}
	for _, id := range slices.Sorted(maps.Keys(res.RuledOut)) {
		if rs.Cause(id) != nil {
			extra = append(extra, rules.ExtraEvidence{Cause: id, Rule: "traces.rule_out." + id, Text: res.RuledOut[id], RuleOut: true})
		}
	}
	merge(strings.Join(res.Notes, "; "), extra)
	return c
}

// fill puts the step's requests, numbers and gaps on the verdict. It is a
// no-op on a nil correlation.
func (c *correlation) fill(v *verdict.Verdict) {
	if c == nil {
		return
	}
	v.Requests = c.requests
	v.DataGaps = append(v.DataGaps, c.gaps...)
	v.Warnings = appendWarnings(v.Warnings, c.warnings...)
	for i := range v.Causes {
		for j := range v.Causes[i].Evidence {
			e := &v.Causes[i].Evidence[j]
			if e.Step != requests.CorrelateStep {
				continue
			}
			if src, ok := c.evidence[v.Causes[i].ID+"/"+e.Rule]; ok {
				e.Now, e.Baseline = src.Now, src.Baseline
				if e.Now != nil || e.Baseline != nil {
					// Every request-level finding compares durations.
					e.Unit = "seconds"
				}
			}
		}
	}
}

// tracedRequests reads the spans of a window (plus the look-back before
// it) and builds the requests.
func tracedRequests(ctx context.Context, t Traces, w verdict.Window) ([]requests.RequestBreakdown, error) {
	spans, err := t.SpansBetween(ctx, w.Start.Add(-traceLookback), w.End, 0)
	if err != nil {
		if errors.Is(err, span.ErrUnsupported) {
			return nil, fmt.Errorf("the trace source cannot search by time: %w", err)
		}
		return nil, err
	}
	return requests.BuildRequests(spans), nil
}
