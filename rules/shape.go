package rules

import (
	"fmt"
	"slices"
	"strings"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
)

// Shape is one shipped form of an engine's metrics: a release's names
// (TensorRT-LLM ≤1.1 has no prefix), a re-export that carries only some
// families (NVIDIA Dynamo), or a deployment mode. An engine's map is written
// once over its richest names; a shape says how its series differ, and
// each shape is read as its own Ruleset (Ruleset.Shapes), so that a
// signal whose series a shape lacks is a gap of that shape, never a query
// for names that could belong to another exporter.
type Shape struct {
	// Name identifies the shape (e.g. "unprefixed"); Title says what it is
	// for people ("trtllm-serve ≤1.1, unprefixed names").
	Name, Title string
	// Detect is the PromQL template whose non-empty result says the shape's
	// series exist. Shapes are tried in file order: the first that matches wins.
	Detect *Signal
	// Exports lists the engine's metric families the shape has, in the map's
	// names (`<owns>e2e_request_latency_seconds`); empty means every family
	// the map reads. It covers the names that start with Owns (the engine's
	// prefix, see rulesets/trtllm.yaml):
	// other exporters' series (GPU counters) are not the engine's to lack.
	// With Exports set, a branch of an `or` over a family the shape lacks is
	// dropped, and a signal that needs one is not mapped for the shape.
	Exports []string
	Owns    string
	// Rename maps metric name prefixes of the map to the shape's
	// (`<owns>` → ``), applied to the selectors after Exports.
	Rename map[string]string
	// Match holds label matchers added to every selector of an exported
	// family (`engine_type!=""`), for names that other software may use.
	Match string
	// Targets are labels that tell targets apart in this form beyond the
	// default target labels (Ray Serve's ReplicaId: one node's metrics
	// agent serves every replica on it under one pod and instance). They
	// are added to every grouping and matching over the target labels.
	Targets []string
	Pos     Pos

	match []*labels.Matcher
}

// Shape reports which form of the engine's metrics this ruleset reads; nil
// for an engine with one form.
func (r *Ruleset) Shape() *Shape { return r.shape }

// exported reports whether a series name belongs to one of the shape's families.
func (s *Shape) exported(name string) bool {
	if len(s.Exports) == 0 || name == "" || !strings.HasPrefix(name, s.Owns) {
		return true
	}
	for _, f := range s.Exports {
		if name == f || name == f+"_total" {
			return true
		}
		for _, suf := range []string{"_bucket", "_sum", "_count", "_created"} {
			if name == f+suf || strings.TrimSuffix(f, "_total")+suf == name {
				return true
			}
		}
	}
	return false
}

// shapes reads an engine file's `shapes` list.
func (b *builder) shapes(d *decoder, n *yaml.Node) {
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, "", "shapes: expected a list, got %s", kindName(n))
		return
	}
	seen := map[string]bool{}
	for i, item := range n.Content {
		ctx := fmt.Sprintf("shape %d", i+1)
		sh := &Shape{Pos: d.pos(item)}
		d.fields(item, ctx, map[string]func(k, v *yaml.Node){
			"name":  func(_, v *yaml.Node) { sh.Name = d.str(v, ctx, "name") },
			"title": func(_, v *yaml.Node) { sh.Title = d.str(v, ctx, "title") },
			"detect": func(_, v *yaml.Node) {
				sh.Detect = &Signal{Name: "detect", Expr: d.str(v, ctx, "detect"), Pos: d.pos(v)}
			},
			"match": func(_, v *yaml.Node) { sh.Match = d.str(v, ctx, "match") },
			"owns":  func(_, v *yaml.Node) { sh.Owns = d.str(v, ctx, "owns") },
			"targets": func(_, v *yaml.Node) {
				if v.Kind != yaml.SequenceNode {
					d.errorf(v, ctx, "targets: expected a list of label names, got %s", kindName(v))
					return
				}
				for _, e := range v.Content {
					sh.Targets = append(sh.Targets, d.str(e, ctx, "targets"))
				}
			},
			"exports": func(_, v *yaml.Node) {
				if v.Kind != yaml.SequenceNode {
					d.errorf(v, ctx, "exports: expected a list of metric families, got %s", kindName(v))
					return
				}
				for _, e := range v.Content {
					sh.Exports = append(sh.Exports, d.str(e, ctx, "exports"))
				}
			},
			"rename": func(_, v *yaml.Node) {
				if v.Kind != yaml.MappingNode {
					d.errorf(v, ctx, "rename: expected a mapping of prefix to prefix, got %s", kindName(v))
					return
				}
				sh.Rename = map[string]string{}
				for j := 0; j+1 < len(v.Content); j += 2 {
					sh.Rename[v.Content[j].Value] = v.Content[j+1].Value
				}
			},
		})
		if sh.Name != "" {
			ctx = fmt.Sprintf("shape %q", sh.Name)
		}
		switch {
		case !identRe.MatchString(sh.Name):
			d.errorf(item, ctx, "name must match %s", identRe)
		case seen[sh.Name]:
			d.errorf(item, ctx, "duplicate shape")
		case sh.Detect == nil:
			d.errorf(item, ctx, "missing detect")
		case (len(sh.Exports) > 0 || len(sh.Rename) > 0 || sh.Match != "") && sh.Owns == "":
			d.errorf(item, ctx, "exports, rename and match need owns: the prefix of the engine's own names (e.g. owns: myengine_)")
		}
		seen[sh.Name] = true
		if sh.Match != "" {
			m, err := promqlParser.ParseMetricSelector("{" + sh.Match + "}")
			if err != nil {
				d.errorf(item, ctx, "match: %s", oneLine(err.Error()))
			}
			sh.match = m
		}
		b.shapeList = append(b.shapeList, sh)
	}
}

// compileShapes builds one ruleset per shape: the engine's signals renamed
// and cut to what the shape exports.
func (b *builder) compileShapes() {
	rs := b.rs
	if len(b.shapeList) == 0 {
		return
	}
	if rs.Engine == "" {
		b.errs.add(b.shapeList[0].Pos, "shapes", "shapes without an engine: add `engine:` to the signal map")
		return
	}
	for _, sh := range b.shapeList {
		if sh.Detect == nil {
			continue // reported by shapes
		}
		b.compileSignal(sh.Detect, fmt.Sprintf("shape %q: detect", sh.Name))
		v := *rs
		v.shape, v.Shapes = sh, nil
		v.Detect = sh.Detect
		if len(sh.Exports) == 0 && len(sh.Rename) == 0 && len(sh.match) == 0 && len(sh.Targets) == 0 {
			// A shape that only names what it found reads the map as is.
			rs.Shapes = append(rs.Shapes, &v)
			continue
		}
		v.signalIndex = map[string]*Signal{}
		v.Signals, v.Unmapped = nil, append([]*Signal(nil), rs.Unmapped...)
		for _, s := range rs.Signals {
			c := *s
			c.shape = sh
			ok, err := c.mapped()
			if err != nil {
				b.errs.add(s.Pos, fmt.Sprintf("shape %q: signal %q", sh.Name, s.Name), "%v", err)
				continue
			}
			if !ok {
				v.Unmapped = append(v.Unmapped, rs.declared[s.Name])
				continue
			}
			v.Signals = append(v.Signals, &c)
			v.signalIndex[c.Name] = &c
		}
		rs.Shapes = append(rs.Shapes, &v)
	}
}

// promqlParser parses with the defaults the store's engine uses.
var promqlParser = parser.NewParser(parser.Options{})

// mapped reports whether the signal has an expression for its shape: at
// least one way through its `or` branches reads only families the shape
// exports, a constant fallback (`or vector(0)`) not counting as one.
func (s *Signal) mapped() (bool, error) {
	if s.shape == nil {
		return true, nil
	}
	if s.tmpl == nil {
		return false, nil // its template failed to compile: reported already
	}
	q, err := s.render(sampleSelectors[len(sampleSelectors)-1], sampleWindow, nil)
	if err != nil {
		return false, err
	}
	e, err := promqlParser.ParseExpr(q)
	if err != nil {
		return false, err
	}
	return s.shape.sat(e, false), nil
}

// restrict rewrites a rendered expression for the shape: drops the `or` and
// `unless` branches over families it lacks, adds its label matchers to the
// engine's selectors and renames them.
func (s *Shape) restrict(q string) (string, error) {
	e, err := promqlParser.ParseExpr(q)
	if err != nil {
		return "", err
	}
	e = s.prune(e)
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		switch x := n.(type) {
		case *parser.AggregateExpr:
			if !x.Without {
				x.Grouping = s.withTargets(x.Grouping)
			}
		case *parser.BinaryExpr:
			if x.VectorMatching != nil && x.VectorMatching.On {
				x.VectorMatching.MatchingLabels = s.withTargets(x.VectorMatching.MatchingLabels)
			}
		}
		vs, ok := n.(*parser.VectorSelector)
		if !ok || vs.Name == "" || !strings.HasPrefix(vs.Name, s.Owns) {
			return nil
		}
		vs.LabelMatchers = append(vs.LabelMatchers, s.match...)
		for from, to := range s.Rename {
			if !strings.HasPrefix(vs.Name, from) {
				continue
			}
			vs.Name = to + strings.TrimPrefix(vs.Name, from)
			for _, m := range vs.LabelMatchers {
				if m.Name == labels.MetricName {
					m.Value = vs.Name
				}
			}
			break
		}
		return nil
	})
	return e.String(), nil
}

// withTargets adds the shape's target labels to a grouping over the
// target labels. Only groupings that name `instance` are per target: the
// GPU join (`on(pod)`) is over labels other exporters' series carry too.
func (s *Shape) withTargets(ls []string) []string {
	if len(s.Targets) == 0 || !slices.Contains(ls, "instance") {
		return ls
	}
	for _, t := range s.Targets {
		if !slices.Contains(ls, t) {
			ls = append(ls, t)
		}
	}
	return ls
}

// sat reports whether an expression can return series when only the
// shape's families exist. constOK counts `vector(c)` as able to; a mapping
// decision does not (a fallback constant alone is not a measurement).
func (s *Shape) sat(e parser.Expr, constOK bool) bool {
	switch n := e.(type) {
	case *parser.VectorSelector:
		return s.exported(n.Name)
	case *parser.MatrixSelector:
		return s.sat(n.VectorSelector, constOK)
	case *parser.ParenExpr:
		return s.sat(n.Expr, constOK)
	case *parser.UnaryExpr:
		return s.sat(n.Expr, constOK)
	case *parser.SubqueryExpr:
		return s.sat(n.Expr, constOK)
	case *parser.StepInvariantExpr:
		return s.sat(n.Expr, constOK)
	case *parser.AggregateExpr:
		return s.sat(n.Expr, constOK)
	case *parser.Call:
		if n.Func.Name == "vector" {
			return constOK
		}
		for _, a := range n.Args {
			if !s.sat(a, constOK) {
				return false
			}
		}
		return true
	case *parser.BinaryExpr:
		switch n.Op {
		case parser.LOR:
			return s.sat(n.LHS, constOK) || s.sat(n.RHS, constOK)
		case parser.LUNLESS:
			return s.sat(n.LHS, constOK)
		}
		return s.sat(n.LHS, constOK) && s.sat(n.RHS, constOK)
	}
	return true
}

// prune drops the branches of `or` and `unless` that read families the
// shape lacks.
func (s *Shape) prune(e parser.Expr) parser.Expr {
	switch n := e.(type) {
	case *parser.ParenExpr:
		n.Expr = s.prune(n.Expr)
	case *parser.UnaryExpr:
		n.Expr = s.prune(n.Expr)
	case *parser.AggregateExpr:
		n.Expr = s.prune(n.Expr)
	case *parser.SubqueryExpr:
		n.Expr = s.prune(n.Expr)
	case *parser.Call:
		for i, a := range n.Args {
			n.Args[i] = s.prune(a)
		}
	case *parser.BinaryExpr:
		l, r := s.sat(n.LHS, true), s.sat(n.RHS, true)
		switch {
		case n.Op == parser.LOR && !l && r:
			return s.prune(n.RHS)
		case (n.Op == parser.LOR || n.Op == parser.LUNLESS) && !r:
			return s.prune(n.LHS)
		}
		n.LHS, n.RHS = s.prune(n.LHS), s.prune(n.RHS)
	}
	return e
}
