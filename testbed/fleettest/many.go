package fleettest

import (
	"bufio"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// ManySeries is a fake Prometheus query API (/api/v1/query and
// /api/v1/query_range) whose every answer holds N series, one per scope
// model_name="m-NNNNNN", for bound tests: a real Prometheus holding
// 200,000 series takes minutes to fill. A query that names one scope
// (model_name="m-…", or model="m-…" for Dynamo's frontend, as a triage's
// do) gets that scope's series alone;
// vector(1), the daemon's probe, gets one sample, and so does a count
// without grouping (`count(x)`, `count(x) or count(y)`: the engine checks
// and history starts), valued N, as a Prometheus answers it: one series
// without labels, however many series it counts (1 when it names one
// scope). The answers are written
// as they are generated, so the fake holds none of them in memory.
type ManySeries struct {
	// N is the number of series (scopes).
	N int
	// Value is scope i's value in every query (nil: 0.5).
	Value func(i int) float64
	// Queries counts the queries answered; Full those that held all N.
	Queries, Full atomic.Int64
}

// oneScope is a scope's matcher: the engines label the model model_name,
// Dynamo's frontend model (rules.FrontendSelector).
var oneScope = regexp.MustCompile(`model(?:_name)?="m-(\d+)"`)

// Name is the model_name of scope i.
func Name(i int) string { return fmt.Sprintf("m-%06d", i) }

// ServeHTTP implements http.Handler.
func (m *ManySeries) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	m.Queries.Add(1)
	matrix := false
	switch r.URL.Path {
	case "/api/v1/query":
	case "/api/v1/query_range":
		matrix = true
	default:
		http.NotFound(w, r)
		return
	}
	q := r.Form.Get("query")
	ts := float64(time.Now().Unix())
	if s := r.Form.Get("time"); s != "" {
		ts, _ = strconv.ParseFloat(s, 64)
	}
	if s := r.Form.Get("end"); matrix && s != "" {
		ts, _ = strconv.ParseFloat(s, 64)
	}
	lo, hi := 0, m.N
	single := 1.0 // the value of the one label-less sample (lo -1)
	switch {
	case q == "vector(1)":
		lo, hi = -1, 0
	case countsOnly(q):
		lo, hi, single = -1, 0, float64(m.N)
		if oneScope.MatchString(q) {
			single = 1 // the scope's one series
		}
	case oneScope.MatchString(q):
		i, _ := strconv.Atoi(oneScope.FindStringSubmatch(q)[1])
		lo, hi = i, min(i+1, m.N)
	default:
		m.Full.Add(1)
	}
	w.Header().Set("Content-Type", "application/json")
	bw := bufio.NewWriterSize(w, 64<<10)
	kind := "vector"
	if matrix {
		kind = "matrix"
	}
	fmt.Fprintf(bw, `{"status":"success","data":{"resultType":%q,"result":[`, kind)
	var b []byte
	for i := lo; i < hi; i++ {
		v := single
		if i >= 0 {
			v = 0.5
			if m.Value != nil {
				v = m.Value(i)
			}
		}
		b = b[:0]
		if i > lo {
			b = append(b, ',')
		}
		b = append(b, `{"metric":{`...)
		if i >= 0 {
			b = append(b, `"model_name":"`...)
			b = append(b, Name(i)...)
			b = append(b, '"')
		}
		b = append(b, `},`...)
		point := func(t float64) {
			b = append(b, '[')
			b = strconv.AppendFloat(b, t, 'f', -1, 64)
			b = append(b, `,"`...)
			b = strconv.AppendFloat(b, v, 'g', -1, 64)
			b = append(b, `"]`...)
		}
		if matrix {
			b = append(b, `"values":[`...)
			point(ts - 60)
			b = append(b, ',')
			point(ts)
			b = append(b, ']')
		} else {
			b = append(b, `"value":`...)
			point(ts)
		}
		b = append(b, '}')
		if _, err := bw.Write(b); err != nil {
			return
		}
	}
	bw.WriteString(`]}}`)
	bw.Flush()
}

// countsOnly reports whether q is one or more counts without grouping
// joined by `or` (`count(a) or count(b)`): its words outside parentheses
// and quotes are count and or alone.
func countsOnly(q string) bool {
	var top []byte
	depth, quote := 0, byte(0)
	for i := 0; i < len(q); i++ {
		c := q[i]
		switch {
		case quote != 0:
			if c == '\\' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'' || c == '`':
			quote = c
		case c == '(':
			depth++
			if depth == 1 {
				top = append(top, ' ')
			}
		case c == ')':
			depth--
		case depth == 0:
			top = append(top, c)
		}
	}
	words := strings.Fields(string(top))
	if depth != 0 || len(words)%2 == 0 {
		return false
	}
	for i, w := range words {
		if (i%2 == 0 && w != "count") || (i%2 == 1 && w != "or") {
			return false
		}
	}
	return true
}
