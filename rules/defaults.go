package rules

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
)

// CheckDefaults finds the optional look-ups (`now.?x.orValue(d)`,
// `ratio.?x.orValue(d)`, `attr.?k.orValue(d)`) whose default stands in for
// evidence: with x missing the rule matches, or grades higher, than with x
// present at some value, in some situation of the other signals. A missing
// series is a data gap (DESIGN.md); a default that can tip a rule must be
// written out (the rule needs the signal) or declared under the rule's
// `safe_defaults` with the reason it cannot mislead.
//
// It also checks that every rule_out names what it stands on (`stands_on`,
// else `signal`) and does not match without it.
//
// How: for each rule and each look-up, a search over the other signals the
// rule reads (absent, or a now/baseline pair from a grid of values and
// ratios; attribution shares from a grid) finds where the rule fires with
// the signal missing (the search grades with smooth ramps, so a product of
// ramps that are all 0 still shows which way to move); there the rule is
// evaluated with the signal missing (not exported; no baseline) and present
// across its range. A missing signal that grades above the lowest present
// value is reported. The search is per scheduler setting when the rule reads
// the scheduler.
func (rs *Ruleset) CheckDefaults() Errors {
	var errs Errors
	env, err := newEnv()
	if err != nil {
		errs.add(Pos{}, "", "CEL environment: %v", err)
		return errs
	}
	soft, err := newEnvWith(gradeFunctionsWith(softRamp, softLogRamp))
	if err != nil {
		errs.add(Pos{}, "", "CEL environment: %v", err)
		return errs
	}
	for _, st := range rs.Steps {
		for _, r := range st.Rules {
			ctx := fmt.Sprintf("step %q, rule %q", st.Name, r.Name)
			c, ok := newDefaultCheck(rs, r, env, soft)
			if !ok {
				continue
			}
			c.check(&errs, ctx)
		}
	}
	return errs.sorted()
}

// lookup is one `m.?key.orValue(def)` in a rule.
type lookup struct {
	m, key, def string
}

func (l lookup) String() string { return fmt.Sprintf("%s.?%s.orValue(%s)", l.m, l.key, l.def) }

type defaultCheck struct {
	rs                 *Ruleset
	r                  *Rule
	when, grade        cel.Program
	softWhen, softGrad cel.Program
	signals, attrs     []string
	lookups            []lookup
	scheds             []Scheduler
}

func newDefaultCheck(rs *Ruleset, r *Rule, env, soft *cel.Env) (*defaultCheck, bool) {
	c := &defaultCheck{rs: rs, r: r, scheds: []Scheduler{{Source: "unknown", KVAdmission: "on_demand"}}}
	sigs, attrs := map[string]bool{}, map[string]bool{}
	for i, src := range []string{r.When, r.Grade} {
		if src == "" {
			continue
		}
		checked, iss := env.Compile(src)
		if iss != nil && iss.Err() != nil {
			return nil, false // Parse reported it
		}
		for _, k := range referencedKeys(checked, signalMaps) {
			sigs[k] = true
		}
		for _, k := range referencedKeys(checked, map[string]bool{varAttr: true}) {
			attrs[k] = true
		}
		c.lookups = append(c.lookups, optionalLookups(checked)...)
		real, _ := env.Program(checked)
		sc, iss := soft.Compile(src)
		if iss != nil && iss.Err() != nil {
			return nil, false
		}
		sp, err := soft.Program(sc)
		if err != nil || real == nil {
			return nil, false
		}
		if i == 0 {
			c.when, c.softWhen = real, sp
		} else {
			c.grade, c.softGrad = real, sp
		}
	}
	for _, n := range r.StandsOn {
		if n != varScheduler {
			sigs[n] = true
		}
	}
	if r.Signal != "" && r.Effect == EffectRuleOut {
		sigs[r.Signal] = true
	}
	c.signals, c.attrs = sortedKeys(sigs), sortedKeys(attrs)
	if strings.Contains(r.When+r.Grade, varScheduler) {
		c.scheds = append(c.scheds,
			Scheduler{Known: true, ChunkedPrefill: true, MaxNumBatchedTokens: 8192, MaxNumSeqs: 256, KVAdmission: "on_demand", Source: "default"},
			Scheduler{Known: true, ChunkedPrefill: false, MaxNumBatchedTokens: 8192, MaxNumSeqs: 256, KVAdmission: "on_demand", Source: "default"},
			Scheduler{Known: true, ChunkedPrefill: false, MaxNumBatchedTokens: 8192, MaxNumSeqs: 2048, KVAdmission: "reserve", Source: "default"})
	}
	return c, true
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// optionalLookups lists the `m.?key.orValue(d)` and `m[?"key"].orValue(d)`
// look-ups of the expression, in order, once each.
func optionalLookups(a *cel.Ast) []lookup {
	var out []lookup
	seen := map[lookup]bool{}
	maps := map[string]bool{varNow: true, varBase: true, varRatio: true, varDelta: true, varAttr: true}
	ast.PreOrderVisit(a.NativeRep().Expr(), ast.NewExprVisitor(func(e ast.Expr) {
		if e.Kind() != ast.CallKind {
			return
		}
		c := e.AsCall()
		if c.FunctionName() != "orValue" || !c.IsMemberFunction() || len(c.Args()) != 1 {
			return
		}
		t := c.Target()
		if t.Kind() != ast.CallKind {
			return
		}
		tc := t.AsCall()
		if fn := tc.FunctionName(); (fn != operators.OptSelect && fn != operators.OptIndex) || len(tc.Args()) != 2 {
			return
		}
		m, k := tc.Args()[0], tc.Args()[1]
		if m.Kind() != ast.IdentKind || !maps[m.AsIdent()] || k.Kind() != ast.LiteralKind {
			return
		}
		key, ok := k.AsLiteral().Value().(string)
		if !ok {
			return
		}
		def := "…"
		if d := c.Args()[0]; d.Kind() == ast.LiteralKind {
			def = fmt.Sprint(d.AsLiteral().Value())
		}
		l := lookup{m: m.AsIdent(), key: key, def: def}
		if !seen[l] {
			seen[l] = true
			out = append(out, l)
		}
	}))
	return out
}

// sigState is one signal in a sample situation.
type sigState struct {
	present bool
	// nowOnly: a value in the incident window, none in the baseline.
	nowOnly   bool
	now, base float64
}

type situation struct {
	sig   map[string]sigState
	attr  map[string]float64 // absent key: no attribution value
	sched Scheduler
}

func (s situation) clone() situation {
	c := situation{sig: make(map[string]sigState, len(s.sig)), attr: make(map[string]float64, len(s.attr)), sched: s.sched}
	for k, v := range s.sig {
		c.sig[k] = v
	}
	for k, v := range s.attr {
		c.attr[k] = v
	}
	return c
}

func (c *defaultCheck) vars(s situation) map[string]any {
	now, base := map[string]float64{}, map[string]float64{}
	for k, v := range s.sig {
		if !v.present {
			continue
		}
		now[k] = v.now
		if !v.nowOnly {
			base[k] = v.base
		}
	}
	ratio, delta := Derive(now, base)
	return map[string]any{
		varNow: now, varBase: base, varRatio: ratio, varDelta: delta, varEngine: c.rs.Engine,
		varScheduler: schedulerMap(s.sched), varGPU: gpuMap(GPU{}), varTargets: int64(2), varAttr: s.attr,
	}
}

// eval is how strongly the rule fires: its grade when its gate holds, else 0.
func (c *defaultCheck) eval(s situation, softly bool) float64 {
	vars := c.vars(s)
	when, grade := c.when, c.grade
	if softly {
		when, grade = c.softWhen, c.softGrad
	}
	if when != nil {
		if ok, err := evalBool(when, vars); err != nil || !ok {
			return 0
		}
	}
	if grade == nil {
		return 1
	}
	g, err := evalGrade(grade, vars)
	if err != nil {
		return 0
	}
	return g
}

// Sample values: levels (with an unchanged baseline) and movements (a ratio
// over a baseline).
var (
	sampleLevels = []float64{0, 0.005, 0.03, 0.2, 0.5, 0.75, 0.9, 0.97, 1, 1.5, 3, 8, 60, 300, 2000, 20000}
	sampleMoves  = []float64{0, 0.3, 0.6, 0.8, 0.9, 1.05, 1.15, 1.3, 1.6, 2.5, 5}
	sampleBases  = []float64{0.04, 0.5, 20, 4000}
	sampleAttr   = []float64{-0.2, 0, 0.05, 0.2, 0.4, 0.6, 0.8, 1, 3}
)

// presentStates are the values a present signal takes: every level with an
// unchanged baseline, and every movement over each baseline.
func presentStates() []sigState {
	var out []sigState
	for _, v := range sampleLevels {
		out = append(out, sigState{present: true, now: v, base: v})
	}
	for _, b := range sampleBases {
		for _, m := range sampleMoves {
			out = append(out, sigState{present: true, now: b * m, base: b})
		}
	}
	return out
}

// searchStates are the candidates of the search: absent, present without a
// baseline, and a coarser grid of present values; the moves start from
// token-sized baselines too, since rules that compare prompts with a step
// budget fire only there.
func searchStates() []sigState {
	out := []sigState{{}, {present: true, nowOnly: true, now: 1}}
	for _, v := range []float64{0, 0.03, 0.5, 0.9, 0.97, 1, 3, 60, 2000, 20000} {
		out = append(out, sigState{present: true, now: v, base: v})
	}
	for _, b := range []float64{0.5, 20, 4000} {
		for _, m := range []float64{0.3, 0.7, 0.9, 1.1, 1.3, 1.6, 2.5, 5} {
			out = append(out, sigState{present: true, now: b * m, base: b})
		}
	}
	return out
}

// climb raises the rule's smooth strength one signal (or attribution key) at
// a time, leaving `fixed` as it is.
func (c *defaultCheck) climb(s situation, fixed string, passes int) situation {
	cands := searchStates()
	best := c.eval(s, true)
	for p := 0; p < passes; p++ {
		moved := false
		for _, name := range c.signals {
			if name == fixed {
				continue
			}
			cur := s.sig[name]
			for _, st := range cands {
				s.sig[name] = st
				if v := c.eval(s, true); v > best+1e-12 {
					best, cur, moved = v, st, true
				}
			}
			s.sig[name] = cur
		}
		for _, name := range c.attrs {
			if name == fixed {
				continue
			}
			cur, had := s.attr[name]
			try := func(set func()) {
				set()
				if v := c.eval(s, true); v > best+1e-12 {
					best, moved = v, true
					cur, had = s.attr[name]
				}
			}
			try(func() { delete(s.attr, name) })
			for _, a := range sampleAttr {
				try(func() { s.attr[name] = a })
			}
			if had {
				s.attr[name] = cur
			} else {
				delete(s.attr, name)
			}
		}
		if !moved {
			break
		}
	}
	return s
}

func (c *defaultCheck) start(sched Scheduler) situation {
	s := situation{sig: map[string]sigState{}, attr: map[string]float64{}, sched: sched}
	for _, n := range c.signals {
		s.sig[n] = sigState{present: true, now: 1, base: 1}
	}
	for _, n := range c.attrs {
		s.attr[n] = 0.5
	}
	return s
}

func (c *defaultCheck) check(errs *Errors, ctx string) {
	r := c.r
	pos := r.Pos
	if r.gradePos.Line > 0 {
		pos = r.gradePos
	}
	reported := map[string]bool{}
	for _, sched := range c.scheds {
		base := c.climb(c.start(sched), "", 3)
		for _, l := range c.lookups {
			if reported[l.key] || r.SafeDefaults[l.key] != "" {
				continue
			}
			if msg := c.unsafe(base, l); msg != "" {
				reported[l.key] = true
				errs.add(pos, ctx, "%s: the default stands in for a missing %s: %s; make the rule need %s, or declare under safe_defaults why the default is safe",
					l, l.key, msg, l.key)
			}
		}
	}
	if r.Effect != EffectRuleOut {
		return
	}
	on := r.StandsOn
	if len(on) == 0 && r.Signal != "" {
		on = []string{r.Signal}
	}
	if len(on) == 0 {
		errs.add(r.Pos, ctx, "a rule_out must name the signals it stands on (stands_on: [...], or signal:)")
		return
	}
	for _, n := range on {
		if n == varScheduler {
			s := c.climb(c.start(Scheduler{Source: "unknown", KVAdmission: "on_demand"}), "", 3)
			if g := c.eval(s, false); g > 0 {
				errs.add(r.Pos, ctx, "rule_out stands on the scheduler settings but rules out (grade %.2g) while they are unknown", g)
			}
			continue
		}
		for _, sched := range c.scheds {
			s := c.start(sched)
			s.sig[n] = sigState{}
			s = c.climb(s, n, 3)
			if g := c.eval(s, false); g > 0 {
				errs.add(r.Pos, ctx, "rule_out stands on %s but rules out (grade %.2g) without it: require it in `when`", n, g)
				break
			}
		}
	}
}

// unsafe looks for a situation where the look-up's signal missing grades
// the rule above the lowest present value; it describes it, or returns "".
func (c *defaultCheck) unsafe(from situation, l lookup) string {
	isAttr := l.m == varAttr
	var missings []situation
	s := from.clone()
	if isAttr {
		delete(s.attr, l.key)
	} else {
		s.sig[l.key] = sigState{}
	}
	s = c.climb(s, l.key, 2)
	missings = append(missings, s)
	if !isAttr && l.m != varNow {
		nb := s.clone()
		nb.sig[l.key] = sigState{present: true, nowOnly: true, now: 1}
		for _, v := range []float64{0.03, 1, 60, 20000} {
			x := nb.clone()
			x.sig[l.key] = sigState{present: true, nowOnly: true, now: v}
			missings = append(missings, x)
		}
	}
	for _, m := range missings {
		gm := c.eval(m, false)
		if gm <= 0 {
			continue
		}
		low, lowAt := math.Inf(1), ""
		p := m.clone()
		if isAttr {
			for _, a := range sampleAttr {
				p.attr[l.key] = a
				if g := c.eval(p, false); g < low {
					low, lowAt = g, fmt.Sprintf("%s = %g", l.key, a)
				}
			}
		} else if st := m.sig[l.key]; st.nowOnly {
			// The same incident value, with a baseline across its range.
			for _, b := range append(append([]float64{st.now}, sampleLevels...), scaled(st.now, sampleMoves)...) {
				p.sig[l.key] = sigState{present: true, now: st.now, base: b}
				if g := c.eval(p, false); g < low {
					low, lowAt = g, fmt.Sprintf("now %.3g, baseline %.3g", st.now, b)
				}
			}
		} else {
			for _, st := range presentStates() {
				p.sig[l.key] = st
				if g := c.eval(p, false); g < low {
					low, lowAt = g, fmt.Sprintf("now %.3g, baseline %.3g", st.now, st.base)
				}
			}
		}
		if gm > low+1e-6 {
			how := "missing"
			if st := m.sig[l.key]; st.nowOnly {
				how = "without a baseline"
			}
			verb := "grades"
			if c.r.Effect == EffectRuleOut {
				verb = "rules out at"
			}
			return fmt.Sprintf("with %s %s the rule %s %.2g, present (%s) it %s %.2g", l.key, how, verb, gm, lowAt, verb, low)
		}
	}
	return ""
}

func scaled(x float64, ms []float64) []float64 {
	out := make([]float64, len(ms))
	for i, m := range ms {
		out[i] = x * m
	}
	return out
}

// softRamp is Ramp made strictly increasing everywhere (never exactly 0 or
// flat), so the search sees which way a factor moves.
func softRamp(x, lo, hi float64) float64 {
	if math.IsNaN(x) {
		return 0.001
	}
	if lo == hi {
		if x >= hi {
			return 1
		}
		return 0.02
	}
	g := (x - lo) / (hi - lo)
	return 0.02 + 0.96*math.Max(0, math.Min(1, g)) + 0.02*(math.Atan(g)/math.Pi+0.5)
}

func softLogRamp(x, lo, hi float64) float64 {
	if !(x > 0) || !(lo > 0) || !(hi > 0) {
		return 0.001
	}
	if math.IsInf(x, 1) {
		if hi > lo {
			return 1
		}
		return 0.02
	}
	return softRamp(math.Log(x), math.Log(lo), math.Log(hi))
}
