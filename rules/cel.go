package rules

import (
	"fmt"
	"math"
	"strings"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/ext"
)

// The variables every CEL expression in a ruleset may use.
const (
	varNow       = "now"       // map(string, double): signal values in the incident window
	varBase      = "base"      // map(string, double): signal values in the baseline window
	varRatio     = "ratio"     // map(string, double): now / base
	varDelta     = "delta"     // map(string, double): now - base
	varEngine    = "engine"    // string
	varScheduler = "scheduler" // map(string, dyn): chunked_prefill, max_num_batched_tokens, max_num_seqs, source
	varGPU       = "gpu"       // map(string, dyn): class, memory_gib
	varTargets   = "targets"   // int: how many targets matched the scope
	varAttr      = "attr"      // map(string, double): the latency attribution (attr.go)
	// varZ holds, for each noise signal (Signal.Noise), how far its change
	// stands outside the baseline's own variability: ln(now/base) over the
	// standard deviation of that log ratio, estimated from the spread of the
	// same statistic over sub-windows of the baseline window. A key
	// "x_recent" compares signal x_recent (the window's last minutes) with
	// base.x the same way. A signal without enough baseline requests has no
	// key: its variability is unknown.
	varZ = "z"
	// varPhase is the verdict's phase, {"prefill": bool, "decode": bool}: the
	// prefill and decode expressions' results. Only the anomaly expression
	// reads it, so that "which half moved" is written once (it is evaluated
	// after them).
	varPhase = "phase"
)

var signalMaps = map[string]bool{varNow: true, varBase: true, varRatio: true, varDelta: true, varZ: true}

// newEnv builds the CEL environment shared by every expression of a ruleset.
func newEnv() (*cel.Env, error) {
	return newEnvWith(gradeFunctions())
}

// newEnvWith builds the environment with the given grade functions (the
// default check swaps in smooth ones to search for where a rule fires).
func newEnvWith(grades cel.EnvOption) (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable(varNow, cel.MapType(cel.StringType, cel.DoubleType)),
		cel.Variable(varBase, cel.MapType(cel.StringType, cel.DoubleType)),
		cel.Variable(varRatio, cel.MapType(cel.StringType, cel.DoubleType)),
		cel.Variable(varDelta, cel.MapType(cel.StringType, cel.DoubleType)),
		cel.Variable(varEngine, cel.StringType),
		cel.Variable(varScheduler, cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable(varGPU, cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable(varTargets, cel.IntType),
		cel.Variable(varAttr, cel.MapType(cel.StringType, cel.DoubleType)),
		cel.Variable(varZ, cel.MapType(cel.StringType, cel.DoubleType)),
		grades,
		cel.CrossTypeNumericComparisons(true),
		cel.OptionalTypes(),
		ext.Strings(),
		ext.Math(),
		ext.Bindings(),
	)
}

// withPhase extends env with the phase variable, for the anomaly expression.
func withPhase(env *cel.Env) (*cel.Env, error) {
	return env.Extend(cel.Variable(varPhase, cel.MapType(cel.StringType, cel.BoolType)))
}

// compileBool compiles and type-checks src, requiring a bool result and that
// every signal it names through now/base/ratio/delta exists. It returns the
// problems as messages (without position).
func compileBool(env *cel.Env, src string, signals map[string]*Signal) (cel.Program, []string) {
	return compileTyped(env, src, signals, "bool", cel.BoolType)
}

// compileNumber compiles a grade: a number (double, int, or bool read as 0
// or 1) with the same reference checks as compileBool.
func compileNumber(env *cel.Env, src string, signals map[string]*Signal) (cel.Program, []string) {
	return compileTyped(env, src, signals, "a number", cel.DoubleType, cel.IntType, cel.BoolType)
}

// compileTyped compiles src and checks its result is one of the types (or
// dyn, checked at run time).
func compileTyped(env *cel.Env, src string, signals map[string]*Signal, want string, types ...*cel.Type) (cel.Program, []string) {
	if strings.TrimSpace(src) == "" {
		return nil, []string{"CEL: empty expression"}
	}
	checked, iss := env.Compile(src)
	if iss != nil && iss.Err() != nil {
		var msgs []string
		for _, e := range iss.Errors() {
			msgs = append(msgs, fmt.Sprintf("CEL: %s (at %d:%d of the expression)", e.Message, e.Location.Line(), e.Location.Column()+1))
		}
		return nil, msgs
	}
	out := checked.OutputType()
	ok := out.IsExactType(cel.DynType)
	for _, t := range types {
		ok = ok || out.IsExactType(t)
	}
	if !ok {
		return nil, []string{fmt.Sprintf("CEL: result must be %s, got %s", want, out)}
	}
	return program(env, checked, signals)
}

func program(env *cel.Env, checked *cel.Ast, signals map[string]*Signal) (cel.Program, []string) {
	var msgs []string
	if signals != nil {
		for _, name := range referencedKeys(checked, signalMaps) {
			if signals[name] == nil {
				msgs = append(msgs, fmt.Sprintf("CEL: unknown signal %q", name))
			}
		}
	}
	for _, name := range referencedKeys(checked, map[string]bool{varAttr: true}) {
		if !attrKeys[name] {
			msgs = append(msgs, fmt.Sprintf("CEL: unknown attribution key %q (known: %s)", name, AttrKeyList()))
		}
	}
	if len(msgs) > 0 {
		return nil, msgs
	}
	prg, err := env.Program(checked, cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		return nil, []string{fmt.Sprintf("CEL: %v", err)}
	}
	return prg, nil
}

// gradeFunctions are the CEL helpers that turn a signal's movement into a
// grade in [0, 1] without a cliff:
//
//	ramp(x, lo, hi)     0 at lo, 1 at hi, linear between (lo > hi ramps down)
//	logramp(x, lo, hi)  the same on a log scale, for ratios (x, lo, hi > 0)
//
// Arguments may be ints or doubles.
func gradeFunctions() cel.EnvOption { return gradeFunctionsWith(Ramp, LogRamp) }

func gradeFunctionsWith(rampF, logRampF func(x, lo, hi float64) float64) cel.EnvOption {
	num := func(v ref.Val) (float64, bool) {
		switch x := v.(type) {
		case types.Double:
			return float64(x), true
		case types.Int:
			return float64(x), true
		case types.Uint:
			return float64(x), true
		}
		return 0, false
	}
	bind := func(f func(x, lo, hi float64) float64) cel.OverloadOpt {
		return cel.FunctionBinding(func(args ...ref.Val) ref.Val {
			x, ok1 := num(args[0])
			lo, ok2 := num(args[1])
			hi, ok3 := num(args[2])
			if !ok1 || !ok2 || !ok3 {
				return types.NewErr("ramp: arguments must be numbers")
			}
			return types.Double(f(x, lo, hi))
		})
	}
	dyn3 := []*cel.Type{cel.DynType, cel.DynType, cel.DynType}
	return cel.Lib(gradeLib{opts: []cel.EnvOption{
		cel.Function("ramp", cel.Overload("ramp_dyn_dyn_dyn", dyn3, cel.DoubleType, bind(rampF))),
		cel.Function("logramp", cel.Overload("logramp_dyn_dyn_dyn", dyn3, cel.DoubleType, bind(logRampF))),
	}})
}

type gradeLib struct{ opts []cel.EnvOption }

func (l gradeLib) CompileOptions() []cel.EnvOption   { return l.opts }
func (gradeLib) ProgramOptions() []cel.ProgramOption { return nil }

// Ramp is 0 at lo, 1 at hi and linear between; lo > hi ramps down. NaN
// reads as 0: a missing movement is no evidence.
func Ramp(x, lo, hi float64) float64 {
	if math.IsNaN(x) || lo == hi {
		if !math.IsNaN(x) && x >= hi {
			return 1
		}
		return 0
	}
	g := (x - lo) / (hi - lo)
	return math.Max(0, math.Min(1, g))
}

// LogRamp is Ramp on a log scale, for ratios: LogRamp(2, 1, 4) = 0.5.
// Non-positive arguments read as 0.
func LogRamp(x, lo, hi float64) float64 {
	if !(x > 0) || !(lo > 0) || !(hi > 0) {
		return 0
	}
	if math.IsInf(x, 1) {
		if hi > lo {
			return 1
		}
		return 0
	}
	return Ramp(math.Log(x), math.Log(lo), math.Log(hi))
}

// referencedKeys lists the constant keys looked up in the named map
// variables: `now.x`, `has(now.x)`, `now["x"]`, `"x" in now` and `now.?x`.
func referencedKeys(a *cel.Ast, maps map[string]bool) []string {
	var names []string
	isMap := func(e ast.Expr) bool {
		return e.Kind() == ast.IdentKind && maps[e.AsIdent()]
	}
	constString := func(e ast.Expr) (string, bool) {
		if e.Kind() != ast.LiteralKind {
			return "", false
		}
		s, ok := e.AsLiteral().Value().(string)
		return s, ok
	}
	ast.PreOrderVisit(a.NativeRep().Expr(), ast.NewExprVisitor(func(e ast.Expr) {
		switch e.Kind() {
		case ast.SelectKind:
			if s := e.AsSelect(); isMap(s.Operand()) {
				names = append(names, s.FieldName())
			}
		case ast.CallKind:
			c := e.AsCall()
			args := c.Args()
			if len(args) != 2 {
				return
			}
			switch c.FunctionName() {
			case operators.Index, operators.OptIndex, operators.OptSelect:
				if s, ok := constString(args[1]); ok && isMap(args[0]) {
					names = append(names, s)
				}
			case operators.In:
				if s, ok := constString(args[0]); ok && isMap(args[1]) {
					names = append(names, s)
				}
			}
		}
	}))
	return names
}
