package reqsim

import (
	"bytes"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// kind is an OpenMetrics family type.
type kind string

const (
	gauge     kind = "gauge"
	counter   kind = "counter"
	histogram kind = "histogram"
	unknown   kind = "unknown"
)

// fam is one metric family with its series.
type fam struct {
	name, help string
	kind       kind
	bounds     []float64
	series     []*ser
}

// ser is one label set's samples: a scalar per scrape, or a histogram's
// cumulative buckets, count and sum per scrape.
type ser struct {
	labels string
	ts     []int64
	vals   []float64
	stride int
}

// probe reads one series at a scrape.
type probe struct {
	s     *ser
	value func() float64
	hist  func() *hist
}

// registry is the exposition under construction.
type registry struct {
	fams   []*fam
	byName map[string]*fam
	probes [][]probe // per replica
}

func newRegistry(replicas int) *registry {
	return &registry{byName: map[string]*fam{}, probes: make([][]probe, replicas)}
}

func (g *registry) family(name, help string, k kind, bounds []float64) *fam {
	if f := g.byName[name]; f != nil {
		return f
	}
	f := &fam{name: name, help: help, kind: k, bounds: bounds}
	g.fams = append(g.fams, f)
	g.byName[name] = f
	return f
}

// labels renders a label set sorted by name.
type labels map[string]string

func (l labels) with(kv ...string) labels {
	out := make(labels, len(l)+len(kv)/2)
	for k, v := range l {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

func (l labels) String() string {
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteString(`="`)
		b.WriteString(strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(l[k]))
		b.WriteByte('"')
	}
	return b.String()
}

func (g *registry) scalar(rep int, name, help string, k kind, l labels, get func() float64) {
	f := g.family(name, help, k, nil)
	s := &ser{labels: l.String(), stride: 1}
	f.series = append(f.series, s)
	g.probes[rep] = append(g.probes[rep], probe{s: s, value: get})
}

func (g *registry) hist(rep int, name, help string, bounds []float64, l labels, get func() *hist) {
	f := g.family(name, help, histogram, bounds)
	s := &ser{labels: l.String(), stride: len(bounds) + 3}
	f.series = append(f.series, s)
	g.probes[rep] = append(g.probes[rep], probe{s: s, hist: get})
}

// scrape appends replica rep's values at ms.
func (g *registry) scrape(rep int, ms int64) {
	for _, p := range g.probes[rep] {
		p.s.ts = append(p.s.ts, ms)
		if p.value != nil {
			p.s.vals = append(p.s.vals, p.value())
			continue
		}
		h := p.hist()
		cum := 0.0
		for _, c := range h.counts {
			cum += c
			p.s.vals = append(p.s.vals, cum)
		}
		p.s.vals = append(p.s.vals, h.count, h.sum)
	}
}

// write renders OpenMetrics text with timestamps (seconds), "# EOF" last.
func (g *registry) write() []byte {
	var buf bytes.Buffer
	var num []byte
	for _, f := range g.fams {
		if len(f.series) == 0 {
			continue
		}
		base := f.name
		if f.kind == counter {
			base = strings.TrimSuffix(base, "_total")
		}
		fmt.Fprintf(&buf, "# HELP %s %s\n# TYPE %s %s\n", base, f.help, base, f.kind)
		for _, s := range f.series {
			if len(s.ts) == 0 {
				continue
			}
			if f.kind != histogram {
				name := base
				if f.kind == counter {
					name += "_total"
				}
				for j, ts := range s.ts {
					buf.WriteString(name)
					buf.WriteByte('{')
					buf.WriteString(s.labels)
					buf.WriteString("} ")
					num = appendNum(num[:0], s.vals[j])
					num = append(num, ' ')
					num = appendTS(num, ts)
					num = append(num, '\n')
					buf.Write(num)
				}
				continue
			}
			les := make([]string, len(f.bounds)+1)
			for i, b := range f.bounds {
				les[i] = `le="` + string(appendNum(nil, b)) + `"`
			}
			les[len(f.bounds)] = `le="+Inf"`
			sep := ","
			if s.labels == "" {
				sep = ""
			}
			for j, ts := range s.ts {
				v := s.vals[j*s.stride : (j+1)*s.stride]
				tsb := appendTS(nil, ts)
				for i, le := range les {
					buf.WriteString(base + "_bucket{" + s.labels + sep + le + "} ")
					num = appendNum(num[:0], v[i])
					num = append(num, ' ')
					num = append(num, tsb...)
					num = append(num, '\n')
					buf.Write(num)
				}
				buf.WriteString(base + "_count{" + s.labels + "} ")
				num = appendNum(num[:0], v[len(les)])
				num = append(num, ' ')
				num = append(num, tsb...)
				num = append(num, '\n')
				buf.Write(num)
				buf.WriteString(base + "_sum{" + s.labels + "} ")
				num = appendNum(num[:0], v[len(les)+1])
				num = append(num, ' ')
				num = append(num, tsb...)
				num = append(num, '\n')
				buf.Write(num)
			}
		}
	}
	buf.WriteString("# EOF\n")
	return buf.Bytes()
}

// appendNum writes a number as prometheus_client does ("1.0", "0.25").
func appendNum(b []byte, v float64) []byte {
	switch {
	case math.IsInf(v, 1):
		return append(b, "+Inf"...)
	case math.IsNaN(v):
		return append(b, "NaN"...)
	case v == math.Trunc(v) && math.Abs(v) < 1e15:
		return append(strconv.AppendInt(b, int64(v), 10), ".0"...)
	}
	return strconv.AppendFloat(b, v, 'g', 10, 64)
}

func appendTS(b []byte, ms int64) []byte {
	b = strconv.AppendInt(b, ms/1000, 10)
	if r := ms % 1000; r != 0 {
		b = append(b, '.', byte('0'+r/100), byte('0'+r/10%10), byte('0'+r%10))
	}
	return b
}
