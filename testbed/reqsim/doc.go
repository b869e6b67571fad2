// Package reqsim is the third engine model of the accuracy harness (issue
// 22): a request-level discrete-event simulation of LLM serving, written
// independently of testbed/sim and testbed/fluid (it imports neither; a
// test checks). It records synthetic incidents as metric bundles (the
// OpenMetrics exposition of the engine the instance runs, with timestamps)
// with the truth it knows from its own requests.
//
// # Model
//
// Requests arrive as a Poisson stream whose rate drifts slowly (±6%, a
// 97 s period) and, under a fault, changes. Each request draws a prompt
// length from a lognormal body plus a long-prompt lognormal component and a
// Pareto tail, an output length from a lognormal capped at max_tokens, a
// prefix-cache hit (a share of the prompt, block-aligned), an API-server /
// tokenizer delay (time outside the engine: it counts in TTFT and e2e, not
// in queue time), and whether it fails in the server (finish reason error,
// HTTP 500, after its prefill) or the client aborts it after some tokens.
//
// A router sends each request to one of the replicas (round-robin or
// least-requests; a "hot replica" fault skews it). A replica is one engine
// (a TP group) with a paged KV pool (16-token blocks, capacity in tokens)
// and a per-step scheduler:
//
//   - vLLM V1: mixed batches under the token budget max_num_batched_tokens
//     (8192 on H100/H200, 2048 on A100), max_num_seqs 256; running requests
//     first (decodes, then the rest of partly prefilled prompts), then
//     waiting ones, a prompt split into chunks over steps. When a decode
//     finds no free block the newest running request is preempted by
//     recompute: it frees its blocks and re-prefills prompt and output so far.
//   - SGLang: prefill first; while requests wait and fit (a tenth of the pool
//     kept as headroom) the step is a prefill batch of up to 8192 tokens (a
//     longer prompt is chunked and continues first), otherwise a decode
//     batch; a decode without a block retracts the newest request.
//   - TensorRT-LLM: in-flight batching, no chunking (a prompt prefills in one
//     step, even past max_num_tokens 8192, which only bounds how many
//     prompts join one step), GUARANTEED_NO_EVICT: a request is admitted
//     only when its prompt plus max_tokens fits the blocks not yet reserved,
//     so it waits instead of being preempted.
//
// A step costs (overhead + weights read + per-token compute × decodes +
// KV read × context of the decoding requests + per-token compute × prefill
// tokens) / clock factor, with per-hardware constants for Llama 8B (one
// H100 or A100) and 70B (TP4 on H100 or H200): a decode step is ~13–40 ms,
// an 8192-token chunk ~0.25–0.55 s. A token is emitted at the end of the
// step that computed it (the last prefill chunk emits the first token).
//
// # Recording
//
// Two segments are simulated, each 150 s of warm-up, a 120 s margin and the
// 5-minute window: the baseline, ending 1 h before the incident time, and
// the incident, whose fault starts 1–3 minutes before its window and ramps
// in over 10–30 s. Engine state restarts between the segments; the
// exported counters carry on (monotone), so the hour between is not
// simulated. Every live replica is scraped every 10 s during the margin
// and the window (each target at its own offset); histograms are
// cumulative, counters monotone except across a rolling restart.
//
// Each instance renders one engine, drawn from the seed (vLLM half the
// time, SGLang and TensorRT-LLM a quarter each), with its real names,
// labels and bucket bounds: vLLM V1 (Options.Names "v0": the 0.10 era,
// deprecated names beside the new, no "error" finish reason), SGLang
// (scheduler- and tokenizer-side label sets; "v0": the old inter-token
// histogram name) or trtllm-serve (per-request TPOT only, no preemption
// counter). GPU series come from whyslow's NVML collector and/or
// dcgm-exporter as Options.GPUSeries asks, derived from the replica's busy,
// memory-bound and compute-bound time and its clock. A third of the
// instances leave out one or two optional families (prefix-cache counters,
// the phase histograms, iteration-token histograms, the HTTP counters,
// SGLang's prompt-length histogram), recorded in
// Truth.Params["omitted_families"]; Truth.Unobservable names an instance
// whose cause shows only in a dropped family.
//
// # Truth
//
// The truth's windows are the model's own: TTFT of the requests whose first
// token fell in the window, inter-token latency over every gap between two
// output tokens emitted in the window, queue/prefill/outside/e2e/errors of
// the requests that finished in it, the means over the last 2 minutes, and
// exact 95th percentiles of TTFT and of the inter-token gaps. The ITL split
// is a Shapley split of the decode tokens' mean step cost over batch,
// context, prefill and clock.
//
// # Scenarios
//
// Faults (cause ids of rulesets/causes.yaml), magnitudes drawn per band
// (subtle, moderate, severe; moderate unless Options.Wide):
//
//	arrival_surge   queue_saturation            arrivals rise to 0.8–1.4× the estimated capacity
//	replica_loss    capacity_loss               20–60% of the replicas stop (their in-flight requests are lost)
//	prompt_shift    chunked_prefill_mismatch    the p90 prompt moves to 1.1–2.6× the budget (TensorRT-LLM: its max_num_tokens)
//	long_prompts    prefill_contention          20–70% of requests bring prompts of 0.6–0.95× the budget, short answers
//	kv_pressure     kv_cache_pressure           outputs grow 1.6–4.5× against a pool that is tight for them
//	clock_throttle  gpu_throttling              the clock factor drops to 0.45–0.86
//	prefix_loss     prefix_cache_regression     the prefix hit rate falls to 0–60% of its baseline
//	errors          request_errors              3–35% of requests fail in the server
//	hot_replica     load_imbalance              one replica gets 1.6–3.5× its share (round-robin router)
//	slow_frontend   outside_engine              the API server adds 0.12–2.5 s before the engine
//	bandwidth       memory_bandwidth_saturation requests carry 2–9× the context, 98% of it served from the prefix cache
//
// Hard negatives (healthy truth): diurnal_growth (traffic +8–20% within
// capacity), steady_busy, rolling_restart (two replicas restart in turn in
// the window, counters reset), abort_storm (20–50% of streams aborted by
// clients), new_tenant (the median prompt 8–16% longer, still fitting). A
// negative whose own TTFT or inter-token p95 moved more than 1.2× (an
// inter-token p95 on the edge between decode-only and prefill-carrying
// steps flips on a small change of load) is drawn again from a derived
// seed, up to 4 times. Compounds: clock_throttle+errors,
// slow_frontend+clock_throttle, prefix_loss+errors.
//
// # Not modelled
//
// Speculative decoding, disaggregated prefill/decode, LoRA, CPU swap and
// KV offload, the prefix cache's own eviction (a hit is drawn per request,
// not looked up), SGLang's new-token-ratio admission and DP attention,
// TensorRT-LLM's MAX_UTILIZATION policy, CUDA-graph batch padding,
// per-token attention cost growth inside a prefill chunk, tokenizer CPU
// contention, network time between client and server, and the hour between
// the two windows. Magnitudes are set against a rough analytic capacity
// estimate, so a band's effect varies with the engine and the hardware.
package reqsim
