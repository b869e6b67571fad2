package rules

import (
	"bytes"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/prometheus/prometheus/promql/parser"
	"gopkg.in/yaml.v3"
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

// Engines a ruleset may be written for.
var engines = map[string]bool{"vllm": true, "sglang": true, "trtllm": true}

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
	p := &builder{rs: &Ruleset{signalIndex: map[string]*Signal{}, causeIndex: map[string]*Cause{}}, errs: &errs}
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
	d.fields(root, "", map[string]func(k, v *yaml.Node){
		"engine": func(k, v *yaml.Node) {
			e := d.str(v, "", "engine")
			if e == "" {
				return
			}
			if !engines[e] {
				d.errorf(v, "", "engine: unknown engine %q (want vllm, sglang or trtllm)", e)
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
		"signals":            func(k, v *yaml.Node) { b.signals(d, v) },
		"steps":              func(k, v *yaml.Node) { b.stepList(d, v) },
		"causes":             func(k, v *yaml.Node) { b.causes(d, v) },
		"scheduler_defaults": func(k, v *yaml.Node) { b.schedulerDefaults(d, v) },
		"verdict":            func(k, v *yaml.Node) { b.verdictBlock(d, v) },
	})
}

func (b *builder) signals(d *decoder, n *yaml.Node) {
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
		if prev := b.rs.signalIndex[name]; prev != nil {
			d.errorf(k, ctx, "duplicate signal (first defined at %s)", prev.Pos)
			continue
		}
		s := &Signal{Name: name, Pos: d.pos(k)}
		exprSeen := false
		d.fields(v, ctx, map[string]func(k, v *yaml.Node){
			"title":    func(_, v *yaml.Node) { s.Title = d.str(v, ctx, "title") },
			"unit":     func(_, v *yaml.Node) { s.Unit = d.str(v, ctx, "unit") },
			"targets":  func(_, v *yaml.Node) { s.Targets = d.bool(v, ctx, "targets") },
			"optional": func(_, v *yaml.Node) { s.Optional = d.bool(v, ctx, "optional") },
			"expr": func(_, v *yaml.Node) {
				exprSeen = true
				s.Expr = d.str(v, ctx, "expr")
				s.Pos = d.pos(v)
			},
		})
		if !exprSeen && v.Kind == yaml.MappingNode {
			d.errorf(k, ctx, "missing expr")
		}
		if !units[s.Unit] {
			if hint, ok := unitHints[strings.ToLower(s.Unit)]; ok {
				d.errorf(v, ctx, "unit: unknown unit %q: %s", s.Unit, hint)
			} else {
				d.errorf(v, ctx, "unit: unknown unit %q (known: %s)", s.Unit, unitList())
			}
		}
		b.rs.signalIndex[name] = s
		b.rs.Signals = append(b.rs.Signals, s)
	}
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
	weightSet, whenSet, ruleOut := false, false, false
	var whenPos Pos
	d.fields(n, ctx, map[string]func(k, v *yaml.Node){
		"name":  func(_, v *yaml.Node) { r.Name = d.str(v, ctx, "name") },
		"cause": func(_, v *yaml.Node) { r.Cause = d.str(v, ctx, "cause") },
		"when": func(_, v *yaml.Node) {
			whenSet = true
			r.When = d.str(v, ctx, "when")
			whenPos = d.pos(v)
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
	})
	if n.Kind != yaml.MappingNode {
		return r
	}
	if r.Cause == "" {
		d.errorf(n, ctx, "missing cause")
	}
	if !whenSet {
		d.errorf(n, ctx, "missing when")
	} else {
		r.Pos = whenPos
	}
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
			"remediation": func(_, v *yaml.Node) { c.Remediation = d.strList(v, ctx, "remediation") },
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
		if len(c.Remediation) == 0 {
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
		"headline":     func(_, n *yaml.Node) { v.Headline = d.strList(n, "verdict", "headline") },
		"samples_signal": func(_, n *yaml.Node) {
			v.SamplesSignal = d.str(n, "verdict", "samples_signal")
			b.verdict["samples_signal"] = Expr{Source: v.SamplesSignal, Pos: d.pos(n)}
		},
	})
}

// compile checks cross references and prepares every program and template.
func (b *builder) compile() {
	rs, errs := b.rs, b.errs
	if rs.Verdict.MinScore == 0 {
		rs.Verdict.MinScore = 1
	}
	env, err := newEnv()
	if err != nil {
		errs.add(Pos{}, "", "CEL environment: %v", err)
		return
	}
	if rs.Engine == "" && (len(rs.Signals) > 0 || len(rs.Steps) > 0) {
		errs.add(Pos{File: firstFile(rs)}, "", "missing engine (vllm, sglang or trtllm)")
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
			if r.Signal != "" && rs.signalIndex[r.Signal] == nil {
				errs.add(r.Pos, rctx, "signal: unknown signal %q", r.Signal)
			}
			if r.When != "" {
				prog, msgs := compileBool(env, r.When, rs.signalIndex)
				for _, m := range msgs {
					errs.add(r.Pos, rctx, "%s", m)
				}
				r.prog = prog
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
		prog, msgs := compileBool(env, sd.When, rs.signalIndex)
		for _, m := range msgs {
			errs.add(sd.Pos, ctx, "%s", m)
		}
		sd.prog = prog
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
		prog, msgs := compileBool(env, e.Source, rs.signalIndex)
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
		if rs.signalIndex[h] == nil {
			errs.add(b.headlinePos(), "verdict: headline", "unknown signal %q", h)
		}
	}
	if v.SamplesSignal != "" && rs.signalIndex[v.SamplesSignal] == nil {
		errs.add(b.verdict["samples_signal"].Pos, "verdict: samples_signal", "unknown signal %q", v.SamplesSignal)
	}
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

// sampleEvidence is the data used to trial-render templates: every signal is 1.
func sampleEvidence(rs *Ruleset) *EvidenceData {
	m := make(map[string]float64, len(rs.Signals))
	for _, s := range rs.Signals {
		m[s.Name] = 1
	}
	return &EvidenceData{
		Now: m, Base: m, Ratio: m, Delta: m, Engine: rs.Engine,
		Scheduler: map[string]any{"chunked_prefill": true, "max_num_batched_tokens": 2048.0, "max_num_seqs": 256.0, "source": "default"},
		GPU:       map[string]any{"class": "H100", "memory_gib": 80.0},
		Targets:   1,
	}
}
