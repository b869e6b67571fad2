package gpu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/whyslow/whyslow/collectors"
)

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func TestSeriesNames(t *testing.T) {
	// The names shared with the engine model and the rulesets.
	want := []string{
		"whyslow_gpu_dram_bandwidth_utilization",
		"whyslow_gpu_memory_busy_ratio",
		"whyslow_gpu_sm_active",
		"whyslow_gpu_sm_occupancy",
		"whyslow_gpu_utilization",
		"whyslow_gpu_sm_clock_mhz",
		"whyslow_gpu_sm_clock_max_mhz",
		"whyslow_gpu_mem_clock_mhz",
		"whyslow_gpu_mem_clock_max_mhz",
		"whyslow_gpu_clock_throttle_active",
		"whyslow_gpu_power_watts",
		"whyslow_gpu_power_limit_watts",
		"whyslow_gpu_temperature_celsius",
		"whyslow_gpu_fb_used_bytes",
		"whyslow_gpu_fb_total_bytes",
		"whyslow_gpu_pcie_tx_bytes_per_second",
		"whyslow_gpu_pcie_rx_bytes_per_second",
		"whyslow_gpu_nvlink_tx_bytes_per_second",
		"whyslow_gpu_nvlink_rx_bytes_per_second",
	}
	var got []string
	for _, k := range Counters() {
		got = append(got, k.Metric())
		if k.help() == "" {
			t.Errorf("%s has no help", k)
		}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("series:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var reasons []string
	for _, r := range ThrottleReasons() {
		reasons = append(reasons, r.String())
	}
	if got, want := strings.Join(reasons, "|"), "sw_power_cap|hw_slowdown|hw_thermal_slowdown|sw_thermal_slowdown|hw_power_brake|gpu_idle|applications_clocks_setting|sync_boost|display_clock"; got != want {
		t.Errorf("reasons = %s, want %s", got, want)
	}
}

func TestParseVisible(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{in: "", want: ""},
		{in: "  ", want: ""},
		{in: "0", want: "0"},
		{in: "3, 1,3", want: "3 1"},
		{in: "GPU-8932f937-d72c,1", want: "gpu-8932f937-d72c 1"},
		{in: "0,,1", err: `visible devices "0,,1": entry 2 "": empty entry`},
		{in: "-1", err: `visible devices "-1": entry 1 "-1": want a GPU index (0, 1, ...) or a GPU UUID (GPU-...)`},
		{in: "1,foo", err: `visible devices "1,foo": entry 2 "foo": want a GPU index`},
		{in: "MIG-abc", err: `entry 1 "MIG-abc": MIG instances are not supported, list the parent GPU`},
		{in: "GPU-", err: `UUID has nothing after GPU-`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			entries, err := parseVisible(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range entries {
				if e.index >= 0 {
					got = append(got, fmt.Sprint(e.index))
				} else {
					got = append(got, e.uuid)
				}
			}
			if strings.Join(got, " ") != tc.want {
				t.Errorf("entries = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestSelectVisible(t *testing.T) {
	entries, err := parseVisible("1,GPU-aa,GPU-b,7")
	if err != nil {
		t.Fatal(err)
	}
	keep, notes := selectVisible(entries, []int{0, 1, 2, 3}, []string{"GPU-aa11", "GPU-bb", "GPU-bc", "GPU-cc"})
	if fmt.Sprint(keep) != "[true true true false]" {
		t.Errorf("keep = %v", keep)
	}
	want := `visible device "GPU-b" matches 2 GPUs; all are read` + "\n" + `visible device "7" matches no GPU (4 found)`
	if strings.Join(notes, "\n") != want {
		t.Errorf("notes = %q, want %q", notes, want)
	}
}

func TestErrorIs(t *testing.T) {
	for _, tc := range []struct {
		kind                 ErrorKind
		unsup, perm, unavail bool
	}{
		{KindNotSupported, true, false, false},
		{KindFunctionNotFound, true, false, false},
		{KindNoPermission, false, true, false},
		{KindLibraryNotFound, false, false, true},
		{KindDriverNotLoaded, false, false, true},
		{KindUnavailable, false, false, true},
		{KindOther, false, false, false},
	} {
		t.Run(tc.kind.String(), func(t *testing.T) {
			err := fmt.Errorf("read: %w", &Error{Op: "X", Message: "m", Kind: tc.kind})
			if errors.Is(err, ErrNotSupported) != tc.unsup || errors.Is(err, ErrNoPermission) != tc.perm || errors.Is(err, ErrUnavailable) != tc.unavail {
				t.Errorf("Is(not supported, no permission, unavailable) = %v %v %v", errors.Is(err, ErrNotSupported), errors.Is(err, ErrNoPermission), errors.Is(err, ErrUnavailable))
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	if _, err := New(Options{GPMInterval: 50e6, Logger: discardLogger()}); err == nil || !strings.Contains(err.Error(), "below NVML's minimum of 100ms") {
		t.Errorf("err = %v, want interval error", err)
	}
	if _, err := New(Options{Visible: "x", Logger: discardLogger()}); err == nil {
		t.Error("bad visible list accepted")
	}
}

// initFailLib fails Init and counts every call.
type initFailLib struct {
	calls map[string]int
}

func (l *initFailLib) count(op string) { l.calls[op]++ }
func (l *initFailLib) Init() error {
	l.count("Init")
	return &Error{Op: "Init", Code: 12, Message: "ERROR_LIBRARY_NOT_FOUND", Kind: KindLibraryNotFound}
}
func (l *initFailLib) Shutdown() error                   { l.count("Shutdown"); return nil }
func (l *initFailLib) DriverVersion() (string, error)    { l.count("DriverVersion"); return "", nil }
func (l *initFailLib) DeviceCount() (int, error)         { l.count("DeviceCount"); return 0, nil }
func (l *initFailLib) DeviceByIndex(int) (Device, error) { l.count("DeviceByIndex"); return nil, nil }
func (l *initFailLib) GPMSampleAlloc() (GPMSample, error) {
	l.count("GPMSampleAlloc")
	return nil, nil
}
func (l *initFailLib) GPMMetrics(GPMSample, GPMSample, []GPMMetric) ([]GPMResult, error) {
	l.count("GPMMetrics")
	return nil, nil
}

func TestInitFailsNoCallsFake(t *testing.T) {
	// The same guarantee as the go-nvml mock test, on our own interface,
	// so that it also holds (and is tested) in CGO_ENABLED=0 builds.
	lib := &initFailLib{calls: map[string]int{}}
	c, err := New(Options{Lib: lib, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		_, err := c.Read(context.Background())
		var nn *NoNVMLError
		if !errors.Is(err, collectors.ErrNoData) || !errors.As(err, &nn) {
			t.Fatalf("err = %v, want a *NoNVMLError matching ErrNoData", err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(lib.calls) != "map[Init:1]" {
		t.Errorf("calls = %v, want Init once", lib.calls)
	}
}
