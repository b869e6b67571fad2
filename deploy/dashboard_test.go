package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
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
	Panels []panel `json:"panels"` // a collapsed row's
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
		"whyslow_incident_open", "whyslow_fleet_scopes", "whyslow_fleet_scopes_violating",
		"whyslow_cycle_duration_seconds_bucket", "whyslow_cycle_queries", "whyslow_incidents_open",
		"whyslow_triage_duration_seconds_bucket",
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
