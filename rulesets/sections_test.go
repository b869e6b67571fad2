package rulesets

import (
	"testing"

	"github.com/whyslow/whyslow/detect"
)

// TestEngineSections: every shipped map gives the detector, the chart and
// the triage's joins their series, and the detector's PromQL parses.
func TestEngineSections(t *testing.T) {
	shipped := Shipped()
	engines, err := detect.ReadEngines(shipped.Files())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := detect.NewDetector(detect.DetectConfig{}, engines); err != nil {
		t.Fatal(err)
	}
	charts, series := shipped.Chart(), shipped.Series()
	for i, e := range Engines {
		// TGI has no TTFT histogram: its per-request time per token stands.
		if d := engines[i]; len(d.TTFT)+len(d.ITL) == 0 || len(d.Queue) == 0 || len(d.SuccessVolume) == 0 || len(d.Requests) == 0 {
			t.Errorf("%s: detector %+v lacks a family", e, d)
		}
		// A map without a kv_usage signal has no KV gauge to chart.
		rs, err := Default(e)
		if err != nil {
			t.Fatal(err)
		}
		kv := rs.Signal("kv_usage") != nil
		if c := charts[i]; len(c.TTFT)+len(c.ITL) == 0 || (kv && len(c.KVUsage) == 0) || len(c.Queue) == 0 {
			t.Errorf("%s: chart %+v lacks a panel", e, c)
		}
		if s := series[i]; s.Names == "" || len(s.Running) == 0 || len(s.Waiting) == 0 || (kv && len(s.KVUsage) == 0) {
			t.Errorf("%s: series %+v lacks a series", e, s)
		}
	}
}
