package sim

import (
	"container/heap"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"
)

// Options selects and shapes one run of the engine model.
type Options struct {
	Scenario       string        // scenario name (see Scenarios)
	Seed           int64         // draws the instance: model, GPU, replicas, magnitudes, arrivals
	GPUSeries      string        // "whyslow" (default), "dcgm", "both" or "none"
	Replicas       int           // 0 = the scenario's drawn default
	ScrapeInterval time.Duration // default 15s
	Start          time.Time     // virtual clock start; zero = 2026-01-01T00:00:00Z
	// Names is which generation or deployment shape of the engine's
	// metrics the replicas expose: "v1" (default) or "v0" for vLLM and
	// SGLang (see Telemetry); for trtllm "v1" (current trtllm-serve),
	// "unprefixed" (TensorRT-LLM 1.1 and older: five per-request families
	// without a prefix) or "dynamo" (NVIDIA Dynamo's re-export of those
	// five with a trtllm_ prefix, plus Dynamo's own series); for sglang
	// also "multiprocess" (prometheus_client multiprocess artifacts) or
	// "dp" (DP attention: scheduler series per dp_rank).
	Names string
	// DCGMLayout is how Prometheus stored the dcgm-exporter series: ""
	// (honor_labels: pod, namespace and container are the workload's) or
	// "k8s" (the Helm chart's ServiceMonitor default honorLabels: false:
	// the workload's labels become exported_pod, exported_namespace and
	// exported_container; pod and namespace are the exporter pod's own).
	DCGMLayout string
	// DCGMCounters is which counters CSV dcgm-exporter runs with: "" (a
	// profiling set: DCGM_FI_PROF_* included, no violation counters),
	// "default" (etc/default-counters.csv: no DCGM_FI_PROF_* and no
	// violation counters) or "violations" (default plus
	// DCGM_FI_DEV_POWER_VIOLATION and DCGM_FI_DEV_THERMAL_VIOLATION).
	DCGMCounters string
	// Trim keeps only the samples of the incident and baseline windows plus
	// a look-back margin for rate(), for small testdata.
	Trim bool
	// Policy is the scheduler policy: "vllm" (default), "sglang" or
	// "trtllm".
	Policy string
	// Telemetry is whose metric names the replicas expose: "" (the
	// policy's engine), "vllm", "sglang" (docs/engines.md §3) or "trtllm"
	// (trtllm-serve, docs/engines.md §4.1). Names "v0" applies to vllm (the
	// pre-0.11 names) and sglang (the old sglang:time_per_output_token_seconds).
	Telemetry string
	// OnRequest is called for every finished or aborted request.
	OnRequest func(RequestRecord)
	// Wide draws the instance from the accuracy harness's wide ranges
	// (plan/models.md): baseline load 0.2–0.9 of the estimated capacity,
	// cost coefficients perturbed ±50%, 1–8 replicas, 8B/70B, H100/A100/H200
	// (each as far as the scenario allows) and a fault magnitude in [0, 1].
	// false draws what the scenario always drew for the seed.
	Wide bool
	// Magnitude fixes the fault magnitude of a wide draw, in (0, 1]; 0
	// draws it uniformly from [0, 1].
	Magnitude float64
}

// DefaultStart is the virtual clock start when Options.Start is zero.
var DefaultStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// RequestRecord is one finished or aborted request, for spans.
type RequestRecord struct {
	ID      string
	Replica int
	Pod     string
	Model   string
	// Arrival is when the API server received the request; Queued when it
	// reached the engine queue; Scheduled its last scheduling before the
	// first token; FirstToken and Finished are zero when not reached.
	Arrival, Queued, Scheduled, FirstToken, Finished time.Time
	PromptTokens, OutputTokens, CachedTokens         int
	MaxTokens                                        int
	FinishedReason                                   string // stop, length, abort or error
	Preemptions                                      int
}

func (o *Options) normalise() error {
	switch o.Names {
	case "":
		o.Names = "v1"
	case "v1", "v0", "unprefixed", "dynamo", "multiprocess", "dp":
	default:
		return fmt.Errorf("names %q: want v1 or v0 (trtllm also unprefixed or dynamo, sglang also multiprocess or dp)", o.Names)
	}
	switch o.GPUSeries {
	case "":
		o.GPUSeries = "whyslow"
	case "whyslow", "dcgm", "both", "none":
	default:
		return fmt.Errorf("gpu series %q: want whyslow, dcgm, both or none", o.GPUSeries)
	}
	switch o.DCGMLayout {
	case "", "k8s":
	default:
		return fmt.Errorf("dcgm layout %q: want \"\" (honor_labels) or k8s", o.DCGMLayout)
	}
	switch o.DCGMCounters {
	case "", "default", "violations":
	default:
		return fmt.Errorf("dcgm counters %q: want \"\", default or violations", o.DCGMCounters)
	}
	if (o.DCGMLayout != "" || o.DCGMCounters != "") && o.GPUSeries != "dcgm" && o.GPUSeries != "both" {
		return fmt.Errorf("dcgm layout %q, counters %q: need gpu series dcgm or both, not %s", o.DCGMLayout, o.DCGMCounters, o.GPUSeries)
	}
	if o.Replicas < 0 || o.Replicas > 64 {
		return fmt.Errorf("replicas %d: want 0 to 64", o.Replicas)
	}
	if o.ScrapeInterval == 0 {
		o.ScrapeInterval = 15 * time.Second
	}
	if o.ScrapeInterval < time.Second || o.ScrapeInterval > 5*time.Minute {
		return fmt.Errorf("scrape interval %s: want 1s to 5m", o.ScrapeInterval)
	}
	if o.Start.IsZero() {
		o.Start = DefaultStart
	}
	pol, err := ParsePolicy(o.Policy)
	if err != nil {
		return err
	}
	if o.Telemetry == "" {
		o.Telemetry = pol.String()
	}
	tel, err := ParsePolicy(o.Telemetry)
	if err != nil {
		return fmt.Errorf("telemetry: %w", err)
	}
	switch {
	case tel == PolicyTRTLLM && o.Names == "v0":
		return fmt.Errorf("names v0: trtllm telemetry has no v0 names (want v1, unprefixed or dynamo)")
	case (o.Names == "unprefixed" || o.Names == "dynamo") && tel != PolicyTRTLLM:
		return fmt.Errorf("names %s: only trtllm telemetry has it (telemetry is %s)", o.Names, tel)
	case (o.Names == "multiprocess" || o.Names == "dp") && tel != PolicySGLang:
		return fmt.Errorf("names %s: only sglang telemetry has it (telemetry is %s)", o.Names, tel)
	}
	if o.Magnitude < 0 || o.Magnitude > 1 {
		return fmt.Errorf("magnitude %v: want 0 (drawn) or a value in (0, 1]", o.Magnitude)
	}
	if o.Magnitude > 0 && !o.Wide {
		return fmt.Errorf("magnitude %v: only wide draws take a magnitude", o.Magnitude)
	}
	return nil
}

type evKind int

const (
	evEngineArrive evKind = iota
	evAbort
	evError // a server-side failure of the request
	evStop  // a replica stops serving (capacity_loss)
)

type event struct {
	t    float64
	kind evKind
	seq  int64
	r    *request
	e    *engine // evStop
}

type eventHeap []event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].t != h[j].t {
		return h[i].t < h[j].t
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// world is the whole simulated fleet on one virtual clock.
type world struct {
	plan    *plan
	opt     Options
	tele    Policy     // whose metric names the replicas expose
	rng     *rand.Rand // arrivals and request shapes
	telRng  *rand.Rand // counter noise
	engines []*engine
	reg     *registry

	now        float64
	nextArr    float64
	nextLong   float64
	nextTenant float64
	events     eventHeap
	evSeq      int64
	reqSeq     int64
	rr         int
	maxRate    float64

	interval  float64
	nextTick  float64
	recording bool
	inflight  int
	finished  int64
	aborted   int64
	obs       observer

	// test hooks
	trackAll   bool
	all        []*request
	afterEvent func()
}

func newWorld(opt Options) (*world, error) {
	if err := opt.normalise(); err != nil {
		return nil, err
	}
	p, err := drawPlan(opt.Scenario, opt.Seed, opt.Wide, opt.Magnitude)
	if err != nil {
		return nil, err
	}
	pol, _ := ParsePolicy(opt.Policy)
	if pol != p.cfg.policy {
		s := defaultScheduler(pol, p.cfg.gpu)
		p.cfg.policy, p.cfg.sched = pol, s
	}
	if opt.Replicas > 0 && opt.Replicas != p.replicas {
		scale := float64(opt.Replicas) / float64(p.replicas)
		p.base.rate *= scale
		p.inc.rate *= scale
		p.inc.longRate *= scale
		p.inc.tenantRate *= scale
		if len(p.stopped) > 0 {
			// Keep the share of replicas that stop.
			k := min(max(int(math.Round(float64(len(p.stopped))*scale)), 1), opt.Replicas-1)
			if k < 1 {
				return nil, fmt.Errorf("scenario %s: replicas %d: a capacity loss needs at least 2", opt.Scenario, opt.Replicas)
			}
			p.stopped = p.stopped[:0]
			for i := opt.Replicas - k; i < opt.Replicas; i++ {
				p.stopped = append(p.stopped, i)
			}
			p.params["replicas_stopped"] = k
		}
		p.replicas = opt.Replicas
		p.params["replicas"] = opt.Replicas
	}
	return newWorldFromPlan(p, opt), nil
}

func newWorldFromPlan(p *plan, opt Options) *world {
	w := &world{plan: p, opt: opt,
		rng:      rand.New(rand.NewPCG(uint64(p.seed), 0xa11ce)),
		telRng:   rand.New(rand.NewPCG(uint64(p.seed), 0x7e1e)),
		interval: opt.ScrapeInterval.Seconds(),
	}
	w.tele, _ = ParsePolicy(opt.Telemetry)
	for i := 0; i < p.replicas; i++ {
		w.engines = append(w.engines, newEngine(i, p.cfg, newEngineTelemetry(w.tele, opt.Names, p.cfg.maxModelLen)))
		if w.tele == PolicySGLang && opt.Names == "dp" {
			w.engines[i].tel.initDP(dpRanks)
		}
	}
	w.maxRate = p.maxRate()
	w.nextArr = w.drawArrival(0)
	w.nextLong = math.Inf(1)
	if p.inc.longRate > 0 {
		w.nextLong = p.onset + w.rng.ExpFloat64()/p.inc.longRate
	}
	w.nextTenant = math.Inf(1)
	if p.inc.tenantRate > 0 {
		w.nextTenant = p.onset + w.rng.ExpFloat64()/p.inc.tenantRate
	}
	w.reg = w.buildRegistry()
	w.obs.init(p, len(w.engines))
	for _, e := range w.engines {
		e.obs = &w.obs
	}
	for _, i := range p.stopped {
		w.evSeq++
		heap.Push(&w.events, event{t: p.onset, kind: evStop, seq: w.evSeq, e: w.engines[i]})
	}
	return w
}

// drawArrival returns the next arrival after t by thinning a Poisson
// process of rate maxRate.
func (w *world) drawArrival(t float64) float64 {
	if w.maxRate <= 0 {
		return math.Inf(1)
	}
	for i := 0; i < 100000; i++ {
		t += w.rng.ExpFloat64() / w.maxRate
		tr := w.plan.trafficAt(t)
		if w.rng.Float64()*w.maxRate < w.plan.rateAt(t, &tr) {
			return t
		}
	}
	return math.Inf(1)
}

func lognormal(r *rand.Rand, mean, sigma float64) float64 {
	mu := math.Log(mean) - sigma*sigma/2
	return math.Exp(mu + sigma*r.NormFloat64())
}

// Arrival streams: the traffic mix, long prompts, a new tenant's requests.
const (
	arrMix = iota
	arrLong
	arrTenant
)

// newRequest draws a request of stream kind arriving at t.
func (w *world) newRequest(t float64, kind int) *request {
	tr := w.plan.trafficAt(t)
	r := w.rng
	w.reqSeq++
	q := &request{seq: w.reqSeq, arrival: t, prefixID: -1, abortAt: math.Inf(1), maxTokens: tr.maxTokens}
	// Drawn for every stream, as it always was.
	unique := int(lognormal(r, tr.promptMean, tr.promptSigma))
	switch kind {
	case arrLong:
		unique = tr.longMin + r.IntN(tr.longMax-tr.longMin+1)
	case arrTenant:
		unique = int(lognormal(r, tr.tenantPrompt, 0.35))
	}
	unique = max(unique, 4)
	prompt := unique
	if kind == arrMix && r.Float64() < tr.sharedFrac && tr.prefixN > 0 {
		id := tr.prefixFrom + r.IntN(tr.prefixN)
		q.prefixLen = w.plan.prefixLens[id]
		prompt += q.prefixLen
		if r.Float64() < tr.cacheable {
			q.prefixID = id
		} else {
			q.prefixLen = 0
		}
	}
	limit := max(w.plan.cfg.maxModelLen-q.maxTokens, 256)
	if prompt > limit {
		prompt = limit
		if q.prefixLen >= prompt {
			q.prefixID, q.prefixLen = -1, 0
		}
	}
	q.prompt = prompt
	out := int(lognormal(r, tr.outMean, tr.outSigma))
	q.target = min(max(out, 1), q.maxTokens)
	if r.Float64() < tr.abortProb {
		q.abortAt = t + tr.abortMin + (tr.abortMax-tr.abortMin)*r.Float64()
	}
	q.queued = t + tr.frontend*(0.8+0.4*r.Float64()) + float64(prompt)*2e-7
	q.replica = w.route(&tr)
	// Drawn only when the mix has failures, so that the other scenarios'
	// draws stay what they were.
	if tr.errorProb > 0 && r.Float64() < tr.errorProb {
		q.errorAt = q.queued + tr.errorMin + (tr.errorMax-tr.errorMin)*r.Float64()
	}
	return q
}

func (w *world) route(tr *traffic) int {
	n := len(w.engines)
	if n == 1 {
		return 0
	}
	switch tr.router {
	case routeSkewed:
		if w.rng.Float64() < tr.hotFrac {
			return 0
		}
		return 1 + w.rng.IntN(n-1)
	case routeLeastQueue:
		best, bestLoad := 0, math.MaxInt
		start := w.rr
		w.rr = (w.rr + 1) % n
		for k := 0; k < n; k++ {
			i := (start + k) % n
			e := w.engines[i]
			if e.stopped {
				continue
			}
			if l := e.nWait*4 + len(e.running); l < bestLoad {
				best, bestLoad = i, l
			}
		}
		return best
	}
	for k := 0; k < n; k++ {
		w.rr = (w.rr + 1) % n
		if !w.engines[w.rr].stopped {
			break
		}
	}
	return w.rr
}

func (w *world) push(t float64, k evKind, r *request) {
	w.evSeq++
	heap.Push(&w.events, event{t: t, kind: k, seq: w.evSeq, r: r})
}

func (w *world) arrive(t float64, kind int) {
	q := w.newRequest(t, kind)
	w.engines[q.replica].tel.arrivals++
	w.inflight++
	w.obs.arrive(t)
	if w.trackAll {
		w.all = append(w.all, q)
	}
	w.push(q.queued, evEngineArrive, q)
	if !math.IsInf(q.abortAt, 1) {
		w.push(q.abortAt, evAbort, q)
	}
	if q.errorAt > 0 {
		w.push(q.errorAt, evError, q)
	}
}

// finish records a finished or aborted request.
func (w *world) finish(e *engine, r *request, now float64, reason string) {
	r.done = true
	r.reason = reason
	if r.running || r.ownBlocks > 0 || r.prefixRef != nil {
		e.release(r, now)
	}
	r.running = false
	w.inflight--
	w.finished++
	t := e.tel
	t.success[reason]++
	t.e2e.observe(now-r.arrival, 1)
	t.promptLen.observe(float64(r.prompt), 1)
	t.genLen.observe(float64(r.gen), 1)
	t.maxGen.observe(float64(r.gen), 1)
	t.paramsMaxTokens.observe(float64(r.maxTokens), 1)
	t.paramsN.observe(1, 1)
	t.numPreemptions.observe(float64(r.preempts), 1)
	t.finishExtra(r)
	w.obs.finish(r, now)
	if reason != "abort" && reason != "error" {
		t.observeQueue(r, r.sched-r.queued)
		t.phase(t.prefill, r.firstToken-r.sched)
		t.phase(t.decode, r.lastToken-r.firstToken)
		t.phase(t.inference, r.lastToken-r.sched)
		t.prefillKVComputed.observe(float64(r.prompt-r.cached), 1)
		tpot := 0.0
		if r.gen > 1 {
			tpot = (r.lastToken - r.firstToken) / float64(r.gen-1)
		}
		t.phase(t.reqTPOT, tpot)
	} else if reason == "abort" {
		w.aborted++
	}
	if r.hasFirst {
		t.promptCompute += float64(r.prompt - r.cached)
		t.promptCacheHit += float64(r.cached)
	}
	if e.onFinish != nil {
		e.onFinish(r, now)
	}
	if w.opt.OnRequest != nil {
		w.opt.OnRequest(w.record(r, now))
	}
}

func (w *world) record(r *request, now float64) RequestRecord {
	st := w.opt.Start
	at := func(s float64, ok bool) time.Time {
		if !ok {
			return time.Time{}
		}
		return sinceStart(st, s)
	}
	return RequestRecord{
		ID:      fmt.Sprintf("chatcmpl-%08x%08x", uint32(w.plan.seed), uint32(r.seq)),
		Replica: r.replica, Pod: w.target(r.replica).pod, Model: w.plan.cfg.model.name,
		Arrival: at(r.arrival, true), Queued: at(r.queued, r.enq), Scheduled: at(r.sched, r.hasSched),
		FirstToken: at(r.firstToken, r.hasFirst), Finished: at(now, true),
		PromptTokens: r.prompt, OutputTokens: r.gen, CachedTokens: r.cached, MaxTokens: r.maxTokens,
		FinishedReason: r.reason, Preemptions: r.preempts,
	}
}

func (w *world) abort(r *request, now float64) { w.drop(r, now, "abort") }

// drop ends a request that did not finish: a client abort or a
// server-side error.
func (w *world) drop(r *request, now float64, reason string) {
	if r.done {
		return
	}
	e := w.engines[r.replica]
	if r.enq && !r.running {
		e.nWait-- // lazily dropped from the deque
	}
	w.finish(e, r, now, reason)
}

// stopReplica takes a replica out of service, like a crashed pod: what it
// held fails, the router stops sending to it and its series end.
func (w *world) stopReplica(e *engine, now float64) {
	var held []*request
	for _, r := range e.running {
		if !r.done {
			held = append(held, r)
		}
	}
	for i := 0; i < e.waiting.size; i++ {
		if r := e.waiting.buf[(e.waiting.head+i)%len(e.waiting.buf)]; !r.done && !r.running {
			held = append(held, r)
		}
	}
	for _, r := range held {
		w.drop(r, now, "error")
	}
	e.waiting = deque{}
	e.nWait = 0
	e.running = e.running[:0]
	e.busy = false
	e.stopped = true
	w.reg.stop(e.idx)
}

// tick updates the GPU counters and records a scrape when recording.
func (w *world) tick(t float64) {
	for i, e := range w.engines {
		tr := w.plan.trafficAt(t)
		e.tel.tick(&e.cfg, w.interval, w.clockFor(i, &tr), w.throttleFor(i, &tr), w.telRng)
	}
	if w.recording {
		w.reg.record(sinceStart(w.opt.Start, t).UnixMilli())
	}
}

func (w *world) clockFor(_ int, tr *traffic) float64 { return tr.clock }

func (w *world) throttleFor(_ int, tr *traffic) string {
	if tr.clock < 0.97 {
		return tr.throttle
	}
	return ""
}

// run advances the clock to until (inclusive of a tick at until).
func (w *world) run(ctx context.Context, until float64) error {
	steps := 0
	for {
		t := math.Inf(1)
		kind := -1
		if w.nextArr < t {
			t, kind = w.nextArr, 0
		}
		if w.nextLong < t {
			t, kind = w.nextLong, 1
		}
		if w.nextTenant < t {
			t, kind = w.nextTenant, 4
		}
		if len(w.events) > 0 && w.events[0].t < t {
			t, kind = w.events[0].t, 2
		}
		var eng *engine
		for _, e := range w.engines {
			if e.busy && e.stepEnd < t {
				t, kind, eng = e.stepEnd, 3, e
			}
		}
		if w.nextTick <= t && w.nextTick <= until {
			w.now = w.nextTick
			w.tick(w.nextTick)
			w.nextTick += w.interval
			continue
		}
		if t > until {
			w.now = until
			return nil
		}
		w.now = t
		switch kind {
		case 0:
			w.arrive(t, arrMix)
			w.nextArr = w.drawArrival(t)
		case 1:
			w.arrive(t, arrLong)
			w.nextLong = t + w.rng.ExpFloat64()/w.plan.inc.longRate
		case 4:
			w.arrive(t, arrTenant)
			w.nextTenant = t + w.rng.ExpFloat64()/w.plan.inc.tenantRate
		case 2:
			ev := heap.Pop(&w.events).(event)
			switch ev.kind {
			case evEngineArrive:
				if !ev.r.done {
					e := w.engines[ev.r.replica]
					if e.stopped {
						// Routed before the replica went away: the
						// gateway retries on a live one.
						tr := w.plan.trafficAt(t)
						ev.r.replica = w.route(&tr)
						e = w.engines[ev.r.replica]
					}
					e.enqueue(ev.r)
					w.startEngine(e, t)
				}
			case evAbort:
				w.abort(ev.r, t)
			case evError:
				w.drop(ev.r, t, "error")
			case evStop:
				w.stopReplica(ev.e, t)
			}
		case 3:
			eng.complete(w)
			if eng.busy {
				eng.clockUpdate(w, eng.stepStart)
			}
		}
		if w.afterEvent != nil {
			w.afterEvent()
		}
		steps++
		if steps&0xffff == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

func (w *world) startEngine(e *engine, t float64) {
	if e.busy || e.stopped {
		return
	}
	tr := w.plan.trafficAt(t)
	e.clock = w.clockFor(e.idx, &tr)
	e.start(t)
}

// clockUpdate applies the current clock factor to a step that complete
// started with the previous one.
func (e *engine) clockUpdate(w *world, t float64) {
	tr := w.plan.trafficAt(t)
	c := w.clockFor(e.idx, &tr)
	if c == e.clock {
		return
	}
	e.clock = c
	e.cost = stepCost{}
	for _, it := range e.batch {
		e.cfg.itemCost(&e.cost, it.ctx, it.n)
	}
	e.cfg.finish(&e.cost, e.clock)
	e.stepEnd = e.stepStart + e.cost.seconds
}

// Record runs a scenario faster than real time and returns its bundle.
func Record(ctx context.Context, opt Options) (*Bundle, error) {
	w, err := newWorld(opt)
	if err != nil {
		return nil, fmt.Errorf("sim record: %w", err)
	}
	return w.recordBundle(ctx)
}

func (w *world) recordBundle(ctx context.Context) (*Bundle, error) {
	p := w.plan
	w.recording = true
	if err := w.run(ctx, p.at); err != nil {
		return nil, fmt.Errorf("sim record %s: %w", p.name, err)
	}
	return w.bundle()
}

// Live is a model advanced in (sped-up) real time whose replicas serve
// Prometheus text.
type Live struct {
	mu sync.Mutex
	w  *world
}

// NewLive builds a live model; it starts at Options.Start and does not
// record samples.
func NewLive(opt Options) (*Live, error) {
	w, err := newWorld(opt)
	if err != nil {
		return nil, fmt.Errorf("sim live: %w", err)
	}
	return &Live{w: w}, nil
}

// Advance moves the virtual clock forward by d.
func (l *Live) Advance(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_ = l.w.run(context.Background(), l.w.now+d.Seconds())
}

// Now is the current virtual time.
func (l *Live) Now() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return sinceStart(l.w.opt.Start, l.w.now)
}

// Replicas is the number of simulated replicas.
func (l *Live) Replicas() int { return len(l.w.engines) }

// Handler serves the current metrics of one replica in the Prometheus text
// format (version 0.0.4).
func (l *Live) Handler(replica int) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		if replica < 0 || replica >= len(l.w.engines) {
			http.Error(rw, fmt.Sprintf("no replica %d", replica), http.StatusNotFound)
			return
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.w.engines[replica].stopped {
			http.Error(rw, fmt.Sprintf("replica %d is gone", replica), http.StatusServiceUnavailable)
			return
		}
		rw.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_ = l.w.reg.writeText(rw, replica)
	})
}

// MetricsPath is the path the replicas' engine serves its metrics on:
// /prometheus/metrics for trtllm-serve (Names "v1" and "unprefixed"),
// /metrics otherwise (vLLM, SGLang, Dynamo's system port).
func (l *Live) MetricsPath() string {
	if l.w.tele == PolicyTRTLLM && l.w.opt.Names != "dynamo" {
		return "/prometheus/metrics"
	}
	return "/metrics"
}

// ProcessStart says whether a replica's endpoint also carries the
// process's process_start_time_seconds, which the model itself does not
// emit: false for the shapes served through prometheus_client's
// multiprocess mode (SGLang "multiprocess", TensorRT-LLM "unprefixed",
// whose trtllm-serve mounted a MultiProcessCollector registry) and for
// Dynamo's runtime endpoint, true otherwise.
func (l *Live) ProcessStart() bool {
	switch l.w.opt.Names {
	case "multiprocess", "unprefixed", "dynamo":
		return false
	}
	return true
}

// Onset is when the scenario's cause starts.
func (l *Live) Onset() time.Time { return sinceStart(l.w.opt.Start, l.w.plan.onset) }
