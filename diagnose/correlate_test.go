package diagnose

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/whyslow/whyslow/rulesets"
	"github.com/whyslow/whyslow/span"
	"github.com/whyslow/whyslow/verdict"
)

// rangeFake adds per-pod range answers to fakeMetrics: every range query
// whose expression names a metric in pods gets one series per pod with a
// constant value.
type rangeFake struct {
	*fakeMetrics
	pods   map[string]map[string]float64 // metric name → pod → value
	ranges []string
}

func (f *rangeFake) QueryRange(_ context.Context, expr string, start, end time.Time, step time.Duration) (model.Matrix, []string, error) {
	f.ranges = append(f.ranges, expr)
	var m model.Matrix
	for metric, byPod := range f.pods {
		if !strings.HasPrefix(expr, "max by (pod) ("+metric) && !strings.HasPrefix(expr, "sum by (pod) ("+metric) &&
			!strings.HasPrefix(expr, "min by (pod) ("+metric) {
			continue
		}
		for pod, v := range byPod {
			ss := &model.SampleStream{Metric: model.Metric{"pod": model.LabelValue(pod)}}
			for t := start; !t.After(end); t = t.Add(step) {
				ss.Values = append(ss.Values, model.SamplePair{Timestamp: model.TimeFromUnixNano(t.UnixNano()), Value: model.SampleValue(v)})
			}
			m = append(m, ss)
		}
	}
	return m, nil, nil
}

// spanTraces is an in-memory Traces over a slice of spans.
type spanTraces struct {
	spans []span.Span
	err   error
}

func (s *spanTraces) SpansBetween(_ context.Context, start, end time.Time, limit int) ([]span.Span, error) {
	if s.err != nil {
		return nil, s.err
	}
	var out []span.Span
	for _, sp := range s.spans {
		if sp.StartUnixNano >= start.UnixNano() && sp.StartUnixNano < end.UnixNano() {
			out = append(out, sp)
		}
	}
	return out, nil
}

func (s *spanTraces) Trace(context.Context, span.TraceID) ([]span.Span, error) {
	return nil, span.ErrTraceNotFound
}

func (s *spanTraces) ByRequestID(context.Context, string) ([]span.Span, error) { return nil, nil }

// podContextSignals is how many pod context signals requests.PodContext
// reads, one range query each.
const podContextSignals = 7

// stallSpans builds 48 requests on pods a and b, one every 5 s from
// from; with long, a 60k-token prompt on pod a prefills for 40 s from
// from+60s and the requests of pod a that arrive meanwhile queue behind it.
func stallSpans(from time.Time, long bool, trace byte) []span.Span {
	var out []span.Span
	for i := 0; i < 48; i++ {
		start := from.Add(time.Duration(i) * 5 * time.Second)
		pod := []string{"a", "b"}[i%2]
		prompt, queue, prefill := 500, 0.02, 0.08
		switch off := start.Sub(from); {
		case long && i == 12:
			prompt, prefill = 60000, 40
		case long && pod == "a" && off > 60*time.Second && off < 100*time.Second:
			queue = (100*time.Second - off).Seconds()
		}
		e2e := queue + prefill + 1
		// vLLM V1 llm_request attributes.
		attrs := span.Attrs{span.StringAttr(span.AttrRequestID, "r"), span.IntAttr(span.AttrPromptTokens, int64(prompt)),
			span.IntAttr(span.AttrCompletionTokens, 100)}
		for _, a := range []struct {
			k string
			v float64
		}{{span.AttrTimeInQueue, queue}, {span.AttrTimeInPrefill, prefill}, {span.AttrTimeInDecode, 1}, {span.AttrTTFT, queue + prefill}, {span.AttrE2E, e2e}} {
			attrs = append(attrs, span.FloatAttr(a.k, a.v))
		}
		out = append(out, span.Span{
			TraceID: span.TraceID{0: trace, 15: byte(i + 1)}, SpanID: span.SpanID{7: 1}, Name: span.SpanLLMRequest,
			StartUnixNano: start.UnixNano(), EndUnixNano: start.Add(time.Duration(e2e * float64(time.Second))).UnixNano(),
			Attrs:    attrs,
			Resource: span.Attrs{span.StringAttr("k8s.pod.name", "vllm-"+pod)},
		})
	}
	return out
}

func TestCorrelateStep(t *testing.T) {
	rs, err := rulesets.Default("vllm")
	if err != nil {
		t.Fatal(err)
	}
	// TTFT up, mostly queue and prefill, a longer longest prompt: the
	// metrics alone only hint at queueing (the attribution's light
	// support, below the reporting score but ranked: an anomaly always
	// gets a ranking).
	base := baseline()
	// Without arrival series (so nothing stands against queueing either).
	delete(base, "started_rate")
	delete(base, "arrival_rate")
	now := with(base, "ttft_mean", 0.8, "ttft_p95", 2.0, "queue_mean", 0.5, "prefill_mean", 0.45, "prompt_len_p999", 60000.0)
	spans := append(stallSpans(at.Add(-5*time.Minute), true, 1), stallSpans(at.Add(-time.Hour-5*time.Minute), false, 2)...)
	pods := map[string]map[string]float64{
		"vllm:kv_cache_usage_perc":  {"vllm-a": 0.7, "vllm-b": 0.2},
		"vllm:num_requests_waiting": {"vllm-a": 6, "vllm-b": 0},
		"whyslow_gpu_sm_clock_mhz":  {"vllm-a": 1980, "vllm-b": 1980},
	}
	cases := []struct {
		name     string
		traces   Traces
		top      string
		gap      string
		outcome  string
		requests bool
	}{
		{name: "without traces", traces: nil, top: "queue_saturation"},
		{name: "long prefill in the traces", traces: &spanTraces{spans: spans}, top: "prefill_contention",
			outcome: "evidence for prefill_contention", requests: true},
		{name: "trace source fails", traces: &spanTraces{err: errors.New("tempo down")}, gap: "trace query failed: tempo down",
			outcome: "traces unavailable", top: "queue_saturation"},
		{name: "no spans in the window", traces: &spanTraces{spans: stallSpans(at.Add(-3*time.Hour), true, 3)},
			gap: "no traced llm_request span", outcome: "no traced requests", top: "queue_saturation"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := &rangeFake{fakeMetrics: newFake(t, rs, now, base, nil), pods: pods}
			v, err := Run(context.Background(), Options{Metrics: m, Ruleset: rs, At: at, GPU: "H100", Traces: c.traces})
			if err != nil {
				t.Fatal(err)
			}
			if v.Status != verdict.StatusAnomaly {
				t.Fatalf("status %s", v.Status)
			}
			top := ""
			if len(v.Causes) > 0 {
				top = v.Causes[0].ID
			}
			if top != c.top {
				t.Fatalf("top cause %q, want %q (%+v)", top, c.top, v.Causes)
			}
			var step *verdict.Step
			for i := range v.Steps {
				if v.Steps[i].Name == "correlate" {
					step = &v.Steps[i]
				}
			}
			switch {
			case c.traces == nil && step != nil:
				t.Errorf("correlate step without traces: %+v", step)
			case c.traces != nil && (step == nil || !strings.Contains(step.Outcome, c.outcome)):
				t.Errorf("correlate step %+v, want outcome with %q", step, c.outcome)
			}
			gaps := ""
			for _, g := range v.DataGaps {
				gaps += g.Reason + "\n"
			}
			if c.gap != "" && !strings.Contains(gaps, c.gap) {
				t.Errorf("data gaps %q lack %q", gaps, c.gap)
			}
			if !c.requests {
				if len(v.Requests) > 0 {
					t.Errorf("requests without traces: %+v", v.Requests)
				}
				return
			}
			var ev verdict.Evidence
			for _, e := range v.Causes[0].Evidence {
				if e.Step == "correlate" {
					ev = e
				}
			}
			if ev.Step != "correlate" || ev.Rule != "traces.long_prefill_stalls_first_tokens" || ev.Now == nil || ev.Baseline == nil || *ev.Now <= *ev.Baseline {
				t.Errorf("evidence = %+v", ev)
			}
			if len(v.Requests) == 0 {
				t.Fatal("no slowest requests")
			}
			r := v.Requests[0]
			if r.Pod != "vllm-a" || r.Parts["prefill"] != 40 || r.Context["kv_cache_usage"] != 0.7 || r.Context["num_requests_waiting"] != 6 ||
				r.Context["whyslow_gpu_sm_clock_mhz"] != 1980 {
				t.Errorf("slowest request = %+v", r)
			}
			if len(m.ranges) != podContextSignals {
				t.Errorf("%d range queries, want %d", len(m.ranges), podContextSignals)
			}
		})
	}
}
