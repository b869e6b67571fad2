// Package notifytest holds test helpers shared by the notifiers: hand-built
// verdicts, a log capture, and the assertion that secrets never leak into
// errors or logs.
package notifytest

import (
	"time"

	"github.com/whyslow/whyslow/verdict"
)

// T0 is the fixed instant every sample verdict is triaged at.
var T0 = time.Unix(1700000000, 0).UTC()

func f(v float64) *float64 { return &v }

func windows() (verdict.Window, verdict.Window) {
	inc := verdict.Window{Start: T0.Add(-5 * time.Minute), End: T0}
	base := verdict.Window{Start: T0.Add(-65 * time.Minute), End: T0.Add(-60 * time.Minute)}
	return inc, base
}

// Anomaly returns a critical prefill anomaly with three ranked causes,
// ruled-out causes, a data gap, targets, a slow request, and explain data.
func Anomaly() *verdict.Verdict {
	inc, base := windows()
	return &verdict.Verdict{
		SchemaVersion: verdict.SchemaVersion,
		Status:        verdict.StatusAnomaly,
		Severity:      verdict.SeverityCritical,
		Phase:         verdict.PhasePrefill,
		Engine:        "vllm",
		Scope: verdict.Scope{
			Selector: `model_name="meta-llama/Llama-3.1-70B-Instruct",namespace="inference"`,
			Labels:   map[string]string{"model_name": "meta-llama/Llama-3.1-70B-Instruct", "namespace": "inference"},
		},
		At:       T0,
		Incident: inc,
		Baseline: base,
		Headline: []verdict.Comparison{
			{Signal: "ttft_p95", Title: "TTFT p95", Unit: "seconds", Now: f(2.41), Baseline: f(0.31), Ratio: f(7.774)},
			{Signal: "tpot_p95", Title: "TPOT p95", Unit: "seconds", Now: f(0.042), Baseline: f(0.040), Ratio: f(1.05)},
			{Signal: "e2e_p95", Title: "E2E p95", Unit: "seconds", Now: f(14.2), Baseline: f(6.1), Ratio: f(2.328)},
			{Signal: "queue_time_p95", Title: "Queue time p95", Unit: "seconds", Now: f(1.9), Baseline: f(0.004), Ratio: f(475)},
			{Signal: "success_rate", Title: "Success rate", Unit: "fraction", Now: f(0.9971), Baseline: f(0.9998), Ratio: f(0.9973)},
			{Signal: "running", Title: "Running requests", Unit: "requests", Now: f(256), Baseline: f(180), Ratio: f(1.422)},
		},
		Causes: []verdict.Cause{
			{
				ID: "queue_saturation", Rank: 1, Score: 0.86, Confidence: 0.83, Title: "Requests are queueing: the engine is saturated",
				Chain: []verdict.ChainLink{
					{Signal: "arrival_rate", Label: "arrivals", Now: f(9.1), Baseline: f(7), Unit: "req/s", Text: "arrivals ×1.3"},
					{Signal: "queue_time_p95", Label: "queue time", Now: f(1.9), Unit: "seconds", Text: "queue time 1.90s"},
					{Signal: "ttft_p95", Label: "TTFT", Now: f(2.41), Baseline: f(0.31), Unit: "seconds", Text: "TTFT ×7.8 (310ms → 2.41s)"},
				},
				Evidence: []verdict.Evidence{
					{Step: "split", Rule: "queue_time_dominates_ttft", Signal: "queue_time_p95", Now: f(1.9), Baseline: f(0.004), Weight: 0.5,
						Text: "Queue time p95 is 1.9 s and makes up 79% of TTFT p95"},
					{Step: "kv_cache", Rule: "waiting_grows", Signal: "num_requests_waiting", Now: f(48), Baseline: f(0), Weight: 0.3,
						Text: "48 requests waiting on average (baseline 0)"},
				},
				Remediation: []string{
					"Add replicas or route traffic away from this pod; the engine is at max_num_seqs=256.",
					"If the gateway supports it, enable queue-aware routing (llm-d EPP queue scorer).",
				},
			},
			{
				ID: "chunked_prefill_mismatch", Rank: 2, Score: 0.54, Confidence: 0.31, Title: "Prompt length outgrew the chunked-prefill budget",
				Evidence: []verdict.Evidence{
					{Step: "scheduler", Rule: "prompt_vs_budget", Signal: "prompt_tokens_mean", Now: f(11800), Baseline: f(2100), Weight: 0.4,
						Text: "Mean prompt is 11800 tokens against max_num_batched_tokens=8192: every prompt needs two chunks"},
				},
				Remediation: []string{"Raise max_num_batched_tokens to 16384 or split long-prompt traffic onto its own pool."},
			},
			{
				ID: "kv_cache_pressure", Rank: 3, Score: 0.21, Confidence: 0.08, Title: "KV cache near capacity",
				Evidence: []verdict.Evidence{
					{Step: "kv_cache", Rule: "kv_usage_high", Signal: "kv_cache_usage", Now: f(0.93), Baseline: f(0.61), Weight: 0.2,
						Text: "KV cache usage 93% (baseline 61%)"},
				},
				Remediation: []string{"Lower max_num_seqs or raise gpu_memory_utilization."},
			},
		},
		Attribution: &verdict.Attribution{
			TTFT: &verdict.LatencySplit{Baseline: 0.31, Now: 2.41, Delta: 2.1, Parts: []verdict.Part{
				{Component: verdict.CompQueue, Seconds: 1.9, Share: 0.905, Driver: "queue time mean 4.0ms → 1.90s"},
				{Component: verdict.CompPrefill, Seconds: 0.15, Share: 0.071, Driver: "prefill time mean 80ms → 230ms"},
				{Component: verdict.CompOutside, Seconds: 0.05, Share: 0.024},
			}},
			ITL: &verdict.LatencySplit{Baseline: 0.040, Now: 0.042, Delta: 0.002, Parts: []verdict.Part{
				{Component: verdict.CompBatch, Seconds: 0.0015, Share: 0.75, Driver: "requests decoding per target 180 → 256"},
			}, Unexplained: 0.0005, UnexplainedShare: 0.25},
			Model: "step model: R 0.96 from a 70B model on H100 (TP 4); ρ 0.0054",
		},
		RuledOut: []verdict.RuledOut{
			{ID: "gpu_throttling", Title: "GPU clocks throttled", Reason: "no throttle reason was active in the incident window"},
			{ID: "request_errors", Title: "Requests failing", Reason: "success rate 99.7% is above 98%"},
			{ID: "memory_bandwidth_saturation", Title: "Memory bandwidth saturated", Reason: "TPOT is unchanged (×1.05)"},
		},
		Steps: []verdict.Step{
			{Name: "split", Title: "Split TTFT from TPOT", Outcome: "prefill: TTFT ×7.8, TPOT ×1.05", Rules: []verdict.RuleOutcome{
				{Name: "ttft_up", Matched: true},
				{Name: "queue_time_dominates_ttft", Cause: "queue_saturation", Matched: true, Effect: "evidence"},
			}},
			{Name: "kv_cache", Title: "KV cache", Outcome: "usage high, no preemptions", Rules: []verdict.RuleOutcome{
				{Name: "kv_usage_high", Cause: "kv_cache_pressure", Matched: true, Effect: "evidence"},
				{Name: "preemptions", Cause: "kv_cache_pressure", Matched: false},
			}},
			{Name: "scheduler", Title: "Scheduler vs traffic shape", Outcome: "prompts exceed the chunk budget", Rules: []verdict.RuleOutcome{
				{Name: "prompt_vs_budget", Cause: "chunked_prefill_mismatch", Matched: true, Effect: "evidence"},
			}},
			{Name: "correlate", Title: "Traces and GPU counters", Outcome: "GPU counters missing", Rules: []verdict.RuleOutcome{
				{Name: "throttle_active", Cause: "gpu_throttling", Matched: true, Effect: "rule_out"},
				{Name: "dram_bw_high", Cause: "memory_bandwidth_saturation", Error: "no data for whyslow_gpu_dram_bandwidth_utilization"},
			}},
		},
		Targets: []verdict.Target{
			{Labels: map[string]string{"pod": "vllm-70b-7d9f-abcde", "instance": "10.0.3.17:8000"}, Signal: "ttft_p95", Value: 3.2},
			{Labels: map[string]string{"pod": "vllm-70b-7d9f-fghij", "instance": "10.0.3.18:8000"}, Signal: "ttft_p95", Value: 1.4},
		},
		DataGaps: []verdict.DataGap{
			{Signal: "whyslow_gpu_dram_bandwidth_utilization", Window: "incident", Reason: "no series matched the selector"},
		},
		Requests: []verdict.Request{
			{TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", Pod: "vllm-70b-7d9f-abcde", Start: T0.Add(-time.Minute), E2E: 15.3, TTFT: 3.1,
				Dominant: "queue", Parts: map[string]float64{"queue": 2.7, "prefill": 0.4, "decode": 12.2}},
		},
		Signals: []verdict.SignalValue{
			{Name: "ttft_p95", Expr: `histogram_quantile(0.95, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket{model_name="meta-llama/Llama-3.1-70B-Instruct"}[5m])))`, Now: f(2.41), Baseline: f(0.31)},
			{Name: "kv_cache_usage", Expr: `avg(vllm:kv_cache_usage_perc)`, Now: f(0.93), Baseline: f(0.61)},
			{Name: "whyslow_gpu_dram_bandwidth_utilization", Expr: `avg(whyslow_gpu_dram_bandwidth_utilization)`},
		},
	}
}

// Healthy returns a healthy verdict with its numbers.
func Healthy() *verdict.Verdict {
	inc, base := windows()
	return &verdict.Verdict{
		SchemaVersion: verdict.SchemaVersion,
		Status:        verdict.StatusHealthy,
		Severity:      verdict.SeverityNone,
		Phase:         verdict.PhaseNone,
		Engine:        "sglang",
		Scope:         verdict.Scope{Selector: `job="sglang"`},
		At:            T0,
		Incident:      inc,
		Baseline:      base,
		Headline: []verdict.Comparison{
			{Signal: "ttft_p95", Title: "TTFT p95", Unit: "seconds", Now: f(0.182), Baseline: f(0.175), Ratio: f(1.04)},
			{Signal: "itl_p95", Title: "ITL p95", Unit: "seconds", Now: f(0.0213), Baseline: f(0.0209), Ratio: f(1.019)},
			{Signal: "success_rate", Title: "Success rate", Unit: "fraction", Now: f(1), Baseline: f(1), Ratio: f(1)},
			{Signal: "kv_cache_usage", Title: "KV cache usage", Unit: "fraction", Now: f(0.41), Baseline: f(0.39), Ratio: f(1.051)},
		},
		Causes:   []verdict.Cause{},
		RuledOut: []verdict.RuledOut{},
		Steps: []verdict.Step{
			{Name: "split", Title: "Split TTFT from TPOT", Outcome: "no phase slower than ×1.2"},
		},
		DataGaps: []verdict.DataGap{},
	}
}

// Insufficient returns an insufficient_data verdict: the engine was not
// scraped in the incident window.
func Insufficient() *verdict.Verdict {
	inc, base := windows()
	return &verdict.Verdict{
		SchemaVersion: verdict.SchemaVersion,
		Status:        verdict.StatusInsufficientData,
		Severity:      verdict.SeverityNone,
		Phase:         verdict.PhaseNone,
		Engine:        "trtllm",
		Scope:         verdict.Scope{Selector: `pod="trt-0"`},
		At:            T0,
		Incident:      inc,
		Baseline:      base,
		Headline: []verdict.Comparison{
			{Signal: "ttft_p95", Title: "TTFT p95", Unit: "seconds", Baseline: f(0.25)},
			{Signal: "tpot_p95", Title: "TPOT p95", Unit: "seconds", Baseline: f(0.03)},
		},
		DataGaps: []verdict.DataGap{
			{Signal: "ttft_p95", Window: "incident", Reason: "too few samples for rate(): 1 scrape in 5m"},
			{Signal: "tpot_p95", Window: "incident", Reason: "too few samples for rate(): 1 scrape in 5m"},
			{Signal: "kv_cache_usage", Reason: "metric nv_trt_llm_kv_cache_block_metrics not exposed"},
		},
		Warnings: []string{"target 10.0.4.2:8000 was down for 4m10s of the incident window"},
	}
}

// Predicted returns Anomaly with the predictions of `why --predict` on a
// poor fit: a seed spread, a fix that trades one latency for the other,
// and a fix the data could not support.
func Predicted() *verdict.Verdict {
	v := Anomaly()
	one := func(x float64) verdict.PredictedRange { return verdict.PredictedRange{Median: x, Low: x, High: x} }
	v.Predicted = &verdict.Predicted{Calibration: "poor (…)", PoorFit: true,
		Incident: &verdict.PredictedValues{TTFTP95: 150, ITLP95: 0.292, Throughput: 3000},
		Fixes: []verdict.FixPrediction{
			{Fix: "replicas×2", TTFTP95: verdict.PredictedRange{Median: 11, Low: 10, High: 12}, ITLP95: one(0.205), Throughput: one(4700)},
			{Fix: "max_num_batched_tokens=4096", TTFTP95: one(45), ITLP95: one(0.4), Throughput: one(3000),
				Trade: "trades inter-token latency for TTFT: TTFT p95 -70%, inter-token p95 +37%"},
		},
		Declined: []verdict.DeclinedFix{{Fix: "clocks restored", Reason: "no GPU clock series"}}}
	return v
}
