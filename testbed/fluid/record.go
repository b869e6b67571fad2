package fluid

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"sort"
	"time"
)

// Options selects and shapes one recorded instance.
type Options struct {
	// Scenario is a catalogue name (see Scenarios) or "a+b", two faults at
	// once (see CompoundPairs).
	Scenario string
	// Seed makes the instance; the same options and seed give the same
	// bundle, byte for byte.
	Seed int64
	// Names is "v1" (vLLM V1 names, the default) or "v0".
	Names string
	// GPUSeries is "whyslow" (whyslow_gpu_*, the default), "dcgm"
	// (dcgm-exporter's DCGM_FI_*), "both" or "none". With Wide and no
	// value, it is drawn; so is Names.
	GPUSeries string
	// Wide draws from models.md's wide ranges (loads 0.2-0.9, cost
	// coefficients ±50%, 1-8 replicas, magnitudes 0-1, 8B/70B,
	// H100/A100/H200, vLLM versions); otherwise a moderate, clearly visible
	// instance.
	Wide bool
	// Trim keeps only the incident and baseline windows, each with a
	// 5-minute look-back for rate().
	Trim bool
}

// ErrTruthUnmet is returned when no draw of an instance (the seed and its
// redraws) showed the truth's mechanism; it does not happen on the seeds
// the tests cover.
var ErrTruthUnmet = errors.New("the drawn instance did not show its truth")

// Record draws the instance opts names, runs it and returns its bundle.
// When a draw fails its truth check (a hard negative's latency moved, a
// fault's mechanism did not show), it redraws: hard negatives with a
// smaller disturbance and lower load, faults with a derived seed at the same
// magnitude. Truth.Params["redraws"] says how many.
func Record(ctx context.Context, opts Options) (*Bundle, error) {
	return record(ctx, opts, recordConfig{m: -1})
}

// recordConfig are the test hooks: tests inspect raw draws, pin a
// magnitude or change the drawn plan (say, its vLLM version).
type recordConfig struct {
	noVerify bool
	m        float64 // >= 0: the magnitude instead of the drawn one
	mutate   func(p *plan)
}

func record(ctx context.Context, opts Options, cfg recordConfig) (*Bundle, error) {
	if opts.Scenario == "" {
		return nil, errors.New("fluid: no scenario (see fluid.Scenarios)")
	}
	defs, err := lookup(opts.Scenario)
	if err != nil {
		return nil, fmt.Errorf("fluid: %w", err)
	}
	hard := defs[0].hard
	// each (scenario, seed) is its own instance
	h := fnv.New64a()
	h.Write([]byte(opts.Scenario))
	mixed := opts.Seed ^ int64(h.Sum64()>>1)
	var last error
	for attempt := 0; attempt <= maxRetries; attempt++ {
		seed := mixed
		if attempt > 0 && !hard {
			seed = mixed + int64(attempt)*1_000_003
		}
		p, err := prepare(opts, defs, seed, mixed, attempt, cfg)
		if err != nil {
			return nil, fmt.Errorf("fluid: %w", err)
		}
		s := newSim(p)
		if err := s.run(ctx); err != nil {
			return nil, fmt.Errorf("fluid: %w", err)
		}
		b := s.bundle()
		if cfg.noVerify {
			return b, nil
		}
		if err := verify(b); err != nil {
			last = err
			continue
		}
		return b, nil
	}
	return nil, fmt.Errorf("fluid: %s seed %d: %w: %v", opts.Scenario, opts.Seed, ErrTruthUnmet, last)
}

// prepare draws the instance and sets every fault's knobs.
func prepare(opts Options, defs []*scenarioDef, seed, mixed int64, attempt int, cfg recordConfig) (*plan, error) {
	p, err := draw(opts, defs, seed, attempt)
	if err != nil {
		return nil, err
	}
	mg := newRNG(mixed, 2) // the magnitude survives redraws
	switch {
	case p.hard:
		p.m = 0
	case cfg.m >= 0:
		p.m = cfg.m
	case opts.Wide:
		p.m = mg.float()
	default:
		p.m = mg.uniform(0.45, 0.85)
	}
	if cfg.mutate != nil {
		cfg.mutate(p)
	}
	kg := newRNG(seed, 3)
	for _, d := range defs {
		f := &faultState{def: d}
		p.faults = append(p.faults, f)
		if d.shape != nil {
			d.shape(p, f, kg)
		}
	}
	p.rebuildGroups()
	if p.hard && attempt > 0 {
		p.load *= math.Pow(0.85, float64(attempt))
		p.driftAmp *= math.Pow(0.5, float64(attempt))
		for i := range p.bursts {
			p.bursts[i].mul = 1 + (p.bursts[i].mul-1)*math.Pow(0.5, float64(attempt))
		}
	}
	p.calibrateLoad()
	for _, f := range p.faults {
		if f.def.tune != nil {
			f.def.tune(p, f, kg)
		}
	}
	p.rebuildGroups()
	return p, nil
}

// throttleReason is the clock-event reason of a gpu_throttle fault.
func (p *plan) throttleReason() string {
	for _, f := range p.faults {
		if f.reason != "" {
			return f.reason
		}
	}
	return ""
}

// internals are what the tests check beyond truth.yaml.
type internals struct {
	p        *plan
	rep      [][2]Window
	repArr   [][2]float64
	grpArr   [3][2]float64
	stopped  int
	lateWait float64
	baseWait float64
}

// bundle assembles the run's bundle.
func (s *sim) bundle() *Bundle {
	p := s.p
	rec := s.obs.recent.window()
	obs := Observed{Baseline: s.obs.fleet[0].window(), Incident: s.obs.fleet[1].window(),
		Recent: Window{TTFTMean: rec.TTFTMean, ITLMean: rec.ITLMean}}
	in := &internals{p: p, repArr: s.obs.repArr, grpArr: s.obs.grpArr, stopped: s.stopped, lateWait: s.lateWait, baseWait: s.baseWait}
	for i := range s.obs.rep {
		in.rep = append(in.rep, [2]Window{s.obs.rep[i][0].window(), s.obs.rep[i][1].window()})
	}
	order := append([]*faultState(nil), p.faults...)
	sort.SliceStable(order, func(i, j int) bool { return order[i].score > order[j].score })
	causes := []string{}
	for _, f := range order {
		causes = append(causes, f.def.causes...)
	}
	at := epoch.Add(time.Duration(p.at * nsPerSec))
	inc := Incident{
		At: at, Window: time.Duration(windowLen * nsPerSec), Baseline: time.Duration(baselineBy * nsPerSec),
		Engine: "vllm", Selector: fmt.Sprintf("model_name=%q", p.model.name), GPU: p.gpu.name,
		Scheduler: Scheduler{ChunkedPrefill: true, MaxNumBatchedTokens: int(p.lim.budget), MaxNumSeqs: int(p.lim.maxSeqs)},
		// no scenario here: whatever reads incident.yaml must not learn the truth
		Notes: fmt.Sprintf("recorded from the fluid engine model (seed %d); %d× %s on %s (TP=%d)",
			p.opts.Seed, p.replicas, p.model.name, p.gpu.name, p.tp),
	}
	tr := Truth{
		Scenario: p.name, Seed: p.opts.Seed, Causes: causes, Onset: epoch.Add(time.Duration(onsetAt * nsPerSec)),
		Magnitude: round3(p.m), Band: band(p.m, p.hard), Params: s.params(), Observed: obs,
		ITLAttribution: attribute(&p.cost, obs.Baseline, obs.Incident),
	}
	return &Bundle{Metrics: s.reg.write(), Incident: inc, Truth: tr, in: in}
}

// params are truth.yaml's drawn parameters.
func (s *sim) params() map[string]any {
	p := s.p
	m := map[string]any{
		"model": p.model.name, "gpu": p.gpu.name, "tensor_parallel": p.tp, "replicas": p.replicas,
		"router": p.router, "names": p.names, "vllm_version": p.era, "gpu_series": p.gpuSeries,
		"scrape_interval_s": p.scrape, "wide": p.opts.Wide, "redraws": p.attempt,
		"baseline_load": round3(p.load), "capacity_rps_per_replica": round3(p.capRep),
		"baseline_rate_rps": round3(p.rate), "num_gpu_blocks": p.numBlocks(), "gpu_memory_utilization": p.memUtil,
		"max_model_len": p.maxLen, "max_num_batched_tokens": int(p.lim.budget), "max_num_seqs": int(p.lim.maxSeqs),
		"prompt_mean_tokens": math.Round(p.base.meanPrompt(scales{prompt: 1, out: 1, history: p.history0})),
		"prompt_p90_tokens":  math.Round(p.promptQuantile(0.9, 1)), "system_prompt_tokens": p.sys,
		"system_prompts": p.nPrefixes, "prefix_match": round3(p.match), "history_tokens_baseline": p.history0,
		"output_mean_tokens": math.Round(p.base.meanOut(scales{prompt: 1, out: 1})), "max_tokens": p.maxTok,
		"abort_share": round3(p.abortP), "outside_base_s": round3(p.outsideBase), "onset_ramp_s": round3(p.ramp),
		"cost_step_overhead_s": sig(p.cost.overhead), "cost_per_seq_s": sig(p.cost.perSeq),
		"cost_hbm_bytes_per_s": sig(p.cost.bw), "cost_prefill_flops": sig(p.cost.flops),
		"cost_kv_bytes_per_token": sig(p.cost.kvBytes), "cost_weight_bytes": sig(p.cost.weights),
		"perturb_prefill": round3(p.pert.prefill), "perturb_overhead": round3(p.pert.overhead),
		"perturb_bandwidth": round3(p.pert.bandwidth), "perturb_kv_capacity": round3(p.pert.kvCapacity),
		"omitted_families": p.omitted(),
	}
	if om := p.omitted(); len(om) == 0 {
		m["omitted_families"] = []string{}
	}
	if len(p.bursts) > 0 {
		m["short_bursts"] = len(p.bursts)
	}
	for _, f := range p.faults {
		switch f.def.name {
		case "arrival_surge":
			m["rate_mul"] = round3(f.knob)
		case "capacity_loss":
			m["stopped_replicas"] = int(f.knob)
			m["surviving_load"] = round3(f.knob2)
			m["capacity_mode"] = f.mode
		case "long_prompt_burst":
			m["long_prompt_share"] = sig(f.knob)
			m["long_prompt_tokens"] = math.Round(f.knob2)
		case "prompt_shift":
			m["prompt_mul"] = round3(f.knob)
			m["prompt_p90_incident_tokens"] = math.Round(p.promptQuantile(0.9, f.knob))
		case "kv_pressure":
			m["output_mul"] = round3(f.knob)
			m["kv_demand_over_pool"] = round3(f.knob2)
		case "context_growth":
			m["history_tokens"] = math.Round(f.knob)
			m["new_message_mul"] = round3(f.knob2)
		case "gpu_throttle":
			m["clock_factor"] = round3(f.knob)
			m["throttle_reason"] = f.reason
		case "prefix_cache_loss":
			m["prefix_match_loss"] = round3(f.knob)
		case "error_burst":
			m["error_share"] = round3(f.knob)
		case "router_skew":
			m["hot_share"] = round3(f.knob)
			m["hot_load"] = round3(f.knob2)
		case "frontend_delay":
			m["frontend_delay_s"] = sig(f.knob)
		case "healthy_burst":
			m["burst_start_s"] = round3(f.start - (p.at - windowLen))
			m["burst_duration_s"] = round3(f.dur)
			m["burst_load"] = round3(f.knob * p.load)
		case "diurnal_growth":
			m["growth"] = round3(f.knob)
		case "new_tenant":
			m["tenant_share"] = round3(f.knob)
			m["tenant_prompt_mul"] = round3(f.knob2)
		}
	}
	return m
}
