package sim

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
)

// famType is the metric type of a family.
type famType int

const (
	gaugeType famType = iota
	counterType
	histogramType
)

// String returns the exposition type name.
func (f famType) String() string {
	switch f {
	case gaugeType:
		return "gauge"
	case counterType:
		return "counter"
	case histogramType:
		return "histogram"
	}
	return "unknown"
}

// family is one metric family; name is the family name (for counters
// without the _total suffix).
type family struct {
	name   string
	help   string
	typ    famType
	series []*series
	// bare says a counter's samples carry the family name itself, without
	// _total, as dcgm-exporter writes its counters.
	bare bool
}

// series is one labelled series of a family on one replica.
type series struct {
	replica int
	own     string // own labels, rendered and sorted, without braces
	full    string // own + target labels
	get     func() float64
	hist    *histogram
	rec     []float64 // recorded values, stride 1 or len(bounds)+3
}

// registry holds every family the run exposes.
type registry struct {
	fams  []*family
	ticks []int64 // recorded tick times, ms since epoch
	// gone are the replicas that stopped serving: their series get no
	// more samples, like a pod that is no longer scraped.
	gone map[int]bool
}

// stop ends the samples of a replica's series from the next tick on.
func (r *registry) stop(replica int) {
	if r.gone == nil {
		r.gone = map[int]bool{}
	}
	r.gone[replica] = true
}

func (r *registry) family(name, help string, typ famType) *family {
	f := &family{name: name, help: help, typ: typ}
	r.fams = append(r.fams, f)
	return f
}

// labelSet renders labels sorted by name.
type labelSet map[string]string

func (l labelSet) String() string {
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
		b.WriteString(escapeLabel(l[k]))
		b.WriteByte('"')
	}
	return b.String()
}

func (l labelSet) with(extra labelSet) labelSet {
	out := labelSet{}
	for k, v := range l {
		out[k] = v
	}
	for k, v := range extra {
		out[k] = v
	}
	return out
}

func escapeLabel(s string) string {
	if !strings.ContainsAny(s, "\\\"\n") {
		return s
	}
	s = strings.ReplaceAll(s, `\`, `\\`)
	s = strings.ReplaceAll(s, `"`, `\"`)
	return strings.ReplaceAll(s, "\n", `\n`)
}

func (f *family) add(replica int, own, target labelSet, get func() float64) {
	f.series = append(f.series, &series{replica: replica, own: own.String(), full: own.with(target).String(), get: get})
}

// addStored adds a series whose stored labels (what Prometheus keeps
// after target relabelling, full) are not simply own plus the target's.
func (f *family) addStored(replica int, own, full labelSet, get func() float64) {
	f.series = append(f.series, &series{replica: replica, own: own.String(), full: full.String(), get: get})
}

func (f *family) addHist(replica int, own, target labelSet, h *histogram) {
	f.series = append(f.series, &series{replica: replica, own: own.String(), full: own.with(target).String(), hist: h})
}

// record appends the current value of every series.
func (r *registry) record(tsMs int64) {
	r.ticks = append(r.ticks, tsMs)
	for _, f := range r.fams {
		for _, s := range f.series {
			if r.gone[s.replica] {
				continue
			}
			if s.hist == nil {
				s.rec = append(s.rec, s.get())
				continue
			}
			cum := 0.0
			for _, c := range s.hist.counts {
				cum += c
				s.rec = append(s.rec, cum)
			}
			s.rec = append(s.rec, s.hist.sum, s.hist.count)
		}
	}
}

// formatFloat writes a float the way Python's prometheus_client does:
// integral values as "N.0", others in shortest form.
func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

func formatTS(ms int64) string {
	if ms%1000 == 0 {
		return strconv.FormatInt(ms/1000, 10)
	}
	return strconv.FormatFloat(float64(ms)/1000, 'f', 3, 64)
}

func sampleName(f *family) string {
	if f.typ == counterType && !f.bare {
		return f.name + "_total"
	}
	return f.name
}

func braces(labels string) string {
	if labels == "" {
		return ""
	}
	return "{" + labels + "}"
}

func withLE(labels, le string) string {
	if labels == "" {
		return `{le="` + le + `"}`
	}
	return "{" + labels + `,le="` + le + `"}`
}

// sampleTail is what sizeOpenMetrics counts for a sample line past its
// name and labels: the space, the value, the space, the timestamp and the
// newline. Values are mostly counts ("1234.0") and the timestamps whole
// seconds (10 digits): 24 is above most lines, so the estimate rarely
// falls short.
const sampleTail = 24

// sizeOpenMetrics estimates the bytes writeOpenMetrics writes for the
// ticks selected by keep, from the names and labels of the lines it will
// write: a bundle's buffer is sized once (an hour at 5 s is ~100 MB, and
// growing a bytes.Buffer to it allocated, zeroed and copied it several
// times over).
func (r *registry) sizeOpenMetrics(keep func(ms int64) bool) int {
	points := 0
	for _, t := range r.ticks {
		if keep == nil || keep(t) {
			points++
		}
	}
	n := len("# EOF\n")
	for _, f := range r.fams {
		if len(f.series) == 0 {
			continue
		}
		n += 2*len(f.name) + len(f.help) + 32
		name := len(sampleName(f))
		for _, s := range f.series {
			if s.hist == nil {
				n += min(points, len(s.rec)) * (name + len(s.full) + 2 + sampleTail)
				continue
			}
			stride := len(s.hist.bounds) + 3
			line := len(f.name) + len(s.full) + 2 + sampleTail
			// Buckets (with _bucket and le="…"), then _sum and _count.
			perPoint := (stride-2)*(line+len("_bucket,le=\"\"")+8) + 2*(line+len("_count"))
			n += min(points, len(s.rec)/stride) * perPoint
		}
	}
	return n
}

// writeOpenMetrics writes the recorded ticks selected by keep (nil = all)
// as OpenMetrics text: per family HELP and TYPE, per series its points in
// time order (a histogram point is its buckets, sum and count), then # EOF.
func (r *registry) writeOpenMetrics(w io.Writer, keep func(ms int64) bool) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	idx := make([]int, 0, len(r.ticks))
	for i, t := range r.ticks {
		if keep == nil || keep(t) {
			idx = append(idx, i)
		}
	}
	ts := make([]string, len(r.ticks))
	for _, i := range idx {
		ts[i] = formatTS(r.ticks[i])
	}
	for _, f := range r.fams {
		if len(f.series) == 0 {
			continue
		}
		fmt.Fprintf(bw, "# HELP %s %s\n# TYPE %s %s\n", f.name, f.help, f.name, f.typ)
		name := sampleName(f)
		for _, s := range f.series {
			if s.hist == nil {
				lb := braces(s.full)
				for _, i := range idx {
					if i >= len(s.rec) {
						break // the replica stopped
					}
					bw.WriteString(name)
					bw.WriteString(lb)
					bw.WriteByte(' ')
					bw.WriteString(formatFloat(s.rec[i]))
					bw.WriteByte(' ')
					bw.WriteString(ts[i])
					bw.WriteByte('\n')
				}
				continue
			}
			nb := len(s.hist.bounds)
			stride := nb + 3
			les := make([]string, nb+1)
			for j, b := range s.hist.bounds {
				les[j] = withLE(s.full, formatFloat(b))
			}
			les[nb] = withLE(s.full, "+Inf")
			lb := braces(s.full)
			for _, i := range idx {
				if (i+1)*stride > len(s.rec) {
					break // the replica stopped
				}
				v := s.rec[i*stride : (i+1)*stride]
				for j := 0; j <= nb; j++ {
					bw.WriteString(f.name)
					bw.WriteString("_bucket")
					bw.WriteString(les[j])
					bw.WriteByte(' ')
					bw.WriteString(formatFloat(v[j]))
					bw.WriteByte(' ')
					bw.WriteString(ts[i])
					bw.WriteByte('\n')
				}
				fmt.Fprintf(bw, "%s_sum%s %s %s\n%s_count%s %s %s\n", f.name, lb, formatFloat(v[nb+1]), ts[i],
					f.name, lb, formatFloat(v[nb+2]), ts[i])
			}
		}
	}
	bw.WriteString("# EOF\n")
	return bw.Flush()
}

// writeText writes the current values of one replica's series in the
// Prometheus text format (version 0.0.4), as the engine itself serves them:
// own labels only, no timestamps.
func (r *registry) writeText(w io.Writer, replica int) error {
	bw := bufio.NewWriter(w)
	for _, f := range r.fams {
		first := true
		name := sampleName(f)
		for _, s := range f.series {
			if s.replica != replica {
				continue
			}
			if first {
				fmt.Fprintf(bw, "# HELP %s %s\n# TYPE %s %s\n", name, f.help, name, f.typ)
				first = false
			}
			if s.hist == nil {
				fmt.Fprintf(bw, "%s%s %s\n", name, braces(s.own), formatFloat(s.get()))
				continue
			}
			cum := 0.0
			for j, c := range s.hist.counts {
				cum += c
				le := "+Inf"
				if j < len(s.hist.bounds) {
					le = formatFloat(s.hist.bounds[j])
				}
				fmt.Fprintf(bw, "%s_bucket%s %s\n", f.name, withLE(s.own, le), formatFloat(cum))
			}
			fmt.Fprintf(bw, "%s_sum%s %s\n%s_count%s %s\n", f.name, braces(s.own), formatFloat(s.hist.sum),
				f.name, braces(s.own), formatFloat(s.hist.count))
		}
	}
	return bw.Flush()
}
