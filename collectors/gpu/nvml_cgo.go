//go:build cgo && linux

package gpu

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// NVMLBuilt reports whether this build links go-nvml (cgo on Linux).
const NVMLBuilt = true

// NewNVML returns the system NVML (libnvidia-ml.so.1, loaded on Init).
func NewNVML() Lib {
	return FromNVML(nvml.New())
}

// FromNVML adapts a go-nvml Interface (the real library or a mock from
// github.com/NVIDIA/go-nvml/pkg/nvml/mock) to Lib.
func FromNVML(l nvml.Interface) Lib {
	return &nvmlLib{l: l}
}

// nvmlLib adapts nvml.Interface. Symbols that older drivers lack are looked
// up once after Init, because calling a missing one kills the process.
type nvmlLib struct {
	l nvml.Interface

	mu          sync.Mutex
	initialised bool
	ready       atomic.Bool // initialised, readable without mu on every call
	eventsNew   bool        // nvmlDeviceGetCurrentClocksEventReasons exists (driver >= 535)
	gpm         bool        // nvmlGpmQueryDeviceSupport exists

	gpmMu  sync.Mutex
	gpmReq *nvml.GpmMetricsGetType // reused: it holds 477 metric slots (~19 KB)
}

// wrap turns an NVML return code into an *Error, nil on success.
func wrap(op string, ret nvml.Return) error {
	if ret == nvml.SUCCESS {
		return nil
	}
	kind := KindOther
	switch ret {
	case nvml.ERROR_NOT_SUPPORTED:
		kind = KindNotSupported
	case nvml.ERROR_NO_PERMISSION:
		kind = KindNoPermission
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		kind = KindLibraryNotFound
	case nvml.ERROR_DRIVER_NOT_LOADED:
		kind = KindDriverNotLoaded
	case nvml.ERROR_FUNCTION_NOT_FOUND:
		kind = KindFunctionNotFound
	case nvml.ERROR_GPU_IS_LOST:
		kind = KindGPULost
	}
	return &Error{Op: op, Code: int(ret), Message: ret.Error(), Kind: kind}
}

// errNotInitialised is returned, without calling NVML, by every method used
// before a successful Init or after Shutdown: such a call could kill the
// process with an unresolved symbol.
func errNotInitialised(op string) error {
	return &Error{Op: op, Message: "NVML not initialised (refused to call it)", Kind: KindOther}
}

func (a *nvmlLib) Init() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.initialised {
		return nil
	}
	if err := wrap("Init", a.l.Init()); err != nil {
		return err
	}
	a.initialised = true
	a.ready.Store(true)
	if ext := a.l.Extensions(); ext != nil {
		a.eventsNew = ext.LookupSymbol("nvmlDeviceGetCurrentClocksEventReasons") == nil
		a.gpm = ext.LookupSymbol("nvmlGpmQueryDeviceSupport") == nil &&
			ext.LookupSymbol("nvmlGpmMetricsGet") == nil
	}
	return nil
}

func (a *nvmlLib) Shutdown() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.initialised {
		return nil
	}
	a.initialised = false
	a.ready.Store(false)
	return wrap("Shutdown", a.l.Shutdown())
}

func (a *nvmlLib) DriverVersion() (string, error) {
	if !a.ready.Load() {
		return "", errNotInitialised("DriverVersion")
	}
	v, ret := a.l.SystemGetDriverVersion()
	return v, wrap("SystemGetDriverVersion", ret)
}

func (a *nvmlLib) DeviceCount() (int, error) {
	if !a.ready.Load() {
		return 0, errNotInitialised("DeviceCount")
	}
	n, ret := a.l.DeviceGetCount()
	return n, wrap("DeviceGetCount", ret)
}

func (a *nvmlLib) DeviceByIndex(index int) (Device, error) {
	if !a.ready.Load() {
		return nil, errNotInitialised("DeviceByIndex")
	}
	d, ret := a.l.DeviceGetHandleByIndex(index)
	if err := wrap(fmt.Sprintf("DeviceGetHandleByIndex(%d)", index), ret); err != nil {
		return nil, err
	}
	return &nvmlDevice{lib: a, d: d}, nil
}

// nvmlSample holds one allocated nvml.GpmSample.
type nvmlSample struct {
	lib *nvmlLib
	s   nvml.GpmSample
}

func (s *nvmlSample) Free() error {
	if !s.lib.ready.Load() {
		return errNotInitialised("GpmSampleFree")
	}
	return wrap("GpmSampleFree", s.lib.l.GpmSampleFree(s.s))
}

func (a *nvmlLib) GPMSampleAlloc() (GPMSample, error) {
	if !a.ready.Load() {
		return nil, errNotInitialised("GPMSampleAlloc")
	}
	if !a.gpm {
		return nil, &Error{Op: "GpmSampleAlloc", Message: "driver has no GPM functions", Kind: KindFunctionNotFound}
	}
	s, ret := a.l.GpmSampleAlloc()
	if err := wrap("GpmSampleAlloc", ret); err != nil {
		return nil, err
	}
	return &nvmlSample{lib: a, s: s}, nil
}

func (a *nvmlLib) GPMMetrics(older, newer GPMSample, ids []GPMMetric) ([]GPMResult, error) {
	if !a.ready.Load() {
		return nil, errNotInitialised("GPMMetrics")
	}
	s1, ok1 := older.(*nvmlSample)
	s2, ok2 := newer.(*nvmlSample)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("gpm metrics: samples not from this library")
	}
	if len(ids) > gpmMetricsCapacity {
		return nil, fmt.Errorf("gpm metrics: %d metrics, at most %d", len(ids), gpmMetricsCapacity)
	}
	a.gpmMu.Lock()
	defer a.gpmMu.Unlock()
	if a.gpmReq == nil {
		a.gpmReq = &nvml.GpmMetricsGetType{}
	}
	req := a.gpmReq
	req.Version = nvml.GPM_METRICS_GET_VERSION
	req.NumMetrics = uint32(len(ids))
	req.Sample1, req.Sample2 = s1.s, s2.s
	for i, id := range ids {
		req.Metrics[i] = nvml.GpmMetric{MetricId: uint32(id)}
	}
	if err := wrap("GpmMetricsGet", a.l.GpmMetricsGet(req)); err != nil {
		return nil, err
	}
	out := make([]GPMResult, len(ids))
	for i, id := range ids {
		m := req.Metrics[i]
		out[i] = GPMResult{Value: m.Value, Err: wrap("GpmMetricsGet "+id.String(), nvml.Return(m.NvmlReturn))}
	}
	return out, nil
}

// nvmlDevice adapts nvml.Device.
type nvmlDevice struct {
	lib *nvmlLib
	d   nvml.Device
}

func (d *nvmlDevice) Name() (string, error) {
	if !d.lib.ready.Load() {
		return "", errNotInitialised("Name")
	}
	v, ret := d.d.GetName()
	return v, wrap("GetName", ret)
}

func (d *nvmlDevice) UUID() (string, error) {
	if !d.lib.ready.Load() {
		return "", errNotInitialised("UUID")
	}
	v, ret := d.d.GetUUID()
	return v, wrap("GetUUID", ret)
}

func (d *nvmlDevice) MemoryInfo() (Memory, error) {
	if !d.lib.ready.Load() {
		return Memory{}, errNotInitialised("MemoryInfo")
	}
	m, ret := d.d.GetMemoryInfo()
	return Memory{Total: m.Total, Used: m.Used}, wrap("GetMemoryInfo", ret)
}

func (d *nvmlDevice) UtilizationRates() (Utilization, error) {
	if !d.lib.ready.Load() {
		return Utilization{}, errNotInitialised("UtilizationRates")
	}
	u, ret := d.d.GetUtilizationRates()
	return Utilization{GPU: u.Gpu, Memory: u.Memory}, wrap("GetUtilizationRates", ret)
}

func clockType(c Clock) nvml.ClockType {
	if c == ClockMem {
		return nvml.CLOCK_MEM
	}
	return nvml.CLOCK_SM
}

func (d *nvmlDevice) ClockMHz(c Clock) (uint32, error) {
	if !d.lib.ready.Load() {
		return 0, errNotInitialised("ClockMHz")
	}
	v, ret := d.d.GetClockInfo(clockType(c))
	return v, wrap("GetClockInfo("+c.String()+")", ret)
}

func (d *nvmlDevice) MaxClockMHz(c Clock) (uint32, error) {
	if !d.lib.ready.Load() {
		return 0, errNotInitialised("MaxClockMHz")
	}
	v, ret := d.d.GetMaxClockInfo(clockType(c))
	return v, wrap("GetMaxClockInfo("+c.String()+")", ret)
}

// reasonBits maps go-nvml's clock event bits to our reasons. The event and
// throttle constant families share their bit values.
var reasonBits = [...]struct {
	bit    uint64
	reason ThrottleReason
}{
	{nvml.ClocksEventReasonSwPowerCap, ReasonSWPowerCap},
	{nvml.ClocksThrottleReasonHwSlowdown, ReasonHWSlowdown},
	{nvml.ClocksThrottleReasonHwThermalSlowdown, ReasonHWThermalSlowdown},
	{nvml.ClocksEventReasonSwThermalSlowdown, ReasonSWThermalSlowdown},
	{nvml.ClocksThrottleReasonHwPowerBrakeSlowdown, ReasonHWPowerBrake},
	{nvml.ClocksEventReasonGpuIdle, ReasonGPUIdle},
	{nvml.ClocksEventReasonApplicationsClocksSetting, ReasonApplicationsClocksSetting},
	{nvml.ClocksEventReasonSyncBoost, ReasonSyncBoost},
	{nvml.ClocksEventReasonDisplayClockSetting, ReasonDisplayClock},
}

// decodeClockEvents names the bits of an NVML clock event reason mask.
func decodeClockEvents(mask uint64) ClockEvents {
	ev := ClockEvents{Raw: mask}
	for _, rb := range reasonBits {
		if mask&rb.bit != 0 {
			ev.Active = ev.Active.With(rb.reason)
		}
	}
	return ev
}

func (d *nvmlDevice) ClockEvents() (ClockEvents, error) {
	if !d.lib.ready.Load() {
		return ClockEvents{}, errNotInitialised("ClockEvents")
	}
	var (
		mask uint64
		ret  nvml.Return
		op   string
	)
	if d.lib.eventsNew {
		op = "GetCurrentClocksEventReasons"
		mask, ret = d.d.GetCurrentClocksEventReasons()
	} else {
		op = "GetCurrentClocksThrottleReasons"
		mask, ret = d.d.GetCurrentClocksThrottleReasons()
	}
	if err := wrap(op, ret); err != nil {
		return ClockEvents{}, err
	}
	return decodeClockEvents(mask), nil
}

func (d *nvmlDevice) PowerUsageMilliwatts() (uint32, error) {
	if !d.lib.ready.Load() {
		return 0, errNotInitialised("PowerUsageMilliwatts")
	}
	v, ret := d.d.GetPowerUsage()
	return v, wrap("GetPowerUsage", ret)
}

func (d *nvmlDevice) PowerLimitMilliwatts() (uint32, error) {
	if !d.lib.ready.Load() {
		return 0, errNotInitialised("PowerLimitMilliwatts")
	}
	v, ret := d.d.GetEnforcedPowerLimit()
	return v, wrap("GetEnforcedPowerLimit", ret)
}

func (d *nvmlDevice) TemperatureCelsius() (uint32, error) {
	if !d.lib.ready.Load() {
		return 0, errNotInitialised("TemperatureCelsius")
	}
	v, ret := d.d.GetTemperature(nvml.TEMPERATURE_GPU)
	return v, wrap("GetTemperature", ret)
}

func (d *nvmlDevice) PCIeThroughputKBps(dir Direction) (uint32, error) {
	if !d.lib.ready.Load() {
		return 0, errNotInitialised("PCIeThroughputKBps")
	}
	c := nvml.PCIE_UTIL_TX_BYTES
	if dir == RX {
		c = nvml.PCIE_UTIL_RX_BYTES
	}
	v, ret := d.d.GetPcieThroughput(c)
	return v, wrap("GetPcieThroughput("+dir.String()+")", ret)
}

func (d *nvmlDevice) ComputeProcessPIDs() ([]uint32, error) {
	if !d.lib.ready.Load() {
		return nil, errNotInitialised("ComputeProcessPIDs")
	}
	procs, ret := d.d.GetComputeRunningProcesses()
	if err := wrap("GetComputeRunningProcesses", ret); err != nil {
		return nil, err
	}
	pids := make([]uint32, len(procs))
	for i, p := range procs {
		pids[i] = p.Pid
	}
	return pids, nil
}

func (d *nvmlDevice) GPMSupported() (bool, error) {
	if !d.lib.ready.Load() {
		return false, errNotInitialised("GPMSupported")
	}
	if !d.lib.gpm {
		return false, &Error{Op: "GpmQueryDeviceSupport", Message: "driver has no GPM functions", Kind: KindFunctionNotFound}
	}
	s, ret := d.d.GpmQueryDeviceSupport()
	if err := wrap("GpmQueryDeviceSupport", ret); err != nil {
		return false, err
	}
	return s.IsSupportedDevice != 0, nil
}

func (d *nvmlDevice) GPMSampleGet(s GPMSample) error {
	if !d.lib.ready.Load() {
		return errNotInitialised("GPMSampleGet")
	}
	ns, ok := s.(*nvmlSample)
	if !ok {
		return fmt.Errorf("gpm sample get: sample not from this library")
	}
	return wrap("GpmSampleGet", d.d.GpmSampleGet(ns.s))
}
