// Package fluid is a second engine model for the accuracy harness (issue
// 10), written independently of testbed/sim and sharing no code with it: a
// time-stepped fluid/cohort queueing model of vLLM serving that emits the
// metric names, types, labels and buckets real engines ship, so that
// whyslow's rules are not fitted to one model.
//
// # Formalism
//
// Time advances in ticks of 0.5 s. Each replica holds an API-server pipe, an
// engine waiting queue and a running set, all of cohorts: the requests that
// arrived at one replica in one tick with the same class (a cell of a grid of
// quantile bins of the lognormal unique-prompt and output lengths) and the
// same outcome (stop, length, abort, error). A cohort carries its count,
// prompt tokens (shared system prompt + cached conversation history + unique
// part), the matched shared prefix, the tokens generated so far, its pending
// prefill and its KV blocks.
//
// The step cost (cost.go) is additive with a partial overlap, not a
// roofline max():
//
//	mem  = (weights + kvBytes·K)/bw · f^-0.6
//	comp = (P + B)·flopsPerToken/flops · f^-1
//	step = overhead·f^-0.3 + perSeq·B + mem + comp − 0.5·mem·comp/(mem+comp)
//
// for B decoding sequences reading K KV tokens, P prefill tokens scheduled
// into the step and clock factor f. Within a tick the engine is a FCFS
// prefill server: a waiting cohort is scheduled at max(its arrival plus half
// a step, the prefill frontier) if max_num_seqs and the KV pool admit it;
// its prompt runs as one step (with the decode batch) or, past the budget
// max_num_batched_tokens − B (or packed behind a backlog), as full-budget
// chunks. Decode-only steps fill the rest of the tick. Every decoding
// cohort advances one token per step it takes part in; ITL observations are
// the tick's prefill-carrying steps and decode-only steps, each at its own
// cost.
//
// KV accounting: 16-token blocks; a request holds (prompt − matched shared
// prefix + generated)/16 + ½ blocks, each distinct system prompt in use once.
// When decode growth overflows the pool, the newest running cohorts are
// preempted (RECOMPUTE): their blocks freed, they rejoin the head of the
// queue with prompt and generated tokens to recompute. Prefix-cache hits are
// the matched shared prefix plus the cached history, the latter kept only
// while at least 10% of blocks are free (eviction under pressure).
//
// A router splits arrivals over replicas (round robin, least loaded, or a
// skewed share); replicas can stop (their series end) or stay up routed
// nothing.
//
// # Latency distributions
//
// Each cohort's value is spread over the histogram's buckets as a
// mean-preserving lognormal (few observations drawn from a 256-point quantile
// table, many split by the CDF with a dither), with log-sigma: TTFT 0.25,
// queue 0.3, prefill 0.2, e2e/decode/inference 0.15, ITL 0.12 (prefill
// steps) and 0.08 (decode steps), per-request TPOT 0.1, token counts 0.12;
// max_tokens, n and preemption counts exact. Fractional observation counts
// wait in a carry, so _count is an integer equal to the +Inf bucket.
//
// # Truth
//
// Each scenario moves one exogenous input (arrivals, replicas, a long-prompt
// stream, the prompt distribution, output length on a pool sized to fill,
// cached history, clocks, prefix matches, errors, routing, frontend delay)
// with a knob set from the magnitude, most through the model's own steady
// predictor (the fluid fixed point B = λ·out·τ̄ with an M/G/1 prefill wait).
// truth.yaml's observed windows are measured from the internals, never from
// the metrics, and Record checks each scenario's mechanism on them, redrawing
// when a draw does not show it.
package fluid

// The committed bundles of this model under testdata/fluid, triaged by the
// golden test next to testbed/sim's (testbed/accuracy TestIncidentBundles):
//
//go:generate go run ./gen -scenario kv_pressure -seed 1 -names v0 -out ../../testdata/fluid/kv_pressure_v0
//go:generate go run ./gen -scenario context_growth -seed 1 -names v1 -out ../../testdata/fluid/context_growth
//go:generate go run ./gen -scenario prefix_cache_loss -seed 1 -names v0 -out ../../testdata/fluid/prefix_cache_loss_v0
//go:generate go run ./gen -scenario capacity_loss -seed 1 -names v1 -out ../../testdata/fluid/capacity_loss
//go:generate go run ./gen -scenario healthy -seed 1 -names v1 -out ../../testdata/fluid/healthy
