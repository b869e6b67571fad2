package triage

import (
	"strings"
)

// gpuMemoryGiB maps a GPU class to its memory, for the engines' scheduler
// defaults (engines.md §9 keys them on memory size and name).
var gpuMemoryGiB = []struct {
	match string
	gib   float64
}{
	// Most specific first.
	{"a100-40", 40}, {"a100-80", 80}, {"a100", 80},
	{"h100-nvl", 94}, {"h100", 80}, {"h200", 141}, {"h20", 96}, {"gh200", 96},
	{"b200", 180}, {"b100", 180}, {"gb200", 186}, {"mi300x", 192}, {"mi300", 192}, {"mi325", 256},
	{"l40s", 48}, {"l40", 48}, {"l4", 24}, {"a10g", 24}, {"a10", 24}, {"a6000", 48},
	{"t4", 16}, {"v100", 32}, {"rtx 4090", 24}, {"4090", 24}, {"5090", 32},
}

// GPUMemoryGiB returns the memory of a GPU class such as "H100" or
// "NVIDIA A100-SXM4-40GB", or 0 when the class is unknown.
func GPUMemoryGiB(class string) float64 {
	c := strings.ToLower(class)
	c = strings.ReplaceAll(c, "_", "-")
	if strings.Contains(c, "a100") && strings.Contains(c, "40g") {
		return 40
	}
	for _, g := range gpuMemoryGiB {
		if strings.Contains(c, g.match) {
			return g.gib
		}
	}
	return 0
}
