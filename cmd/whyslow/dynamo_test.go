package main

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/whyslow/whyslow/verdict"
)

// routerDelay is the fixed time the test's Dynamo frontend adds before the
// worker: its TTFT is the worker's plus this much.
const routerDelay = 0.25

var labelRe = regexp.MustCompile(`(\w+)="([^"]*)"`)

// withDynamoFrontend adds NVIDIA Dynamo frontend histograms to a recorded
// worker exposition (names: ai-dynamo/dynamo lib/runtime/src/metrics/
// prometheus_names.rs, label `model`): one frontend replica per worker,
// TTFT the worker's shifted by routerDelay (every bucket bound +delay,
// the sum +delay per request), inter-token latency the worker's itl family.
func withDynamoFrontend(ttft, itl string) func(string) string {
	to := map[string]string{ttft: "dynamo_frontend_time_to_first_token_seconds", itl: "dynamo_frontend_inter_token_latency_seconds"}
	return func(om string) string {
		lines := strings.Split(om, "\n")
		type sample struct{ name, series, le, value, ts string }
		parse := func(l string) (sample, bool) {
			name, rest, ok := strings.Cut(l, "{")
			if !ok || strings.HasPrefix(l, "#") {
				return sample{}, false
			}
			lbls, val, _ := strings.Cut(rest, "} ")
			f := strings.Fields(val)
			if len(f) != 2 {
				return sample{}, false
			}
			s := sample{name: name, value: f[0], ts: f[1]}
			m := map[string]string{}
			for _, kv := range labelRe.FindAllStringSubmatch(lbls, -1) {
				m[kv[1]] = kv[2]
			}
			s.le = m["le"]
			s.series = fmt.Sprintf(`instance="frontend-%s",job="dynamo-frontend",model=%q`, m["pod"], m["model_name"])
			return s, true
		}
		counts := map[string]float64{}
		for _, l := range lines {
			if s, ok := parse(l); ok && s.name == ttft+"_count" {
				counts[s.series+s.ts], _ = strconv.ParseFloat(s.value, 64)
			}
		}
		var out strings.Builder
		for _, l := range lines {
			out.WriteString(l + "\n")
			if f := strings.Fields(l); len(f) >= 3 && f[0] == "#" && to[f[2]] != "" {
				if f[1] == "TYPE" {
					out.WriteString("# TYPE " + to[f[2]] + " histogram\n")
				}
				continue
			}
			s, ok := parse(l)
			if !ok {
				continue
			}
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				fam, ok := strings.CutSuffix(s.name, suf)
				if !ok || to[fam] == "" {
					continue
				}
				v, _ := strconv.ParseFloat(s.value, 64)
				series := s.series
				if fam == ttft && suf == "_sum" {
					v += routerDelay * counts[s.series+s.ts]
				}
				if suf == "_bucket" {
					le := s.le
					if fam == ttft && le != "+Inf" {
						b, _ := strconv.ParseFloat(le, 64)
						le = strconv.FormatFloat(b+routerDelay, 'g', -1, 64)
					}
					series += `,le="` + le + `"`
				}
				fmt.Fprintf(&out, "%s%s{%s} %s %s\n", to[fam], suf, series, strconv.FormatFloat(v, 'g', -1, 64), s.ts)
			}
		}
		return strings.TrimSuffix(out.String(), "\n")
	}
}

func headlineRow(v *verdict.Verdict, signal string) *verdict.Comparison {
	for i := range v.Headline {
		if v.Headline[i].Signal == signal {
			return &v.Headline[i]
		}
	}
	return nil
}

// TestDynamoFrontendClientView: a recorded Dynamo worker (TensorRT-LLM
// surge; a vLLM worker, healthy) with the frontend's histograms beside
// it. The walk and its gaps are the worker's (same status, causes and
// not-exported signals as without the frontend); the headline's TTFT and
// inter-token rows are the frontend's and say so; the frontend-minus-worker
// TTFT mean is the added router delay; no client_view gap is left. Without
// the frontend the headline carries no frontend row.
func TestDynamoFrontendClientView(t *testing.T) {
	for _, c := range []struct {
		incident, ttft, itl, engine, shape string
		status                             verdict.Status
		code                               int
	}{
		{"trtllm_dynamo_arrival_surge", "trtllm_time_to_first_token_seconds", "trtllm_time_per_output_token_seconds", "trtllm", "dynamo", verdict.StatusAnomaly, exitCause},
		{"healthy", "vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds", "vllm", "v1", verdict.StatusHealthy, exitOK},
	} {
		t.Run(c.incident, func(t *testing.T) {
			plain := runShared(t, "why", "--bundle", incidentsDir+"/"+c.incident, "--output", "json")
			r := runCLI(t, "why", "--bundle", rewrittenBundle(t, c.incident, false, withDynamoFrontend(c.ttft, c.itl)), "--output", "json")
			if r.code != c.code {
				t.Fatalf("exit %d, want %d: %s", r.code, c.code, r.stderr)
			}
			wv, fv := decodeVerdict(t, plain.stdout), decodeVerdict(t, r.stdout)
			if fv.Engine != c.engine || fv.EngineShape == nil || fv.EngineShape.Name != c.shape {
				t.Fatalf("read as %s/%+v, want %s/%s", fv.Engine, fv.EngineShape, c.engine, c.shape)
			}
			ids := func(v *verdict.Verdict) (out []string) {
				for _, c := range v.Causes {
					out = append(out, c.ID)
				}
				return out
			}
			if fv.Status != c.status || fv.Status != wv.Status || !slices.Equal(ids(fv), ids(wv)) {
				t.Errorf("with the frontend: %s %v; without: %s %v; want %s", fv.Status, ids(fv), wv.Status, ids(wv), c.status)
			}
			if c.status == verdict.StatusAnomaly && (len(fv.Causes) == 0 || fv.Causes[0].ID != "queue_saturation") {
				t.Errorf("causes %v, want queue_saturation first", ids(fv))
			}
			gaps := func(v *verdict.Verdict) (out []string) {
				for _, g := range v.DataGaps {
					out = append(out, g.Signal+"/"+g.Window+"/"+strings.Join(g.Signals, ","))
				}
				return out
			}
			if !slices.Equal(gaps(fv), gaps(wv)) {
				t.Errorf("gaps with the frontend %v, without %v: want the worker's (no client_view)", gaps(fv), gaps(wv))
			}
			for _, s := range []string{"ttft_p95", "ttft_mean", "ttft_mean_recent", "tpot_p95", "tpot_mean", "ttft_outside_engine"} {
				if row := headlineRow(wv, s); row != nil && row.Source != "" {
					t.Errorf("without the frontend %s reads %q", s, row.Source)
				}
				row := headlineRow(fv, s)
				if row == nil || row.Source != "dynamo_frontend" || row.Now == nil || row.Baseline == nil {
					t.Fatalf("headline %s: %+v, want the frontend's now and baseline", s, row)
				}
				if s != "ttft_outside_engine" && !strings.Contains(row.Title, "as the Dynamo frontend sees it") {
					t.Errorf("headline %s title %q", s, row.Title)
				}
			}
			if headlineRow(wv, "ttft_outside_engine") != nil {
				t.Error("an outside-the-engine row without the frontend")
			}
			out := headlineRow(fv, "ttft_outside_engine")
			t.Logf("outside the engine: now %.4f s, baseline %.4f s (router delay %.2f s)", *out.Now, *out.Baseline, routerDelay)
			for _, d := range []float64{*out.Now, *out.Baseline} {
				if math.Abs(d-routerDelay) > 0.01*routerDelay {
					t.Errorf("outside the engine %.4f s, want %.2f s ±1%%", d, routerDelay)
				}
			}
			// The worker's TTFT p95 shifted by the delay (shifted buckets).
			wp, fp := headlineRow(wv, "ttft_p95"), headlineRow(fv, "ttft_p95")
			t.Logf("TTFT p95: worker %.4f s, frontend %.4f s", *wp.Now, *fp.Now)
			if math.Abs(*fp.Now-*wp.Now-routerDelay) > 0.02*(*fp.Now) {
				t.Errorf("frontend TTFT p95 %.4f s, worker %.4f s: want the worker's + %.2f s", *fp.Now, *wp.Now, routerDelay)
			}
			txt := runCLI(t, "why", "--bundle", rewrittenBundle(t, c.incident, false, withDynamoFrontend(c.ttft, c.itl)))
			if !strings.Contains(txt.stdout, "as the Dynamo frontend sees it") {
				t.Errorf("the text verdict does not say whose TTFT it shows:\n%s", txt.stdout)
			}
		})
	}
}

// TestDynamoFrontendScope: a scope that names no model (a pod) reads the
// frontend when it serves one model; when it serves two, the frontend is
// not read for that scope (the headline stays the worker's) and the
// client_view gap says why.
func TestDynamoFrontendScope(t *testing.T) {
	one := withDynamoFrontend("vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds")
	two := func(om string) string {
		var out strings.Builder
		for _, l := range strings.Split(one(om), "\n") {
			out.WriteString(l + "\n")
			if strings.HasPrefix(l, "dynamo_frontend_") {
				out.WriteString(regexp.MustCompile(`model="[^"]*"`).ReplaceAllString(l, `model="other-model"`) + "\n")
			}
		}
		return strings.TrimSuffix(out.String(), "\n")
	}
	for _, c := range []struct {
		name    string
		rewrite func(string) string
		read    bool
	}{{"one model", one, true}, {"two models", two, false}} {
		t.Run(c.name, func(t *testing.T) {
			r := runCLI(t, "why", "--bundle", rewrittenBundle(t, "healthy", false, c.rewrite), "--selector", `pod="vllm-llama-70b-0"`, "--output", "json")
			v := decodeVerdict(t, r.stdout)
			if v.Status != verdict.StatusHealthy {
				t.Fatalf("status %s: %s", v.Status, r.stderr)
			}
			row := headlineRow(v, "ttft_mean")
			var gap *verdict.DataGap
			for i := range v.DataGaps {
				if v.DataGaps[i].Signal == "client_view" {
					gap = &v.DataGaps[i]
				}
			}
			switch {
			case c.read && (row == nil || row.Source != "dynamo_frontend" || gap != nil):
				t.Errorf("one model: headline %+v, gap %+v; want the frontend read", row, gap)
			case !c.read && (row == nil || row.Source != "" || gap == nil || !strings.Contains(gap.Reason, "serves 2 models")):
				t.Errorf("two models: headline %+v, gap %+v; want the worker's headline and the reason", row, gap)
			}
		})
	}
}
