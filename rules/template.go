package rules

import (
	"bytes"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"text/template"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/whyslow/whyslow/internal/format"
)

// SignalData is what a signal template sees.
type SignalData struct {
	// Selector is the scope's PromQL label matchers without braces; may be empty.
	Selector string
	// Window is the range of range-vector selectors, e.g. 5m.
	Window string
	// Recent is the range of the persistence check: the last RecentWindow of
	// the incident window (or the whole window when it is shorter), so a
	// slowdown that already ended before the window's end can be told from one
	// that still holds.
	Recent string
	// Target is the target labels joined by ", " (e.g. "pod"), for expressions
	// that compare targets inside one scope-level number.
	Target string

	by      []string // non-nil in per-target mode
	join    string   // the label series of other exporters share with the engine's (the first target label)
	gpuJoin string   // the map's gpu_join
}

// Join restricts series that lack the scope's labels (GPU counters, for one)
// to the targets in scope: it renders ` and on(<first target label>)
// metric{selector}`, or nothing when the selector is empty. Only the first
// label joins: another exporter's series (dcgm-exporter's, say) carry the
// engine's pod but their own instance.
func (d SignalData) Join(metric string) string {
	if strings.TrimSpace(d.Selector) == "" {
		return ""
	}
	return fmt.Sprintf(" and on(%s) %s{%s}", d.join, metric, d.Selector)
}

// Frontend renders the scope's label matchers for the router in front of
// the engine (NVIDIA Dynamo's frontend), which labels the model `model`
// (the engines `model_name`) and runs in the workers' namespace; the
// workers' pod, instance and engine labels never match it.
func (d SignalData) Frontend() string {
	scope, _ := ScopeLabels(d.Selector)
	sel, _ := FrontendSelector(scope)
	return sel
}

// FrontendSelector turns the scope's labels into the frontend's matchers
// (SignalData.Frontend); hasModel says whether the scope names a model.
func FrontendSelector(scope map[string]string) (sel string, hasModel bool) {
	var parts []string
	for _, k := range []string{"model_name", "model"} {
		if v, ok := scope[k]; ok && !hasModel {
			parts = append(parts, "model="+strconv.Quote(v))
			hasModel = true
		}
	}
	if v, ok := scope["namespace"]; ok {
		parts = append(parts, "namespace="+strconv.Quote(v))
	}
	return strings.Join(parts, ","), hasModel
}

// ScopeLabels returns the equality matchers of a scope's selector (label
// matchers without braces) as labels; nil for an empty selector.
func ScopeLabels(sel string) (map[string]string, error) {
	if strings.TrimSpace(sel) == "" {
		return nil, nil
	}
	ms, err := promqlParser.ParseMetricSelector("{" + sel + "}")
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, m := range ms {
		if m.Type == labels.MatchEqual {
			out[m.Name] = m.Value
		}
	}
	return out, nil
}

// GPUJoin is Join over the map's `gpu_join:` series: how a shared GPU
// signal (rulesets/gpu.yaml) is restricted to the engine's targets.
func (d SignalData) GPUJoin() (string, error) {
	if d.gpuJoin == "" {
		return "", fmt.Errorf("{{.GPUJoin}} needs the map's gpu_join: (a series with one per target)")
	}
	return d.Join(d.gpuJoin), nil
}

// GPUScope renders a GPU counter's (whyslow's, which carries the pod's
// namespace) label matchers: the given ones, and the scope's namespace
// when {{.GPUJoin}} joins on it (the scope names one):
// `{reason="x",namespace="a"}`, or nothing without either. The join drops
// every other namespace's counters anyway; restricted, a scope's query
// reads its own instead of the fleet's.
func (d SignalData) GPUScope(matchers ...string) string {
	if ns, ok := d.joinNamespace(); ok {
		matchers = append(matchers, "namespace="+strconv.Quote(ns))
	}
	return braces(matchers)
}

// DCGMScope is GPUScope for dcgm-exporter's counters, whose pod's
// namespace is exported_namespace (label_replace makes it the namespace
// when set): `{exported_namespace=~"a|"}` keeps the counters that name the
// scope's namespace and those that name none (their own namespace joins).
func (d SignalData) DCGMScope(matchers ...string) string {
	if ns, ok := d.joinNamespace(); ok {
		matchers = append(matchers, "exported_namespace=~"+strconv.Quote(regexp.QuoteMeta(ns)+"|"))
	}
	return braces(matchers)
}

func braces(matchers []string) string {
	if len(matchers) == 0 {
		return ""
	}
	return "{" + strings.Join(matchers, ",") + "}"
}

// joinNamespace is the scope's namespace when other exporters' series
// join on it (joinLabels).
func (d SignalData) joinNamespace() (string, bool) {
	if d.join != "namespace, pod" {
		return "", false
	}
	return selectorValue(d.Selector, "namespace")
}

// By renders a grouping clause: `{{.By "le"}}` is `by (le)` for the scope and
// `by (le, pod)` when the signal is evaluated per target.
func (d SignalData) By(labels ...string) string {
	all := append(append(make([]string, 0, len(labels)+len(d.by)), labels...), d.by...)
	return "by (" + strings.Join(all, ", ") + ")"
}

// Quantile renders the histogram quantile the maps write for most latency
// and size signals, so that a map names its histogram once:
// `{{.Quantile 0.95 .Window "vllm:e2e_request_latency_seconds"}}` is
//
//	histogram_quantile(0.95, sum by (le) (rate(vllm:e2e_request_latency_seconds_bucket{ SELECTOR }[5m])))
//
// grouped as {{.By "le"}} groups (per target too). Several families (one
// histogram under its names across versions, newest first) are read with
// `or`, one a line.
func (d SignalData) Quantile(q float64, window string, families ...string) (string, error) {
	if q < 0 || q > 1 || math.IsNaN(q) {
		return "", fmt.Errorf("quantile %v is outside [0, 1]", q)
	}
	if len(families) == 0 {
		return "", fmt.Errorf("no histogram given: write {{.Quantile %v .Window \"family\"}}", q)
	}
	rates := make([]string, len(families))
	for i, f := range families {
		if strings.HasSuffix(f, "_bucket") {
			return "", fmt.Errorf("give the histogram's family, %q, not its _bucket series", strings.TrimSuffix(f, "_bucket"))
		}
		rates[i] = fmt.Sprintf("rate(%s_bucket{ %s }[%s])", f, d.Selector, window)
	}
	inner := rates[0]
	if len(rates) > 1 {
		inner = "\n  " + strings.Join(rates, "\n  or ")
	}
	return fmt.Sprintf("histogram_quantile(%s, sum %s (%s))", strconv.FormatFloat(q, 'f', -1, 64), d.By("le"), inner), nil
}

// Render fills the signal's template for the scope (targetLabels nil) or per
// target (targetLabels the labels that identify a target, e.g. ["pod"]).
func (s *Signal) Render(selector, window string, targetLabels []string) (string, error) {
	q, err := s.render(selector, window, targetLabels)
	if err != nil || s.shape == nil {
		return q, err
	}
	return s.shape.restrict(q)
}

// RecentWindow is the length of `{{.Recent}}`: the end of the incident window
// that must still show a slowdown for it to count as ongoing.
const RecentWindow = 2 * time.Minute

// recentOf returns the persistence range for a window: RecentWindow, or the
// window itself when that is shorter or cannot be parsed.
func recentOf(window string) string {
	d, err := model.ParseDuration(window)
	if err != nil || time.Duration(d) <= RecentWindow {
		return window
	}
	return model.Duration(RecentWindow).String()
}

// render fills the template before a shape cuts it to its names.
func (s *Signal) render(selector, window string, targetLabels []string) (string, error) {
	var buf bytes.Buffer
	targets := defaultTargets(targetLabels)
	data := SignalData{Selector: selector, Window: window, Recent: recentOf(window),
		Target: strings.Join(targets, ", "), by: targetLabels, join: joinLabels(selector, targets[0]), gpuJoin: s.gpuJoin}
	if err := s.tmpl.Execute(&buf, data); err != nil {
		return "", err
	}
	return strings.TrimSpace(buf.String()), nil
}

// joinLabels are the labels other exporters' series join the engine's on:
// the first target label, and the namespace when the scope names one — in
// a fleet, pod names repeat across namespaces (a StatefulSet's vllm-0), so
// a pod alone would join another deployment's GPUs.
func joinLabels(selector, target string) string {
	if target == "pod" && selectorHas(selector, "namespace") {
		return "namespace, pod"
	}
	return target
}

// selectorHas reports whether selector has an equality matcher on label.
func selectorHas(selector, label string) bool {
	_, ok := selectorValue(selector, label)
	return ok
}

// selectorValue is the value of selector's equality matcher on label, if
// it has one with a value.
func selectorValue(selector, label string) (string, bool) {
	if !strings.Contains(selector, label) {
		return "", false
	}
	key := selectorLabel{selector, label}
	if v, ok := selectorValues.get(key); ok {
		return v.value, v.ok
	}
	var v labelValue
	if ms, err := promqlParser.ParseMetricSelector("{" + selector + "}"); err == nil {
		for _, m := range ms {
			if m.Name == label && m.Type == labels.MatchEqual && m.Value != "" {
				v = labelValue{m.Value, true}
				break
			}
		}
	}
	selectorValues.put(key, v)
	return v.value, v.ok
}

type selectorLabel struct{ selector, label string }

type labelValue struct {
	value string
	ok    bool
}

// selectorValues keeps selectorValue's answers: every signal of a triage
// renders with the scope's selector, and parsing it for each was a third
// of rendering. When full it starts over; a fleet has a few hundred scopes.
var selectorValues = selectorCache{max: 4096}

// selectorCache is a map safe for concurrent use that is cleared when it
// holds max entries.
type selectorCache struct {
	mu  sync.RWMutex
	m   map[selectorLabel]labelValue
	max int
}

func (c *selectorCache) get(k selectorLabel) (labelValue, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	v, ok := c.m[k]
	return v, ok
}

func (c *selectorCache) put(k selectorLabel, v labelValue) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= c.max {
		c.m = make(map[selectorLabel]labelValue)
	}
	c.m[k] = v
}

// DefaultTargetLabels tell targets apart when no target labels are given:
// Kubernetes service discovery adds pod, a bare scrape has only instance
// (host:port) and target (the URL path, for replicas behind one
// host:port, collectors/scrape); grouping by all three works for any.
// pod stays first: it is the label other exporters' series join on.
var DefaultTargetLabels = []string{"pod", "instance", "target"}

func defaultTargets(l []string) []string {
	if len(l) == 0 {
		return DefaultTargetLabels
	}
	return l
}

func parseSignalTemplate(name, src string) (*template.Template, error) {
	return template.New(name).Option("missingkey=error").Parse(src)
}

// EvidenceData is what evidence and step summary templates see.
// The signal maps hold float64 values; a signal without a value is absent,
// so helpers render it as "n/a" rather than as a zero.
type EvidenceData struct {
	Now, Base, Ratio, Delta map[string]any
	Engine                  string
	Scheduler               map[string]any
	GPU                     map[string]any
	Targets                 int
	// Attr is the latency attribution (attr.go); Gaps names the signals
	// the triage has no value for.
	Attr map[string]any
	Gaps []string
}

// anyMap copies a signal map for templates.
func anyMap(m map[string]float64) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// EvidenceFuncs are the helpers available in evidence templates.
var EvidenceFuncs = template.FuncMap{
	"seconds": FormatSeconds,
	"percent": FormatPercent,
	"ratio":   FormatRatio,
	"num":     FormatNumber,
	"tokens":  FormatTokens,
	"join":    strings.Join,
	"pow2up":  Pow2Up,
	"below":   below,
	"minus":   minus,
	"missing": missing,
}

// missing reports a signal the engine did not export (or a value that is not
// a number): evidence that had to do without it can say so.
func missing(v any) bool { return math.IsNaN(toFloat(v)) }

// minus is a − b; NaN, rendered "n/a", when either is missing.
func minus(a, b any) float64 { return toFloat(a) - toFloat(b) }

// below reports a < b, false when either is missing: a template's
// comparison with a gap does not hold.
func below(a, b any) bool {
	x, y := toFloat(a), toFloat(b)
	return !math.IsNaN(x) && !math.IsNaN(y) && x < y
}

// Pow2Up is the least power of two at or above a value (a token budget
// that holds it): 20000 → 32768, 8192 → 8192; NaN for a missing or
// non-positive value, which renders as "n/a".
func Pow2Up(v any) float64 {
	f := toFloat(v)
	if math.IsNaN(f) || math.IsInf(f, 0) || f <= 0 {
		return math.NaN()
	}
	return math.Pow(2, math.Ceil(math.Log2(f)))
}

func toFloat(v any) float64 {
	switch x := v.(type) {
	case float64:
		return x
	case float32:
		return float64(x)
	case int:
		return float64(x)
	case int64:
		return float64(x)
	case bool:
		if x {
			return 1
		}
		return 0
	}
	return math.NaN()
}

// FormatTokens renders a token count: 8192; a missing value is "n/a",
// never "NaN".
func FormatTokens(v any) string {
	f := toFloat(v)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "n/a"
	}
	return strconv.FormatFloat(f, 'f', 0, 64)
}

// FormatSeconds renders a duration in seconds the way every rendering
// does (internal/format.Seconds): 43.1 ms, 9.28 s, 1m17s.
func FormatSeconds(v any) string {
	f := toFloat(v)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "n/a"
	}
	return format.Seconds(f)
}

// FormatPercent renders a 0–1 fraction as a percentage: 0.934 → 93.4%.
func FormatPercent(v any) string {
	f := toFloat(v)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "n/a"
	}
	return strconv.FormatFloat(f*100, 'f', 1, 64) + "%"
}

// FormatRatio renders a ratio as a factor: 2.14 → 2.1×.
func FormatRatio(v any) string {
	f := toFloat(v)
	if math.IsNaN(f) {
		return "n/a"
	}
	if math.IsInf(f, 1) {
		return "∞×"
	}
	return strconv.FormatFloat(f, 'f', 1, 64) + "×"
}

// FormatMultiple renders a multiple the way the renderers' tables do
// (internal/format.Ratio): ×2016, ×3.89. Chains use it, so a chain's
// "TTFT ×2016" reads as the headline's.
func FormatMultiple(f float64) string { return format.Ratio(f) }

// FormatNumber renders a number compactly: 12345 → 12345, 0.01234 → 0.0123.
func FormatNumber(v any) string {
	f := toFloat(v)
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0):
		return "n/a"
	case math.Abs(f) >= 100:
		return strconv.FormatFloat(f, 'f', 0, 64)
	}
	return strconv.FormatFloat(f, 'g', 3, 64)
}

func parseEvidenceTemplate(name, src string) (*template.Template, error) {
	return template.New(name).Funcs(EvidenceFuncs).Parse(src)
}

func renderEvidence(t *template.Template, d *EvidenceData) (string, error) {
	if t == nil {
		return "", nil
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, d); err != nil {
		return "", err
	}
	return strings.Join(strings.Fields(buf.String()), " "), nil
}
