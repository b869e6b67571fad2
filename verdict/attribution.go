package verdict

// Attribution splits the change of the two latencies between the baseline
// and incident windows into parts that add up, in seconds, with the
// remainder no measured part covers stated as unexplained.
//
// TTFT = queue + prefill + time before the engine: vLLM measures TTFT from
// the API server's arrival, queue from the engine's QUEUED to SCHEDULED and
// prefill from SCHEDULED to the first token (docs/engines.md §2.9; V1), so the
// difference is the API server, tokenizer and IPC. Each part is read from
// its own histogram; an engine without one states it as missing.
//
// Inter-token latency is one engine step (every running request gets a
// token per step). A step reads the weights and the KV context of every
// running request from HBM, and computes the prompt tokens scheduled in it:
//
//	step = T0 + F · [max(1 + R·B·c, ρ·B)·kₘ + ρ·(P + Pr)·k꜀]
//
// with B the requests a decoding request shares a step with, c its KV
// context (the KV usage per running request at the baseline, grown by the
// context tokens per request: attention reads every sequence's context
// even where the blocks are shared), P the prompt tokens computed per step,
// Pr those recomputed after preemption, R the time to read a full KV cache
// relative to the weights, ρ the GPU's bandwidth-to-FLOP ratio (a token's
// compute relative to one weight read), k꜀ = clock_base/clock_now (compute
// slows with the SM clock) and kₘ = k꜀^0.6 (memory-bound work slows less:
// the SMs issue the loads, HBM's own clock does not drop),
// and T0 = 2 ms of per-step overhead (scheduling, sampling, launches). F
// is solved from the baseline window; the parts are the Shapley values of
// the drivers (the average change each makes over every order of changing
// them), and what the model misses is the unexplained part.
type Attribution struct {
	TTFT *LatencySplit `json:"ttft,omitempty"`
	ITL  *LatencySplit `json:"itl,omitempty"`
	// Model states the step model's assumptions (R, ρ) and where they came from.
	Model string `json:"model,omitempty"`
}

// LatencySplit is one latency's change split into parts.
type LatencySplit struct {
	Baseline float64 `json:"baseline_seconds"`
	Now      float64 `json:"now_seconds"`
	Delta    float64 `json:"delta_seconds"`
	Parts    []Part  `json:"parts"`
	// Unexplained is Delta minus the parts; its share of Delta.
	Unexplained      float64 `json:"unexplained_seconds"`
	UnexplainedShare float64 `json:"unexplained_share"`
	// Missing names the parts that could not be measured, and why.
	Missing []string `json:"missing,omitempty"`
	// Unmeasured: no part of the change could be measured (the engine
	// exports neither queue nor prefill time). The split is a data gap, not
	// an unexplained slowdown: Unexplained stays 0 and the rules' `unexplained`
	// ignores it.
	Unmeasured bool `json:"unmeasured,omitempty"`
}

// Part is one component of a latency's change.
type Part struct {
	// Component: queue, prefill, outside (TTFT); batch, context, prefill,
	// recompute, clock (inter-token latency).
	Component string  `json:"component"`
	Seconds   float64 `json:"seconds"`
	// Share is Seconds over the latency's change (may be negative).
	Share float64 `json:"share"`
	// Driver says what moved, e.g. "queue time mean 12ms → 2.6s" or
	// "KV context per running request ×6.1".
	Driver string `json:"driver,omitempty"`
}

// Attribution components (Part.Component).
const (
	CompQueue     = "queue"
	CompPrefill   = "prefill"
	CompOutside   = "outside"
	CompBatch     = "batch"
	CompContext   = "context"
	CompRecompute = "recompute"
	CompClock     = "clock"
)
