package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
)

const fleetDashboard = "grafana/whyslow-fleet.json"

// grafanaIntervals stand in for Grafana's interval variables, which sit
// where PromQL wants a duration.
var grafanaIntervals = strings.NewReplacer(
	"${__rate_interval}", "5m", "$__rate_interval", "5m",
	"${__interval}", "1m", "$__interval", "1m",
	"${__range}", "1h", "$__range", "1h",
)

// grafanaVar is a dashboard variable reference: $name, ${name}, ${name:fmt}
// or [[name]].
var grafanaVar = regexp.MustCompile(`\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]`)

// promqlOf returns expr with Grafana's variables replaced by stand-ins
// that parse (durations for intervals, "x" for the rest, which sit in
// label values), and the variables it used.
func promqlOf(expr string) (string, []string) {
	var used []string
	out := grafanaVar.ReplaceAllStringFunc(grafanaIntervals.Replace(expr), func(ref string) string {
		m := grafanaVar.FindStringSubmatch(ref)
		used = append(used, m[1]+m[2]+m[3])
		return "x"
	})
	return out, used
}

// labelValues is Grafana's label_values(selector, label) variable query.
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`)

type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Annotations   struct {
		List []struct {
			Name       string     `json:"name"`
			Datasource datasource `json:"datasource"`
			Expr       string     `json:"expr"`
			TextFormat string     `json:"textFormat"`
			BuiltIn    int        `json:"builtIn"`
		} `json:"list"`
	} `json:"annotations"`
	Templating struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Datasource *datasource     `json:"datasource"`
			Query      json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *datasource `json:"datasource"`
	GridPos    *struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID      string      `json:"refId"`
		Expr       string      `json:"expr"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
	Panels      []panel `json:"panels"` // a collapsed row's
	FieldConfig struct {
		Defaults struct {
			Links []struct {
				Title string `json:"title"`
				URL   string `json:"url"`
			} `json:"links"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
}

// variableQuery is the PromQL of a variable query, which Grafana stores as a
// string or as {"query": ...}.
func variableQuery(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var o struct {
		Query string `json:"query"`
	}
	_ = json.Unmarshal(raw, &o)
	return o.Query
}

// expression is one PromQL expression of the dashboard and where it is.
type expression struct{ where, expr string }

func loadDashboard(t *testing.T) (dashboard, []expression) {
	t.Helper()
	b, err := os.ReadFile(fleetDashboard)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", fleetDashboard, err)
	}
	var exprs []expression
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				exprs = append(exprs, expression{fmt.Sprintf("panel %d %q target %s", p.ID, p.Title, tg.RefID), tg.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, a := range d.Annotations.List {
		if a.BuiltIn == 0 {
			exprs = append(exprs, expression{fmt.Sprintf("annotation %q", a.Name), a.Expr})
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q := variableQuery(v.Query)
		m := labelValues.FindStringSubmatch(q)
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(selector, label)", v.Name, q)
			continue
		}
		exprs = append(exprs, expression{fmt.Sprintf("variable %s", v.Name), m[1]})
	}
	return d, exprs
}

// Every expression parses and reads only metrics whyslow or an engine
// exports, with only variables the dashboard defines.
func TestDashboardQueries(t *testing.T) {
	d, exprs := loadDashboard(t)
	k := exported(t)
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
	}
	read := map[string]bool{}
	for _, e := range exprs {
		if strings.TrimSpace(e.expr) == "" {
			t.Errorf("%s: empty expression", e.where)
			continue
		}
		q, used := promqlOf(e.expr)
		for _, v := range used {
			if !vars[v] {
				t.Errorf("%s: uses $%s, which the dashboard does not define", e.where, v)
			}
		}
		for _, p := range checkExpr(k, q) {
			t.Errorf("%s: %s\n\t%s", e.where, p, e.expr)
		}
		names, _ := metricNames(q)
		for _, n := range names {
			read[n] = true
		}
	}
	// The panels users expect are there.
	for _, want := range []string{
		"vllm:time_to_first_token_seconds_bucket", "vllm:inter_token_latency_seconds_bucket",
		"vllm:e2e_request_latency_seconds_bucket", "vllm:kv_cache_usage_perc",
		"vllm:num_requests_running", "vllm:num_requests_waiting",
		"sglang:time_to_first_token_seconds_bucket", "sglang:inter_token_latency_seconds_bucket",
		"sglang:e2e_request_latency_seconds_bucket", "sglang:token_usage",
		"sglang:num_running_reqs", "sglang:num_queue_reqs",
		"trtllm_time_to_first_token_seconds_bucket", "trtllm_time_per_output_token_seconds_bucket",
		"trtllm_e2e_request_latency_seconds_bucket", "trtllm_kv_cache_utilization",
		"trtllm_num_requests_running", "trtllm_num_requests_waiting",
		"whyslow_incident_open", "whyslow_fleet_scopes", "whyslow_fleet_scopes_violating",
		"whyslow_cycle_duration_seconds_bucket", "whyslow_cycle_queries", "whyslow_ready",
		"whyslow_triage_duration_seconds_bucket", "whyslow_notifications_total",
	} {
		if !read[want] {
			t.Errorf("no query reads %s", want)
		}
	}
	if len(exprs) < 15 {
		t.Errorf("only %d expressions found: the walk is broken", len(exprs))
	}
}

// The dashboard imports anywhere: its data source is a variable, and the
// scope variables come from the engine's series.
func TestDashboardShape(t *testing.T) {
	d, _ := loadDashboard(t)
	if d.SchemaVersion < 36 {
		t.Errorf("schemaVersion %d, want at least 36", d.SchemaVersion)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q title %q: want both", d.UID, d.Title)
	}
	types := map[string]string{}
	for _, v := range d.Templating.List {
		types[v.Name] = v.Type
		if v.Type == "query" && (v.Datasource == nil || v.Datasource.UID != "${datasource}") {
			t.Errorf("variable %s does not query ${datasource}", v.Name)
		}
	}
	if types["datasource"] != "datasource" || types["namespace"] != "query" || types["model_name"] != "query" {
		t.Errorf("variables = %v, want datasource (datasource), namespace and model_name (query)", types)
	}
	ids := map[int]bool{}
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] || p.ID == 0 {
				t.Errorf("panel %q: id %d missing or used twice", p.Title, p.ID)
			}
			ids[p.ID] = true
			if p.GridPos == nil || p.GridPos.W == 0 || p.GridPos.H == 0 {
				t.Errorf("panel %q has no size", p.Title)
			}
			if p.Type != "row" && (p.Datasource == nil || p.Datasource.UID != "${datasource}") {
				t.Errorf("panel %q does not use ${datasource}", p.Title)
			}
			for _, tg := range p.Targets {
				if tg.Datasource != nil && tg.Datasource.UID != "${datasource}" {
					t.Errorf("panel %q target %s uses data source %q", p.Title, tg.RefID, tg.Datasource.UID)
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	found := false
	for _, a := range d.Annotations.List {
		if a.BuiltIn == 0 {
			found = found || strings.Contains(a.Expr, "whyslow_incident_open")
			if a.Datasource.UID != "${datasource}" {
				t.Errorf("annotation %q does not use ${datasource}", a.Name)
			}
		}
	}
	if !found {
		t.Error("no annotation marks whyslow's incidents (whyslow_incident_open)")
	}
}

// The stand-ins make Grafana's variables parse, and the checks notice a
// metric nobody exports.
func TestDashboardCheckCatches(t *testing.T) {
	q, used := promqlOf(`sum(rate(vllm:request_success_total{model_name=~"$model_name", namespace=~"${namespace:regex}"}[$__rate_interval]))`)
	if q != `sum(rate(vllm:request_success_total{model_name=~"x", namespace=~"x"}[5m]))` || strings.Join(used, ",") != "model_name,namespace" {
		t.Errorf("promqlOf = %s, %v", q, used)
	}
	k := exported(t)
	q, _ = promqlOf(`histogram_quantile(0.95, sum by (le) (rate(vllm:time_to_first_token_bucket{model_name=~"$model_name"}[$__rate_interval])))`)
	if len(checkExpr(k, q)) == 0 {
		t.Error("a misspelled vLLM metric passed")
	}
}

// rows returns the dashboard's panels by the row they sit under (a row's
// own panels when collapsed).
func rows(d dashboard) map[string][]panel {
	out := map[string][]panel{}
	row := ""
	for _, p := range d.Panels {
		if p.Type == "row" {
			row = p.Title
			out[row] = append(out[row], p.Panels...)
			continue
		}
		out[row] = append(out[row], p)
	}
	return out
}

// reads returns the metric names p's queries read.
func reads(t *testing.T, p panel) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, tg := range p.Targets {
		q, _ := promqlOf(tg.Expr)
		names, err := metricNames(q)
		if err != nil {
			t.Errorf("panel %q: %v", p.Title, err)
		}
		for _, n := range names {
			out[n] = true
		}
	}
	return out
}

// engines are the metric name prefixes of the shipped engine maps
// (rulesets/vllm.yaml, sglang.yaml, trtllm.yaml).
var engines = map[string]string{"vLLM": "vllm:", "SGLang": "sglang:", "TensorRT-LLM": "trtllm_"}

// Every engine panel and both scope variables read vLLM, SGLang and
// TensorRT-LLM (issue 25 item 10: the dashboard was vLLM-only).
func TestDashboardEngines(t *testing.T) {
	d, exprs := loadDashboard(t)
	var enginePanels []panel
	for row, ps := range rows(d) {
		if row != "" && !strings.Contains(row, "whyslow") {
			enginePanels = append(enginePanels, ps...)
		}
	}
	if len(enginePanels) < 5 {
		t.Fatalf("%d engine panels, want at least 5", len(enginePanels))
	}
	for _, p := range enginePanels {
		names := reads(t, p)
		for engine, prefix := range engines {
			found := false
			for n := range names {
				found = found || strings.HasPrefix(n, prefix)
			}
			if !found {
				t.Errorf("panel %q reads no %s series (%v)", p.Title, engine, names)
			}
		}
	}
	for _, e := range exprs {
		if !strings.HasPrefix(e.where, "variable ") {
			continue
		}
		names, _ := metricNames(e.expr)
		for engine, prefix := range engines {
			found := false
			for _, n := range names {
				found = found || strings.HasPrefix(n, prefix)
			}
			if !found {
				t.Errorf("%s takes no values from %s series (%s)", e.where, engine, e.expr)
			}
		}
	}
}

// keeps reports whether expr's result keeps label: no aggregation drops
// it.
func keeps(t *testing.T, expr, label string) bool {
	t.Helper()
	q, _ := promqlOf(expr)
	e, err := promql.ParseExpr(q)
	if err != nil {
		t.Errorf("%s: %v", expr, err)
		return false
	}
	ok := true
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if a, is := n.(*parser.AggregateExpr); is && (a.Without == slices.Contains(a.Grouping, label)) {
			ok = false
		}
		return nil
	})
	return ok
}

// Each incident annotation and each row of the open-incidents table links
// to the incident's verdict page: whyslow_incident_open's verdict_url label
// (daemon/fleet.go; TestOpenIncidentMetric in package daemon).
func TestDashboardVerdictLinks(t *testing.T) {
	d, _ := loadDashboard(t)
	annotated := false
	for _, a := range d.Annotations.List {
		if a.BuiltIn != 0 || !strings.Contains(a.Expr, "whyslow_incident_open") {
			continue
		}
		annotated = true
		if !keeps(t, a.Expr, "verdict_url") || !strings.Contains(a.TextFormat, "{{verdict_url}}") {
			t.Errorf("annotation %q: the query must keep verdict_url and its text show it (expr %s, text %q)", a.Name, a.Expr, a.TextFormat)
		}
	}
	if !annotated {
		t.Error("no annotation of whyslow_incident_open")
	}
	tables := 0
	for _, ps := range rows(d) {
		for _, p := range ps {
			if p.Type != "table" || !reads(t, p)["whyslow_incident_open"] {
				continue
			}
			tables++
			for _, tg := range p.Targets {
				if !keeps(t, tg.Expr, "verdict_url") {
					t.Errorf("table %q: %s drops verdict_url", p.Title, tg.Expr)
				}
			}
			linked := false
			for _, l := range p.FieldConfig.Defaults.Links {
				linked = linked || strings.Contains(l.URL, "${__data.fields.verdict_url}")
			}
			if !linked {
				t.Errorf("table %q: rows do not link to ${__data.fields.verdict_url}", p.Title)
			}
		}
	}
	if tables == 0 {
		t.Error("no table of open incidents (whyslow_incident_open)")
	}
}

// fleetOnly are whyslow metrics that a sidecar does not export (it sends
// no Alertmanager alerts by default).
var fleetOnly = map[string]bool{"whyslow_alertmanager_sends_total": true}

// The whyslow row works for sidecars (issue 25 item 10: it read "No data"):
// every panel reads a metric a sidecar exports, and none counts incidents
// with max(whyslow_incidents_open), which is one sidecar's count.
func TestDashboardWhyslowRowForSidecars(t *testing.T) {
	d, _ := loadDashboard(t)
	n := 0
	for row, ps := range rows(d) {
		if !strings.Contains(row, "whyslow") {
			continue
		}
		for _, p := range ps {
			n++
			sidecar := false
			for name := range reads(t, p) {
				sidecar = sidecar || strings.HasPrefix(name, "whyslow_") && !fleetOnly[name]
			}
			if !sidecar {
				t.Errorf("panel %q reads only fleet metrics: No data for sidecars", p.Title)
			}
			if reads(t, p)["whyslow_incidents_open"] {
				t.Errorf("panel %q reads whyslow_incidents_open, each whyslow's own count: count distinct scopes of whyslow_incident_open", p.Title)
			}
		}
	}
	if n < 5 {
		t.Errorf("%d panels in the whyslow row, want at least 5", n)
	}
}
