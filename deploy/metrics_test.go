// Package deploy tests the shipped deployment files: the Kubernetes
// manifests decode strictly into their real types and agree with each
// other, and every PromQL expression of the alert rules and the Grafana
// dashboard parses and names only metrics someone exports.
package deploy

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/whyslow/whyslow/rules"
	"github.com/whyslow/whyslow/rulesets"
)

var promql = parser.NewParser(parser.Options{})

// fleetMetrics are the fleet daemon's metrics (issue 12), listed here as
// well as found in the sources: a dashboard may be written against them
// before they land. true marks a histogram.
var fleetMetrics = map[string]bool{
	"whyslow_incident_open":           false,
	"whyslow_fleet_scopes":            false,
	"whyslow_fleet_scopes_violating":  false,
	"whyslow_cycle_duration_seconds":  true,
	"whyslow_cycle_queries":           false,
	"whyslow_incidents_open":          false,
	"whyslow_triage_duration_seconds": true,
}

// Metric declarations in whyslow's Go sources: client_golang options with a
// literal Name, and descriptors with a literal name.
var (
	optsName = regexp.MustCompile(`(Counter|Gauge|Histogram|Summary)Opts\{\s*Name:\s*"([a-zA-Z_:][a-zA-Z0-9_:]*)"`)
	descName = regexp.MustCompile(`NewDesc\(\s*"([a-zA-Z_:][a-zA-Z0-9_:]*)"`)
)

// known is every series name a dashboard or a rule may read.
type known struct {
	names   map[string]string // series name → who exports it
	metrics map[string]bool   // whyslow's own, for the report
}

var (
	knownOnce sync.Once
	knownSet  known
	knownErr  []string
)

// exported returns the series names whyslow and the engines export: the
// metrics declared in whyslow's Go sources (daemon/metrics.go
// among them), the fleet metrics above, and every metric the shipped
// rulesets read for vLLM, SGLang and TensorRT-LLM (all their shapes).
func exported(t *testing.T) known {
	t.Helper()
	knownOnce.Do(func() { knownSet, knownErr = loadKnown() })
	for _, e := range knownErr {
		t.Error(e)
	}
	return knownSet
}

func loadKnown() (known, []string) {
	k := known{names: map[string]string{}, metrics: map[string]bool{}}
	var errs []string
	add := func(name, by string, histogram bool) {
		k.names[name] = by
		if histogram {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				k.names[name+s] = by
			}
		}
		if strings.HasPrefix(name, "whyslow_") {
			k.metrics[name] = true
		}
	}
	for name, h := range fleetMetrics {
		add(name, "whyslow (fleet)", h)
	}
	fromDaemon := 0
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != ".." && (strings.HasPrefix(n, ".") || n == "testdata" || n == "vendor" || n == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range optsName.FindAllStringSubmatch(string(b), -1) {
			add(m[2], "whyslow ("+path+")", m[1] == "Histogram" || m[1] == "Summary")
			if filepath.ToSlash(path) == "../daemon/metrics.go" {
				fromDaemon++
			}
		}
		for _, m := range descName.FindAllStringSubmatch(string(b), -1) {
			add(m[1], "whyslow ("+path+")", false)
		}
		return nil
	})
	if err != nil {
		errs = append(errs, "scan whyslow's sources: "+err.Error())
	}
	if fromDaemon == 0 {
		errs = append(errs, "no metric Name: found in daemon/metrics.go: the scan is broken")
	}

	rss, err := rulesets.All()
	if err != nil {
		return k, append(errs, "load shipped rulesets: "+err.Error())
	}
	engines := 0
	for _, rs := range rss {
		all := append([]*rules.Ruleset{rs}, rs.Shapes...)
		for _, r := range all {
			sigs := append([]*rules.Signal{r.Detect}, r.Signals...)
			if sh := r.Shape(); sh != nil {
				sigs = append(sigs, sh.Detect)
			}
			for _, s := range sigs {
				if s == nil {
					continue
				}
				q, err := s.Render("", "5m", nil)
				if err != nil {
					errs = append(errs, "render "+rs.Engine+" signal "+s.Name+": "+err.Error())
					continue
				}
				names, err := metricNames(q)
				if err != nil {
					errs = append(errs, rs.Engine+" signal "+s.Name+": "+err.Error())
					continue
				}
				for _, n := range names {
					if !strings.HasPrefix(n, "whyslow_") {
						engines++
						k.names[n] = rs.Engine + " (rulesets)"
					}
				}
			}
		}
	}
	if engines == 0 {
		errs = append(errs, "no engine metric found in the shipped rulesets: the scan is broken")
	}
	// Prometheus's own series about its targets.
	k.names["up"] = "Prometheus"
	return k, errs
}

// metricNames parses expr and returns the metric names its selectors read.
func metricNames(expr string) ([]string, error) {
	e, err := promql.ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
				name = m.Value
			}
			// {__name__=~"a|b|c"} (a dashboard variable's selector over
			// several engines) reads each of a, b and c.
			if m.Name == model.MetricNameLabel && m.Type == labels.MatchRegexp {
				if alts := strings.Split(m.Value, "|"); allNames(alts) {
					for _, a := range alts {
						seen[a] = true
					}
				}
			}
		}
		if name != "" {
			seen[name] = true
		}
		return nil
	})
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, nil
}

var literalName = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)

// allNames reports whether every alternative of a regex is a plain metric
// name.
func allNames(alts []string) bool {
	for _, a := range alts {
		if !literalName.MatchString(a) {
			return false
		}
	}
	return true
}

// checkExpr returns what is wrong with expr: a parse error, or metrics
// that nobody exports.
func checkExpr(k known, expr string) []string {
	names, err := metricNames(expr)
	if err != nil {
		return []string{"does not parse: " + err.Error()}
	}
	var out []string
	for _, n := range names {
		if _, ok := k.names[n]; !ok {
			out = append(out, "reads "+n+", which neither whyslow nor a shipped engine ruleset exports")
		}
	}
	return out
}

// The checks catch what they are for.
func TestCheckExprCatches(t *testing.T) {
	k := exported(t)
	for _, expr := range []string{
		`rate(vllm:no_such_metric_total[5m])`,
		`whyslow_cycle_duration_seconds_bucketz`,
		`sum(rate(whyslow_detect_errors_total[5m])`,
	} {
		if len(checkExpr(k, expr)) == 0 {
			t.Errorf("%s: no problem found", expr)
		}
	}
	for _, expr := range []string{
		`histogram_quantile(0.9, sum by (le) (rate(whyslow_cycle_duration_seconds_bucket[5m])))`,
		`whyslow_ready == 0 and vllm:num_requests_running > 0`,
		`sum(rate(sglang:prompt_tokens_total[5m]))`,
	} {
		if p := checkExpr(k, expr); len(p) != 0 {
			t.Errorf("%s: %v", expr, p)
		}
	}
}
