// Package whatif predicts what a fix would do to an incident (issue 28):
// it fits a small engine model to the incident's own telemetry and replays
// it with the fix applied.
//
// # Inputs
//
// Read takes the triage's signal values for the baseline and incident
// windows (Verdict.Signals, filled with diagnose.Options.Explain) and
// evaluates a few of the same canonical signals over one-minute
// sub-windows of both windows, the observations the step-time fit runs
// on. Nothing here knows an engine's metric names: the signals come from
// the engine's map in rulesets/.
//
// # Model
//
// A step costs a + b·prefill tokens + c·decode batch + d·context tokens read
// by the decodes, divided by the clock factor. The coefficients are a
// non-negative least-squares fit of the mean inter-token gap of each
// sub-window (a decode token waits one step plus the prefill work
// interleaved with it) on that sub-window's prefill tokens per gap, decode
// batch and context. One incident's sub-windows move those together, so
// the split between the prefill cost and the rest is poorly determined;
// the prefill cost is set within ½–2× of the fitted one so that the
// replay's mean TTFT is the window's (where the time outside the engine
// is known, or where the replay's engine alone exceeds the window's whole
// TTFT mean: the time outside is never negative; else, on vLLM and
// SGLang, its mean waiting, where requests queue), the other coefficients
// fitted again with it held (TensorRT-LLM's queue fits its reservation
// instead). The
// KV pool's capacity per replica is the context a
// running request holds over the share of the pool it uses
// (decode_ctx_tokens / kv_per_running). The scheduler is the incident's
// (incident.yaml, the engine's configuration gauges) or the engine's
// default for the GPU (rulesets/*.yaml scheduler_defaults, docs/engines.md).
//
// # Replay
//
// Replay runs up to four replicas behind a round-robin router (standing
// for the scope's replicas: a gateway's even split is much smoother than
// Poisson arrivals per replica), each step by step under the engine's scheduler (vLLM
// V1 chunked mixed batches with recompute preemption; SGLang prefill-first
// with retraction; TensorRT-LLM in-flight batching under
// GUARANTEED_NO_EVICT), fed by a Poisson stream with lognormal prompt and
// output lengths of the window's means (the prompts drawn from the
// exported prompt-length histogram, the draw inside a bucket tilted so
// that the mean is the token counters', else through its p90/p99/p99.9,
// else lognormal). It is bounded: 420 s simulated (120 s warm-up, the
// 300 s after it measured), 20,000 requests, 100,000 steps.
//
// # Prediction
//
// Predict replays the incident's own inputs and, for each fix, the inputs
// the fix changes, with three seeds; the median and range are reported.
// The replay of the incident's own inputs calibrates: its TTFT p95 over the
// observed one is the fit's quality, called good within 0.8–1.25; the
// predictions take that scale, and outside the band they are labelled as
// relative changes from a poor fit. Where a series a fit needs is missing, a MissingError names
// it: a gap is never filled with a default.
//
// # Assumptions (stated, not measured)
//
//   - arrivals are Poisson at the window's mean rate (no burstiness term);
//   - output lengths are lognormal with σ 0.8 (engines export a mean, the
//     histogram's buckets are too coarse for a spread);
//   - a prompt's spread is σ 0.8 where no prompt-length p90 or p99 is
//     exported, and prompts are cut at 1.2× the window's p99.9 (2× its p99);
//     a prompt the whole pool cannot hold is refused (max_model_len);
//   - a routing skew is a share of the arrivals pinned to one replica
//     (from rate_spread), which more replicas do not spread;
//   - TensorRT-LLM reserves prompt + max_tokens; max_tokens is read from the
//     pool when requests waited at a full reservation on average (on the
//     busiest replica, by waiting_spread and running_spread, where the
//     routing is skewed: the wall is one replica's), else 4× the mean output, raised where requests waited at all to the value
//     whose replay queues the window's mean waiting (at most what fills
//     the pool at the busiest replica's peak running);
//   - time outside the engine (TTFT − queue − prefill) is a constant;
//   - a request's prefix-cache share spreads uniformly around the window's
//     hit rate (±60% of it, narrowed near the 0.98 cap so that the mean
//     stays the measured rate).
package whatif
