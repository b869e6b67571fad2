package fluid

import (
	"bytes"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// famKind is a MetricFamily type as OpenMetrics spells it.
type famKind int

const (
	kindGauge famKind = iota
	kindCounter
	kindHistogram
	kindUnknown // counters exported without a _total suffix (dcgm-exporter)
)

func (k famKind) String() string {
	switch k {
	case kindCounter:
		return "counter"
	case kindHistogram:
		return "histogram"
	case kindUnknown:
		return "unknown"
	}
	return "gauge"
}

// family is one MetricFamily of the exposition.
type family struct {
	name, help string
	kind       famKind
	bounds     []float64 // histograms
	series     []*series
}

// series is one label set's samples. A histogram sample is its cumulative
// buckets (+Inf last), then _count, then _sum.
type series struct {
	labels string // rendered, sorted, without braces
	ts     []int64
	vals   []float64
}

// probe reads one series' value from the model at a scrape.
type probe struct {
	s   *series
	rep int // replica whose liveness gates the series (-1: always)
	get func() float64
	h   *hist
	off int64 // the target's scrape offset within the tick, ms
}

// registry holds every family and the probes that fill them. Each target is
// scraped at its own phase of the scrape interval, as Prometheus spreads
// targets.
type registry struct {
	fams    []*family
	byName  map[string]*family
	byPhase [][]probe
	phase   int   // of the target whose series are being added
	off     int64 // and its offset within the tick
}

func newRegistry(phases int) *registry {
	return &registry{byName: map[string]*family{}, byPhase: make([][]probe, phases)}
}

// target sets the scrape phase and offset of the series added next.
func (r *registry) target(phase int, off int64) { r.phase, r.off = phase, off }

func (r *registry) add(p probe) {
	p.off = r.off
	r.byPhase[r.phase] = append(r.byPhase[r.phase], p)
}

// family returns the named family, declaring it on first use.
func (r *registry) family(name, help string, kind famKind, bounds []float64) *family {
	if f := r.byName[name]; f != nil {
		return f
	}
	f := &family{name: name, help: help, kind: kind, bounds: bounds}
	r.fams = append(r.fams, f)
	r.byName[name] = f
	return f
}

// labelSet is a label set under construction.
type labelSet map[string]string

func (l labelSet) with(kv ...string) labelSet {
	out := make(labelSet, len(l)+len(kv)/2)
	for k, v := range l {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

func (l labelSet) render() string {
	parts := make([]string, 0, len(l))
	for _, k := range slices.Sorted(maps.Keys(l)) {
		parts = append(parts, k+`="`+escapeLabel(l[k])+`"`)
	}
	return strings.Join(parts, ",")
}

func escapeLabel(v string) string {
	if !strings.ContainsAny(v, "\\\"\n") {
		return v
	}
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(v)
}

// gauge adds a scalar series to a gauge-like family.
func (r *registry) scalar(f *family, rep int, l labelSet, get func() float64) {
	s := &series{labels: l.render()}
	f.series = append(f.series, s)
	r.add(probe{s: s, rep: rep, get: get})
}

// histogram adds a histogram series.
func (r *registry) histogram(f *family, rep int, l labelSet, h *hist) {
	s := &series{labels: l.render()}
	f.series = append(f.series, s)
	r.add(probe{s: s, rep: rep, h: h})
}

// snapshot appends the current value of every live series scraped at this
// phase, at ts (ms) less its target's offset; expect is how many scrapes a
// target gets, to size the series once.
func (r *registry) snapshot(phase int, ts int64, expect int, live func(rep int) bool) {
	for _, p := range r.byPhase[phase] {
		if p.rep >= 0 && !live(p.rep) {
			continue
		}
		ts := ts - p.off
		if p.s.ts == nil {
			stride := 1
			if p.h != nil {
				stride = len(p.h.counts) + 2
			}
			p.s.ts = make([]int64, 0, expect)
			p.s.vals = make([]float64, 0, expect*stride)
		}
		p.s.ts = append(p.s.ts, ts)
		if p.h == nil {
			p.s.vals = append(p.s.vals, p.get())
			continue
		}
		cum := 0.0
		for _, c := range p.h.counts {
			cum += c
			p.s.vals = append(p.s.vals, cum)
		}
		p.s.vals = append(p.s.vals, p.h.count, p.h.sum)
	}
}

// write renders the registry as OpenMetrics text: families in declaration
// order, each series' samples in time order (a histogram's buckets, _count
// and _sum together per timestamp), every sample timestamped, "# EOF" last.
func (r *registry) write() []byte {
	size := 0
	for _, f := range r.fams {
		for _, s := range f.series {
			size += len(s.vals) * (len(f.name) + len(s.labels) + 40)
		}
	}
	buf := bytes.NewBuffer(make([]byte, 0, size))
	var num []byte
	for _, f := range r.fams {
		if len(f.series) == 0 {
			continue
		}
		base := f.name
		if f.kind == kindCounter {
			base = strings.TrimSuffix(base, "_total")
		}
		buf.WriteString("# HELP " + base + " " + escapeHelp(f.help) + "\n")
		buf.WriteString("# TYPE " + base + " " + f.kind.String() + "\n")
		sample := base
		if f.kind == kindCounter {
			sample = base + "_total"
		}
		les := make([]string, len(f.bounds)+1)
		for i, b := range f.bounds {
			les[i] = `le="` + formatFloat(b) + `"`
		}
		les[len(f.bounds)] = `le="+Inf"`
		for _, s := range f.series {
			lb := s.labels
			sep := ","
			if lb == "" {
				sep = ""
			}
			if f.kind != kindHistogram {
				prefix := sample + "{" + lb + "} "
				for j, ts := range s.ts {
					buf.WriteString(prefix)
					num = appendFloat(num[:0], s.vals[j])
					buf.Write(num)
					buf.WriteByte(' ')
					num = appendTS(num[:0], ts)
					buf.Write(num)
					buf.WriteByte('\n')
				}
				continue
			}
			stride := len(f.bounds) + 3
			bucketPrefix := base + "_bucket{" + lb + sep
			countPrefix := base + "_count{" + lb + "} "
			sumPrefix := base + "_sum{" + lb + "} "
			var tsb []byte
			for j, ts := range s.ts {
				tsb = appendTS(tsb[:0], ts)
				v := s.vals[j*stride : (j+1)*stride]
				for i, le := range les {
					buf.WriteString(bucketPrefix)
					buf.WriteString(le)
					buf.WriteString("} ")
					num = appendFloat(num[:0], v[i])
					buf.Write(num)
					buf.WriteByte(' ')
					buf.Write(tsb)
					buf.WriteByte('\n')
				}
				buf.WriteString(countPrefix)
				num = appendFloat(num[:0], v[len(les)])
				buf.Write(num)
				buf.WriteByte(' ')
				buf.Write(tsb)
				buf.WriteByte('\n')
				buf.WriteString(sumPrefix)
				num = appendFloat(num[:0], v[len(les)+1])
				buf.Write(num)
				buf.WriteByte(' ')
				buf.Write(tsb)
				buf.WriteByte('\n')
			}
		}
	}
	buf.WriteString("# EOF\n")
	return buf.Bytes()
}

func escapeHelp(h string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(h)
}

// formatFloat writes a float as Python's repr does for the bounds vLLM
// declares ("1.0", "0.25", "8192.0"): what prometheus_client puts in le.
func formatFloat(v float64) string { return string(appendFloat(nil, v)) }

func appendFloat(b []byte, v float64) []byte {
	switch {
	case math.IsInf(v, 1):
		return append(b, "+Inf"...)
	case math.IsInf(v, -1):
		return append(b, "-Inf"...)
	case math.IsNaN(v):
		return append(b, "NaN"...)
	case v == math.Trunc(v) && math.Abs(v) < 1e15:
		b = strconv.AppendInt(b, int64(v), 10)
		return append(b, ".0"...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}

// appendTS writes a millisecond timestamp in OpenMetrics' unit, seconds.
func appendTS(b []byte, ms int64) []byte {
	b = strconv.AppendInt(b, ms/1000, 10)
	if r := ms % 1000; r != 0 {
		b = append(b, '.')
		b = append(b, byte('0'+r/100), byte('0'+r/10%10), byte('0'+r%10))
	}
	return b
}
