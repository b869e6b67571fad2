package diagnose

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/whyslow/whyslow/rules"
	"github.com/whyslow/whyslow/verdict"
)

// Signals the attribution reads (declared in the rulebook).
const (
	sigTTFTMean     = "ttft_mean"
	sigQueueMean    = "queue_mean"
	sigPrefillMean  = "prefill_mean"
	sigITLMean      = "tpot_mean"
	sigRunning      = "running"
	sigTargets      = "targets"
	sigKVUsageAvg   = "kv_usage_avg"
	sigPrefillTPS   = "prefill_tps"
	sigStepsRate    = "steps_rate"
	sigPreemptRate  = "preemption_rate"
	sigPromptMean   = "prompt_len_mean"
	sigGenMean      = "gen_len_mean"
	sigSMClock      = "sm_clock"
	sigDecodeBatch  = "decode_batch"
	sigDecodeKV     = "decode_kv_usage"
	sigDecodeCtx    = "decode_ctx_tokens"
	minRiseFraction = 0.05 // a latency that rose less than 5% is not split
)

// stepModel is the inter-token step model's constants.
type stepModel struct {
	r, rho float64
	note   string
}

// Attribute computes the attribution from the signal values of the two
// windows (canonical names). gpuClass and model are what is known of the
// hardware and the served model (both may be empty). It returns nil when
// neither latency rose.
func Attribute(now, base map[string]float64, gpuClass, model string) *verdict.Attribution {
	a := &verdict.Attribution{TTFT: splitTTFT(now, base)}
	sm := newStepModel(gpuClass, model)
	a.ITL = splitITL(now, base, sm)
	if a.ITL != nil {
		a.Model = sm.note
	}
	if a.TTFT == nil && a.ITL == nil {
		return nil
	}
	return a
}

func rose(n, b float64) bool { return b > 0 && n > b*(1+minRiseFraction) }

func splitTTFT(now, base map[string]float64) *verdict.LatencySplit {
	n, okN := now[sigTTFTMean]
	b, okB := base[sigTTFTMean]
	if !okN || !okB || !rose(n, b) {
		return nil
	}
	s := &verdict.LatencySplit{Baseline: b, Now: n, Delta: n - b}
	part := func(comp, sig, what string) (float64, bool) {
		pn, ok1 := now[sig]
		pb, ok2 := base[sig]
		if !ok1 || !ok2 {
			s.Missing = append(s.Missing, what)
			return 0, false
		}
		s.Parts = append(s.Parts, verdict.Part{Component: comp, Seconds: pn - pb,
			Driver: fmt.Sprintf("%s %s → %s", what, rules.FormatSeconds(pb), rules.FormatSeconds(pn))})
		return pn - pb, true
	}
	q, okQ := part(verdict.CompQueue, sigQueueMean, "queue time mean")
	p, okP := part(verdict.CompPrefill, sigPrefillMean, "prefill time mean")
	if !okQ && !okP {
		// Nothing of the split is exported: a gap, not 100% unexplained.
		s.Missing = append(s.Missing, "time before the engine (needs both queue and prefill time)")
		s.Unmeasured, s.Parts = true, []verdict.Part{}
		return s
	}
	explained := q + p
	if okQ && okP {
		// What vLLM's TTFT holds beyond the engine's own queue and prefill.
		o := s.Delta - q - p
		s.Parts = append(s.Parts, verdict.Part{Component: verdict.CompOutside, Seconds: o,
			Driver: fmt.Sprintf("TTFT − queue − prefill %s → %s",
				rules.FormatSeconds(b-base[sigQueueMean]-base[sigPrefillMean]), rules.FormatSeconds(n-now[sigQueueMean]-now[sigPrefillMean]))})
		explained += o
	} else {
		s.Missing = append(s.Missing, "time before the engine (needs both queue and prefill time)")
	}
	finishSplit(s, explained)
	return s
}

// finishSplit sets the unexplained remainder of s and each part's share of
// the change, given the seconds the parts explain.
func finishSplit(s *verdict.LatencySplit, explained float64) {
	s.Unexplained = s.Delta - explained
	for i := range s.Parts {
		s.Parts[i].Share = s.Parts[i].Seconds / s.Delta
	}
	s.UnexplainedShare = s.Unexplained / s.Delta
	if s.Parts == nil {
		s.Parts = []verdict.Part{}
	}
}

// drivers are the step model's inputs for one window.
type drivers struct {
	batch, ctx, prefill, recompute, clock float64
}

// stepOverhead is T0, the per-step time that is neither weights, KV nor
// compute (scheduler, sampling, kernel launches; a few ms in vLLM).
const stepOverhead = 0.002

// stepDrivers reads the step model's inputs; ok is false without the
// latency, the running gauge or the KV usage.
//
// Without a step counter, steps per second are taken as 1 / the baseline's
// inter-token latency in both windows (itl): using each window's own would
// make any slowdown look like more prefill per step.
func stepDrivers(m map[string]float64, itl float64) (d drivers, missing []string, ok bool) {
	targets := math.Max(1, m[sigTargets])
	batch, okB := m[sigDecodeBatch]
	if !okB {
		run, okR := m[sigRunning]
		batch, okB = run/targets, okR
	}
	kv, okK := m[sigDecodeKV]
	if !okK {
		kv, okK = m[sigKVUsageAvg]
	}
	if !okB || batch <= 0 || !okK {
		return d, nil, false
	}
	d.batch = batch
	d.ctx = kv / batch
	steps := 0.0
	if sr, ok := m[sigStepsRate]; ok && sr > 0 {
		steps = sr / targets
	} else if itl > 0 {
		steps = 1 / itl // every step gives each running request a token
	}
	if pt, ok := m[sigPrefillTPS]; ok && steps > 0 {
		d.prefill = pt / targets / steps
	} else {
		missing = append(missing, "prompt tokens computed per step (no computed prompt token counter)")
	}
	if pr, ok := m[sigPreemptRate]; ok && steps > 0 {
		ctx := m[sigPromptMean] + m[sigGenMean]/2
		d.recompute = pr / targets * ctx / steps
	} else if !ok {
		missing = append(missing, "recompute after preemption (no preemption counter)")
	}
	d.clock = m[sigSMClock] // 0 when unknown
	return d, missing, true
}

// stepTime is the model's step time less T0, in units of F (the weights'
// read time).
func (sm stepModel) stepTime(d drivers, clockBase float64) float64 {
	mem := 1 + sm.r*d.batch*d.ctx
	comp := sm.rho * d.batch
	kc := 1.0
	if clockBase > 0 && d.clock > 0 {
		kc = clockBase / d.clock
	}
	return math.Max(mem, comp)*math.Pow(kc, 0.6) + sm.rho*(d.prefill+d.recompute)*kc
}

func splitITL(now, base map[string]float64, sm stepModel) *verdict.LatencySplit {
	n, okN := now[sigITLMean]
	b, okB := base[sigITLMean]
	if !okN || !okB || !rose(n, b) {
		return nil
	}
	s := &verdict.LatencySplit{Baseline: b, Now: n, Delta: n - b}
	dn, missN, ok1 := stepDrivers(now, b)
	db, _, ok2 := stepDrivers(base, b)
	if !ok1 || !ok2 {
		s.Missing = append(s.Missing, "decode batch and KV context (needs the running gauge and KV cache usage)")
		finishSplit(s, 0)
		return s
	}
	s.Missing = append(s.Missing, missN...)
	// Attention reads each sequence's whole context, shared blocks too: the
	// context grows as the tokens per request do, whatever the sharing.
	if cn, cb := now[sigDecodeCtx], base[sigDecodeCtx]; cn > 0 && cb > 0 {
		dn.ctx = db.ctx * cn / cb
	}
	if db.clock == 0 || dn.clock == 0 {
		s.Missing = append(s.Missing, "GPU clocks (no SM clock series)")
		db.clock, dn.clock = 0, 0
	}
	t0 := stepOverhead
	if b < 1.25*t0 {
		t0 = 0.2 * b
	}
	f := (b - t0) / sm.stepTime(db, db.clock)
	// Shapley values over the drivers: each driver's average marginal change
	// over all orders in which the drivers move from baseline to now.
	names := []string{verdict.CompBatch, verdict.CompContext, verdict.CompPrefill, verdict.CompRecompute, verdict.CompClock}
	get := func(d *drivers, i int) *float64 {
		return [...]*float64{&d.batch, &d.ctx, &d.prefill, &d.recompute, &d.clock}[i]
	}
	phi := make([]float64, len(names))
	perms := permutations(len(names))
	for _, perm := range perms {
		cur := db
		prev := sm.stepTime(cur, db.clock)
		for _, i := range perm {
			*get(&cur, i) = *get(&dn, i)
			t := sm.stepTime(cur, db.clock)
			phi[i] += t - prev
			prev = t
		}
	}
	explained := 0.0
	for i, name := range names {
		sec := f * phi[i] / float64(len(perms))
		if math.Abs(sec) < 1e-9 {
			continue
		}
		explained += sec
		s.Parts = append(s.Parts, verdict.Part{Component: name, Seconds: sec, Driver: driverText(name, db, dn)})
	}
	finishSplit(s, explained)
	return s
}

func driverText(name string, b, n drivers) string {
	r := func(x, y float64) string {
		if x <= 0 {
			return fmt.Sprintf("%s → %s", rules.FormatNumber(x), rules.FormatNumber(y))
		}
		return rules.FormatRatio(y / x)
	}
	switch name {
	case verdict.CompBatch:
		return fmt.Sprintf("requests decoding per target %s → %s", rules.FormatNumber(b.batch), rules.FormatNumber(n.batch))
	case verdict.CompContext:
		return "KV context per running request " + r(b.ctx, n.ctx)
	case verdict.CompPrefill:
		return fmt.Sprintf("prompt tokens computed per step %s → %s", rules.FormatNumber(b.prefill), rules.FormatNumber(n.prefill))
	case verdict.CompRecompute:
		return fmt.Sprintf("tokens recomputed per step %s → %s", rules.FormatNumber(b.recompute), rules.FormatNumber(n.recompute))
	case verdict.CompClock:
		return fmt.Sprintf("SM clock %s → %s MHz", rules.FormatNumber(b.clock), rules.FormatNumber(n.clock))
	}
	return ""
}

func permutations(n int) [][]int {
	if n == 0 {
		return [][]int{{}}
	}
	var out [][]int
	for _, p := range permutations(n - 1) {
		for i := 0; i <= len(p); i++ {
			q := make([]int, 0, n)
			q = append(q, p[:i]...)
			q = append(q, n-1)
			q = append(q, p[i:]...)
			out = append(out, q)
		}
	}
	return out
}

// gpuRoofline is HBM bandwidth and dense BF16 FLOP/s from the vendors'
// data sheets, for ρ = (bandwidth·0.8)/(FLOP/s·0.5): the cost of one token's
// compute relative to one read of the weights, at typical achieved
// efficiencies.
var gpuRoofline = []struct {
	match     string
	bw, flops float64
}{
	{"h200", 4.8e12, 989e12}, {"gh200", 4.0e12, 989e12}, {"h100", 3.35e12, 989e12},
	{"h800", 3.35e12, 989e12}, {"a100", 2.039e12, 312e12}, {"a800", 2.039e12, 312e12},
	{"b200", 8e12, 2250e12}, {"b300", 8e12, 2250e12}, {"l40s", 0.864e12, 362e12},
	{"l4", 0.3e12, 121e12}, {"mi300x", 5.3e12, 1307e12},
}

var modelSize = regexp.MustCompile(`(?i)(^|[^a-z0-9.])(\d+(?:\.\d+)?)b($|[^a-z0-9])`)

// newStepModel picks R and ρ. ρ comes from the GPU class. R, the time to
// read a full KV cache over the weights' read time, is the KV pool's bytes
// over the weights' bytes per GPU: the engine gives the cache what memory
// the weights leave (vLLM: memory × gpu_memory_utilization − weights −
// activations), so with the parameter count from the served model's name
// (e.g. "Llama-3.1-70B"), 2 bytes per weight, 0.9 utilisation and the
// smallest power-of-two tensor parallelism that fits the weights in 60% of
// the memory. Without them R is 1.5 (Llama-class models on 80 GiB GPUs
// range 0.8–3.5).
func newStepModel(gpuClass, model string) stepModel {
	sm := stepModel{r: 1.5, rho: 0.007}
	var notes []string
	c := strings.ToLower(gpuClass)
	foundGPU := false
	for _, g := range gpuRoofline {
		if c != "" && strings.Contains(c, g.match) {
			sm.rho = g.bw * 0.8 / (g.flops * 0.5)
			foundGPU = true
			break
		}
	}
	if !foundGPU {
		notes = append(notes, "ρ assumed (GPU class unknown)")
	}
	mem := GPUMemoryGiB(gpuClass) * (1 << 30)
	if m := modelSize.FindStringSubmatch(model); m != nil && mem > 0 {
		params, _ := strconv.ParseFloat(m[2], 64)
		w := params * 1e9 * 2
		tp := 1.0
		for w > 0.6*mem*tp && tp < 64 {
			tp *= 2
		}
		pool := 0.9*mem*tp - w - 3e9*tp
		if pool > 0 {
			sm.r = math.Max(0.2, math.Min(8, pool/w))
			notes = append(notes, fmt.Sprintf("R %.2f from a %sB model on %s (TP %.0f)", sm.r, m[2], gpuClass, tp))
		}
	} else {
		notes = append(notes, "R assumed 1.5 (model size or GPU memory unknown)")
	}
	notes = append(notes, fmt.Sprintf("ρ %.4f", sm.rho))
	sm.note = "step model: " + strings.Join(notes, "; ")
	return sm
}

// AttrMap flattens the attribution into the rules' `attr` variable
// (rules/attr.go keys); a nil attribution gives an empty map.
func AttrMap(a *verdict.Attribution) map[string]float64 {
	m := map[string]float64{}
	if a == nil {
		return m
	}
	if s := a.TTFT; s != nil {
		m[rules.AttrTTFTDelta] = s.Delta
		if !s.Unmeasured {
			m[rules.AttrTTFTUnexplained] = s.UnexplainedShare
		}
		for _, p := range s.Parts {
			switch p.Component {
			case verdict.CompQueue:
				m[rules.AttrTTFTQueue] = p.Share
			case verdict.CompPrefill:
				m[rules.AttrTTFTPrefill] = p.Share
			case verdict.CompOutside:
				m[rules.AttrTTFTOutside] = p.Share
			}
		}
	}
	if s := a.ITL; s != nil {
		m[rules.AttrITLDelta] = s.Delta
		m[rules.AttrITLUnexplained] = s.UnexplainedShare
		for _, p := range s.Parts {
			key := map[string]string{verdict.CompBatch: rules.AttrITLBatch, verdict.CompContext: rules.AttrITLContext,
				verdict.CompPrefill: rules.AttrITLPrefill, verdict.CompRecompute: rules.AttrITLRecompute, verdict.CompClock: rules.AttrITLClock}[p.Component]
			if key != "" {
				m[key] = p.Share
			}
		}
	}
	// The larger symptom, by relative rise, decides the overall unexplained share.
	var big *verdict.LatencySplit
	for _, s := range []*verdict.LatencySplit{a.TTFT, a.ITL} {
		if s != nil && !s.Unmeasured && (big == nil || s.Now/s.Baseline > big.Now/big.Baseline) {
			big = s
		}
	}
	// A remainder beside a part that was not measured (no prefill-time
	// histogram, no computed-prompt counter, no clock series) may be that
	// part: a gap the verdict lists, not a finding of its own.
	if big != nil && len(big.Missing) == 0 {
		m[rules.AttrUnexplained] = math.Max(0, math.Min(1, big.UnexplainedShare))
	}
	if a.ITL != nil {
		// A TTFT without a split did not rise (or was not measured: then
		// the inter-token half is all that was seen).
		rise := func(s *verdict.LatencySplit) float64 {
			if s == nil || s.Baseline <= 0 || s.Now <= 0 {
				return 0
			}
			return math.Max(0, math.Log(s.Now/s.Baseline))
		}
		if t, i := rise(a.TTFT), rise(a.ITL); t+i > 0 {
			m[rules.AttrITLSymptom] = i / (t + i)
		}
	}
	return m
}
