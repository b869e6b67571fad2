package rules

import (
	"bytes"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
)

// Units a signal may declare: the renderers' units (notifiers/render) and
// plain count units that they print after the number (3.12 req/s, 1200 tokens).
var units = map[string]bool{
	"": true, "seconds": true, "fraction": true, "percent": true, "ratio": true, "bytes": true,
	"bytes_per_second": true,
	"count":            true, "requests": true, "tokens": true, "req/s": true, "tokens/s": true,
	"preemptions/s": true, "MHz": true, "°C": true, "W": true,
}

// unitHints explain the unit names older rulesets used.
var unitHints = map[string]string{
	"per_second": "use a plain rate unit such as req/s, tokens/s or preemptions/s",
	"mhz":        "use MHz",
	"celsius":    "use °C",
	"watts":      "use W",
}

// unitList is the accepted units, for error messages.
func unitList() string {
	var us []string
	for u := range units {
		if u != "" {
			us = append(us, u)
		}
	}
	sort.Strings(us)
	return strings.Join(us, ", ")
}

// Sample scope values used to trial-render and parse every signal.
var (
	sampleSelectors = []string{``, `job="vllm", pod="pod-0"`}
	sampleWindow    = "5m"
	sampleTargets   = []string{"pod", "instance"}
)

// LoadFiles reads and parses the files as one ruleset (see Parse).
func LoadFiles(paths ...string) (*Ruleset, error) {
	files := make([]File, 0, len(paths))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("read ruleset: %w", err)
		}
		files = append(files, File{Name: p, Data: b})
	}
	return Parse(files...)
}

// Parse builds one ruleset from the documents, in order, and validates all of
// it: unknown keys, every PromQL template (rendered with sample scopes and
// parsed), every CEL expression (compiled, type-checked, bool), every template
// (trial-rendered). It returns either a ready ruleset or Errors holding every
// problem as `file:line:col: context: message`; never a partial ruleset.
//
// Signals and steps must be unique across documents; a cause defined again in a
// later document replaces the earlier definition (so a site file can override
// the shipped remediation text).
func Parse(files ...File) (*Ruleset, error) {
	var errs Errors
	p := &builder{rs: &Ruleset{signalIndex: map[string]*Signal{}, declared: map[string]*Signal{}, causeIndex: map[string]*Cause{}},
		errs: &errs, exprs: map[string]mapped{}}
	for _, f := range files {
		p.file(f)
	}
	if len(errs) == 0 && len(files) == 0 {
		errs.add(Pos{}, "", "no ruleset files")
	}
	p.compile()
	if len(errs) > 0 {
		return nil, errs.sorted()
	}
	return p.rs, nil
}

type builder struct {
	rs         *Ruleset
	errs       *Errors
	engineNode Pos
	steps      map[string]bool
	// order lists declared signals in declaration order; exprs holds the
	// expressions given for them, mapOrder in the order they were given.
	order    []string
	exprs    map[string]mapped
	mapOrder []string
	chainPos []chainRef
	// shapeList holds the engine file's shapes, in file order.
	shapeList []*Shape
	// shared holds the `shared:` expressions (every engine map's unless it
	// maps the signal itself), sharedOrder their names in file order.
	shared      map[string]mapped
	sharedOrder []string
	gpuJoinPos  Pos
	// rawVerdict fields keep the last definition and its position.
	verdict map[string]Expr
}

func (b *builder) file(f File) {
	b.rs.Files = append(b.rs.Files, f.Name)
	d := &decoder{file: f.Name, errs: b.errs}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(f.Data))
	if err := dec.Decode(&doc); err != nil {
		if err.Error() == "EOF" {
			b.errs.add(Pos{File: f.Name, Line: 1, Col: 1}, "", "empty ruleset file")
			return
		}
		yamlError(f.Name, err, b.errs)
		return
	}
	if len(doc.Content) == 0 {
		b.errs.add(Pos{File: f.Name, Line: 1, Col: 1}, "", "empty ruleset file")
		return
	}
	root := doc.Content[0]
	engineFile := false
	if root.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(root.Content); i += 2 {
			if root.Content[i].Value == "engine" {
				engineFile = true
			}
		}
	}
	if engineFile && b.rs.Map.Name == "" {
		b.rs.Map = f
	}
	d.fields(root, "", map[string]func(k, v *yaml.Node){
		"engine": func(k, v *yaml.Node) {
			e := d.str(v, "", "engine")
			if e == "" {
				return
			}
			if !identRe.MatchString(e) {
				d.errorf(v, "", "engine: name %q must match %s", e, identRe)
				return
			}
			if b.rs.Engine != "" && b.rs.Engine != e {
				d.errorf(v, "", "engine: %q conflicts with %q set at %s", e, b.rs.Engine, b.engineNode)
				return
			}
			b.rs.Engine, b.engineNode = e, d.pos(v)
		},
		"detect": func(k, v *yaml.Node) {
			if b.rs.Detect != nil {
				d.errorf(k, "", "detect: already set at %s", b.rs.Detect.Pos)
				return
			}
			b.rs.Detect = &Signal{Name: "detect", Expr: d.str(v, "", "detect"), Pos: d.pos(v)}
		},
		"order":              func(k, v *yaml.Node) { b.rs.Order = d.int(v, "", "order") },
		"gpu_join":           func(k, v *yaml.Node) { b.gpuJoin(d, v) },
		"shared":             func(k, v *yaml.Node) { b.sharedSection(d, v) },
		"signals":            func(k, v *yaml.Node) { b.signals(d, v, engineFile) },
		"steps":              func(k, v *yaml.Node) { b.stepList(d, v) },
		"causes":             func(k, v *yaml.Node) { b.causes(d, v) },
		"scheduler_defaults": func(k, v *yaml.Node) { b.schedulerDefaults(d, v) },
		"detector":           func(k, v *yaml.Node) { detectorSection(d, v) },
		"chart":              func(k, v *yaml.Node) { chartSection(d, v) },
		"series":             func(k, v *yaml.Node) { b.seriesSection(d, v) },
		"shapes":             func(k, v *yaml.Node) { b.shapes(d, v) },
		"verdict":            func(k, v *yaml.Node) { b.verdictBlock(d, v) },
	})
}

// gpuJoin reads a map's `gpu_join:`: the series, one per target, that
// restricts GPU counters to the scope's targets ({{.GPUJoin}}).
func (b *builder) gpuJoin(d *decoder, v *yaml.Node) {
	name := d.str(v, "", "gpu_join")
	switch {
	case name == "":
		return
	case !metricNameRe.MatchString(name):
		d.errorf(v, "", "gpu_join: %q is not a metric name (want e.g. vllm:num_requests_running)", name)
	case b.rs.GPUJoin != "" && b.rs.GPUJoin != name:
		d.errorf(v, "", "gpu_join: %q conflicts with %q set at %s", name, b.rs.GPUJoin, b.gpuJoinPos)
	default:
		b.rs.GPUJoin, b.gpuJoinPos = name, d.pos(v)
	}
}

// sharedSection reads a `shared:` mapping of signal name to a PromQL
// template that every engine map gets unless it maps the signal itself
// (rulesets/gpu.yaml: the GPU counters, joined with {{.GPUJoin}}).
func (b *builder) sharedSection(d *decoder, n *yaml.Node) {
	if n.Kind != yaml.MappingNode {
		d.errorf(n, "", "shared: expected a mapping of signal name to PromQL, got %s", kindName(n))
		return
	}
	if b.shared == nil {
		b.shared = map[string]mapped{}
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		ctx := fmt.Sprintf("shared signal %q", k.Value)
		if !identRe.MatchString(k.Value) {
			d.errorf(k, ctx, "name must match %s", identRe)
			continue
		}
		if v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
			d.errorf(v, ctx, "expected a PromQL expression, got %s", kindName(v))
			continue
		}
		if prev, ok := b.shared[k.Value]; ok {
			d.errorf(k, ctx, "duplicate shared signal (first at %s)", prev.keyPos)
			continue
		}
		b.shared[k.Value] = mapped{expr: v.Value, pos: d.pos(v), keyPos: d.pos(k), engineFile: true}
		b.sharedOrder = append(b.sharedOrder, k.Value)
	}
}

// addShared gives the map the shared expressions it does not write itself.
// One that joins on {{.GPUJoin}} needs the map's gpu_join: without it the
// signal stays the engine's gap, as if the map left it out.
func (b *builder) addShared() {
	for _, name := range b.sharedOrder {
		m := b.shared[name]
		if _, own := b.exprs[name]; own || (b.rs.GPUJoin == "" && strings.Contains(m.expr, ".GPUJoin")) {
			continue
		}
		b.exprs[name] = m
		b.mapOrder = append(b.mapOrder, name)
	}
}

// detectorSection checks the shape of a map's `detector:` section; the
// detector reads it (detect.ParseEngine) and parses the PromQL it builds.
func detectorSection(d *decoder, n *yaml.Node) {
	const ctx = "detector"
	list := func(key string) func(_, v *yaml.Node) { return func(_, v *yaml.Node) { d.strList(v, ctx, key) } }
	d.fields(n, ctx, map[string]func(k, v *yaml.Node){
		"ttft": list("ttft"), "itl": list("itl"), "queue": list("queue"),
		"success": list("success"), "success_volume": list("success_volume"), "requests": list("requests"),
		"http": func(_, v *yaml.Node) {
			for _, h := range d.seq(v, ctx, "http") {
				d.fields(h, ctx+": http", map[string]func(k, v *yaml.Node){
					"counter":       func(_, v *yaml.Node) { d.str(v, ctx, "counter") },
					"errors":        func(_, v *yaml.Node) { d.str(v, ctx, "errors") },
					"requests":      func(_, v *yaml.Node) { d.str(v, ctx, "requests") },
					"engine_series": func(_, v *yaml.Node) { d.str(v, ctx, "engine_series") },
				})
			}
		},
	})
}

// chartSection checks the shape of a map's `chart:` section (the chart's
// panels, rulesets.Panels).
func chartSection(d *decoder, n *yaml.Node) {
	const ctx = "chart"
	list := func(key string) func(_, v *yaml.Node) { return func(_, v *yaml.Node) { d.strList(v, ctx, key) } }
	d.fields(n, ctx, map[string]func(k, v *yaml.Node){
		"ttft": list("ttft"), "itl": list("itl"), "queue": list("queue"),
	})
}

// seriesSection reads a map's `series:` section.
func (b *builder) seriesSection(d *decoder, n *yaml.Node) {
	const ctx = "series"
	sr := &b.rs.Series
	d.fields(n, ctx, map[string]func(k, v *yaml.Node){
		"names":    func(_, v *yaml.Node) { sr.Names = d.str(v, ctx, "names") },
		"running":  func(_, v *yaml.Node) { sr.Running = d.strList(v, ctx, "running") },
		"targets":  func(_, v *yaml.Node) { sr.Targets = d.strList(v, ctx, "targets") },
		"waiting":  func(_, v *yaml.Node) { sr.Waiting = d.strList(v, ctx, "waiting") },
		"kv_usage": func(_, v *yaml.Node) { sr.KVUsage = d.strList(v, ctx, "kv_usage") },
	})
}

// signals reads a `signals` mapping. An entry is one of:
//   - a declaration (title, unit, ... without expr): the rulebook's canonical signal;
//   - a mapping (a string, or `{expr: ...}` in an engine file): the engine's
//     PromQL for a signal declared elsewhere;
//   - both at once (a mapping with expr and title/unit): a signal declared and
//     mapped in one place, e.g. a user's own signal next to their rules.
func (b *builder) signals(d *decoder, n *yaml.Node, engineFile bool) {
	if n.Kind != yaml.MappingNode {
		d.errorf(n, "", "signals: expected a mapping of name to signal, got %s", kindName(n))
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		name := k.Value
		ctx := fmt.Sprintf("signal %q", name)
		if !identRe.MatchString(name) {
			d.errorf(k, ctx, "name must match %s", identRe)
		}
		decl := &Signal{Name: name, DeclPos: d.pos(k)}
		var expr *yaml.Node
		declares := false
		switch {
		case v.Kind == yaml.ScalarNode && v.Tag != "!!null":
			expr = v
		case v.Kind == yaml.MappingNode:
			d.fields(v, ctx, map[string]func(k, v *yaml.Node){
				"title":       func(_, v *yaml.Node) { declares = true; decl.Title = d.str(v, ctx, "title") },
				"unit":        func(_, v *yaml.Node) { declares = true; decl.Unit = d.str(v, ctx, "unit") },
				"targets":     func(_, v *yaml.Node) { declares = true; decl.Targets = d.bool(v, ctx, "targets") },
				"optional":    func(_, v *yaml.Node) { declares = true; decl.Optional = d.bool(v, ctx, "optional") },
				"zero_is_gap": func(_, v *yaml.Node) { declares = true; decl.ZeroIsGap = d.bool(v, ctx, "zero_is_gap") },
				"noise":       func(_, v *yaml.Node) { declares = true; decl.Noise = d.bool(v, ctx, "noise") },
				"group":       func(_, v *yaml.Node) { declares = true; decl.Group = d.str(v, ctx, "group") },
				"frontend_of": func(_, v *yaml.Node) { declares = true; decl.FrontendOf = d.str(v, ctx, "frontend_of") },
				"expr":        func(_, v *yaml.Node) { expr = v },
			})
			if expr == nil && !declares {
				d.errorf(k, ctx, "missing expr (or title and unit to declare it)")
				continue
			}
		default:
			d.errorf(v, ctx, "expected a PromQL expression or a mapping, got %s", kindName(v))
			continue
		}
		if declares || expr == nil {
			if !units[decl.Unit] {
				if hint, ok := unitHints[strings.ToLower(decl.Unit)]; ok {
					d.errorf(v, ctx, "unit: unknown unit %q: %s", decl.Unit, hint)
				} else {
					d.errorf(v, ctx, "unit: unknown unit %q (known: %s)", decl.Unit, unitList())
				}
			}
			if prev := b.rs.declared[name]; prev != nil {
				d.errorf(k, ctx, "duplicate signal (first declared at %s)", prev.DeclPos)
				continue
			}
			b.rs.declared[name] = decl
			b.order = append(b.order, name)
		}
		if expr != nil {
			if prev, ok := b.exprs[name]; ok {
				d.errorf(k, ctx, "duplicate signal (first mapped at %s)", prev.pos)
				continue
			}
			src := d.str(expr, ctx, "expr")
			m := mapped{expr: src, pos: d.pos(expr), keyPos: d.pos(k)}
			m.engineFile = engineFile
			b.exprs[name] = m
			b.mapOrder = append(b.mapOrder, name)
		}
	}
}

// mapped is an expression given for a signal, with where it came from.
type mapped struct {
	expr        string
	pos, keyPos Pos
	engineFile  bool
}

// resolveSignals joins declarations and expressions: every mapped signal must
// be declared; declared signals without an expression are the engine's gaps.
func (b *builder) resolveSignals() {
	rs := b.rs
	b.addShared()
	for _, name := range b.mapOrder {
		m := b.exprs[name]
		if rs.declared[name] == nil {
			b.errs.add(m.keyPos, fmt.Sprintf("signal %q", name),
				"not a declared signal: declare it in the rulebook, or give it a title and unit here (declared: %s)", b.declaredList())
		}
	}
	for _, name := range b.order {
		s := rs.declared[name]
		if of := s.FrontendOf; of != "" && (rs.declared[of] == nil || rs.declared[of].FrontendOf != "") {
			b.errs.add(s.DeclPos, fmt.Sprintf("signal %q", name), "frontend_of: %q is not a declared engine signal", of)
		}
		m, ok := b.exprs[name]
		if !ok {
			rs.Unmapped = append(rs.Unmapped, s)
			continue
		}
		s.Expr, s.Pos, s.gpuJoin = m.expr, m.pos, rs.GPUJoin
		if m.engineFile {
			s.Engine = rs.Engine
		}
		rs.signalIndex[name] = s
		rs.Signals = append(rs.Signals, s)
	}
}

func (b *builder) declaredList() string {
	names := append([]string(nil), b.order...)
	sort.Strings(names)
	if len(names) > 12 {
		names = append(names[:12], "...")
	}
	return strings.Join(names, ", ")
}

func (b *builder) stepList(d *decoder, n *yaml.Node) {
	if b.steps == nil {
		b.steps = map[string]bool{}
	}
	for i, sn := range d.seq(n, "", "steps") {
		st := &Step{Pos: d.pos(sn)}
		ctx := fmt.Sprintf("step %d", i+1)
		var rulesNode *yaml.Node
		d.fields(sn, ctx, map[string]func(k, v *yaml.Node){
			"name":    func(_, v *yaml.Node) { st.Name = d.str(v, ctx, "name") },
			"title":   func(_, v *yaml.Node) { st.Title = d.str(v, ctx, "title") },
			"summary": func(_, v *yaml.Node) { st.Summary = d.str(v, ctx, "summary") },
			"rules":   func(_, v *yaml.Node) { rulesNode = v },
		})
		if st.Name == "" {
			d.errorf(sn, ctx, "missing name")
		} else {
			ctx = fmt.Sprintf("step %q", st.Name)
			if b.steps[st.Name] {
				d.errorf(sn, ctx, "duplicate step")
			}
			b.steps[st.Name] = true
		}
		if rulesNode != nil {
			for j, rn := range d.seq(rulesNode, ctx, "rules") {
				st.Rules = append(st.Rules, b.rule(d, rn, ctx, j+1))
			}
		}
		b.rs.Steps = append(b.rs.Steps, st)
	}
}

func (b *builder) rule(d *decoder, n *yaml.Node, stepCtx string, idx int) *Rule {
	r := &Rule{Name: fmt.Sprintf("rule %d", idx), Pos: d.pos(n)}
	ctx := fmt.Sprintf("%s, rule %d", stepCtx, idx)
	weightSet, whenSet, gradeSet, ruleOut := false, false, false, false
	var whenPos, gradePos Pos
	d.fields(n, ctx, map[string]func(k, v *yaml.Node){
		"name":  func(_, v *yaml.Node) { r.Name = d.str(v, ctx, "name") },
		"cause": func(_, v *yaml.Node) { r.Cause = d.str(v, ctx, "cause") },
		"when": func(_, v *yaml.Node) {
			whenSet = true
			r.When = d.str(v, ctx, "when")
			whenPos = d.pos(v)
		},
		"grade": func(_, v *yaml.Node) {
			gradeSet = true
			r.Grade = d.str(v, ctx, "grade")
			gradePos = d.pos(v)
		},
		"weight": func(_, v *yaml.Node) {
			weightSet = true
			r.Weight = d.float(v, ctx, "weight")
			if r.Weight <= 0 {
				d.errorf(v, ctx, "weight: must be positive")
			}
		},
		"rule_out": func(_, v *yaml.Node) { ruleOut = d.bool(v, ctx, "rule_out") },
		"signal":   func(_, v *yaml.Node) { r.Signal = d.str(v, ctx, "signal") },
		"evidence": func(_, v *yaml.Node) { r.Evidence = d.str(v, ctx, "evidence") },
		"safe_defaults": func(_, v *yaml.Node) {
			r.safePos = d.pos(v)
			if v.Kind != yaml.MappingNode {
				d.errorf(v, ctx, "safe_defaults: expected a mapping of signal to the reason its default is safe, got %s", kindName(v))
				return
			}
			r.SafeDefaults = map[string]string{}
			for i := 0; i+1 < len(v.Content); i += 2 {
				k, reason := v.Content[i], d.str(v.Content[i+1], ctx, "safe_defaults")
				if strings.TrimSpace(reason) == "" {
					d.errorf(v.Content[i+1], ctx, "safe_defaults: %s: give the reason the default is safe", k.Value)
				}
				r.SafeDefaults[k.Value] = reason
			}
		},
		"stands_on": func(_, v *yaml.Node) { r.StandsOn = d.strList(v, ctx, "stands_on") },
	})
	if n.Kind != yaml.MappingNode {
		return r
	}
	if r.Cause == "" {
		d.errorf(n, ctx, "missing cause")
	}
	switch {
	case whenSet:
		r.Pos = whenPos
	case gradeSet:
		r.Pos = gradePos
	default:
		d.errorf(n, ctx, "missing when (or grade)")
	}
	r.gradePos = gradePos
	switch {
	case ruleOut && weightSet:
		d.errorf(n, ctx, "a rule has either weight or rule_out: true, not both")
	case ruleOut:
		r.Effect = EffectRuleOut
	case !weightSet:
		d.errorf(n, ctx, "missing weight (or rule_out: true)")
	}
	if strings.TrimSpace(r.Evidence) == "" {
		d.errorf(n, ctx, "missing evidence")
	}
	return r
}

func (b *builder) causes(d *decoder, n *yaml.Node) {
	for i, cn := range d.seq(n, "", "causes") {
		c := &Cause{Pos: d.pos(cn)}
		ctx := fmt.Sprintf("cause %d", i+1)
		d.fields(cn, ctx, map[string]func(k, v *yaml.Node){
			"id":          func(_, v *yaml.Node) { c.ID = d.str(v, ctx, "id") },
			"title":       func(_, v *yaml.Node) { c.Title = d.str(v, ctx, "title") },
			"description": func(_, v *yaml.Node) { c.Description = d.str(v, ctx, "description") },
			"remediation": func(_, v *yaml.Node) { c.Fixes = b.fixes(d, v, ctx+": remediation") },
			"engine_remediation": func(_, v *yaml.Node) {
				if v.Kind != yaml.MappingNode {
					d.errorf(v, ctx, "engine_remediation: expected a mapping of engine to remediation list, got %s", kindName(v))
					return
				}
				c.EngineFixes = map[string][]Fix{}
				for j := 0; j+1 < len(v.Content); j += 2 {
					e := v.Content[j].Value
					if !identRe.MatchString(e) {
						d.errorf(v.Content[j], ctx, "engine_remediation: engine name %q must match %s", e, identRe)
						continue
					}
					c.EngineFixes[e] = b.fixes(d, v.Content[j+1], ctx+": engine_remediation "+e)
				}
			},
			"chain": func(_, v *yaml.Node) { c.Chain = b.chain(d, v, ctx) },
		})
		if cn.Kind != yaml.MappingNode {
			continue
		}
		if !identRe.MatchString(c.ID) {
			d.errorf(cn, ctx, "id: must match %s, got %q", identRe, c.ID)
			continue
		}
		ctx = fmt.Sprintf("cause %q", c.ID)
		if c.Title == "" {
			d.errorf(cn, ctx, "missing title")
		}
		if len(c.Fixes) == 0 {
			d.errorf(cn, ctx, "missing remediation")
		}
		if prev := b.rs.causeIndex[c.ID]; prev != nil {
			// A later document overrides the earlier definition, keeping its rank order.
			c.order = prev.order
			for j, old := range b.rs.Causes {
				if old == prev {
					b.rs.Causes[j] = c
				}
			}
		} else {
			c.order = len(b.rs.Causes)
			b.rs.Causes = append(b.rs.Causes, c)
		}
		b.rs.causeIndex[c.ID] = c
	}
}

// fixes reads a remediation list: each item a string, or a mapping
// {text, knob, direction} for a fix that turns a setting one way.
func (b *builder) fixes(d *decoder, n *yaml.Node, ctx string) []Fix {
	var out []Fix
	for _, it := range d.seq(n, ctx, "remediation") {
		if it.Kind == yaml.ScalarNode {
			out = append(out, Fix{Text: d.str(it, ctx, "remediation")})
			continue
		}
		var f Fix
		d.fields(it, ctx, map[string]func(k, v *yaml.Node){
			"text": func(_, v *yaml.Node) { f.Text = d.str(v, ctx, "text") },
			"computed": func(_, v *yaml.Node) {
				f.Computed = d.str(v, ctx, "computed")
				t, err := parseEvidenceTemplate("remediation", f.Computed)
				if err == nil {
					_, err = renderEvidence(t, sampleFixData)
				}
				if err != nil {
					d.errorf(v, ctx, "computed: template: %v", err)
				}
				f.computed = t
			},
			"knob": func(_, v *yaml.Node) { f.Knob = d.str(v, ctx, "knob") },
			"direction": func(_, v *yaml.Node) {
				f.Direction = d.str(v, ctx, "direction")
				if f.Direction != "up" && f.Direction != "down" {
					d.errorf(v, ctx, "direction: want up or down, got %q", f.Direction)
				}
			},
		})
		if f.Text == "" {
			d.errorf(it, ctx, "missing text")
		}
		if (f.Knob == "") != (f.Direction == "") {
			d.errorf(it, ctx, "knob and direction go together")
		}
		out = append(out, f)
	}
	return out
}

// chain reads a cause's chain: a list of {signal, label, show, min}.
func (b *builder) chain(d *decoder, n *yaml.Node, ctx string) []ChainLink {
	var out []ChainLink
	for _, it := range d.seq(n, ctx, "chain") {
		l := ChainLink{Show: "ratio"}
		d.fields(it, ctx+": chain", map[string]func(k, v *yaml.Node){
			"signal": func(_, v *yaml.Node) { l.Signal = d.str(v, ctx, "signal") },
			"label":  func(_, v *yaml.Node) { l.Label = d.str(v, ctx, "label") },
			"show": func(_, v *yaml.Node) {
				l.Show = d.str(v, ctx, "show")
				if l.Show != "ratio" && l.Show != "value" {
					d.errorf(v, ctx, "chain: show: want ratio or value, got %q", l.Show)
				}
			},
			"min":   func(_, v *yaml.Node) { l.Min = d.float(v, ctx, "min") },
			"falls": func(_, v *yaml.Node) { l.Falls = d.bool(v, ctx, "falls") },
		})
		if l.Signal == "" {
			d.errorf(it, ctx, "chain: missing signal")
		}
		b.chainPos = append(b.chainPos, chainRef{signal: l.Signal, pos: d.pos(it), ctx: ctx})
		out = append(out, l)
	}
	return out
}

type chainRef struct {
	signal, ctx string
	pos         Pos
}

func (b *builder) schedulerDefaults(d *decoder, n *yaml.Node) {
	for i, sn := range d.seq(n, "", "scheduler_defaults") {
		sd := &SchedulerDefault{Pos: d.pos(sn)}
		ctx := fmt.Sprintf("scheduler_defaults %d", i+1)
		whenSet := false
		d.fields(sn, ctx, map[string]func(k, v *yaml.Node){
			"when": func(_, v *yaml.Node) {
				whenSet = true
				sd.When = d.str(v, ctx, "when")
				sd.Pos = d.pos(v)
			},
			"chunked_prefill":        func(_, v *yaml.Node) { sd.ChunkedPrefill = d.bool(v, ctx, "chunked_prefill") },
			"max_num_batched_tokens": func(_, v *yaml.Node) { sd.MaxNumBatchedTokens = d.int(v, ctx, "max_num_batched_tokens") },
			"max_num_seqs":           func(_, v *yaml.Node) { sd.MaxNumSeqs = d.int(v, ctx, "max_num_seqs") },
			"note":                   func(_, v *yaml.Node) { sd.Note = d.str(v, ctx, "note") },
			"kv_admission": func(_, v *yaml.Node) {
				sd.KVAdmission = d.str(v, ctx, "kv_admission")
				if sd.KVAdmission != "on_demand" && sd.KVAdmission != "reserve" {
					d.errorf(v, ctx, "kv_admission: want on_demand or reserve, got %q", sd.KVAdmission)
				}
			},
		})
		if sn.Kind == yaml.MappingNode && !whenSet {
			d.errorf(sn, ctx, "missing when (use 'true' for a fallback)")
		}
		b.rs.SchedulerDefaults = append(b.rs.SchedulerDefaults, sd)
	}
}

func (b *builder) verdictBlock(d *decoder, n *yaml.Node) {
	if b.verdict == nil {
		b.verdict = map[string]Expr{}
	}
	expr := func(key string) func(k, v *yaml.Node) {
		return func(_, v *yaml.Node) {
			b.verdict[key] = Expr{Source: d.str(v, "verdict", key), Pos: d.pos(v)}
		}
	}
	v := &b.rs.Verdict
	d.fields(n, "verdict", map[string]func(k, v *yaml.Node){
		"insufficient": expr("insufficient"),
		"anomaly":      expr("anomaly"),
		"critical":     expr("critical"),
		"prefill":      expr("prefill"),
		"decode":       expr("decode"),
		"min_score":    func(_, n *yaml.Node) { v.MinScore = d.float(n, "verdict", "min_score") },
		"fallback":     func(_, n *yaml.Node) { v.Fallback = d.str(n, "verdict", "fallback") },
		"confidence": func(_, n *yaml.Node) {
			c := &v.Confidence
			d.fields(n, "verdict: confidence", map[string]func(k, v *yaml.Node){
				"log_score": func(_, v *yaml.Node) { c.LogScore = d.float(v, "verdict: confidence", "log_score") },
				"share":     func(_, v *yaml.Node) { c.Share = d.float(v, "verdict: confidence", "share") },
				"offset":    func(_, v *yaml.Node) { c.Offset = d.float(v, "verdict: confidence", "offset") },
			})
			c.Defined = true
		},
		"headline": func(_, n *yaml.Node) { v.Headline = d.strList(n, "verdict", "headline") },
		"samples_signal": func(_, n *yaml.Node) {
			v.SamplesSignal = d.str(n, "verdict", "samples_signal")
			b.verdict["samples_signal"] = Expr{Source: v.SamplesSignal, Pos: d.pos(n)}
		},
	})
}

// compile checks cross references and prepares every program and template.
func (b *builder) compile() {
	rs, errs := b.rs, b.errs
	b.resolveSignals()
	if rs.Verdict.MinScore == 0 {
		rs.Verdict.MinScore = 1
	}
	env, err := newEnv()
	if err != nil {
		errs.add(Pos{}, "", "CEL environment: %v", err)
		return
	}
	if rs.Engine == "" && len(rs.Signals) > 0 {
		errs.add(Pos{File: firstFile(rs)}, "", "signal expressions without an engine: add `engine:` (vllm, sglang or trtllm) to the signal map")
	}
	for _, s := range rs.Signals {
		b.compileSignal(s, fmt.Sprintf("signal %q", s.Name))
	}
	if rs.Detect != nil {
		b.compileSignal(rs.Detect, "detect")
	}
	for _, st := range rs.Steps {
		ctx := fmt.Sprintf("step %q", st.Name)
		if st.Summary != "" {
			t, err := parseEvidenceTemplate(st.Name, st.Summary)
			if err == nil {
				_, err = renderEvidence(t, sampleEvidence(rs))
			}
			if err != nil {
				errs.add(st.Pos, ctx, "summary: template: %v", err)
			}
			st.summary = t
		}
		for i, r := range st.Rules {
			rctx := fmt.Sprintf("%s, rule %d", ctx, i+1)
			if r.Name != fmt.Sprintf("rule %d", i+1) {
				rctx = fmt.Sprintf("%s, rule %q", ctx, r.Name)
			}
			if r.Cause != "" && rs.causeIndex[r.Cause] == nil {
				errs.add(r.Pos, rctx, "unknown cause %q", r.Cause)
			}
			if r.Signal != "" && rs.declared[r.Signal] == nil {
				errs.add(r.Pos, rctx, "signal: unknown signal %q", r.Signal)
			}
			for name := range r.SafeDefaults {
				if rs.declared[name] == nil && !attrKeys[name] {
					errs.add(r.safePos, rctx, "safe_defaults: unknown signal %q", name)
				}
			}
			for _, name := range r.StandsOn {
				if rs.declared[name] == nil && name != varScheduler {
					errs.add(r.Pos, rctx, "stands_on: unknown signal %q (a declared signal, or scheduler)", name)
				}
			}
			if len(r.StandsOn) > 0 && r.Effect != EffectRuleOut {
				errs.add(r.Pos, rctx, "stands_on: only a rule_out rule stands on signals")
			}
			if r.When != "" {
				prog, msgs := compileBool(env, r.When, rs.declared)
				for _, m := range msgs {
					errs.add(r.Pos, rctx, "%s", m)
				}
				r.prog = prog
			}
			if r.Grade != "" {
				prog, msgs := compileNumber(env, r.Grade, rs.declared)
				for _, m := range msgs {
					errs.add(r.gradePos, rctx, "grade: %s", m)
				}
				r.grade = prog
			}
			if r.Evidence != "" {
				t, err := parseEvidenceTemplate(r.Name, r.Evidence)
				if err == nil {
					_, err = renderEvidence(t, sampleEvidence(rs))
				}
				if err != nil {
					errs.add(r.Pos, rctx, "evidence: template: %v", err)
				}
				r.evidence = t
			}
		}
	}
	for i, sd := range rs.SchedulerDefaults {
		ctx := fmt.Sprintf("scheduler_defaults %d", i+1)
		if sd.When == "" {
			continue
		}
		prog, msgs := compileBool(env, sd.When, rs.declared)
		for _, m := range msgs {
			errs.add(sd.Pos, ctx, "%s", m)
		}
		sd.prog = prog
	}
	// A chain link to a signal the rulebook does not declare is left out
	// (a site rulebook need not declare every signal the shipped chains
	// quote); `rules check` lists them.
	for _, c := range b.chainPos {
		if c.signal != "" && rs.declared[c.signal] == nil {
			rs.UnknownChainLinks = append(rs.UnknownChainLinks, fmt.Sprintf("%s: %s: chain: signal %q is not declared; the link is left out", c.pos, c.ctx, c.signal))
		}
	}
	v := &rs.Verdict
	for _, f := range []struct {
		key string
		dst *Expr
	}{{"insufficient", &v.Insufficient}, {"anomaly", &v.Anomaly}, {"critical", &v.Critical}, {"prefill", &v.Prefill}, {"decode", &v.Decode}} {
		e, ok := b.verdict[f.key]
		if !ok {
			continue
		}
		exprEnv := env
		if f.key == "anomaly" {
			if exprEnv, err = withPhase(env); err != nil {
				errs.add(e.Pos, "verdict: "+f.key, "CEL environment: %v", err)
				continue
			}
		}
		prog, msgs := compileBool(exprEnv, e.Source, rs.declared)
		for _, m := range msgs {
			errs.add(e.Pos, "verdict: "+f.key, "%s", m)
		}
		e.prog = prog
		*f.dst = e
	}
	if len(rs.Steps) > 0 && !v.Anomaly.Defined() && b.verdict["anomaly"].Source == "" {
		errs.add(Pos{File: firstFile(rs)}, "verdict", "missing anomaly expression")
	}
	for _, h := range v.Headline {
		if rs.declared[h] == nil {
			errs.add(b.headlinePos(), "verdict: headline", "unknown signal %q", h)
		}
	}
	if v.SamplesSignal != "" && rs.declared[v.SamplesSignal] == nil {
		errs.add(b.verdict["samples_signal"].Pos, "verdict: samples_signal", "unknown signal %q", v.SamplesSignal)
	}
	if v.Fallback != "" && rs.causeIndex[v.Fallback] == nil {
		errs.add(b.headlinePos(), "verdict: fallback", "unknown cause %q", v.Fallback)
	}
	// Last: a shape's ruleset is a copy of the finished one.
	b.compileShapes()
}

func (b *builder) headlinePos() Pos {
	if e, ok := b.verdict["anomaly"]; ok {
		return Pos{File: e.Pos.File}
	}
	return Pos{File: firstFile(b.rs)}
}

func firstFile(rs *Ruleset) string {
	if len(rs.Files) == 0 {
		return ""
	}
	return rs.Files[len(rs.Files)-1]
}

// compileSignal parses the template and checks that it renders to valid
// PromQL for every sample scope, for the scope and (if asked) per target.
func (b *builder) compileSignal(s *Signal, ctx string) {
	if strings.TrimSpace(s.Expr) == "" {
		b.errs.add(s.Pos, ctx, "empty expr")
		return
	}
	t, err := parseSignalTemplate(s.Name, s.Expr)
	if err != nil {
		b.errs.add(s.Pos, ctx, "template: %v", err)
		return
	}
	s.tmpl = t
	p := parser.NewParser(parser.Options{})
	modes := [][]string{nil}
	if s.Targets {
		modes = append(modes, sampleTargets)
	}
	for _, sel := range sampleSelectors {
		for _, mode := range modes {
			q, err := s.Render(sel, sampleWindow, mode)
			if err != nil {
				b.errs.add(s.Pos, ctx, "template: %v", err)
				return
			}
			if _, err := p.ParseExpr(q); err != nil {
				b.errs.add(s.Pos, ctx, "PromQL: %s (rendered: %s)", oneLine(err.Error()), q)
				return
			}
		}
	}
	if s.Targets {
		scope, _ := s.Render("", sampleWindow, nil)
		per, _ := s.Render("", sampleWindow, sampleTargets)
		if scope == per {
			b.errs.add(s.Pos, ctx, "targets: true but the expression never uses {{.By ...}}, so targets cannot be told apart")
		}
	}
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// sampleFixData trial-renders a computed fix: its signals are missing
// (rendered "n/a"), which is how a fix template must cope with a gap.
var sampleFixData = &EvidenceData{Now: map[string]any{}, Base: map[string]any{}, Ratio: map[string]any{}, Delta: map[string]any{},
	Scheduler: map[string]any{}, GPU: map[string]any{}, Attr: map[string]any{}}

// sampleEvidence is the data used to trial-render templates: every signal is 1.
func sampleEvidence(rs *Ruleset) *EvidenceData {
	m := make(map[string]any, len(rs.declared))
	for name := range rs.declared {
		m[name] = 1.0
	}
	return &EvidenceData{
		Now: m, Base: m, Ratio: m, Delta: m, Engine: rs.Engine,
		Scheduler: map[string]any{"chunked_prefill": true, "max_num_batched_tokens": 2048.0, "max_num_seqs": 256.0, "kv_admission": "on_demand", "source": "default"},
		GPU:       map[string]any{"class": "H100", "memory_gib": 80.0},
		Targets:   1,
		Attr:      map[string]any{AttrTTFTDelta: 1.0, AttrITLDelta: 1.0},
		Gaps:      []string{"queue time"},
	}
}

// DeclaresEngine reports whether a ruleset document names its engine at the
// top level (a signal map), without validating the rest.
func DeclaresEngine(data []byte) bool { return DeclaresKey(data, "engine") }

// DeclaresKey reports whether a ruleset document has the top-level key,
// without validating the rest.
func DeclaresKey(data []byte, key string) bool {
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil || len(doc.Content) == 0 {
		return false
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return false
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == key {
			return true
		}
	}
	return false
}
