package store

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// parseCacheCases are queries of the shapes the rulesets and the detector
// run (scope selectors, regex matchers, label_replace, quoted names), and
// ones the cache must leave to the parser.
var parseCacheCases = []string{
	`histogram_quantile(0.95, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket{namespace="steady-001",model_name="steady"}[5m])))`,
	`(sum(rate(http_requests_total{status=~"5.."}[5m]) and on(namespace, pod) vllm:num_requests_running{namespace="a-001"}) or vector(0)) / (sum(rate(http_requests_total[5m])) > 0)`,
	`max(label_replace(label_replace(avg_over_time(DCGM_FI_PROF_SM_ACTIVE[5m]), "pod", "$1", "exported_pod", "(.+)"), "namespace", "$1", "exported_namespace", "(.+)"))`,
	`count(last_over_time({__name__=~"dynamo_frontend_time_to_first_token_seconds_count|dynamo_frontend_x"}[5m]))`,
	`count by (le) (last_over_time(vllm:e2e_request_latency_seconds_bucket{namespace='single-quoted'}[1m]))`,
	"sum(rate(x{job=`raw\\string`}[1m]))",
	`{"utf8.metric.name", "label.one"="value-one"}`,
	`sum by ("label.one") (rate({"utf8.metric.name"}[1m]))`,
	`x{a="abc"} @ 100 offset 5m`,
	`sum_over_time(rate(x{a="abc"}[1m])[5m:1m])`,
	`count_values("value", x{a="abc"})`,
	// No string literal: the query is its own shape.
	`sum(rate(vllm:request_success_total[5m])) / sum(rate(vllm:request_success_total[1h] offset 5m))`, `x @ 100`, `1 + 2`,
	// Invalid: the parser's own error.
	`{a=~".*"}`, `{a=~"(("}`, `x{a="abc"`, `x{__name__="abc"}`, `x{"__name__"="abc"}`, `sum(x{a="abc"}) # comment`,
	`x{a="abc\"def"}`, `x{a="ab` + "\n" + `c"}`,
}

func TestParseCacheMatchesParser(t *testing.T) {
	plain := parser.NewParser(parser.Options{})
	cached := newParseCache(plain)
	for _, q := range parseCacheCases {
		// Three times: the first is parsed as is, the second keeps the
		// shape, the third copies it.
		for range 3 {
			checkParseCache(t, plain, cached, q)
		}
	}
	// Another scope's query of a kept shape.
	checkParseCache(t, plain, cached, `histogram_quantile(0.95, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket{namespace="steady-002",model_name="other"}[5m])))`)
	checkParseCache(t, plain, cached, `count(last_over_time({__name__=~"a|b|c"}[5m]))`) // matches no empty name, unlike "" would
}

func checkParseCache(t *testing.T, plain parser.Parser, cached *parseCache, q string) {
	t.Helper()
	want, wantErr := plain.ParseExpr(q)
	got, err := cached.ParseExpr(q)
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("%q: cached parse error %v, parser's %v", q, err, wantErr)
	}
	if err != nil {
		if err.Error() != wantErr.Error() {
			t.Fatalf("%q: cached parse error %q, parser's %q", q, err, wantErr)
		}
		return
	}
	if !reflect.DeepEqual(withoutRegexps(got), withoutRegexps(want)) {
		t.Fatalf("%q: cached parse differs:\n%s\n%s", q, got, want)
	}
}

// withoutRegexps replaces the tree's matchers by ones without their
// compiled regexps (whose caches differ between two compilations).
func withoutRegexps(e parser.Expr) parser.Expr {
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			for i, m := range vs.LabelMatchers {
				vs.LabelMatchers[i] = &labels.Matcher{Type: m.Type, Name: m.Name, Value: m.Value}
			}
		}
		return nil
	})
	return e
}

// countingParser counts the parses that reach the parser.
type countingParser struct {
	parser.Parser
	parses int
}

func (p *countingParser) ParseExpr(input string) (parser.Expr, error) {
	p.parses++
	return p.Parser.ParseExpr(input)
}

// TestParseCacheKeepsLiteralFreeQueries: a sidecar's queries have no
// string literals; each is parsed once, then answered from the cache, and
// every answer is a tree of its own. A shape is kept the second time it
// is asked: two parses each.
func TestParseCacheKeepsLiteralFreeQueries(t *testing.T) {
	plain := parser.NewParser(parser.Options{})
	counting := &countingParser{Parser: plain}
	cached := newParseCache(counting)
	queries := []string{
		`histogram_quantile(0.95, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[5m])))`,
		`sum(vllm:num_requests_waiting) / sum(vllm:num_requests_running)`,
		`x{a=""} offset 5m`, // a literal too short to stand in for: the shape keeps it
	}
	for range 3 {
		for _, q := range queries {
			checkParseCache(t, plain, cached, q)
		}
	}
	if counting.parses != 2*len(queries) {
		t.Fatalf("%d parses for %d queries asked three times each, want two each", counting.parses, len(queries))
	}
	a, err := cached.ParseExpr(queries[0])
	if err != nil {
		t.Fatal(err)
	}
	b, err := cached.ParseExpr(queries[0])
	if err != nil {
		t.Fatal(err)
	}
	if a == b {
		t.Fatal("two parses of one query share a tree")
	}
	// An invalid literal-free query: the parser's error, every time, and
	// nothing kept.
	for range 2 {
		checkParseCache(t, plain, cached, `sum(x`)
	}
	if len(cached.shapes) != len(queries) {
		t.Fatalf("%d shapes kept, want %d", len(cached.shapes), len(queries))
	}
}

// TestParseCacheKeepsNoOneOffShape: triage queries whose range grows with
// the data seen have a new shape every cycle; their trees must not be kept
// (they held half the sidecar's live heap), while a repeated one is.
func TestParseCacheKeepsNoOneOffShape(t *testing.T) {
	plain := parser.NewParser(parser.Options{})
	cached := newParseCache(plain)
	for i := range 2 * maxShapes {
		checkParseCache(t, plain, cached, fmt.Sprintf(`count(last_over_time(vllm:num_requests_running{namespace="steady-001"}[%ds]))`, 60+i))
	}
	if len(cached.shapes) != 0 {
		t.Fatalf("%d trees kept for shapes asked once each, want none", len(cached.shapes))
	}
	if len(cached.seenOnce) > maxShapes {
		t.Fatalf("%d shapes remembered, want at most %d", len(cached.seenOnce), maxShapes)
	}
	repeated := `count(last_over_time(vllm:num_requests_running{namespace="steady-001"}[5m]))`
	for range 2 {
		checkParseCache(t, plain, cached, repeated)
	}
	if len(cached.shapes) != 1 {
		t.Fatalf("%d trees kept after a shape asked twice, want 1", len(cached.shapes))
	}
}

// TestParseCacheCopies checks that queries answered from one kept shape do
// not share what the engine writes into the tree.
func TestParseCacheCopies(t *testing.T) {
	st, err := Open(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	at := time.Unix(1700000000, 0)
	app := st.Appender(context.Background())
	for i, ns := range []string{"aaa", "bbb"} {
		for k := range 10 {
			ts := at.Add(time.Duration(k-9) * 15 * time.Second).UnixMilli()
			if _, err := app.Append(0, labels.FromStrings("__name__", "up_total", "namespace", ns), ts, float64((i+1)*k)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		for i, ns := range []string{"aaa", "bbb"} {
			v, _, err := st.Query(context.Background(), `sum(increase(up_total{namespace="`+ns+`"}[2m]))`, at)
			if err != nil {
				t.Fatal(err)
			}
			if len(v) != 1 || float64(v[0].Value) < float64(i+1)*7 || float64(v[0].Value) > float64(i+1)*10 {
				t.Fatalf("namespace %s: %v", ns, v)
			}
		}
	}
}

// FuzzParseCache: the cache answers every query as the parser does.
func FuzzParseCache(f *testing.F) {
	for _, q := range parseCacheCases {
		f.Add(q)
	}
	plain := parser.NewParser(parser.Options{})
	cached := newParseCache(plain)
	f.Fuzz(func(t *testing.T, q string) {
		want, wantErr := plain.ParseExpr(q)
		got, err := cached.ParseExpr(q)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("%q: cached parse error %v, parser's %v", q, err, wantErr)
		}
		if err == nil && got.String() != want.String() {
			t.Fatalf("%q: cached parse %s, parser's %s", q, got, want)
		}
	})
}

// BenchmarkParseCache parses the rulesets-like queries of 256 scopes (each
// shape once per scope, as a cycle does) through the parser and through
// the cache, in one run:
//
//	go test ./collectors/store -run '^$' -bench BenchmarkParseCache -benchmem
func BenchmarkParseCache(b *testing.B) {
	var qs []string
	for i := range 256 {
		for _, q := range parseCacheCases[:5] {
			qs = append(qs, strings.ReplaceAll(q, "steady-001", fmt.Sprintf("steady-%03d", i)))
		}
	}
	plain := parser.NewParser(parser.Options{})
	for _, p := range []struct {
		name string
		p    parser.Parser
	}{{"parser", plain}, {"cache", newParseCache(plain)}} {
		b.Run(p.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				for _, q := range qs {
					if _, err := p.p.ParseExpr(q); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// TestParseCacheDropsShapesNoLongerAsked: an incident's triage queries are
// kept while they are asked every cycle; once the incident is over and
// they are not asked for two sweep periods their trees go, while the
// detector's query, asked every cycle throughout, stays.
func TestParseCacheDropsShapesNoLongerAsked(t *testing.T) {
	plain := parser.NewParser(parser.Options{})
	now := time.Unix(1_800_000_000, 0)
	cached := newParseCacheAt(plain, func() time.Time { return now })
	detector := `histogram_quantile(0.95, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[5m])))`
	triage := []string{
		`sum(rate(vllm:num_preemptions_total{namespace="steady-001"}[5m]))`,
		`avg(vllm:kv_cache_usage_perc{namespace="steady-001"})`,
	}
	cycle := func(withTriage bool) {
		checkParseCache(t, plain, cached, detector)
		if withTriage {
			for _, q := range triage {
				checkParseCache(t, plain, cached, q)
			}
		}
		now = now.Add(5 * time.Second)
	}
	for range 12 * 5 { // five minutes with the incident open
		cycle(true)
	}
	if got := len(cached.shapes) + len(cached.older); got != 1+len(triage) {
		t.Fatalf("%d shapes kept while the incident is open, want %d", got, 1+len(triage))
	}
	for range 12 * 2 * 10 { // two sweep periods after it closed
		cycle(false)
	}
	if got := len(cached.shapes) + len(cached.older); got != 1 {
		t.Fatalf("%d shapes kept twenty minutes after the triage's last query, want the detector's only", got)
	}
	if len(cached.seenOnce) != 0 {
		t.Fatalf("%d shapes seen once remembered after a sweep, want none", len(cached.seenOnce))
	}
	// A dropped shape asked again is parsed and kept again.
	for range 2 {
		checkParseCache(t, plain, cached, triage[0])
	}
	if got := len(cached.shapes) + len(cached.older); got != 2 {
		t.Fatalf("%d shapes kept after a dropped one came back, want 2", got)
	}
}
