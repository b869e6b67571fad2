package gpu

import (
	"errors"
	"fmt"
)

// Lib is the part of NVML the collector uses. The cgo build adapts
// github.com/NVIDIA/go-nvml to it (FromNVML); other builds get a stub whose
// Init always fails. Init must succeed before any other method is called:
// after a failed Init, a call into NVML can kill the process with an
// unresolved symbol, and the Collector never makes one.
type Lib interface {
	Init() error
	Shutdown() error
	DriverVersion() (string, error)
	DeviceCount() (int, error)
	DeviceByIndex(index int) (Device, error)
	// GPMSampleAlloc allocates a buffer for one GPM sample.
	GPMSampleAlloc() (GPMSample, error)
	// GPMMetrics computes metrics between two samples of one device; the
	// results line up with ids.
	GPMMetrics(older, newer GPMSample, ids []GPMMetric) ([]GPMResult, error)
}

// Device is one GPU as NVML sees it. Units are NVML's.
type Device interface {
	Name() (string, error)
	UUID() (string, error)
	MemoryInfo() (Memory, error)
	// UtilizationRates returns percents (0-100) over NVML's last sample
	// period: GPU = a kernel was running, Memory = device memory was read
	// or written. Memory is a busy-time percent, not bandwidth.
	UtilizationRates() (Utilization, error)
	// ClockMHz and MaxClockMHz return the current and maximum clock.
	ClockMHz(Clock) (uint32, error)
	MaxClockMHz(Clock) (uint32, error)
	// ClockEvents returns the current clock event (throttle) reasons.
	ClockEvents() (ClockEvents, error)
	// PowerUsageMilliwatts and PowerLimitMilliwatts return the board power
	// draw and the enforced limit.
	PowerUsageMilliwatts() (uint32, error)
	PowerLimitMilliwatts() (uint32, error)
	// TemperatureCelsius returns the GPU core temperature.
	TemperatureCelsius() (uint32, error)
	// PCIeThroughputKBps returns PCIe throughput over NVML's 20 ms window.
	PCIeThroughputKBps(Direction) (uint32, error)
	// ComputeProcessPIDs lists the PIDs of compute processes on the GPU.
	ComputeProcessPIDs() ([]uint32, error)
	// GPMSupported reports whether the GPU has GPM (Hopper and newer).
	GPMSupported() (bool, error)
	// GPMSampleGet fills s with the device's current GPM counters.
	GPMSampleGet(s GPMSample) error
}

// GPMSample is an allocated GPM sample buffer.
type GPMSample interface {
	Free() error
}

// GPMMetric is an NVML GPM metric id (nvmlGpmMetricId_t).
type GPMMetric uint32

// GPM metric ids the collector reads (values from nvml.h).
const (
	GPMSMUtil          GPMMetric = 2  // percent of SMs busy, 0-100
	GPMSMOccupancy     GPMMetric = 3  // percent of warps active vs maximum, 0-100
	GPMDRAMBWUtil      GPMMetric = 10 // percent of DRAM bandwidth used vs maximum, 0-100
	GPMPCIeTxPerSec    GPMMetric = 20 // MiB/s
	GPMPCIeRxPerSec    GPMMetric = 21 // MiB/s
	GPMNVLinkRxPerSec  GPMMetric = 60 // MiB/s, all links
	GPMNVLinkTxPerSec  GPMMetric = 61 // MiB/s, all links
	gpmMetricsCapacity           = 477
)

// String names the metric like nvml.h does, without the prefix.
func (m GPMMetric) String() string {
	switch m {
	case GPMSMUtil:
		return "SM_UTIL"
	case GPMSMOccupancy:
		return "SM_OCCUPANCY"
	case GPMDRAMBWUtil:
		return "DRAM_BW_UTIL"
	case GPMPCIeTxPerSec:
		return "PCIE_TX_PER_SEC"
	case GPMPCIeRxPerSec:
		return "PCIE_RX_PER_SEC"
	case GPMNVLinkRxPerSec:
		return "NVLINK_TOTAL_RX_PER_SEC"
	case GPMNVLinkTxPerSec:
		return "NVLINK_TOTAL_TX_PER_SEC"
	}
	return fmt.Sprintf("GPM_METRIC(%d)", uint32(m))
}

// GPMResult is one computed GPM metric: a value, or why there is none.
type GPMResult struct {
	Value float64
	Err   error
}

// Memory is the framebuffer size and use, in bytes.
type Memory struct {
	Total, Used uint64
}

// Utilization holds NVML's utilisation rates, in percent.
type Utilization struct {
	GPU, Memory uint32
}

// Clock selects a clock domain.
type Clock int

// Clock domains the collector reads.
const (
	ClockSM Clock = iota
	ClockMem
)

// String returns "sm" or "mem".
func (c Clock) String() string {
	switch c {
	case ClockSM:
		return "sm"
	case ClockMem:
		return "mem"
	}
	return fmt.Sprintf("clock(%d)", int(c))
}

// Direction selects transmit or receive.
type Direction int

// Directions, seen from the GPU.
const (
	TX Direction = iota
	RX
)

// String returns "tx" or "rx".
func (d Direction) String() string {
	switch d {
	case TX:
		return "tx"
	case RX:
		return "rx"
	}
	return fmt.Sprintf("direction(%d)", int(d))
}

// ThrottleReason is a decoded clock event (throttle) reason.
type ThrottleReason int

// Known throttle reasons. Their String values are the `reason` label of
// whyslow_gpu_clock_throttle_active.
const (
	ReasonSWPowerCap ThrottleReason = iota
	ReasonHWSlowdown
	ReasonHWThermalSlowdown
	ReasonSWThermalSlowdown
	ReasonHWPowerBrake
	ReasonGPUIdle
	ReasonApplicationsClocksSetting
	ReasonSyncBoost
	ReasonDisplayClock
	numThrottleReasons
)

// ThrottleReasons lists every known reason in label order.
func ThrottleReasons() []ThrottleReason {
	out := make([]ThrottleReason, numThrottleReasons)
	for i := range out {
		out[i] = ThrottleReason(i)
	}
	return out
}

// String returns the reason's label value.
func (r ThrottleReason) String() string {
	switch r {
	case ReasonSWPowerCap:
		return "sw_power_cap"
	case ReasonHWSlowdown:
		return "hw_slowdown"
	case ReasonHWThermalSlowdown:
		return "hw_thermal_slowdown"
	case ReasonSWThermalSlowdown:
		return "sw_thermal_slowdown"
	case ReasonHWPowerBrake:
		return "hw_power_brake"
	case ReasonGPUIdle:
		return "gpu_idle"
	case ReasonApplicationsClocksSetting:
		return "applications_clocks_setting"
	case ReasonSyncBoost:
		return "sync_boost"
	case ReasonDisplayClock:
		return "display_clock"
	}
	return fmt.Sprintf("reason(%d)", int(r))
}

// ThrottleSet is a set of ThrottleReasons.
type ThrottleSet uint32

// Has reports whether r is in the set.
func (s ThrottleSet) Has(r ThrottleReason) bool { return s&(1<<uint(r)) != 0 }

// With returns the set plus r.
func (s ThrottleSet) With(r ThrottleReason) ThrottleSet { return s | 1<<uint(r) }

// ClockEvents is a decoded clock event reason mask.
type ClockEvents struct {
	Active ThrottleSet
	// Raw is NVML's bit mask, including bits whyslow does not name.
	Raw uint64
}

// ErrorKind classifies an NVML failure.
type ErrorKind int

// Error kinds the collector tells apart.
const (
	KindOther ErrorKind = iota
	KindNotSupported
	KindNoPermission
	KindLibraryNotFound
	KindDriverNotLoaded
	KindFunctionNotFound
	KindGPULost
	KindUnavailable // NVML not built in (CGO_ENABLED=0 or not Linux)
)

// String describes the kind in a few words.
func (k ErrorKind) String() string {
	switch k {
	case KindNotSupported:
		return "not supported"
	case KindNoPermission:
		return "no permission"
	case KindLibraryNotFound:
		return "library not found"
	case KindDriverNotLoaded:
		return "driver not loaded"
	case KindFunctionNotFound:
		return "function not found"
	case KindGPULost:
		return "GPU lost"
	case KindUnavailable:
		return "not available in this build"
	}
	return "error"
}

// Sentinels for errors.Is on NVML failures.
var (
	ErrNotSupported = errors.New("not supported")
	ErrNoPermission = errors.New("no permission")
	ErrUnavailable  = errors.New("NVML not available")
)

// Error is a failed NVML call.
type Error struct {
	Op      string // our method, e.g. "GetPowerUsage"
	Code    int    // nvmlReturn_t, 0 when not from NVML
	Message string // NVML's error string
	Kind    ErrorKind
}

// Error returns "nvml OP: MESSAGE".
func (e *Error) Error() string {
	return fmt.Sprintf("nvml %s: %s", e.Op, e.Message)
}

// Is matches ErrNotSupported, ErrNoPermission and ErrUnavailable by kind.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrNotSupported:
		return e.Kind == KindNotSupported || e.Kind == KindFunctionNotFound
	case ErrNoPermission:
		return e.Kind == KindNoPermission
	case ErrUnavailable:
		return e.Kind == KindUnavailable || e.Kind == KindLibraryNotFound || e.Kind == KindDriverNotLoaded
	}
	return false
}

// kindOf returns the ErrorKind of err, KindOther when it is not an *Error.
func kindOf(err error) ErrorKind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return KindOther
}
