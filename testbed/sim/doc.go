// Package sim is a discrete-event model of an LLM inference engine doing
// continuous batching, on a virtual clock, that emits the telemetry a real
// vLLM V1 emits (names, types, labels and buckets of docs/engines.md §2) plus GPU
// counters (whyslow_gpu_* as the NVML collector names them, or the
// dcgm-exporter names). It is for the demo, tests, the accuracy benchmark
// and performance runs; production code must not import it.
//
// # Mechanism
//
// Requests arrive as a Poisson process (thinned for diurnal drift and
// bursts) with lognormal prompt and output lengths; a fraction carries a
// shared system prefix that the prefix cache can serve. A router spreads
// them over replicas (round-robin, least-queue or skewed). Each replica has
// a KV block pool (16-token blocks sized from GPU memory ×
// gpu_memory_utilization minus weights, at 2 × layers × kv_heads ×
// head_dim × dtype bytes per token) and a scheduler:
//
//   - vLLM V1: running requests first (decodes and partial prefills), then
//     waiting requests fill the rest of max_num_batched_tokens with chunked
//     prefills, up to max_num_seqs. When a running request needs a block and
//     none is free, the newest running request is preempted (recompute) to
//     the front of the waiting queue.
//   - SGLang: prefill batches (chunked) before decode batches.
//   - TensorRT-LLM: no chunking; GUARANTEED_NO_EVICT admission reserves
//     prompt + max_tokens blocks, so nothing is ever preempted.
//
// Defaults per GPU class follow docs/engines.md §2.10, §3.5 and §4.4. A step's duration is a
// roofline: FLOPs (2 × params per token plus attention) over effective
// FLOP/s against bytes (weights plus KV read and written) over effective
// HBM bandwidth, scaled by a clock factor for throttling, plus a small CPU
// overhead. DRAM-bandwidth utilisation, SM activity, tensor activity,
// clocks, power and temperature are derived from the steps of each scrape
// interval. The simulation advances step by step, not token by token.
//
// # Scenarios
//
// Every scenario has a healthy baseline hour after a warm-up, then an onset
// at 75 minutes; the incident is at onset + 8 minutes (window 5m, baseline
// offset 1h), so the baseline window ends 18 to 23 minutes into the run.
// Model (Llama-3.1 8B/70B), GPU (H100/A100/H200), replica count and
// magnitudes are drawn from the seed; each scenario constrains its draws so
// that its cause is unambiguous, and the truth label is what was injected.
// Magnitudes come from the engine model, never from the rules' thresholds:
// kv_pressure sizes the block pool from the mean KV demand (running
// sequences × tokens held, Little's law on the mean-value model) so the
// incident's demand exceeds it while the baseline's stays under 35% (checked
// with a pilot run of the baseline: peak under 75%); healthy_burst places `at`
// after the burst's queue has drained and its requests finished, with the
// last two minutes of the window clear; long_prompt_burst keeps long prompts
// arriving up to `at` and small enough not to fill the KV cache.
//
//	healthy            -                         noisy but fine: diurnal drift, short bursts within capacity
//	healthy_busy       -                         hard negative: busy (load ≈0.7) but stable
//	healthy_burst      -                         hard negative: a 15–30 s burst past capacity early in the window, drained before its last 2 minutes
//	arrival_surge      queue_saturation          arrival rate 1.1–1.3× capacity; the waiting queue grows
//	long_prompt_burst  prefill_contention        32k–100k prompts (≥5 per replica every 2 minutes, ≤12% of the KV pool) hold the token budget
//	prompt_shift       chunked_prefill_mismatch  mean prompt ×4, from below to above the chunk budget
//	kv_pressure        kv_cache_pressure         outputs ×2.5–4 on a pool sized to 1/1.2–1/1.5 of the incident's KV demand; preemptions
//	bandwidth_bound    memory_bandwidth_saturation  long shared contexts, big decode batches; HBM-bound steps
//	gpu_throttle       gpu_throttling            clock factor 0.45–0.65 with a throttle reason
//	prefix_cache_loss  prefix_cache_regression   shared prefixes stop matching; hit rate falls
//	abort_storm        (healthy)                 8–25% of requests aborted early by clients (finished_reason="abort")
//	router_skew        load_imbalance            one replica gets most traffic and saturates
//	frontend_delay     outside_engine            0.6–2.5 s spent in the API server before the engine queue
//	capacity_loss      capacity_loss             of 2–8 replicas, some stop at the onset (their series end); the router moves their share
//	context_growth     memory_bandwidth_saturation  each request carries a long cached context: KV per running ×2–12, prefill flat, ITL up
//	error_burst        request_errors            3–25% of requests fail in the server (finished_reason="error")
//	diurnal_growth     -                         hard negative: arrivals +15–35% over the hour, latency means within ×1.25
//	new_tenant         -                         hard negative: +5–15% requests with 2–4× prompts, latency means within ×1.25
//
// # Wide draws, magnitude, compounds (plan/models.md)
//
// Options.Wide draws from the accuracy harness's ranges: baseline load
// 0.2–0.9 of the estimated capacity (lowered by pilot runs where the
// configuration does not reach it), compute and bandwidth efficiency, step
// overhead and KV pool ×0.5–1.5, 1–8 replicas, 8B/70B, H100/A100/H200, each
// as far as the scenario allows, from a random stream of its own. Every
// fault has a magnitude m in [0, 1] mapped monotonically onto its knob (m = 0
// barely visible, m = 1 severe); narrow draws of the older scenarios report
// the magnitude their knob implies. Options.Scenario "a+b" injects two
// faults of CompoundPairs at the same onset. The truth carries the
// magnitude and its band, what the model saw in both windows (observed,
// from request and step records) and the Shapley split of the step cost
// over batch, context, prefill and clock (itl_attribution).
//
// # Shapes
//
// Options.Names picks what a deployment of the engine exposes: vLLM and
// SGLang "v1"/"v0"; TensorRT-LLM "v1" (current trtllm-serve), "unprefixed"
// (1.1 and older) or "dynamo" (NVIDIA Dynamo's re-export); SGLang
// "multiprocess" or "dp" (DP attention). Options.DCGMCounters and
// DCGMLayout pick dcgm-exporter's counters CSV and how Prometheus stored its
// labels. Bundles carry the same shapes; incident.yaml records only what a
// user of that shape would write, truth.yaml the options.
//
// The committed bundles under testdata/incidents are regenerated with
// go generate ./testbed/sim (seeds in gen/main.go).
package sim

//go:generate go run ./gen -out ../../testdata/incidents
