package fluid

// gpuClass holds the public datasheet numbers the cost model starts from.
type gpuClass struct {
	name        string  // the GPU class incident.yaml names
	product     string  // what NVML and DCGM report as the model name
	memBytes    float64 // device memory
	hbmBW       float64 // peak HBM bytes/s
	flops       float64 // dense BF16 peak FLOP/s
	smClockMax  float64 // MHz
	memClockMax float64 // MHz
	tdp, idleW  float64 // W
}

var gpuClasses = map[string]gpuClass{
	"H100": {"H100", "NVIDIA H100 80GB HBM3", 80 << 30, 3.35e12, 989e12, 1980, 2619, 700, 70},
	"A100": {"A100", "NVIDIA A100-SXM4-80GB", 80 << 30, 2.039e12, 312e12, 1410, 1593, 400, 55},
	"H200": {"H200", "NVIDIA H200", 141 << 30, 4.8e12, 989e12, 1980, 3201, 700, 75},
}

// modelSpec is a served model's shape (Llama 3.1 configs).
type modelSpec struct {
	name    string // served_model_name
	short   string // pod name stem
	params  float64
	layers  int
	kvHeads int
	headDim int
	hidden  int
}

var models = map[string]modelSpec{
	"8B":  {"meta-llama/Llama-3.1-8B-Instruct", "llama-8b", 8.03e9, 32, 8, 128, 4096},
	"70B": {"meta-llama/Llama-3.1-70B-Instruct", "llama-70b", 70.6e9, 80, 8, 128, 8192},
}

// tensorParallel is the TP degree a deployment of m on g would use.
func tensorParallel(m modelSpec, g gpuClass) int {
	if m.params < 20e9 {
		return 1
	}
	if g.memBytes > 100<<30 {
		return 2
	}
	return 4
}

// schedulerDefaults are vLLM V1's `vllm serve` defaults by device
// (vllm/engine/arg_utils.py get_batch_defaults; docs/engines.md §2.10): 8192 tokens
// and 1024 sequences on >=70 GiB GPUs other than A100, else 2048 and 256.
func schedulerDefaults(g gpuClass) (budget, maxSeqs int) {
	if g.memBytes >= 70<<30 && g.name != "A100" {
		return 8192, 1024
	}
	return 2048, 256
}

// blockSize is vLLM's default KV block size in tokens.
const blockSize = 16
