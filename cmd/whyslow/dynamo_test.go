package main

import (
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/whyslow/whyslow/verdict"
)

// routerDelay is the time the test's Dynamo frontend adds before the
// worker at baseline: its TTFT is the worker's plus this much, and its
// bucket bounds the worker's plus this much.
const routerDelay = 0.25

// steadyRouter adds routerDelay at every sample.
func steadyRouter(int64) float64 { return routerDelay }

var labelRe = regexp.MustCompile(`(\w+)="([^"]*)"`)

// withDynamoFrontend adds NVIDIA Dynamo frontend histograms to a recorded
// worker exposition (names: ai-dynamo/dynamo lib/runtime/src/metrics/
// prometheus_names.rs, label `model`): one frontend replica per worker,
// inter-token latency the worker's itl family, TTFT the worker's plus the
// router's delay at each scrape (the requests finished between two scrapes
// each wait delay(ts) in the router). The frontend's TTFT buckets are the
// worker's bounds plus routerDelay; a request lands in the first frontend
// bucket whose bound holds its worker bucket's bound plus the delay.
func withDynamoFrontend(ttft, itl string, delay func(ts int64) float64) func(string) string {
	to := map[string]string{ttft: "dynamo_frontend_time_to_first_token_seconds", itl: "dynamo_frontend_inter_token_latency_seconds"}
	return func(om string) string {
		lines := strings.Split(om, "\n")
		type sample struct {
			name, series, le, value string
			ts                      int64
		}
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
			ts, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return sample{}, false
			}
			s := sample{name: name, value: f[0], ts: ts}
			m := map[string]string{}
			for _, kv := range labelRe.FindAllStringSubmatch(lbls, -1) {
				m[kv[1]] = kv[2]
			}
			s.le = m["le"]
			s.series = fmt.Sprintf(`instance="frontend-%s",job="dynamo-frontend",model=%q`, m["pod"], m["model_name"])
			return s, true
		}
		// The worker's TTFT histogram per frontend series and scrape.
		type hist struct {
			cum        map[float64]float64 // le → cumulative count, +Inf included
			sum, count float64
		}
		type key struct {
			series string
			ts     int64
		}
		worker := map[key]*hist{}
		at := func(k key) *hist {
			if worker[k] == nil {
				worker[k] = &hist{cum: map[float64]float64{}}
			}
			return worker[k]
		}
		for _, l := range lines {
			s, ok := parse(l)
			if !ok {
				continue
			}
			v, _ := strconv.ParseFloat(s.value, 64)
			switch s.name {
			case ttft + "_bucket":
				le, _ := strconv.ParseFloat(s.le, 64)
				at(key{s.series, s.ts}).cum[le] = v
			case ttft + "_sum":
				at(key{s.series, s.ts}).sum = v
			case ttft + "_count":
				at(key{s.series, s.ts}).count = v
			}
		}
		// The frontend's histogram: each scrape's new requests delayed.
		scrapes := map[string][]int64{}
		for k := range worker {
			scrapes[k.series] = append(scrapes[k.series], k.ts)
		}
		front := map[key]*hist{}
		for series, tss := range scrapes {
			slices.Sort(tss)
			var les []float64
			for le := range worker[key{series, tss[0]}].cum {
				les = append(les, le)
			}
			slices.Sort(les)
			// cumAt is the worker's count at or below x (its largest bound ≤ x).
			cumAt := func(h *hist, x float64) float64 {
				c := 0.0
				for _, le := range les {
					if le <= x+1e-9 {
						c = h.cum[le]
					}
				}
				return c
			}
			prev, acc := &hist{cum: map[float64]float64{}}, &hist{cum: map[float64]float64{}}
			for _, ts := range tss {
				cur, d := worker[key{series, ts}], delay(ts)
				if cur.count < prev.count { // a restart
					prev = &hist{cum: map[float64]float64{}}
				}
				n := cur.count - prev.count
				acc.count += n
				acc.sum += cur.sum - prev.sum + d*n
				for _, le := range les {
					fle := le + routerDelay
					if math.IsInf(le, 1) {
						acc.cum[fle] += n
						continue
					}
					acc.cum[fle] += cumAt(cur, fle-d) - cumAt(prev, fle-d)
				}
				snap := &hist{cum: maps.Clone(acc.cum), sum: acc.sum, count: acc.count}
				front[key{series, ts}] = snap
				prev = cur
			}
		}
		num := func(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
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
			if s.name == ttft+"_count" {
				h, fam := front[key{s.series, s.ts}], to[ttft]
				les := slices.Sorted(maps.Keys(h.cum))
				for _, le := range les {
					lbl := "+Inf"
					if !math.IsInf(le, 1) {
						lbl = num(le)
					}
					fmt.Fprintf(&out, "%s_bucket{%s,le=%q} %s %d\n", fam, s.series, lbl, num(h.cum[le]), s.ts)
				}
				fmt.Fprintf(&out, "%s_sum{%s} %s %d\n%s_count{%s} %s %d\n", fam, s.series, num(h.sum), s.ts, fam, s.series, num(h.count), s.ts)
				continue
			}
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				if fam, ok := strings.CutSuffix(s.name, suf); ok && fam == itl {
					series := s.series
					if suf == "_bucket" {
						series += `,le="` + s.le + `"`
					}
					fmt.Fprintf(&out, "%s%s{%s} %s %d\n", to[fam], suf, series, s.value, s.ts)
				}
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
// it. With a steady router delay the walk and its gaps are the worker's
// (same status, causes and not-exported signals as without the frontend);
// the headline's TTFT and inter-token rows are the frontend's and say so;
// the frontend-minus-worker TTFT mean is the added router delay; no
// client_view gap is left. Without the frontend the headline carries no
// frontend row. When the router's delay grows over the incident window
// (250 ms → 1.5 s) while the healthy worker holds, what clients feel moved:
// the status is an anomaly and outside_engine comes first, quoting the
// frontend-minus-worker TTFT.
func TestDynamoFrontendClientView(t *testing.T) {
	// The healthy bundle's incident window ends at its last scrape
	// (incident.yaml: at 2026-01-01T01:23:00Z, window 5m).
	const healthyAt, window = 1767230580, 300
	growingRouter := func(ts int64) float64 {
		return routerDelay + (1.5-routerDelay)*min(1, max(0, float64(ts-(healthyAt-window))/window))
	}
	for _, c := range []struct {
		name, incident, ttft, itl, engine, shape string
		delay                                    func(int64) float64
		status                                   verdict.Status
		code                                     int
		first                                    string
	}{
		{"trtllm_dynamo_arrival_surge", "trtllm_dynamo_arrival_surge", "trtllm_time_to_first_token_seconds", "trtllm_time_per_output_token_seconds",
			"trtllm", "dynamo", steadyRouter, verdict.StatusAnomaly, exitCause, "queue_saturation"},
		{"healthy", "healthy", "vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds", "vllm", "v1", steadyRouter, verdict.StatusHealthy, exitOK, ""},
		{"healthy_router_grows", "healthy", "vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds", "vllm", "v1", growingRouter,
			verdict.StatusAnomaly, exitCause, "outside_engine"},
	} {
		t.Run(c.name, func(t *testing.T) {
			steady := c.delay(0) == c.delay(healthyAt)
			plain := runShared(t, "why", "--bundle", incidentsDir+"/"+c.incident, "--output", "json")
			r := runCLI(t, "why", "--bundle", rewrittenBundle(t, c.incident, false, withDynamoFrontend(c.ttft, c.itl, c.delay)), "--output", "json")
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
			if fv.Status != c.status || (steady && (fv.Status != wv.Status || !slices.Equal(ids(fv), ids(wv)))) {
				t.Errorf("with the frontend: %s %v; without: %s %v; want %s", fv.Status, ids(fv), wv.Status, ids(wv), c.status)
			}
			if c.first != "" && (len(fv.Causes) == 0 || fv.Causes[0].ID != c.first) {
				t.Errorf("causes %v, want %s first", ids(fv), c.first)
			}
			if !steady {
				if wv.Status != verdict.StatusHealthy {
					t.Fatalf("the worker alone reads %s, want healthy", wv.Status)
				}
				var quoted bool
				for _, e := range fv.Causes[0].Evidence {
					quoted = quoted || (e.Rule == "router_time_grew" && strings.Contains(e.Text, "frontend minus worker TTFT mean"))
					t.Logf("%s: %s", e.Rule, e.Text)
				}
				if !quoted {
					t.Errorf("outside_engine's evidence does not quote the frontend-minus-worker TTFT: %+v", fv.Causes[0].Evidence)
				}
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
			t.Logf("outside the engine: now %.4f s, baseline %.4f s (router delay %.2f s at baseline)", *out.Now, *out.Baseline, routerDelay)
			if math.Abs(*out.Baseline-routerDelay) > 0.01*routerDelay {
				t.Errorf("outside the engine at baseline %.4f s, want %.2f s ±1%%", *out.Baseline, routerDelay)
			}
			if steady && math.Abs(*out.Now-routerDelay) > 0.01*routerDelay {
				t.Errorf("outside the engine %.4f s, want %.2f s ±1%%", *out.Now, routerDelay)
			}
			if !steady && (*out.Now < 0.8 || *out.Now > 1.5) {
				t.Errorf("outside the engine %.4f s, want the window's mean delay, between 0.8 and 1.5 s", *out.Now)
			}
			// The worker's TTFT p95 shifted by the delay (shifted buckets).
			wp, fp := headlineRow(wv, "ttft_p95"), headlineRow(fv, "ttft_p95")
			t.Logf("TTFT p95: worker %.4f s, frontend %.4f s", *wp.Now, *fp.Now)
			if steady && math.Abs(*fp.Now-*wp.Now-routerDelay) > 0.02*(*fp.Now) {
				t.Errorf("frontend TTFT p95 %.4f s, worker %.4f s: want the worker's + %.2f s", *fp.Now, *wp.Now, routerDelay)
			}
			txt := runCLI(t, "why", "--bundle", rewrittenBundle(t, c.incident, false, withDynamoFrontend(c.ttft, c.itl, c.delay)))
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
	one := withDynamoFrontend("vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds", steadyRouter)
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
