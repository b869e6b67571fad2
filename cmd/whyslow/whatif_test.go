package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

func TestWhatifUsageErrors(t *testing.T) {
	bundle := filepath.Join(incidentsDir, "arrival_surge")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no bundle", []string{"whatif", "--replicas", "4"}, "--bundle DIR is required"},
		{"bad flag", []string{"whatif", "--bundle", bundle, "--replicas", "many"}, "invalid value"},
		{"bad output", []string{"whatif", "--bundle", bundle, "--output", "yaml"}, "want text or json"},
		{"bad sweep", []string{"whatif", "--bundle", bundle, "--sweep", "replicas=8..2"}, "NAME=A..B"},
		{"unknown sweep", []string{"whatif", "--bundle", bundle, "--sweep", "gpus=1..2"}, "NAME is one of"},
		{"negative", []string{"whatif", "--bundle", bundle, "--max-num-seqs", "-3"}, "negative"},
		{"argument", []string{"whatif", "--bundle", bundle, "extra"}, "unexpected argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, tc.args...)
			if r.code != exitFailed || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want exit 2 and %q", r.code, r.stderr, tc.want)
			}
		})
	}
}

// TestWhatifMissingSeries: a bundle without the running-requests gauge
// (the KV pool per running request, the arrivals' in-flight term) predicts
// nothing and names what is missing.
func TestWhatifMissingSeries(t *testing.T) {
	dir := rewrittenBundle(t, "arrival_surge", false, func(om string) string {
		var b strings.Builder
		for _, line := range strings.SplitAfter(om, "\n") {
			if !strings.Contains(line, "vllm:num_requests_running") {
				b.WriteString(line)
			}
		}
		return b.String()
	})
	r := runCLI(t, "whatif", "--bundle", dir, "--replicas", "4")
	if r.code != exitFailed || !strings.Contains(r.stderr, "no prediction: missing series") || !strings.Contains(r.stderr, "kv_per_running") {
		t.Fatalf("exit %d, stderr %q; want exit 2 naming kv_per_running", r.code, r.stderr)
	}
}

func TestWhatifJSON(t *testing.T) {
	r := runShared(t, "whatif", "--bundle", filepath.Join(incidentsDir, whatifGoldenBundle), "--sweep", "replicas=1..3", "--output", "json")
	if r.code != exitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var out struct {
		Observed struct {
			TTFT struct{ Median float64 } `json:"ttft_p95_seconds"`
		}
		Predictions []struct {
			Fix  string
			TTFT struct{ Median, Low, High float64 } `json:"ttft_p95_seconds"`
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	if len(out.Predictions) != 3 || out.Predictions[0].Fix != "replicas=1" {
		t.Fatalf("predictions %+v, want replicas=1..3", out.Predictions)
	}
	for _, p := range out.Predictions {
		if !(p.TTFT.Low <= p.TTFT.Median && p.TTFT.Median <= p.TTFT.High) {
			t.Errorf("%s: range %+v does not hold its median", p.Fix, p.TTFT)
		}
	}
	// more replicas never predict a worse TTFT for the same arrivals
	if out.Predictions[2].TTFT.Median > out.Predictions[0].TTFT.Median {
		t.Errorf("3 replicas predicted slower than 1: %+v", out.Predictions)
	}
}

// whatifGoldenBundle is the shipped bundle the README's worked example
// and the golden use.
const whatifGoldenBundle = "arrival_surge"

// TestWhatifTextGolden keeps `whatif`'s text on a shipped bundle in
// testdata/whatif_arrival_surge.golden (-update rewrites it).
func TestWhatifTextGolden(t *testing.T) {
	r := runShared(t, "whatif", "--bundle", filepath.Join(incidentsDir, whatifGoldenBundle))
	if r.code != exitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	checkGolden(t, filepath.Join("testdata", "whatif_"+whatifGoldenBundle+".golden"), r.stdout)
}

// TestWhyPredictGolden keeps the `predicted` part of `why --predict
// --output json` on the shipped bundle in
// testdata/why_predict_arrival_surge.golden (-update rewrites it).
func TestWhyPredictGolden(t *testing.T) {
	r := runShared(t, "why", "--bundle", filepath.Join(incidentsDir, whatifGoldenBundle), "--predict", "--output", "json")
	if r.code == exitFailed {
		t.Fatalf("exit 2: %s", r.stderr)
	}
	v := decodeVerdict(t, r.stdout)
	if v.Predicted == nil || len(v.Predicted.Fixes) == 0 {
		t.Fatalf("no predictions: %+v", v.Predicted)
	}
	got, err := json.MarshalIndent(v.Predicted, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, filepath.Join("testdata", "why_predict_"+whatifGoldenBundle+".golden"), string(got)+"\n")
	// without --predict the verdict has no predictions
	if v := decodeVerdict(t, runShared(t, "why", "--bundle", filepath.Join(incidentsDir, whatifGoldenBundle), "--output", "json").stdout); v.Predicted != nil {
		t.Errorf("predicted without --predict")
	}
}

// TestWhyPredictTextGolden keeps the text of `why --predict` on the
// shipped bundle in testdata/why_predict_arrival_surge_text.golden
// (-update rewrites it): the predictions where on-call reads them.
func TestWhyPredictTextGolden(t *testing.T) {
	r := runShared(t, "why", "--bundle", filepath.Join(incidentsDir, whatifGoldenBundle), "--predict")
	if r.code == exitFailed {
		t.Fatalf("exit 2: %s", r.stderr)
	}
	checkGolden(t, filepath.Join("testdata", "why_predict_"+whatifGoldenBundle+"_text.golden"), r.stdout)
}
