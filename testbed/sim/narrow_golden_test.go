package sim

// narrowSeed1 is what the narrow draw of each scenario that predates wide
// draws gave for seed 1 before they existed: the drawn parameters and the
// sha256 of the trimmed vLLM bundle's metrics. Wide draws must not move it.
var narrowSeed1 = map[string]struct{ params, metrics string }{
	"healthy": {
		"baseline_load=0.321 baseline_rate_rps=2.838 gpu=H100 gpu_memory_utilization=0.9 incident_output_mean_tokens=239 incident_prompt_mean_tokens=1317 incident_rate_rps=2.838 model=meta-llama/Llama-3.1-70B-Instruct num_gpu_blocks=29761 output_mean_tokens=239 prompt_mean_tokens=1317 replicas=1 router=least_queue tensor_parallel=4",
		"08980eddcb0c26ab77f04d67d0142d04f261b68af78bc4cc07c3a2a272871c70"},
	"healthy_busy": {
		"baseline_load=0.7 baseline_rate_rps=50.374 gpu=H200 gpu_memory_utilization=0.9 incident_output_mean_tokens=191 incident_prompt_mean_tokens=700 incident_rate_rps=50.374 model=meta-llama/Llama-3.1-8B-Instruct num_gpu_blocks=55884 output_mean_tokens=191 prompt_mean_tokens=700 replicas=2 router=least_queue tensor_parallel=1",
		"e3ea0101d7656ddf21ae1b33e27718ab3205311c32b0e5ceca541ffff99a481e"},
	"healthy_burst": {
		"baseline_load=0.3 baseline_rate_rps=11.153 burst_load=0.9921787915836078 burst_over_before_at_seconds=213 burst_seconds=27 gpu=H100 gpu_memory_utilization=0.9 incident_output_mean_tokens=143 incident_prompt_mean_tokens=718 incident_rate_rps=11.153 model=meta-llama/Llama-3.1-8B-Instruct num_gpu_blocks=27775 output_mean_tokens=143 prompt_mean_tokens=718 replicas=1 router=least_queue tensor_parallel=1",
		"fbc32355c956d2202f503538d3ee246f60bde43c21905ea0f7663a49fe7611d7"},
	"arrival_surge": {
		"baseline_load=0.475 baseline_rate_rps=13.501 gpu=H100 gpu_memory_utilization=0.9 incident_output_mean_tokens=264 incident_prompt_mean_tokens=1185 incident_rate_rps=33.703 model=meta-llama/Llama-3.1-70B-Instruct num_gpu_blocks=29761 onset_load=1.1850656367858081 output_mean_tokens=264 prompt_mean_tokens=1185 replicas=3 router=least_queue tensor_parallel=4",
		"b3b1ad8e404db02d68615683623fc21180630ffdeaad855a0db2d5a5cb74f615"},
	"long_prompt_burst": {
		"baseline_load=0.439 baseline_rate_rps=2.399 gpu=A100 gpu_memory_utilization=0.9 incident_output_mean_tokens=213 incident_prompt_mean_tokens=624 incident_rate_rps=2.399 long_prompt_busy_fraction=0.4 long_prompt_max_tokens=36000 long_prompts_per_minute=2.5 model=meta-llama/Llama-3.1-70B-Instruct num_gpu_blocks=29761 output_mean_tokens=213 prompt_mean_tokens=624 replicas=1 router=round_robin tensor_parallel=4",
		"305b51a4a10ff07c80aee91bdc4fa265dee910ecde61fb6e968832e3055b35c5"},
	"prompt_shift": {
		"baseline_load=0.335 baseline_rate_rps=3.131 gpu=H100 gpu_memory_utilization=0.9 incident_output_mean_tokens=152 incident_prompt_mean_tokens=10605 incident_rate_rps=1.131 model=meta-llama/Llama-3.1-70B-Instruct num_gpu_blocks=29761 output_mean_tokens=152 prompt_mean_tokens=2806 prompt_mul=3.779505311425376 replicas=2 router=least_queue tensor_parallel=4",
		"977c5b47adb99757fd150b251af20efb46fa87dd0f73d30d4c2959373b1ebad1"},
	"kv_pressure": {
		"baseline_kv_demand_fraction=0.33 baseline_load=0.359 baseline_rate_rps=11.709 gpu=H200 gpu_memory_utilization=0.211 incident_output_mean_tokens=744 incident_prompt_mean_tokens=699 incident_rate_rps=11.709 kv_demand_over_pool=1.47 max_model_len=97280 model=meta-llama/Llama-3.1-8B-Instruct num_gpu_blocks=6143 output_mean_tokens=271 output_mul=2.750543512541039 prompt_mean_tokens=699 replicas=1 router=round_robin tensor_parallel=1",
		"502b786931008f3561ab621028e1cb90a4c38ea5659214a17e2b590c5044c020"},
	"bandwidth_bound": {
		"baseline_load=0.302 baseline_rate_rps=8.187 gpu=H200 gpu_memory_utilization=0.9 incident_output_mean_tokens=422 incident_prompt_mean_tokens=179 incident_rate_rps=5.585 model=meta-llama/Llama-3.1-8B-Instruct num_gpu_blocks=55884 output_mean_tokens=189 prompt_mean_tokens=994 replicas=1 router=least_queue tensor_parallel=1",
		"6eb2bdae69964f21e9006af6772b2b691984d0de2c0ea793d42d67fe63d97a73"},
	"gpu_throttle": {
		"baseline_load=0.298 baseline_rate_rps=13.677 clock_factor=0.5606351268421761 gpu=H200 gpu_memory_utilization=0.9 incident_output_mean_tokens=183 incident_prompt_mean_tokens=1216 incident_rate_rps=13.677 model=meta-llama/Llama-3.1-8B-Instruct num_gpu_blocks=55884 output_mean_tokens=183 prompt_mean_tokens=1216 replicas=2 router=least_queue tensor_parallel=1 throttle_reason=sw_power_cap",
		"ad9cfb34c7d76fa9361ba3240770a61aff15a65a53a7a5a99781f594e5d385fb"},
	"prefix_cache_loss": {
		"baseline_load=0.222 baseline_rate_rps=3.481 cacheable_after=0.07099163480097534 gpu=A100 gpu_memory_utilization=0.9 incident_output_mean_tokens=314 incident_prompt_mean_tokens=429 incident_rate_rps=3.481 model=meta-llama/Llama-3.1-8B-Instruct num_gpu_blocks=27775 output_mean_tokens=314 prompt_mean_tokens=429 replicas=2 router=least_queue tensor_parallel=1",
		"7eb8f7a4059910456af393ead1e599a217af4d75a12c30978547657094d2d973"},
	"abort_storm": {
		"abort_probability=0.21655374289905166 baseline_load=0.324 baseline_rate_rps=1.769 gpu=A100 gpu_memory_utilization=0.9 incident_output_mean_tokens=315 incident_prompt_mean_tokens=1356 incident_rate_rps=1.769 model=meta-llama/Llama-3.1-70B-Instruct num_gpu_blocks=29761 output_mean_tokens=315 prompt_mean_tokens=1356 replicas=2 router=round_robin tensor_parallel=4",
		"460a6ec800a2283a3bee2c385dcab901854a9e1baeb2b62282e3534380120ca1"},
	"router_skew": {
		"baseline_load=0.461 baseline_rate_rps=13.176 gpu=H100 gpu_memory_utilization=0.9 hot_fraction=0.9054410642962598 incident_output_mean_tokens=124 incident_prompt_mean_tokens=1348 incident_rate_rps=13.176 model=meta-llama/Llama-3.1-70B-Instruct num_gpu_blocks=29761 output_mean_tokens=124 prompt_mean_tokens=1348 replicas=3 router=round_robin tensor_parallel=4",
		"039a5408f2dc0d1be2a795bbec0c227c67357221d86d56ff13a1d073a9c5076b"},
	"frontend_delay": {
		"baseline_load=0.392 baseline_rate_rps=10.357 frontend_delay_seconds=0.875314257711445 gpu=H100 gpu_memory_utilization=0.9 incident_output_mean_tokens=154 incident_prompt_mean_tokens=902 incident_rate_rps=10.357 model=meta-llama/Llama-3.1-70B-Instruct num_gpu_blocks=29761 output_mean_tokens=154 prompt_mean_tokens=902 replicas=2 router=round_robin tensor_parallel=4",
		"e97d84084db31c6b04df0294450197f434d0c488349e7266df16e0d8d0f196a6"},
}
