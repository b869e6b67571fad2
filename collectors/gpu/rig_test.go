//go:build cgo && linux

package gpu

import (
	"context"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// fakeClock is the clock and sleep of a test collector.
type fakeClock struct {
	mu     sync.Mutex
	t      time.Time
	sleeps []time.Duration
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1700000000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Sleep advances the clock by d at once.
func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sleeps = append(c.sleeps, d)
	c.t = c.t.Add(d)
	return nil
}

// gpuSpec is what a mock GPU reports. DRAM and SM activity are integrated
// over the fake clock into cumulative busy counters, the way GPM counters
// accumulate, so GPM metrics depend on which two samples are compared.
type gpuSpec struct {
	gpuUtil, memUtil       uint32
	sm, smMax, mem, memMax uint32
	reasons                uint64
	powerMW, limitMW       uint32
	tempC                  uint32
	pcieTxKB, pcieRxKB     uint32
	pids                   []uint32

	dramPct, smPct, occPct float64
	pcieTxMiB, pcieRxMiB   float64
	nvlTxMiB, nvlRxMiB     float64
	nvlinkUnsupported      bool

	dramBusy, smBusy float64 // percent-seconds since start
	last             time.Time
}

func (s *gpuSpec) accumulate(now time.Time) {
	if !s.last.IsZero() {
		dt := now.Sub(s.last).Seconds()
		s.dramBusy += dt * s.dramPct
		s.smBusy += dt * s.smPct
	}
	s.last = now
}

// fakeSample is a GPM sample of the rig: a time and cumulative counters.
type fakeSample struct {
	dev        int
	at         time.Time
	dram, sm   float64
	filled     bool
	freedCount *int
}

func (s *fakeSample) Free() nvml.Return { *s.freedCount++; return nvml.SUCCESS }
func (s *fakeSample) Get(nvml.Device) nvml.Return {
	panic("collector must take samples through Device.GpmSampleGet")
}
func (s *fakeSample) MigGet(nvml.Device, int) nvml.Return { panic("no MIG") }

// rig is a go-nvml mock server with the Func fields the collector needs.
type rig struct {
	srv   *server.Server
	clock *fakeClock
	specs []*gpuSpec
	mu    sync.Mutex
	freed int
}

func defaultSpec(i int) *gpuSpec {
	return &gpuSpec{
		gpuUtil: 90, memUtil: 55,
		sm: 1755, smMax: 1980, mem: 2619, memMax: 2619,
		powerMW: 512345, limitMW: 700000, tempC: 61,
		pcieTxKB: 2000, pcieRxKB: 3000,
		pids:    []uint32{uint32(1000 + i)},
		dramPct: 40, smPct: 70, occPct: 30,
		pcieTxMiB: 10, pcieRxMiB: 20, nvlTxMiB: 1000, nvlRxMiB: 1500,
	}
}

// newRig fills srv's devices with default specs. gpm says whether the
// devices report GPM support.
func newRig(srv *server.Server, gpm bool) *rig {
	r := &rig{srv: srv, clock: newFakeClock()}
	for i, nd := range srv.Devices {
		d := nd.(*server.Device)
		spec := defaultSpec(i)
		r.specs = append(r.specs, spec)
		d.MemoryInfo.Used = d.MemoryInfo.Total / 4 * 3
		d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: spec.gpuUtil, Memory: spec.memUtil}, nvml.SUCCESS
		}
		d.GetClockInfoFunc = func(ct nvml.ClockType) (uint32, nvml.Return) {
			switch ct {
			case nvml.CLOCK_SM:
				return spec.sm, nvml.SUCCESS
			case nvml.CLOCK_MEM:
				return spec.mem, nvml.SUCCESS
			}
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		d.GetMaxClockInfoFunc = func(ct nvml.ClockType) (uint32, nvml.Return) {
			switch ct {
			case nvml.CLOCK_SM:
				return spec.smMax, nvml.SUCCESS
			case nvml.CLOCK_MEM:
				return spec.memMax, nvml.SUCCESS
			}
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		d.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { return spec.reasons, nvml.SUCCESS }
		d.GetPowerUsageFunc = func() (uint32, nvml.Return) { return spec.powerMW, nvml.SUCCESS }
		d.GetEnforcedPowerLimitFunc = func() (uint32, nvml.Return) { return spec.limitMW, nvml.SUCCESS }
		d.GetTemperatureFunc = func(s nvml.TemperatureSensors) (uint32, nvml.Return) {
			if s != nvml.TEMPERATURE_GPU {
				return 0, nvml.ERROR_INVALID_ARGUMENT
			}
			return spec.tempC, nvml.SUCCESS
		}
		d.GetPcieThroughputFunc = func(c nvml.PcieUtilCounter) (uint32, nvml.Return) {
			if c == nvml.PCIE_UTIL_TX_BYTES {
				return spec.pcieTxKB, nvml.SUCCESS
			}
			return spec.pcieRxKB, nvml.SUCCESS
		}
		d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
			out := make([]nvml.ProcessInfo, len(spec.pids))
			for j, p := range spec.pids {
				out[j] = nvml.ProcessInfo{Pid: p}
			}
			return out, nvml.SUCCESS
		}
		d.GpmQueryDeviceSupportFunc = func() (nvml.GpmSupport, nvml.Return) {
			s := nvml.GpmSupport{Version: nvml.GPM_SUPPORT_VERSION}
			if gpm {
				s.IsSupportedDevice = 1
			}
			return s, nvml.SUCCESS
		}
		idx := i
		d.GpmSampleGetFunc = func(gs nvml.GpmSample) nvml.Return {
			s := gs.(*fakeSample)
			now := r.clock.Now()
			r.mu.Lock()
			defer r.mu.Unlock()
			spec.accumulate(now)
			s.dev, s.at, s.dram, s.sm, s.filled = idx, now, spec.dramBusy, spec.smBusy, true
			return nvml.SUCCESS
		}
	}
	srv.GpmSampleAllocFunc = func() (nvml.GpmSample, nvml.Return) {
		return &fakeSample{dev: -1, freedCount: &r.freed}, nvml.SUCCESS
	}
	srv.GpmSampleFreeFunc = func(gs nvml.GpmSample) nvml.Return { return gs.Free() }
	srv.GpmMetricsGetFunc = func(req *nvml.GpmMetricsGetType) nvml.Return {
		s1, ok1 := req.Sample1.(*fakeSample)
		s2, ok2 := req.Sample2.(*fakeSample)
		if !ok1 || !ok2 || !s1.filled || !s2.filled || s1.dev != s2.dev || req.Version != nvml.GPM_METRICS_GET_VERSION {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		dt := s2.at.Sub(s1.at).Seconds()
		if dt < 0.1 { // NVML wants samples at least 100 ms apart, older first
			return nvml.ERROR_INVALID_ARGUMENT
		}
		spec := r.specs[s1.dev]
		for i := 0; i < int(req.NumMetrics); i++ {
			m := &req.Metrics[i]
			m.NvmlReturn = uint32(nvml.SUCCESS)
			switch GPMMetric(m.MetricId) {
			case GPMDRAMBWUtil:
				m.Value = (s2.dram - s1.dram) / dt
			case GPMSMUtil:
				m.Value = (s2.sm - s1.sm) / dt
			case GPMSMOccupancy:
				m.Value = spec.occPct
			case GPMPCIeTxPerSec:
				m.Value = spec.pcieTxMiB
			case GPMPCIeRxPerSec:
				m.Value = spec.pcieRxMiB
			case GPMNVLinkTxPerSec, GPMNVLinkRxPerSec:
				if spec.nvlinkUnsupported {
					m.NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
					continue
				}
				m.Value = spec.nvlTxMiB
				if GPMMetric(m.MetricId) == GPMNVLinkRxPerSec {
					m.Value = spec.nvlRxMiB
				}
			default:
				m.NvmlReturn = uint32(nvml.ERROR_INVALID_ARGUMENT)
			}
		}
		return nvml.SUCCESS
	}
	return r
}

// set changes GPU i's spec from now on (activity so far is accounted first).
func (r *rig) set(i int, f func(*gpuSpec)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.specs[i].accumulate(r.clock.Now())
	f(r.specs[i])
}

// device returns mock device i.
func (r *rig) device(i int) *server.Device { return r.srv.Devices[i].(*server.Device) }

// collector returns a Collector on the rig's mock and clock.
func (r *rig) collector(t testing.TB, opts Options) *Collector {
	t.Helper()
	opts.Lib = FromNVML(r.srv)
	opts.Now = r.clock.Now
	opts.Sleep = r.clock.Sleep
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	c, err := New(opts)
	if err != nil {
		t.Fatalf("new collector: %v", err)
	}
	return c
}

// countCalls returns how many times each method of a moq mock (the server
// or a device) was called, by method name, using its XxxCalls accessors.
func countCalls(m any) map[string]int {
	out := map[string]int{}
	v := reflect.ValueOf(m)
	t := v.Type()
	for i := 0; i < t.NumMethod(); i++ {
		name := t.Method(i).Name
		if !strings.HasSuffix(name, "Calls") || t.Method(i).Type.NumIn() != 1 {
			continue
		}
		res := v.Method(i).Call(nil)
		if len(res) == 1 && res[0].Kind() == reflect.Slice && res[0].Len() > 0 {
			out[strings.TrimSuffix(name, "Calls")] = res[0].Len()
		}
	}
	return out
}
