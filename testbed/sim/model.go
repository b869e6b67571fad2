package sim

import (
	"fmt"
	"math"
)

// gpuSpec holds the published peak numbers of one GPU class that the cost
// model needs.
type gpuSpec struct {
	class       string  // short class, e.g. "H100" (incident.yaml gpu)
	product     string  // NVML product name (the `model` label)
	memBytes    float64 // HBM capacity in bytes
	flops       float64 // dense BF16 FLOP/s
	bw          float64 // HBM bytes/s
	smClockMax  float64 // MHz
	memClockMax float64 // MHz
	smClockIdle float64 // MHz when idle
	powerLimit  float64 // W
	powerIdle   float64 // W
	nvlinkBW    float64 // bytes/s per direction
}

const gib = 1 << 30

var gpuSpecs = map[string]gpuSpec{
	"H100": {class: "H100", product: "NVIDIA H100 80GB HBM3", memBytes: 80 * gib, flops: 989e12, bw: 3.35e12,
		smClockMax: 1980, memClockMax: 2619, smClockIdle: 345, powerLimit: 700, powerIdle: 72, nvlinkBW: 450e9},
	"A100": {class: "A100", product: "NVIDIA A100-SXM4-80GB", memBytes: 80 * gib, flops: 312e12, bw: 2.039e12,
		smClockMax: 1410, memClockMax: 1593, smClockIdle: 210, powerLimit: 400, powerIdle: 60, nvlinkBW: 300e9},
	"H200": {class: "H200", product: "NVIDIA H200", memBytes: 141 * gib, flops: 989e12, bw: 4.8e12,
		smClockMax: 1980, memClockMax: 3201, smClockIdle: 345, powerLimit: 700, powerIdle: 78, nvlinkBW: 450e9},
}

// modelSpec describes a dense decoder-only transformer.
type modelSpec struct {
	name       string // served model name (the model_name label)
	short      string // for pod names
	params     float64
	layers     int
	dModel     int
	kvHeads    int
	headDim    int
	dtypeBytes int
}

var modelSpecs = map[string]modelSpec{
	"8B": {name: "meta-llama/Llama-3.1-8B-Instruct", short: "llama-8b", params: 8.03e9, layers: 32, dModel: 4096,
		kvHeads: 8, headDim: 128, dtypeBytes: 2},
	"70B": {name: "meta-llama/Llama-3.1-70B-Instruct", short: "llama-70b", params: 70.6e9, layers: 80, dModel: 8192,
		kvHeads: 8, headDim: 128, dtypeBytes: 2},
}

// kvBytesPerToken is 2 (K and V) × layers × kv heads × head dim × dtype bytes:
// 128 KiB for Llama-3-8B, 320 KiB for 70B.
func (m modelSpec) kvBytesPerToken() float64 {
	return float64(2 * m.layers * m.kvHeads * m.headDim * m.dtypeBytes)
}

func (m modelSpec) weightBytes() float64 { return m.params * float64(m.dtypeBytes) }

// Policy is a scheduler policy of the engine model.
type Policy int

// Scheduler policies.
const (
	// PolicyVLLM is vLLM V1: running requests (decodes and partial
	// prefills) first, then waiting requests fill the remaining
	// max_num_batched_tokens budget with chunked prefills.
	PolicyVLLM Policy = iota
	// PolicySGLang runs separate prefill and decode batches, prefill first,
	// with a chunked-prefill size.
	PolicySGLang
	// PolicyTRTLLM does not chunk and admits under GUARANTEED_NO_EVICT
	// (blocks for prompt + max_tokens are reserved up front).
	PolicyTRTLLM
)

// String returns the engine name of the policy.
func (p Policy) String() string {
	switch p {
	case PolicyVLLM:
		return "vllm"
	case PolicySGLang:
		return "sglang"
	case PolicyTRTLLM:
		return "trtllm"
	}
	return fmt.Sprintf("Policy(%d)", int(p))
}

// ParsePolicy maps an engine name to a Policy.
func ParsePolicy(s string) (Policy, error) {
	switch s {
	case "", "vllm":
		return PolicyVLLM, nil
	case "sglang":
		return PolicySGLang, nil
	case "trtllm":
		return PolicyTRTLLM, nil
	}
	return 0, fmt.Errorf("unknown scheduler policy %q (want vllm, sglang or trtllm)", s)
}

// defaultScheduler returns the engine's defaults for a GPU class
// (docs/engines.md §2.10, §3.5, §4.4): vLLM serve uses 8192/1024 on ≥70 GiB cards other than
// A100 and 2048/256 otherwise; SGLang chunks at 8192 on H100/H200/A100-80G;
// TensorRT-LLM does not chunk (max_num_tokens 8192, max_batch_size 2048).
func defaultScheduler(p Policy, g gpuSpec) Scheduler {
	switch p {
	case PolicySGLang:
		return Scheduler{ChunkedPrefill: true, MaxNumBatchedTokens: 8192, MaxNumSeqs: 1024}
	case PolicyTRTLLM:
		return Scheduler{ChunkedPrefill: false, MaxNumBatchedTokens: 8192, MaxNumSeqs: 2048}
	}
	if g.memBytes >= 70*gib && g.class != "A100" {
		return Scheduler{ChunkedPrefill: true, MaxNumBatchedTokens: 8192, MaxNumSeqs: 1024}
	}
	return Scheduler{ChunkedPrefill: true, MaxNumBatchedTokens: 2048, MaxNumSeqs: 256}
}

// tensorParallel is how many GPUs of class g a replica of m uses.
func tensorParallel(m modelSpec, g gpuSpec) int {
	tp := 1
	for m.weightBytes() > 0.6*g.memBytes*float64(tp) {
		tp *= 2
	}
	return tp
}

// engineConfig is the static configuration of one replica.
type engineConfig struct {
	policy      Policy
	sched       Scheduler
	model       modelSpec
	gpu         gpuSpec
	tp          int
	gpuMemUtil  float64
	blockSize   int
	numBlocks   int
	maxModelLen int
	mfu         float64 // achievable fraction of peak FLOP/s
	bwEff       float64 // achievable fraction of peak HBM bandwidth
	// overhead and overheadPerSeq are the CPU time of a step: fixed and
	// per scheduled sequence, in seconds.
	overhead, overheadPerSeq float64
}

const blockSize = 16

// newEngineConfig sizes the KV cache from GPU memory: TP × memory ×
// gpu_memory_utilization, minus weights and an activation reserve, divided
// by the bytes of one block.
func newEngineConfig(p Policy, m modelSpec, g gpuSpec, memUtil float64) engineConfig {
	tp := tensorParallel(m, g)
	c := engineConfig{policy: p, sched: defaultScheduler(p, g), model: m, gpu: g, tp: tp, gpuMemUtil: memUtil,
		blockSize: blockSize, maxModelLen: 131072, mfu: 0.55, bwEff: 0.93, overhead: 0.002, overheadPerSeq: 3e-6}
	c.numBlocks = blocksFor(m, g, tp, memUtil)
	return c
}

func blocksFor(m modelSpec, g gpuSpec, tp int, memUtil float64) int {
	reserve := 3.0e9 * float64(tp)
	pool := float64(tp)*g.memBytes*memUtil - m.weightBytes() - reserve
	n := int(pool / (m.kvBytesPerToken() * blockSize))
	if n < 64 {
		n = 64
	}
	return n
}

// memUtilForBlocks inverts blocksFor.
func memUtilForBlocks(m modelSpec, g gpuSpec, tp, blocks int) float64 {
	pool := float64(blocks) * m.kvBytesPerToken() * blockSize
	u := (pool + m.weightBytes() + 3.0e9*float64(tp)) / (float64(tp) * g.memBytes)
	return math.Round(u*1000) / 1000
}

// stepCost is the roofline cost of one engine step.
type stepCost struct {
	seconds  float64 // wall time of the step
	gpu      float64 // GPU-busy part
	compute  float64 // FLOP-limited time at the current clock
	memory   float64 // bandwidth-limited time at the current clock
	flops    float64
	bytes    float64 // HBM bytes moved (all GPUs of the replica)
	nvlink   float64 // bytes exchanged over NVLink per GPU
	tokens   int
	batchLen int
}

// accumulate adds one batch item: n new tokens on top of c cached ones.
// Linear FLOPs are 2 × params per token; attention adds 4 × layers × d ×
// context per token; KV bytes read are the context, written the new tokens.
func (c *engineConfig) itemCost(s *stepCost, ctx, n int) {
	fn := float64(n)
	s.flops += 2*c.model.params*fn + 4*float64(c.model.layers*c.model.dModel)*fn*(float64(ctx)+fn/2)
	s.bytes += float64(ctx+n) * c.model.kvBytesPerToken()
	s.tokens += n
	s.batchLen++
}

// finish turns the accumulated work into time under the clock factor cf
// (1 = full clocks). Memory-bound kernels slow down less than compute-bound
// ones when SM clocks drop.
func (c *engineConfig) finish(s *stepCost, cf float64) {
	c.finishAt(s, cf, float64(s.batchLen), float64(s.tokens))
}

// finishAt is finish with the batch length and token count as reals, so
// that stepSecondsAt can evaluate it at mean drivers.
func (c *engineConfig) finishAt(s *stepCost, cf, batchLen, tokens float64) {
	s.bytes += c.model.weightBytes()
	tp := float64(c.tp)
	s.compute = s.flops / (c.gpu.flops * tp * c.mfu * cf)
	s.memory = s.bytes / (c.gpu.bw * tp * c.bwEff * (0.3 + 0.7*cf))
	s.gpu = math.Max(s.compute, s.memory)
	overhead := c.overhead + c.overheadPerSeq*batchLen
	if c.tp > 1 {
		// Two all-reduces per layer; latency plus volume over NVLink.
		s.nvlink = 2 * float64(c.model.layers) * tokens * float64(c.model.dModel) * 2 * (tp - 1) / tp
		s.gpu += 2*float64(c.model.layers)*8e-6 + s.nvlink/c.gpu.nvlinkBW
	}
	s.seconds = overhead + s.gpu
}

// stepSecondsAt is the duration of a step of n running requests each
// reading ctx tokens of context, plus prefill new prompt tokens (one
// chunk without cached context), at clock factor cf: the engine's own
// cost function (itemCost and finish) evaluated at mean drivers.
func (c *engineConfig) stepSecondsAt(n, ctx, prefill, cf float64) float64 {
	lin := 2 * c.model.params
	att := 4 * float64(c.model.layers*c.model.dModel)
	kv := c.model.kvBytesPerToken()
	s := stepCost{}
	s.flops = n*(lin+att*(ctx+0.5)) + prefill*(lin+att*prefill/2)
	s.bytes = (n*(ctx+1) + prefill) * kv
	items := n
	if prefill > 0 {
		items++
	}
	c.finishAt(&s, math.Max(cf, 0.05), items, n+prefill)
	return s.seconds
}
