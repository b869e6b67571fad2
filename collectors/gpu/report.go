package gpu

import (
	"errors"
	"fmt"
)

// Counter is one whyslow_gpu_* series.
type Counter int

// Counters in the order the probe prints them.
const (
	CounterDRAMBandwidth Counter = iota
	CounterMemoryBusy
	CounterSMActive
	CounterSMOccupancy
	CounterUtilization
	CounterSMClock
	CounterSMClockMax
	CounterMemClock
	CounterMemClockMax
	CounterThrottle
	CounterPower
	CounterPowerLimit
	CounterTemperature
	CounterFBUsed
	CounterFBTotal
	CounterPCIeTx
	CounterPCIeRx
	CounterNVLinkTx
	CounterNVLinkRx
	numCounters
)

// Counters lists every counter in print order.
func Counters() []Counter {
	out := make([]Counter, numCounters)
	for i := range out {
		out[i] = Counter(i)
	}
	return out
}

var counterInfo = [numCounters]struct{ name, help string }{
	CounterDRAMBandwidth: {"dram_bandwidth_utilization", "Share of the GPU's theoretical DRAM bandwidth in use (GPM DRAM_BW_UTIL, Hopper and newer), 0-1."},
	CounterMemoryBusy:    {"memory_busy_ratio", "Share of time device memory was read or written (NVML memory utilisation), 0-1. Not bandwidth."},
	CounterSMActive:      {"sm_active", "Share of SMs busy (GPM SM_UTIL), or NVML GPU utilisation where GPM is missing, 0-1."},
	CounterSMOccupancy:   {"sm_occupancy", "Share of warps active against the maximum (GPM SM_OCCUPANCY), 0-1."},
	CounterUtilization:   {"utilization", "Share of time a kernel was running (NVML GPU utilisation), 0-1."},
	CounterSMClock:       {"sm_clock_mhz", "Current SM clock in MHz."},
	CounterSMClockMax:    {"sm_clock_max_mhz", "Maximum SM clock in MHz."},
	CounterMemClock:      {"mem_clock_mhz", "Current memory clock in MHz."},
	CounterMemClockMax:   {"mem_clock_max_mhz", "Maximum memory clock in MHz."},
	CounterThrottle:      {"clock_throttle_active", "Whether a clock event (throttle) reason is active, 0 or 1."},
	CounterPower:         {"power_watts", "Board power draw in watts."},
	CounterPowerLimit:    {"power_limit_watts", "Enforced power limit in watts."},
	CounterTemperature:   {"temperature_celsius", "GPU core temperature in degrees Celsius."},
	CounterFBUsed:        {"fb_used_bytes", "Framebuffer memory used in bytes."},
	CounterFBTotal:       {"fb_total_bytes", "Framebuffer memory size in bytes."},
	CounterPCIeTx:        {"pcie_tx_bytes_per_second", "PCIe traffic from the GPU in bytes per second."},
	CounterPCIeRx:        {"pcie_rx_bytes_per_second", "PCIe traffic to the GPU in bytes per second."},
	CounterNVLinkTx:      {"nvlink_tx_bytes_per_second", "NVLink traffic sent over all links in bytes per second (GPM)."},
	CounterNVLinkRx:      {"nvlink_rx_bytes_per_second", "NVLink traffic received over all links in bytes per second (GPM)."},
}

// String returns the series name without the whyslow_gpu_ prefix.
func (k Counter) String() string {
	if k < 0 || k >= numCounters {
		return fmt.Sprintf("counter(%d)", int(k))
	}
	return counterInfo[k].name
}

// Metric returns the full series name.
func (k Counter) Metric() string { return "whyslow_gpu_" + k.String() }

func (k Counter) help() string {
	if k < 0 || k >= numCounters {
		return ""
	}
	return counterInfo[k].help
}

// Reading is one counter's value on one GPU.
type Reading struct {
	Counter Counter
	// Reason is set for CounterThrottle only.
	Reason ThrottleReason
	Value  float64
	// Source says where the value came from when that matters ("GPM",
	// "fallback: ...").
	Source string
}

// GapKind says why a counter has no value.
type GapKind int

// Gap kinds.
const (
	GapFailed       GapKind = iota // the call failed
	GapNotSupported                // NVML: NOT_SUPPORTED on this GPU or driver
	GapNoPermission                // NVML: NO_PERMISSION
	GapNoGPM                       // needs GPM, which this GPU or driver lacks
	GapWarmingUp                   // GPM's first interval is not over
)

// String describes the kind.
func (k GapKind) String() string {
	switch k {
	case GapNotSupported:
		return "not supported"
	case GapNoPermission:
		return "no permission"
	case GapNoGPM:
		return "no GPM"
	case GapWarmingUp:
		return "warming up"
	}
	return "failed"
}

// Gap is a counter the collector could not read on one GPU.
type Gap struct {
	Counter Counter
	Kind    GapKind
	Detail  string
}

// GPU is what one cycle read on one GPU.
type GPU struct {
	Index    int
	UUID     string
	Model    string
	Readings []Reading
	Gaps     []Gap
	// ClockEventMask is NVML's raw clock event reason mask.
	ClockEventMask uint64
}

// Value returns the value of counter k (for CounterThrottle, of reason r).
func (g GPU) Value(k Counter, r ThrottleReason) (float64, bool) {
	for _, rd := range g.Readings {
		if rd.Counter == k && (k != CounterThrottle || rd.Reason == r) {
			return rd.Value, true
		}
	}
	return 0, false
}

// Gap returns the gap of counter k, if it has one.
func (g GPU) Gap(k Counter) (Gap, bool) {
	for _, gp := range g.Gaps {
		if gp.Counter == k {
			return gp, true
		}
	}
	return Gap{}, false
}

func (g *GPU) add(k Counter, v float64, source string) {
	g.Readings = append(g.Readings, Reading{Counter: k, Value: v, Source: source})
}

// gap records err as the reason every counter in ks has no value.
func (g *GPU) gap(err error, ks ...Counter) {
	g.gapAs(classify(err), err, ks...)
}

// gapNoGPM records err, a failure to use GPM at all, for counters that only
// GPM provides: NOT_SUPPORTED there means "no GPM here".
func (g *GPU) gapNoGPM(err error, ks ...Counter) {
	kind := classify(err)
	if kind == GapNotSupported {
		kind = GapNoGPM
	}
	g.gapAs(kind, err, ks...)
}

func (g *GPU) gapAs(kind GapKind, err error, ks ...Counter) {
	for _, k := range ks {
		g.Gaps = append(g.Gaps, Gap{Counter: k, Kind: kind, Detail: err.Error()})
	}
}

// classify maps an error to a GapKind.
func classify(err error) GapKind {
	switch {
	case errors.Is(err, errWarmingUp):
		return GapWarmingUp
	case errors.Is(err, ErrNotSupported):
		return GapNotSupported
	case errors.Is(err, ErrNoPermission):
		return GapNoPermission
	}
	return GapFailed
}

// SkippedGPU is a GPU the selection left out.
type SkippedGPU struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	Why   string `json:"why"`
}

// Report is one cycle's result.
type Report struct {
	Driver  string
	GPUs    []GPU
	Skipped []SkippedGPU
	// Notes are selection remarks: visible entries that matched nothing,
	// GPUs whose process list could not be read.
	Notes []string
}
