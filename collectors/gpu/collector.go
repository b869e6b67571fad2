// Package gpu reads GPU counters through NVML (github.com/NVIDIA/go-nvml) and
// emits them as whyslow_gpu_* gauges labelled gpu (index), uuid and model.
//
// NVML is reached only through Lib, a small interface of our own. Builds with
// cgo on Linux adapt go-nvml to it; other builds (CGO_ENABLED=0) get a stub
// that reports "NVML not available in this build", so the rest of whyslow
// builds without cgo. Every NVML call is made only after a successful Init:
// after a failed Init, a call can kill the process with an unresolved symbol.
// Without NVML the collector returns collectors.ErrNoData (wrapped in a
// *NoNVMLError that says why) and logs once at info level.
//
// What the counters mean:
//
//   - whyslow_gpu_dram_bandwidth_utilization is GPM's DRAM_BW_UTIL: the share
//     of the HBM's theoretical bandwidth used between two GPM samples. GPM
//     exists on Hopper and newer; on older GPUs (A100) the series is absent.
//   - whyslow_gpu_memory_busy_ratio is NVML's memory utilisation: the share of
//     time device memory was being read or written. It is NOT bandwidth: a
//     trickle of traffic keeps it high.
//   - whyslow_gpu_sm_active is GPM's SM_UTIL (share of SMs busy) where GPM
//     exists, else NVML's GPU utilisation (share of time any kernel ran),
//     which overstates how busy the SMs are.
//   - whyslow_gpu_sm_occupancy (GPM only) is the share of warps active
//     against the maximum.
//   - PCIe throughput comes from GPM (averaged over the sample interval)
//     where it exists, else from NVML's 20 ms window (KB/s, read as KiB/s).
//     NVLink throughput comes from GPM only.
//
// GPM needs two samples at least 100 ms apart. The collector keeps each
// GPU's previous sample between cycles, so a steady-state cycle takes one
// sample and does not wait. The first cycle takes a first sample of every GPM
// GPU, sleeps GPMInterval once (Options.Sleep, injectable), then reads. A
// cycle that comes less than GPMInterval after the previous one repeats the
// previous GPM values.
package gpu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/whyslow/whyslow/collectors"
)

// MinGPMInterval is NVML's minimum distance between two GPM samples.
const MinGPMInterval = 100 * time.Millisecond

// Options configures a Collector. Zero values get defaults.
type Options struct {
	// Lib is the NVML to read; default NewNVML().
	Lib Lib
	// Visible narrows the GPUs read, in CUDA_VISIBLE_DEVICES style: a
	// comma-separated list of indices and GPU UUIDs (or unique UUID
	// prefixes). Empty reads every GPU.
	Visible string
	// EnginePIDs, when set and returning PIDs, narrows the GPUs read to those
	// running one of them as a compute process. NVML reports host PIDs: in a
	// container, pass the PIDs as the host sees them (or share the host PID
	// namespace). A GPU whose process list cannot be read is kept.
	EnginePIDs func() []int
	// GPMInterval is the first cycle's wait between GPM samples and the
	// least time between two GPM readings; default and minimum 100 ms.
	GPMInterval time.Duration
	// Sleep waits d or until ctx ends; default a timer.
	Sleep func(ctx context.Context, d time.Duration) error
	// Now reads the clock for GPM intervals; default time.Now.
	Now func() time.Time
	// Logger gets the collector's logs; default slog.Default().
	Logger *slog.Logger
}

// Collector reads GPU counters through NVML. It implements
// collectors.Collector (Update) and prometheus.Collector (Describe, Collect).
// It is safe for concurrent use; cycles run one at a time.
type Collector struct {
	opts    Options
	logger  *slog.Logger
	visible []visibleEntry
	descs   [numCounters]*prometheus.Desc

	mu       sync.Mutex
	initDone bool
	initErr  error
	devices  []*deviceState // every GPU, by index; nil until enumerated
	notes    []string       // from enumeration, repeated in every Report
	driver   string
}

// deviceState is what the collector keeps about one GPU between cycles.
type deviceState struct {
	index       int
	dev         Device
	uuid, model string
	selected    bool // by Options.Visible

	// unsupported remembers calls that returned NOT_SUPPORTED, which does
	// not change while the process runs, so they are not retried.
	unsupported map[string]error

	gpmChecked bool
	gpmErr     error // why GPM is not used; nil when it is
	samples    [2]GPMSample
	prev       int // index into samples of the previous sample
	prevAt     time.Time
	havePrev   bool
	warmErr    error       // why the first sample failed, retried next cycle
	lastGPM    []GPMResult // last computed values, reused when a cycle comes too soon
}

// New returns a Collector. It makes no NVML call: Init happens on the first
// cycle.
func New(opts Options) (*Collector, error) {
	visible, err := parseVisible(opts.Visible)
	if err != nil {
		return nil, err
	}
	if opts.GPMInterval == 0 {
		opts.GPMInterval = MinGPMInterval
	}
	if opts.GPMInterval < MinGPMInterval {
		return nil, fmt.Errorf("gpm interval %s is below NVML's minimum of %s", opts.GPMInterval, MinGPMInterval)
	}
	if opts.Lib == nil {
		opts.Lib = NewNVML()
	}
	if opts.Sleep == nil {
		opts.Sleep = sleep
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	c := &Collector{opts: opts, logger: opts.Logger.With("collector", "gpu"), visible: visible}
	labels := []string{"gpu", "uuid", "model"}
	for i := range c.descs {
		k := Counter(i)
		l := labels
		if k == CounterThrottle {
			l = append([]string{}, append(labels, "reason")...)
		}
		c.descs[i] = prometheus.NewDesc(k.Metric(), k.help(), l, nil)
	}
	return c, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// NoNVMLError reports that NVML could not be initialised. It matches
// collectors.ErrNoData and wraps the Init error.
type NoNVMLError struct {
	Err error
}

// Error returns "no NVML: <reason>".
func (e *NoNVMLError) Error() string { return "no NVML: " + InitFailureReason(e.Err) }

// Unwrap returns the Init error and collectors.ErrNoData.
func (e *NoNVMLError) Unwrap() []error { return []error{e.Err, collectors.ErrNoData} }

// InitFailureReason explains a failed Init in words an operator can act on.
func InitFailureReason(err error) string {
	var e *Error
	if !errors.As(err, &e) {
		return err.Error()
	}
	switch e.Kind {
	case KindUnavailable:
		return e.Message
	case KindLibraryNotFound:
		return "libnvidia-ml.so.1 not found: no NVIDIA driver on this machine, or not mounted into this container (" + e.Message + ")"
	case KindDriverNotLoaded:
		return "the NVIDIA kernel driver is not loaded (" + e.Message + ")"
	case KindNoPermission:
		return "no permission to open the GPU devices /dev/nvidia* (" + e.Message + ")"
	}
	return err.Error()
}

// Close frees GPM samples and shuts NVML down if it was initialised.
func (c *Collector) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.initDone || c.initErr != nil {
		return nil
	}
	for _, ds := range c.devices {
		for i, s := range ds.samples {
			if s != nil {
				_ = s.Free()
				ds.samples[i] = nil
			}
		}
	}
	c.devices = nil
	c.initDone = false
	return c.opts.Lib.Shutdown()
}

// Read runs one cycle and returns what it read, GPU by GPU, with every
// counter it could not read and why. It makes no NVML call unless Init
// succeeded.
func (c *Collector) Read(ctx context.Context) (Report, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	lib := c.opts.Lib
	if !c.initDone {
		c.initDone = true
		c.initErr = lib.Init()
		if c.initErr != nil {
			c.logger.Info("No GPU counters: NVML not available", "reason", InitFailureReason(c.initErr))
		}
	}
	if c.initErr != nil {
		return Report{}, &NoNVMLError{Err: c.initErr}
	}

	if c.devices == nil {
		if err := c.enumerate(); err != nil {
			return Report{}, err
		}
	}
	rep := Report{Driver: c.driver}
	rep.Notes = append(rep.Notes, c.notes...)

	selected, err := c.selectDevices(&rep)
	if err != nil {
		return rep, err
	}

	// First GPM sample of GPUs that have none yet, then one shared wait.
	wait := false
	for _, ds := range selected {
		c.checkGPM(ds)
		if ds.gpmErr == nil && !ds.havePrev {
			if err := ds.dev.GPMSampleGet(ds.samples[ds.prev]); err != nil {
				if errors.Is(err, ErrNotSupported) {
					ds.gpmErr = err
				}
				ds.warmErr = err
				continue
			}
			ds.prevAt = c.opts.Now()
			ds.havePrev = true
			wait = true
		}
	}
	if wait {
		if err := c.opts.Sleep(ctx, c.opts.GPMInterval); err != nil {
			return rep, fmt.Errorf("wait between gpm samples: %w", err)
		}
	}

	for _, ds := range selected {
		rep.GPUs = append(rep.GPUs, c.readDevice(ds))
	}
	return rep, nil
}

// enumerate lists every GPU once and applies Options.Visible.
func (c *Collector) enumerate() error {
	lib := c.opts.Lib
	c.notes = nil
	if v, err := lib.DriverVersion(); err == nil {
		c.driver = v
	}
	n, err := lib.DeviceCount()
	if err != nil {
		return fmt.Errorf("count gpus: %w", err)
	}
	if n == 0 {
		return fmt.Errorf("%w: NVML found no GPUs", collectors.ErrNoData)
	}
	devs := make([]*deviceState, 0, n)
	indices := make([]int, 0, n)
	uuids := make([]string, 0, n)
	for i := 0; i < n; i++ {
		d, err := lib.DeviceByIndex(i)
		if err != nil {
			c.notes = append(c.notes, fmt.Sprintf("GPU %d skipped: %v", i, err))
			continue
		}
		ds := &deviceState{index: i, dev: d, unsupported: map[string]error{}}
		if ds.uuid, err = d.UUID(); err != nil {
			c.notes = append(c.notes, fmt.Sprintf("GPU %d: no UUID: %v", i, err))
		}
		if ds.model, err = d.Name(); err != nil {
			ds.model = "unknown"
		}
		devs = append(devs, ds)
		indices = append(indices, i)
		uuids = append(uuids, ds.uuid)
	}
	keep, notes := selectVisible(c.visible, indices, uuids)
	for i, ds := range devs {
		ds.selected = keep[i]
	}
	c.notes = append(c.notes, notes...)
	for _, n := range notes {
		c.logger.Warn("GPU selection", "note", n)
	}
	c.devices = devs
	return nil
}

// selectDevices returns the GPUs to read this cycle: those Options.Visible
// kept, narrowed to the engine's GPUs when Options.EnginePIDs gives PIDs.
func (c *Collector) selectDevices(rep *Report) ([]*deviceState, error) {
	var out []*deviceState
	for _, ds := range c.devices {
		if ds.selected {
			out = append(out, ds)
		} else {
			rep.Skipped = append(rep.Skipped, SkippedGPU{Index: ds.index, UUID: ds.uuid, Why: "not in the visible devices list"})
		}
	}
	if c.opts.EnginePIDs == nil {
		return out, nil
	}
	pids := c.opts.EnginePIDs()
	if len(pids) == 0 {
		return out, nil
	}
	engine := make(map[uint32]bool, len(pids))
	for _, p := range pids {
		engine[uint32(p)] = true
	}
	kept := out[:0:0]
	for _, ds := range out {
		running, err := ds.dev.ComputeProcessPIDs()
		switch {
		case err != nil:
			rep.Notes = append(rep.Notes, fmt.Sprintf("GPU %d kept: cannot list its processes: %v", ds.index, err))
			kept = append(kept, ds)
		case pidsMatch(engine, running):
			kept = append(kept, ds)
		default:
			rep.Skipped = append(rep.Skipped, SkippedGPU{Index: ds.index, UUID: ds.uuid, Why: "runs none of the engine's PIDs"})
		}
	}
	if len(kept) == 0 {
		return nil, fmt.Errorf("%w: no GPU runs the engine's PIDs %v", collectors.ErrNoData, pids)
	}
	return kept, nil
}

// checkGPM decides once per GPU whether to use GPM, allocating its two
// sample buffers.
func (c *Collector) checkGPM(ds *deviceState) {
	if ds.gpmChecked {
		return
	}
	ds.gpmChecked = true
	ok, err := ds.dev.GPMSupported()
	if err == nil && !ok {
		err = &Error{Op: "GpmQueryDeviceSupport", Message: "GPM not supported on this GPU (needs Hopper or newer)", Kind: KindNotSupported}
	}
	if err != nil {
		ds.gpmErr = err
		return
	}
	for i := range ds.samples {
		s, err := c.opts.Lib.GPMSampleAlloc()
		if err != nil {
			ds.gpmErr = err
			return
		}
		ds.samples[i] = s
	}
}

// gpmIDs are the GPM metrics read, in the order of GPMMetrics results.
var gpmIDs = []GPMMetric{GPMDRAMBWUtil, GPMSMUtil, GPMSMOccupancy, GPMPCIeTxPerSec, GPMPCIeRxPerSec, GPMNVLinkTxPerSec, GPMNVLinkRxPerSec}

const mib = 1 << 20

// call runs f unless the same call returned NOT_SUPPORTED before.
func (ds *deviceState) call(key string, f func() error) error {
	if err := ds.unsupported[key]; err != nil {
		return err
	}
	err := f()
	if errors.Is(err, ErrNotSupported) {
		ds.unsupported[key] = err
	}
	return err
}

// readDevice reads every counter of one GPU.
func (c *Collector) readDevice(ds *deviceState) GPU {
	g := GPU{Index: ds.index, UUID: ds.uuid, Model: ds.model}
	dev := ds.dev

	var mem Memory
	if err := ds.call("memory", func() (err error) { mem, err = dev.MemoryInfo(); return err }); err != nil {
		g.gap(err, CounterFBUsed, CounterFBTotal)
	} else {
		g.add(CounterFBUsed, float64(mem.Used), "")
		g.add(CounterFBTotal, float64(mem.Total), "")
	}

	var util Utilization
	utilErr := ds.call("utilization", func() (err error) { util, err = dev.UtilizationRates(); return err })
	if utilErr != nil {
		g.gap(utilErr, CounterUtilization, CounterMemoryBusy)
	} else {
		g.add(CounterUtilization, float64(util.GPU)/100, "")
		g.add(CounterMemoryBusy, float64(util.Memory)/100, "NVML memory utilisation: share of time memory was read or written, not bandwidth")
	}

	for _, cl := range []struct {
		clock      Clock
		cur, limit Counter
	}{{ClockSM, CounterSMClock, CounterSMClockMax}, {ClockMem, CounterMemClock, CounterMemClockMax}} {
		var v uint32
		if err := ds.call("clock "+cl.clock.String(), func() (err error) { v, err = dev.ClockMHz(cl.clock); return err }); err != nil {
			g.gap(err, cl.cur)
		} else {
			g.add(cl.cur, float64(v), "")
		}
		if err := ds.call("max clock "+cl.clock.String(), func() (err error) { v, err = dev.MaxClockMHz(cl.clock); return err }); err != nil {
			g.gap(err, cl.limit)
		} else {
			g.add(cl.limit, float64(v), "")
		}
	}

	var ev ClockEvents
	if err := ds.call("clock events", func() (err error) { ev, err = dev.ClockEvents(); return err }); err != nil {
		g.gap(err, CounterThrottle)
	} else {
		g.ClockEventMask = ev.Raw
		for _, r := range ThrottleReasons() {
			v := 0.0
			if ev.Active.Has(r) {
				v = 1
			}
			g.Readings = append(g.Readings, Reading{Counter: CounterThrottle, Reason: r, Value: v})
		}
	}

	var mw uint32
	if err := ds.call("power", func() (err error) { mw, err = dev.PowerUsageMilliwatts(); return err }); err != nil {
		g.gap(err, CounterPower)
	} else {
		g.add(CounterPower, float64(mw)/1000, "")
	}
	if err := ds.call("power limit", func() (err error) { mw, err = dev.PowerLimitMilliwatts(); return err }); err != nil {
		g.gap(err, CounterPowerLimit)
	} else {
		g.add(CounterPowerLimit, float64(mw)/1000, "")
	}
	var temp uint32
	if err := ds.call("temperature", func() (err error) { temp, err = dev.TemperatureCelsius(); return err }); err != nil {
		g.gap(err, CounterTemperature)
	} else {
		g.add(CounterTemperature, float64(temp), "")
	}

	gpm, gpmErr := c.readGPM(ds)
	pcieFromGPM := false
	if gpmErr != nil {
		g.gapNoGPM(gpmErr, CounterDRAMBandwidth, CounterSMOccupancy, CounterNVLinkTx, CounterNVLinkRx)
		if utilErr == nil {
			g.add(CounterSMActive, float64(util.GPU)/100, "fallback: NVML GPU utilisation (share of time a kernel ran), no GPM here")
		} else {
			g.gap(utilErr, CounterSMActive)
		}
	} else {
		for i, id := range gpmIDs {
			r := gpm[i]
			var k Counter
			scale := 0.01
			switch id {
			case GPMDRAMBWUtil:
				k = CounterDRAMBandwidth
			case GPMSMUtil:
				k = CounterSMActive
			case GPMSMOccupancy:
				k = CounterSMOccupancy
			case GPMNVLinkTxPerSec:
				k, scale = CounterNVLinkTx, mib
			case GPMNVLinkRxPerSec:
				k, scale = CounterNVLinkRx, mib
			default:
				continue // PCIe below
			}
			if r.Err != nil {
				g.gap(r.Err, k)
				continue
			}
			g.add(k, r.Value*scale, "GPM")
		}
		tx, rx := gpm[3], gpm[4]
		if tx.Err == nil && rx.Err == nil {
			pcieFromGPM = true
			g.add(CounterPCIeTx, tx.Value*mib, "GPM")
			g.add(CounterPCIeRx, rx.Value*mib, "GPM")
		}
	}
	if !pcieFromGPM {
		for _, p := range []struct {
			dir Direction
			k   Counter
		}{{TX, CounterPCIeTx}, {RX, CounterPCIeRx}} {
			var kb uint32
			if err := ds.call("pcie "+p.dir.String(), func() (err error) { kb, err = dev.PCIeThroughputKBps(p.dir); return err }); err != nil {
				g.gap(err, p.k)
			} else {
				g.add(p.k, float64(kb)*1024, "NVML 20 ms window")
			}
		}
	}
	sort.SliceStable(g.Readings, func(i, j int) bool { return g.Readings[i].Counter < g.Readings[j].Counter })
	sort.SliceStable(g.Gaps, func(i, j int) bool { return g.Gaps[i].Counter < g.Gaps[j].Counter })
	return g
}

// readGPM takes a new GPM sample and computes the metrics against the
// previous one. A cycle less than GPMInterval after the last reading
// repeats it.
func (c *Collector) readGPM(ds *deviceState) ([]GPMResult, error) {
	if ds.gpmErr != nil {
		return nil, ds.gpmErr
	}
	if !ds.havePrev {
		return nil, ds.warmErr
	}
	now := c.opts.Now()
	if now.Sub(ds.prevAt) < c.opts.GPMInterval {
		if ds.lastGPM != nil {
			return ds.lastGPM, nil
		}
		return nil, errWarmingUp
	}
	next := 1 - ds.prev
	if err := ds.dev.GPMSampleGet(ds.samples[next]); err != nil {
		return nil, err
	}
	res, err := c.opts.Lib.GPMMetrics(ds.samples[ds.prev], ds.samples[next], gpmIDs)
	if err != nil {
		return nil, err
	}
	ds.prev, ds.prevAt, ds.lastGPM = next, now, res
	return res, nil
}

// errWarmingUp says the first GPM interval has not passed yet (only with a
// Sleep that returns early).
var errWarmingUp = errors.New("gpm: first interval not over yet")

// Update sends one cycle's gauges on ch. It implements collectors.Collector.
// Without NVML it returns an error matching collectors.ErrNoData.
func (c *Collector) Update(ctx context.Context, ch chan<- prometheus.Metric) error {
	rep, err := c.Read(ctx)
	if err != nil {
		return err
	}
	n := 0
	for _, g := range rep.GPUs {
		idx := fmt.Sprint(g.Index)
		for _, r := range g.Readings {
			if r.Counter == CounterThrottle {
				ch <- prometheus.MustNewConstMetric(c.descs[r.Counter], prometheus.GaugeValue, r.Value, idx, g.UUID, g.Model, r.Reason.String())
			} else {
				ch <- prometheus.MustNewConstMetric(c.descs[r.Counter], prometheus.GaugeValue, r.Value, idx, g.UUID, g.Model)
			}
			n++
		}
	}
	if n == 0 {
		return fmt.Errorf("gpu: no counter could be read on %d GPUs", len(rep.GPUs))
	}
	return nil
}

// Describe sends the descriptors of every whyslow_gpu_* series. It
// implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

// Collect runs one cycle for a /metrics scrape. It implements
// prometheus.Collector; errors are logged (no data at debug level).
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	if err := c.Update(context.Background(), ch); err != nil {
		if errors.Is(err, collectors.ErrNoData) {
			c.logger.Debug("No GPU counters", "err", err)
		} else {
			c.logger.Warn("GPU collection failed", "err", err)
		}
	}
}
