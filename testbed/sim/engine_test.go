package sim

import (
	"context"
	"math"
	"testing"
)

// checkPool verifies the block accounting of one engine. It runs after
// every simulated event, so it calls t.Helper (a stack walk) only on failure.
func checkPool(t *testing.T, e *engine, now float64) {
	p := &e.pool
	if p.used < 0 || p.idle < 0 || p.used+p.idle > p.total {
		t.Helper()
		t.Fatalf("t=%.3f replica %d: pool over-allocated: used %d idle %d total %d", now, e.idx, p.used, p.idle, p.total)
	}
	own := 0
	for _, r := range e.running {
		if r.running && !r.done {
			own += r.ownBlocks
		}
	}
	shared, idle := 0, 0
	for _, pe := range p.entries {
		if pe.refs > 0 {
			shared += pe.blocks
		} else {
			idle += pe.blocks
		}
	}
	if own+shared != p.used || idle != p.idle {
		t.Helper()
		t.Fatalf("t=%.3f replica %d: blocks held (own %d + shared %d, idle %d) != pool (used %d, idle %d)",
			now, e.idx, own, shared, idle, p.used, p.idle)
	}
}

// drain stops arrivals and runs until every request has left.
func drain(t *testing.T, w *world) {
	t.Helper()
	w.nextArr, w.nextLong = math.Inf(1), math.Inf(1)
	for i := 0; i < 200 && w.inflight > 0; i++ {
		if err := w.run(context.Background(), w.now+600); err != nil {
			t.Fatal(err)
		}
	}
	if w.inflight != 0 {
		t.Fatalf("%d requests never finished", w.inflight)
	}
}

func TestInvariants(t *testing.T) {
	cases := []struct {
		scenario, policy string
		seed             int64
		wantPreempt      bool
	}{
		{"healthy", "vllm", 3, false},
		{"kv_pressure", "vllm", 2, true},
		{"abort_storm", "vllm", 1, false},
		{"long_prompt_burst", "vllm", 2, false},
		{"router_skew", "vllm", 1, false},
		{"kv_pressure", "sglang", 2, true},
		{"kv_pressure", "trtllm", 2, false},
		{"prefix_cache_loss", "vllm", 1, false},
		{"error_burst", "vllm", 1, false},
		{"capacity_loss", "vllm", 1, false},
		{"new_tenant", "sglang", 1, false},
	}
	for _, tc := range cases {
		if testing.Short() && tc.scenario == "new_tenant" {
			continue
		}
		t.Run(tc.scenario+"/"+tc.policy, func(t *testing.T) {
			w, err := newWorld(Options{Scenario: tc.scenario, Seed: tc.seed, Policy: tc.policy})
			if err != nil {
				t.Fatal(err)
			}
			w.trackAll = true
			w.recording = true
			preempts := 0
			for _, e := range w.engines {
				e.onPreempt = func(free, need int) {
					if free >= need {
						t.Fatalf("replica %d preempted with %d free blocks for %d needed", e.idx, free, need)
					}
				}
			}
			w.afterEvent = func() {
				for _, e := range w.engines {
					checkPool(t, e, w.now)
				}
			}
			if err := w.run(context.Background(), w.plan.onset+300); err != nil {
				t.Fatal(err)
			}
			w.afterEvent = nil
			for _, e := range w.engines {
				preempts += int(e.tel.preemptions)
			}
			if tc.wantPreempt && preempts == 0 {
				t.Errorf("no preemptions in %s", tc.scenario)
			}
			if tc.policy == "trtllm" && preempts != 0 {
				t.Errorf("GUARANTEED_NO_EVICT preempted %d times", preempts)
			}
			checkCountersMonotonic(t, w.reg)
			drain(t, w)

			// Tokens conserved and every request accounted for.
			var prompt, gen, first, finished, aborted, errored, completed float64
			for _, r := range w.all {
				if !r.done {
					t.Fatalf("request %d not done after drain", r.seq)
				}
				gen += float64(r.gen)
				if r.hasFirst {
					prompt += float64(r.prompt)
					first++
				}
				if r.gen > r.target {
					t.Fatalf("request %d generated %d > target %d", r.seq, r.gen, r.target)
				}
				finished++
				switch r.reason {
				case "abort":
					aborted++
				case "error":
					errored++
				default:
					completed++
					if r.gen != r.target {
						t.Fatalf("request %d finished %s with %d of %d tokens", r.seq, r.reason, r.gen, r.target)
					}
				}
			}
			var tp, tg, succ, abort, failed, e2e, queue, ttft, itl float64
			for _, e := range w.engines {
				tl := e.tel
				tp += tl.promptTokens
				tg += tl.generationTokens
				for _, v := range tl.success {
					succ += v
				}
				abort += tl.success["abort"]
				failed += tl.success["error"]
				e2e += tl.e2e.count
				queue += tl.queue.count
				ttft += tl.ttft.count
				itl += tl.itl.count
				for _, h := range []*histogram{tl.e2e, tl.queue, tl.prefill, tl.decode, tl.inference, tl.reqTPOT,
					tl.promptLen, tl.genLen, tl.numPreemptions, tl.ttft, tl.itl, tl.iterationTokens} {
					sum := 0.0
					for _, c := range h.counts {
						sum += c
					}
					if sum != h.count {
						t.Fatalf("histogram buckets sum %v != count %v", sum, h.count)
					}
				}
				if e.pool.used != 0 {
					t.Errorf("replica %d: %d blocks still used after drain", e.idx, e.pool.used)
				}
			}
			if tp != prompt || tg != gen {
				t.Errorf("tokens: counters prompt %v gen %v, requests prompt %v gen %v", tp, tg, prompt, gen)
			}
			if succ != float64(len(w.all)) || abort != aborted || failed != errored {
				t.Errorf("requests: %d arrived, %v counted (%v aborted, want %v; %v failed, want %v)", len(w.all), succ,
					abort, aborted, failed, errored)
			}
			if tc.scenario == "error_burst" && errored == 0 {
				t.Error("error_burst failed no request")
			}
			if e2e != finished || queue != completed || ttft != first || itl != gen-first {
				t.Errorf("histogram counts: e2e %v (want %v) queue %v (want %v) ttft %v (want %v) itl %v (want %v)",
					e2e, finished, queue, completed, ttft, first, itl, gen-first)
			}
		})
	}
}

// checkCountersMonotonic verifies recorded counters and histogram series
// never decrease.
func checkCountersMonotonic(t *testing.T, reg *registry) {
	t.Helper()
	if len(reg.ticks) < 2 {
		t.Fatal("nothing recorded")
	}
	for _, f := range reg.fams {
		if f.typ == gaugeType {
			continue
		}
		for _, s := range f.series {
			stride := 1
			if s.hist != nil {
				stride = len(s.hist.bounds) + 3
			}
			for i := stride; i < len(s.rec); i++ {
				if s.rec[i] < s.rec[i-stride] {
					t.Fatalf("%s{%s} decreased at tick %d: %v -> %v", f.name, s.full, i/stride, s.rec[i-stride], s.rec[i])
				}
			}
		}
	}
}

func TestBlockPoolEviction(t *testing.T) {
	p := blockPool{total: 10, entries: map[int]*prefixEntry{}}
	p.entries[1] = &prefixEntry{id: 1, blocks: 3, lastUsed: 5}
	p.entries[2] = &prefixEntry{id: 2, blocks: 2, lastUsed: 1}
	p.idle = 5
	if !p.take(6) {
		t.Fatal("take(6) with 5 unused and 5 idle failed")
	}
	if _, ok := p.entries[2]; ok {
		t.Error("least recently used prefix not evicted first")
	}
	if _, ok := p.entries[1]; !ok {
		t.Error("evicted more than needed")
	}
	if !p.take(2) || len(p.entries) != 0 {
		t.Error("take(2) with 1 unused block and an idle prefix did not evict it")
	}
	if p.take(3) {
		t.Errorf("take(3) succeeded with %d free blocks", p.free())
	}
}

func TestDefaultScheduler(t *testing.T) {
	cases := []struct {
		policy Policy
		gpu    string
		want   Scheduler
	}{
		{PolicyVLLM, "H100", Scheduler{true, 8192, 1024}},
		{PolicyVLLM, "H200", Scheduler{true, 8192, 1024}},
		{PolicyVLLM, "A100", Scheduler{true, 2048, 256}},
		{PolicySGLang, "A100", Scheduler{true, 8192, 1024}},
		{PolicyTRTLLM, "H100", Scheduler{false, 8192, 2048}},
	}
	for _, tc := range cases {
		t.Run(tc.policy.String()+"/"+tc.gpu, func(t *testing.T) {
			if got := defaultScheduler(tc.policy, gpuSpecs[tc.gpu]); got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestKVBytesPerToken(t *testing.T) {
	if got := modelSpecs["8B"].kvBytesPerToken(); got != 128*1024 {
		t.Errorf("8B: %v", got)
	}
	if got := modelSpecs["70B"].kvBytesPerToken(); got != 320*1024 {
		t.Errorf("70B: %v", got)
	}
	// An 8B model at gpu_memory_utilization 0.9 on an 80 GB card leaves ~55 GiB for KV: 128 KiB per token, 2 MiB per block, ~28k blocks (num_gpu_blocks, docs/engines.md §2.5).
	if n := blocksFor(modelSpecs["8B"], gpuSpecs["H100"], 1, 0.9); n < 26000 || n > 30000 {
		t.Errorf("8B on H100 at 0.9: %d blocks", n)
	}
}
