//go:build cgo && linux

package gpu

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/whyslow/whyslow/collectors"
)

func read(t *testing.T, c *Collector) Report {
	t.Helper()
	rep, err := c.Read(context.Background())
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return rep
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// gatherSeries registers c with a pedantic registry (which checks the
// metrics against Describe) and returns `name{gpu="i"[,reason="r"]}` → value.
func gatherSeries(t *testing.T, c prometheus.Collector) (map[string]float64, map[string]map[string]string) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatalf("register: %v", err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	vals := map[string]float64{}
	labels := map[string]map[string]string{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			ls := map[string]string{}
			for _, l := range m.GetLabel() {
				ls[l.GetName()] = l.GetValue()
			}
			key := fmt.Sprintf("%s{gpu=%q}", mf.GetName(), ls["gpu"])
			if r, ok := ls["reason"]; ok {
				key = fmt.Sprintf("%s{gpu=%q,reason=%q}", mf.GetName(), ls["gpu"], r)
			}
			vals[key] = m.GetGauge().GetValue()
			labels[key] = ls
		}
	}
	return vals, labels
}

func TestH100Values(t *testing.T) {
	r := newRig(dgxh100.New(), true)
	r.set(0, func(s *gpuSpec) {
		s.reasons = nvml.ClocksEventReasonSwPowerCap | nvml.ClocksThrottleReasonHwThermalSlowdown
	})
	c := r.collector(t, Options{})
	vals, labels := gatherSeries(t, c)

	want := map[string]float64{
		"whyslow_gpu_dram_bandwidth_utilization": 0.40,
		"whyslow_gpu_memory_busy_ratio":          0.55,
		"whyslow_gpu_sm_active":                  0.70,
		"whyslow_gpu_sm_occupancy":               0.30,
		"whyslow_gpu_utilization":                0.90,
		"whyslow_gpu_sm_clock_mhz":               1755,
		"whyslow_gpu_sm_clock_max_mhz":           1980,
		"whyslow_gpu_mem_clock_mhz":              2619,
		"whyslow_gpu_mem_clock_max_mhz":          2619,
		"whyslow_gpu_power_watts":                512.345,
		"whyslow_gpu_power_limit_watts":          700,
		"whyslow_gpu_temperature_celsius":        61,
		"whyslow_gpu_fb_used_bytes":              60 << 30, // 3/4 of 80 GiB
		"whyslow_gpu_fb_total_bytes":             80 << 30,
		"whyslow_gpu_pcie_tx_bytes_per_second":   10 << 20,
		"whyslow_gpu_pcie_rx_bytes_per_second":   20 << 20,
		"whyslow_gpu_nvlink_tx_bytes_per_second": 1000 << 20,
		"whyslow_gpu_nvlink_rx_bytes_per_second": 1500 << 20,
	}
	for name, w := range want {
		t.Run(name, func(t *testing.T) {
			for gpu := 0; gpu < 8; gpu++ {
				key := fmt.Sprintf("%s{gpu=%q}", name, fmt.Sprint(gpu))
				got, ok := vals[key]
				if !ok || !near(got, w) {
					t.Errorf("%s = %v (present %v), want %v", key, got, ok, w)
				}
			}
		})
	}
	for _, reason := range ThrottleReasons() {
		key := fmt.Sprintf("whyslow_gpu_clock_throttle_active{gpu=\"0\",reason=%q}", reason)
		w := 0.0
		if reason == ReasonSWPowerCap || reason == ReasonHWThermalSlowdown {
			w = 1
		}
		if got, ok := vals[key]; !ok || got != w {
			t.Errorf("%s = %v (present %v), want %v", key, got, ok, w)
		}
	}
	ls := labels[`whyslow_gpu_power_watts{gpu="3"}`]
	if ls["model"] != "NVIDIA H100 80GB HBM3" || ls["uuid"] != r.device(3).UUID {
		t.Errorf("labels = %v, want model NVIDIA H100 80GB HBM3 and uuid %s", ls, r.device(3).UUID)
	}
	if len(vals) != 8*(len(want)+len(ThrottleReasons())) {
		t.Errorf("%d series, want %d", len(vals), 8*(len(want)+len(ThrottleReasons())))
	}
	if len(r.clock.sleeps) != 1 || r.clock.sleeps[0] != MinGPMInterval {
		t.Errorf("sleeps = %v, want one of %s for the first GPM interval", r.clock.sleeps, MinGPMInterval)
	}
}

func TestGPMTwoSamples(t *testing.T) {
	r := newRig(dgxh100.NewWithGPUs(gpus.H100_SXM5_80GB), true)
	c := r.collector(t, Options{})
	dram := func(rep Report) float64 {
		t.Helper()
		v, ok := rep.GPUs[0].Value(CounterDRAMBandwidth, 0)
		if !ok {
			t.Fatalf("no DRAM bandwidth: gaps %+v", rep.GPUs[0].Gaps)
		}
		return v
	}
	samples := func() int { return len(r.device(0).GpmSampleGetCalls()) }

	// First cycle: two samples, one sleep between them.
	if got := dram(read(t, c)); !near(got, 0.40) {
		t.Errorf("first cycle dram = %v, want 0.40", got)
	}
	if samples() != 2 || len(r.clock.sleeps) != 1 {
		t.Errorf("first cycle: %d samples, sleeps %v; want 2 samples and one sleep", samples(), r.clock.sleeps)
	}

	// Steady state: one new sample against the previous cycle's, no sleep.
	// DRAM went from 40% to 80% for the whole 15 s since: the value must be
	// 0.80, not an average since the first sample.
	r.set(0, func(s *gpuSpec) { s.dramPct = 80 })
	r.clock.Advance(15 * time.Second)
	if got := dram(read(t, c)); !near(got, 0.80) {
		t.Errorf("second cycle dram = %v, want 0.80", got)
	}
	// Half the interval at 20%, half at 60%: the mean.
	r.set(0, func(s *gpuSpec) { s.dramPct = 20 })
	r.clock.Advance(5 * time.Second)
	r.set(0, func(s *gpuSpec) { s.dramPct = 60 })
	r.clock.Advance(5 * time.Second)
	if got := dram(read(t, c)); !near(got, 0.40) {
		t.Errorf("third cycle dram = %v, want 0.40", got)
	}
	if samples() != 4 || len(r.clock.sleeps) != 1 {
		t.Errorf("after 3 cycles: %d samples, sleeps %v; want 4 samples and still one sleep", samples(), r.clock.sleeps)
	}

	// Too soon (< 100 ms): the previous values are repeated, no sample taken.
	r.set(0, func(s *gpuSpec) { s.dramPct = 99 })
	r.clock.Advance(50 * time.Millisecond)
	if got := dram(read(t, c)); !near(got, 0.40) {
		t.Errorf("too-soon cycle dram = %v, want the previous 0.40", got)
	}
	if samples() != 4 {
		t.Errorf("too-soon cycle took a sample (%d)", samples())
	}

	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if r.freed != 2 {
		t.Errorf("freed %d samples on close, want 2", r.freed)
	}
}

func TestGPMFirstCycleCancelled(t *testing.T) {
	r := newRig(dgxh100.NewWithGPUs(gpus.H100_SXM5_80GB), true)
	c := r.collector(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Read(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context canceled", err)
	}
}

func TestGPMWarmingUp(t *testing.T) {
	// A Sleep that returns without the clock moving: the first cycle
	// reports DRAM bandwidth as warming up instead of a bogus value.
	r := newRig(dgxh100.NewWithGPUs(gpus.H100_SXM5_80GB), true)
	c := r.collector(t, Options{})
	c.opts.Sleep = func(context.Context, time.Duration) error { return nil }
	g := read(t, c).GPUs[0]
	if gp, ok := g.Gap(CounterDRAMBandwidth); !ok || gp.Kind != GapWarmingUp {
		t.Errorf("gap = %+v (present %v), want warming up", gp, ok)
	}
	if _, ok := g.Value(CounterMemoryBusy, 0); !ok {
		t.Error("memory busy missing while GPM warms up")
	}
}

func TestThrottleDecoding(t *testing.T) {
	all := ThrottleReasons()
	for _, tc := range []struct {
		name string
		mask uint64
		want []ThrottleReason
	}{
		{"none", nvml.ClocksEventReasonNone, nil},
		{"power cap", nvml.ClocksEventReasonSwPowerCap, []ThrottleReason{ReasonSWPowerCap}},
		{"thermal", nvml.ClocksThrottleReasonHwThermalSlowdown | nvml.ClocksEventReasonSwThermalSlowdown, []ThrottleReason{ReasonHWThermalSlowdown, ReasonSWThermalSlowdown}},
		{"hw slowdown and power brake", nvml.ClocksThrottleReasonHwSlowdown | nvml.ClocksThrottleReasonHwPowerBrakeSlowdown, []ThrottleReason{ReasonHWSlowdown, ReasonHWPowerBrake}},
		{"idle", nvml.ClocksEventReasonGpuIdle, []ThrottleReason{ReasonGPUIdle}},
		{"settings", nvml.ClocksEventReasonApplicationsClocksSetting | nvml.ClocksEventReasonSyncBoost | nvml.ClocksEventReasonDisplayClockSetting, []ThrottleReason{ReasonApplicationsClocksSetting, ReasonSyncBoost, ReasonDisplayClock}},
		{"unnamed bits only", nvml.ClocksEventReasonBoardLimit | nvml.ClocksEventReasonReliability, nil},
		{"all", nvml.ClocksEventReasonAll, all},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(dgxh100.NewWithGPUs(gpus.H100_SXM5_80GB), true)
			r.set(0, func(s *gpuSpec) { s.reasons = tc.mask })
			g := read(t, r.collector(t, Options{})).GPUs[0]
			var got []ThrottleReason
			for _, reason := range all {
				v, ok := g.Value(CounterThrottle, reason)
				if !ok {
					t.Fatalf("reason %s missing", reason)
				}
				if v == 1 {
					got = append(got, reason)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("active = %v, want %v", got, tc.want)
			}
			if g.ClockEventMask != tc.mask {
				t.Errorf("raw mask = %#x, want %#x", g.ClockEventMask, tc.mask)
			}
		})
	}
}

func TestOldDriverThrottleReasons(t *testing.T) {
	// A driver without nvmlDeviceGetCurrentClocksEventReasons: the older
	// throttle call is used and the newer one is never made.
	r := newRig(dgxh100.NewWithGPUs(gpus.H100_SXM5_80GB), true)
	r.srv.LookupSymbolFunc = func(name string) error {
		if name == "nvmlDeviceGetCurrentClocksEventReasons" {
			return errors.New("undefined symbol")
		}
		return nil
	}
	d := r.device(0)
	d.GetCurrentClocksEventReasonsFunc = nil // a call would panic
	d.GetCurrentClocksThrottleReasonsFunc = func() (uint64, nvml.Return) {
		return nvml.ClocksThrottleReasonSwPowerCap, nvml.SUCCESS
	}
	g := read(t, r.collector(t, Options{})).GPUs[0]
	if v, _ := g.Value(CounterThrottle, ReasonSWPowerCap); v != 1 {
		t.Errorf("sw_power_cap = %v, want 1", v)
	}
}

func TestA100Fallback(t *testing.T) {
	for _, tc := range []struct {
		name    string
		support func() (nvml.GpmSupport, nvml.Return)
	}{
		{"device says unsupported", func() (nvml.GpmSupport, nvml.Return) {
			return nvml.GpmSupport{Version: 1, IsSupportedDevice: 0}, nvml.SUCCESS
		}},
		{"query not supported", func() (nvml.GpmSupport, nvml.Return) {
			return nvml.GpmSupport{}, nvml.ERROR_NOT_SUPPORTED
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(dgxa100.New(), false)
			for i := range r.srv.Devices {
				r.device(i).GpmQueryDeviceSupportFunc = tc.support
			}
			// Any GPM sample or metrics call would panic.
			r.srv.GpmSampleAllocFunc, r.srv.GpmMetricsGetFunc = nil, nil
			c := r.collector(t, Options{})
			vals, _ := gatherSeries(t, c)
			g := read(t, c).GPUs[0]

			for _, k := range []Counter{CounterDRAMBandwidth, CounterSMOccupancy, CounterNVLinkTx, CounterNVLinkRx} {
				if _, ok := vals[fmt.Sprintf("%s{gpu=\"0\"}", k.Metric())]; ok {
					t.Errorf("%s emitted without GPM", k.Metric())
				}
				if gp, ok := g.Gap(k); !ok || gp.Kind != GapNoGPM {
					t.Errorf("%s gap = %+v (present %v), want no GPM", k, gp, ok)
				}
			}
			for key, w := range map[string]float64{
				`whyslow_gpu_memory_busy_ratio{gpu="0"}`:        0.55,
				`whyslow_gpu_sm_active{gpu="0"}`:                0.90, // from GPU utilisation
				`whyslow_gpu_utilization{gpu="0"}`:              0.90,
				`whyslow_gpu_pcie_tx_bytes_per_second{gpu="0"}`: 2000 * 1024,
				`whyslow_gpu_pcie_rx_bytes_per_second{gpu="0"}`: 3000 * 1024,
			} {
				if got, ok := vals[key]; !ok || !near(got, w) {
					t.Errorf("%s = %v (present %v), want %v", key, got, ok, w)
				}
			}
			for _, rd := range g.Readings {
				if rd.Counter == CounterSMActive && !strings.Contains(rd.Source, "fallback") {
					t.Errorf("sm_active source = %q, want it marked as a fallback", rd.Source)
				}
			}
			if len(r.clock.sleeps) != 0 {
				t.Errorf("slept %v without GPM", r.clock.sleeps)
			}
			if n := len(r.device(0).GpmQueryDeviceSupportCalls()); n != 1 {
				t.Errorf("GPM support queried %d times over two cycles, want once", n)
			}
		})
	}
}

func TestDriverWithoutGPMSymbols(t *testing.T) {
	r := newRig(dgxh100.NewWithGPUs(gpus.H100_SXM5_80GB), true)
	r.srv.LookupSymbolFunc = func(name string) error {
		if strings.HasPrefix(name, "nvmlGpm") {
			return errors.New("undefined symbol")
		}
		return nil
	}
	d := r.device(0)
	d.GpmQueryDeviceSupportFunc, d.GpmSampleGetFunc = nil, nil // a call would panic
	g := read(t, r.collector(t, Options{})).GPUs[0]
	if gp, ok := g.Gap(CounterDRAMBandwidth); !ok || gp.Kind != GapNoGPM {
		t.Errorf("gap = %+v (present %v), want no GPM", gp, ok)
	}
}

func TestNVLinkNotSupported(t *testing.T) {
	r := newRig(dgxh100.NewWithGPUs(gpus.H100_SXM5_80GB), true)
	r.set(0, func(s *gpuSpec) { s.nvlinkUnsupported = true })
	g := read(t, r.collector(t, Options{})).GPUs[0]
	if gp, ok := g.Gap(CounterNVLinkTx); !ok || gp.Kind != GapNotSupported {
		t.Errorf("nvlink gap = %+v (present %v), want not supported", gp, ok)
	}
	if _, ok := g.Value(CounterDRAMBandwidth, 0); !ok {
		t.Error("DRAM bandwidth missing when only NVLink is unsupported")
	}
}

func TestNotSupportedCounterSkipped(t *testing.T) {
	r := newRig(dgxh100.NewWithGPUs(gpus.H100_SXM5_80GB), true)
	d := r.device(0)
	d.GetPowerUsageFunc = func() (uint32, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
	d.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 0, nvml.ERROR_NO_PERMISSION }
	c := r.collector(t, Options{})
	ch := make(chan prometheus.Metric, 1000)
	for cycle := 0; cycle < 2; cycle++ {
		if err := c.Update(context.Background(), ch); err != nil {
			t.Fatalf("cycle %d: unsupported counters failed the update: %v", cycle, err)
		}
		r.clock.Advance(time.Second)
	}
	g := read(t, c).GPUs[0]
	for _, tc := range []struct {
		k    Counter
		kind GapKind
	}{{CounterPower, GapNotSupported}, {CounterTemperature, GapNoPermission}} {
		if gp, ok := g.Gap(tc.k); !ok || gp.Kind != tc.kind {
			t.Errorf("%s gap = %+v (present %v), want %s", tc.k, gp, ok, tc.kind)
		}
	}
	if _, ok := g.Value(CounterPowerLimit, 0); !ok {
		t.Error("power limit missing")
	}
	if n := len(d.GetPowerUsageCalls()); n != 1 {
		t.Errorf("NOT_SUPPORTED power read %d times in 3 cycles, want once", n)
	}
	if n := len(d.GetTemperatureCalls()); n != 3 {
		t.Errorf("NO_PERMISSION temperature read %d times in 3 cycles, want 3 (may change)", n)
	}
}

func TestInitFailsNoCalls(t *testing.T) {
	for _, tc := range []struct {
		ret  nvml.Return
		want string
	}{
		{nvml.ERROR_LIBRARY_NOT_FOUND, "no NVML: libnvidia-ml.so.1 not found"},
		{nvml.ERROR_DRIVER_NOT_LOADED, "no NVML: the NVIDIA kernel driver is not loaded"},
		{nvml.ERROR_NO_PERMISSION, "no NVML: no permission to open the GPU devices"},
		{nvml.ERROR_UNKNOWN, "no NVML: nvml Init: ERROR_UNKNOWN"},
	} {
		t.Run(tc.ret.Error(), func(t *testing.T) {
			r := newRig(dgxh100.New(), true)
			r.srv.InitFunc = func() nvml.Return { return tc.ret }
			c := r.collector(t, Options{EnginePIDs: func() []int { return []int{1000} }})
			ch := make(chan prometheus.Metric, 100)
			for i := 0; i < 3; i++ {
				_, err := c.Read(context.Background())
				if !errors.Is(err, collectors.ErrNoData) {
					t.Fatalf("read %d: err = %v, want ErrNoData", i, err)
				}
				if !strings.HasPrefix(err.Error(), tc.want) {
					t.Errorf("err = %q, want prefix %q", err, tc.want)
				}
				if err := c.Update(context.Background(), ch); !errors.Is(err, collectors.ErrNoData) {
					t.Errorf("update: err = %v, want ErrNoData", err)
				}
			}
			c.Collect(ch)
			if err := c.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
			if len(ch) != 0 {
				t.Errorf("%d metrics sent without NVML", len(ch))
			}
			calls := countCalls(&r.srv.Interface)
			for k, v := range countCalls(&r.srv.ExtendedInterface) {
				calls[k] += v
			}
			for i := range r.srv.Devices {
				for k, v := range countCalls(&r.device(i).Device) {
					calls[fmt.Sprintf("device%d.%s", i, k)] += v
				}
			}
			if len(calls) != 1 || calls["Init"] != 1 {
				keys := make([]string, 0, len(calls))
				for k, v := range calls {
					keys = append(keys, fmt.Sprintf("%s=%d", k, v))
				}
				sort.Strings(keys)
				t.Errorf("NVML calls = %v, want Init=1 only", keys)
			}
		})
	}
}

func TestAdapterRefusesCallsBeforeInit(t *testing.T) {
	r := newRig(dgxh100.NewWithGPUs(gpus.H100_SXM5_80GB), true)
	lib := FromNVML(r.srv)
	if _, err := lib.DeviceCount(); err == nil || !strings.Contains(err.Error(), "not initialised") {
		t.Errorf("DeviceCount before Init: err = %v", err)
	}
	if err := lib.Init(); err != nil {
		t.Fatal(err)
	}
	d, err := lib.DeviceByIndex(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := lib.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.PowerUsageMilliwatts(); err == nil {
		t.Error("device call after Shutdown was made")
	}
	calls := countCalls(&r.srv.Interface)
	if calls["DeviceGetCount"] != 0 || len(r.device(0).GetPowerUsageCalls()) != 0 {
		t.Errorf("calls = %v, want no DeviceGetCount and no GetPowerUsage", calls)
	}
}

func TestCountCallsSeesCalls(t *testing.T) {
	// Guards TestInitFailsNoCalls: the reflection counter must see calls.
	r := newRig(dgxh100.NewWithGPUs(gpus.H100_SXM5_80GB), true)
	read(t, r.collector(t, Options{}))
	srv, dev := countCalls(&r.srv.Interface), countCalls(&r.device(0).Device)
	if srv["Init"] != 1 || srv["DeviceGetCount"] != 1 || dev["GetPowerUsage"] != 1 || dev["GpmSampleGet"] != 2 {
		t.Errorf("server calls %v, device calls %v", srv, dev)
	}
}

func TestSelection(t *testing.T) {
	r := newRig(dgxh100.New(), true)
	uuid3 := r.device(3).UUID
	indices := func(rep Report) string {
		var s []string
		for _, g := range rep.GPUs {
			s = append(s, fmt.Sprint(g.Index))
		}
		return strings.Join(s, ",")
	}
	for _, tc := range []struct {
		name      string
		opts      Options
		want      string
		wantNote  string
		wantNoDat bool
	}{
		{name: "all by default", want: "0,1,2,3,4,5,6,7"},
		{name: "indices", opts: Options{Visible: "5, 1"}, want: "1,5"},
		{name: "uuid and prefix", opts: Options{Visible: "0," + strings.ToUpper(uuid3[:12])}, want: "0,3"},
		{name: "missing index noted", opts: Options{Visible: "2,9"}, want: "2", wantNote: `visible device "9" matches no GPU (8 found)`},
		{name: "engine pids", opts: Options{EnginePIDs: func() []int { return []int{1004, 1006, 42} }}, want: "4,6"},
		{name: "engine pids within visible", opts: Options{Visible: "4,5", EnginePIDs: func() []int { return []int{1004, 1006} }}, want: "4"},
		{name: "no pids known reads all", opts: Options{EnginePIDs: func() []int { return nil }}, want: "0,1,2,3,4,5,6,7"},
		{name: "engine on no gpu", opts: Options{EnginePIDs: func() []int { return []int{7} }}, wantNoDat: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := r.collector(t, tc.opts)
			rep, err := c.Read(context.Background())
			if tc.wantNoDat {
				if !errors.Is(err, collectors.ErrNoData) {
					t.Fatalf("err = %v, want ErrNoData", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := indices(rep); got != tc.want {
				t.Errorf("gpus = %s, want %s", got, tc.want)
			}
			if tc.wantNote != "" && !strings.Contains(strings.Join(rep.Notes, "\n"), tc.wantNote) {
				t.Errorf("notes = %q, want %q", rep.Notes, tc.wantNote)
			}
		})
	}
}

func TestProcessListUnreadableKeepsGPU(t *testing.T) {
	r := newRig(dgxh100.NewWithGPUs(gpus.H100_SXM5_80GB, gpus.H100_SXM5_80GB), true)
	r.device(1).GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return nil, nvml.ERROR_NO_PERMISSION
	}
	rep := read(t, r.collector(t, Options{EnginePIDs: func() []int { return []int{1000} }}))
	if len(rep.GPUs) != 2 || !strings.Contains(strings.Join(rep.Notes, "\n"), "GPU 1 kept: cannot list its processes") {
		t.Errorf("gpus %d, notes %q; want both GPUs and a note", len(rep.GPUs), rep.Notes)
	}
}

func TestRealNVMLWithoutDriver(t *testing.T) {
	c, err := New(Options{Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Read(context.Background())
	if err == nil {
		t.Skip("this machine has a working NVML")
	}
	if !errors.Is(err, collectors.ErrNoData) || !strings.HasPrefix(err.Error(), "no NVML: ") {
		t.Errorf("err = %v, want a no-NVML ErrNoData", err)
	}
}

// BenchmarkCycle8GPUs measures one steady-state collection cycle (Update)
// for 8 H100s on the go-nvml mock, GPM included; ns/gpu is the per-GPU cost.
// The mock records every call, so this is an upper bound on our own cost.
func BenchmarkCycle8GPUs(b *testing.B) {
	r := newRig(dgxh100.New(), true)
	c := r.collector(b, Options{})
	ch := make(chan prometheus.Metric, 1024)
	drain := func() {
		for len(ch) > 0 {
			<-ch
		}
	}
	if err := c.Update(context.Background(), ch); err != nil { // first cycle: GPM warm-up
		b.Fatal(err)
	}
	drain()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		r.clock.Advance(time.Second)
		if err := c.Update(context.Background(), ch); err != nil {
			b.Fatal(err)
		}
		drain()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/8, "ns/gpu")
}

func TestInCollectorsRegistry(t *testing.T) {
	for _, tc := range []struct {
		name        string
		initRet     nvml.Return
		wantSuccess float64
		wantNoData  bool
	}{
		{"nvml present", nvml.SUCCESS, 1, false},
		{"no nvml", nvml.ERROR_LIBRARY_NOT_FOUND, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(dgxh100.NewWithGPUs(gpus.H100_SXM5_80GB), true)
			r.srv.InitFunc = func() nvml.Return { return tc.initRet }
			reg := collectors.NewRegistry(collectors.RegistryOptions{Logger: discardLogger()})
			if err := reg.Register("gpu", r.collector(t, Options{})); err != nil {
				t.Fatal(err)
			}
			ch := make(chan prometheus.Metric, 1000)
			res := reg.Cycle(context.Background(), ch)
			if len(res) != 1 || res[0].NoData() != tc.wantNoData {
				t.Fatalf("results = %+v, want no data %v", res, tc.wantNoData)
			}
			close(ch)
			success := -1.0
			for m := range ch {
				if !strings.Contains(m.Desc().String(), `"whyslow_collector_success"`) {
					continue
				}
				var pb dto.Metric
				if err := m.Write(&pb); err != nil {
					t.Fatal(err)
				}
				success = pb.GetGauge().GetValue()
			}
			if success != tc.wantSuccess {
				t.Errorf("success = %v, want %v", success, tc.wantSuccess)
			}
		})
	}
}
