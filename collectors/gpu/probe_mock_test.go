//go:build cgo && linux

package gpu

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

func TestProbeGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		rig  func() *rig
	}{
		{"h100", func() *rig {
			r := newRig(dgxh100.NewWithGPUs(gpus.H100_SXM5_80GB, gpus.H100_SXM5_80GB), true)
			r.set(0, func(s *gpuSpec) {
				s.reasons = nvml.ClocksEventReasonSwPowerCap | nvml.ClocksEventReasonBoardLimit
				s.nvlinkUnsupported = true
			})
			r.device(0).GetEnforcedPowerLimitFunc = func() (uint32, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
			return r
		}},
		{"a100", func() *rig {
			r := newRig(dgxa100.NewWithGPUs(gpus.A100_SXM4_40GB), false)
			r.device(0).GpmQueryDeviceSupportFunc = func() (nvml.GpmSupport, nvml.Return) { return nvml.GpmSupport{}, nvml.ERROR_NOT_SUPPORTED }
			return r
		}},
		{"init_fails", func() *rig {
			r := newRig(dgxh100.NewWithGPUs(gpus.H100_SXM5_80GB), true)
			r.srv.InitFunc = func() nvml.Return { return nvml.ERROR_DRIVER_NOT_LOADED }
			return r
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.rig()
			for i := range r.srv.Devices {
				r.device(i).UUID = "GPU-00000000-0000-0000-0000-00000000000" + string(rune('0'+i))
			}
			res, err := Probe(context.Background(), Options{
				Lib: FromNVML(r.srv), Now: r.clock.Now, Sleep: r.clock.Sleep,
				Visible: "0", Logger: discardLogger(),
			})
			if err != nil {
				t.Fatal(err)
			}
			var text, js bytes.Buffer
			if err := res.WriteText(&text); err != nil {
				t.Fatal(err)
			}
			if err := res.WriteJSON(&js); err != nil {
				t.Fatal(err)
			}
			var back ProbeResult
			if err := json.Unmarshal(js.Bytes(), &back); err != nil {
				t.Fatalf("json does not parse back: %v", err)
			}
			golden := filepath.Join("testdata", "probe_"+tc.name+".golden")
			if *update {
				if err := os.MkdirAll("testdata", 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, text.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if text.String() != string(want) {
				t.Errorf("probe output differs from %s (run with -update after checking):\n%s", golden, text.String())
			}
		})
	}
}
