package triage

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/whyslow/whyslow/query"
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
	traceLookback = 10 * time.Minute
	// podContextStep is the resolution of the pods' metric context.
	podContextStep = 5 * time.Second
	correlateTitle = "Correlate the slowest requests with their pods' metrics"
)

// PodContextQuery asks for the metric context of some pods over a time range.
type PodContextQuery struct {
	// Selector is the scope's PromQL label matchers without braces.
	Selector string
	// TargetLabel is the label that names a pod in the metrics (default "pod").
	TargetLabel string
	// Pods restricts the result to these pods; empty means every pod.
	Pods       []string
	Start, End time.Time
	// Step is the sample spacing (default 5s).
	Step time.Duration
}

// podContextExprs are the per-pod context signals: the engine's KV usage and
// queues (vLLM V1 and V0, SGLang, TensorRT-LLM names as `or` alternatives)
// and the GPU counters of the whyslow NVML collector, restricted to pods of
// the scope. %[1]s is the selector, %[2]s the target label.
var podContextExprs = []struct{ key, expr string }{
	{"kv_cache_usage", `max by (%[2]s) (vllm:kv_cache_usage_perc{%[1]s} or vllm:gpu_cache_usage_perc{%[1]s} or sglang:token_usage{%[1]s} or trtllm_kv_cache_utilization{%[1]s})`},
	{"num_requests_waiting", `sum by (%[2]s) (vllm:num_requests_waiting{%[1]s} or sglang:num_queue_reqs{%[1]s} or trtllm_num_requests_waiting{%[1]s})`},
	{"num_requests_running", `sum by (%[2]s) (vllm:num_requests_running{%[1]s} or sglang:num_running_reqs{%[1]s} or trtllm_num_requests_running{%[1]s})`},
	{"whyslow_gpu_sm_clock_mhz", `min by (%[2]s) (whyslow_gpu_sm_clock_mhz) and on (%[2]s) ` + podScope},
	{"whyslow_gpu_dram_bandwidth_utilization", `max by (%[2]s) (whyslow_gpu_dram_bandwidth_utilization) and on (%[2]s) ` + podScope},
	{"whyslow_gpu_sm_active", `max by (%[2]s) (whyslow_gpu_sm_active) and on (%[2]s) ` + podScope},
	{"whyslow_gpu_clock_throttle_active", `max by (%[2]s) (whyslow_gpu_clock_throttle_active{reason=~"hw_slowdown|hw_thermal_slowdown|sw_thermal_slowdown|hw_power_brake|sw_power_cap"}) and on (%[2]s) ` + podScope},
}

const podScope = `max by (%[2]s) (vllm:num_requests_running{%[1]s} or sglang:num_running_reqs{%[1]s} or trtllm_num_requests_running{%[1]s})`

// PodContext reads the pods' metric context (KV cache usage, queue depth,
// running requests, GPU counters) over [Start, End] through PromQL range
// queries, one sample per pod and step. Signals without data are left out
// of the samples; an error is returned only when every query failed.
func PodContext(ctx context.Context, m query.Metrics, q PodContextQuery) ([]PodSample, []string, error) {
	if q.TargetLabel == "" {
		q.TargetLabel = "pod"
	}
	if q.Step <= 0 {
		q.Step = podContextStep
	}
	want := map[string]bool{}
	for _, p := range q.Pods {
		want[p] = true
	}
	type key struct {
		pod string
		at  int64
	}
	byKey := map[key]map[string]float64{}
	var warns []string
	var firstErr error
	failed := 0
	for _, pc := range podContextExprs {
		expr := fmt.Sprintf(pc.expr, q.Selector, q.TargetLabel)
		mat, w, err := m.QueryRange(ctx, expr, q.Start, q.End, q.Step)
		warns = appendWarnings(warns, w...)
		if err != nil {
			if ctx.Err() != nil {
				return nil, warns, ctx.Err()
			}
			failed++
			if firstErr == nil {
				firstErr = fmt.Errorf("%s: %w", pc.key, err)
			}
			continue
		}
		for _, ss := range mat {
			pod := string(ss.Metric[model.LabelName(q.TargetLabel)])
			if pod == "" || len(want) > 0 && !want[pod] {
				continue
			}
			for _, p := range ss.Values {
				f := float64(p.Value)
				if math.IsNaN(f) || math.IsInf(f, 0) {
					continue
				}
				k := key{pod, int64(p.Timestamp)}
				if byKey[k] == nil {
					byKey[k] = map[string]float64{}
				}
				byKey[k][pc.key] = f
			}
		}
	}
	if failed == len(podContextExprs) {
		return nil, warns, fmt.Errorf("pod context: %w", firstErr)
	}
	out := make([]PodSample, 0, len(byKey))
	for k, vs := range byKey {
		out = append(out, PodSample{Pod: k.pod, At: time.UnixMilli(k.at).UTC(), Values: vs})
	}
	slices.SortFunc(out, func(a, b PodSample) int {
		if c := a.At.Compare(b.At); c != 0 {
			return c
		}
		return strings.Compare(a.Pod, b.Pod)
	})
	return out, warns, nil
}

// ExplainRequests returns the verdict form of the requests, each joined to
// its pod's latest sample at or before the time the engine queued it
// (within tolerance; 0 means one minute).
func ExplainRequests(reqs []RequestBreakdown, samples []PodSample, tolerance time.Duration) []verdict.Request {
	if tolerance <= 0 {
		tolerance = time.Minute
	}
	out := make([]verdict.Request, 0, len(reqs))
	for i := range reqs {
		r := reqs[i].Request()
		if s := rqSampleAt(samples, reqs[i].Pod, reqs[i].EngineStart, tolerance); s != nil {
			r.Context = s.Values
		}
		out = append(out, r)
	}
	return out
}

// correlation carries step 4's result from the walk to the verdict.
type correlation struct {
	requests []verdict.Request
	// evidence by cause and rule, to put the numbers back on the verdict's
	// evidence (the walk's findings carry text and weight only).
	evidence map[string]verdict.Evidence
	gaps     []verdict.DataGap
	warnings []string
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
		rs.MergeEvidence(out, correlateStep, correlateTitle, summary, extra)
	}
	scope, err := newRequestScope(opts.Selector, opts.TargetLabels)
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
	reqs = inWindow(reqs, v.Incident)
	all := len(reqs)
	reqs = scope.filter(reqs)
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

	in := CorrelationInput{
		Requests: reqs,
		Baseline: scope.filter(inWindow(base, v.Baseline)),
		Window:   v.Incident,
	}
	in.Slow = SlowestRequests(in.Requests, v.Incident.Start.Add(-traceLookback), v.Incident.End, correlateSlowest)
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
	q := PodContextQuery{Selector: opts.Selector, TargetLabel: opts.TargetLabels[0],
		Start: from.Add(-time.Minute), End: v.Incident.End}
	for p := range pods {
		q.Pods = append(q.Pods, p)
	}
	slices.Sort(q.Pods)
	samples, warns, err := PodContext(ctx, opts.Metrics, q)
	c.warnings = append(c.warnings, warns...)
	if err != nil {
		c.gaps = append(c.gaps, verdict.DataGap{Signal: "pod_context", Window: "incident", Reason: err.Error()})
	}
	in.PodSamples = samples

	res := CorrelateRequests(in)
	c.requests = res.Requests
	var extra []rules.ExtraEvidence
	for _, id := range sortedKeys(res.Evidence) {
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
	for _, id := range sortedKeys(res.RuledOut) {
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
			if e.Step != correlateStep {
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
func tracedRequests(ctx context.Context, t Traces, w verdict.Window) ([]RequestBreakdown, error) {
	spans, err := t.SpansBetween(ctx, w.Start.Add(-traceLookback), w.End, 0)
	if err != nil {
		if errors.Is(err, span.ErrUnsupported) {
			return nil, fmt.Errorf("the trace source cannot search by time: %w", err)
		}
		return nil, err
	}
	return BuildRequests(spans), nil
}

// requestScope keeps the traced requests of a scope. A scope label maps to
// what the spans say about a request: model_name (and model) to the model
// that served it (Model: gen_ai.response.model, else gen_ai.request.model),
// pod (and the scope's first target label, unless it is instance) to its
// pods (Pod, PrefillPod: k8s.pod.name, service.instance.id, host.name),
// namespace to k8s.namespace.name. As in PromQL, a request whose spans do
// not say is the empty value: it is kept only when the scope's matcher
// accepts "" (does not constrain the label). Labels without a mapping (job,
// instance, ...) do not filter.
type requestScope []scopeMatcher

type scopeMatcher struct {
	m      *labels.Matcher
	values func(*RequestBreakdown) []string
}

// requestLabels are the scope labels with a span mapping.
var requestLabels = map[string]func(*RequestBreakdown) []string{
	"model_name": requestModel,
	"model":      requestModel,
	"pod":        requestPods,
	"namespace":  func(r *RequestBreakdown) []string { return []string{r.Namespace} },
}

func requestModel(r *RequestBreakdown) []string { return []string{r.Model} }

func requestPods(r *RequestBreakdown) []string {
	if r.PrefillPod != "" && r.PrefillPod != r.Pod {
		return []string{r.Pod, r.PrefillPod}
	}
	return []string{r.Pod}
}

// newRequestScope parses the scope's selector (PromQL label matchers
// without braces) into the matchers that apply to requests.
func newRequestScope(selector string, targetLabels []string) (requestScope, error) {
	if strings.TrimSpace(selector) == "" {
		return nil, nil
	}
	ms, err := parser.NewParser(parser.Options{}).ParseMetricSelector("{" + selector + "}")
	if err != nil {
		return nil, fmt.Errorf("selector %q: %w", selector, err)
	}
	var sc requestScope
	for _, m := range ms {
		values, ok := requestLabels[m.Name]
		if !ok && len(targetLabels) > 0 && m.Name == targetLabels[0] && m.Name != "instance" {
			values, ok = requestPods, true
		}
		if ok {
			sc = append(sc, scopeMatcher{m: m, values: values})
		}
	}
	return sc, nil
}

// matches reports whether the request belongs to the scope: every mapped
// matcher accepts one of the request's values for its label.
func (sc requestScope) matches(r *RequestBreakdown) bool {
	for _, c := range sc {
		if !slices.ContainsFunc(c.values(r), c.m.Matches) {
			return false
		}
	}
	return true
}

// filter returns the requests of the scope.
func (sc requestScope) filter(reqs []RequestBreakdown) []RequestBreakdown {
	if len(sc) == 0 {
		return reqs
	}
	var out []RequestBreakdown
	for i := range reqs {
		if sc.matches(&reqs[i]) {
			out = append(out, reqs[i])
		}
	}
	return out
}

// inWindow keeps the requests that started or finished in [w.Start,
// w.End): those the window's metrics saw.
func inWindow(reqs []RequestBreakdown, w verdict.Window) []RequestBreakdown {
	var out []RequestBreakdown
	for _, r := range reqs {
		end := r.Start.Add(rqDur(r.E2E))
		if r.Start.Before(w.End) && !end.Before(w.Start) {
			out = append(out, r)
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
