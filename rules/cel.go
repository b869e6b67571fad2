package rules

import (
	"fmt"
	"strings"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
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
)

var signalMaps = map[string]bool{varNow: true, varBase: true, varRatio: true, varDelta: true}

// newEnv builds the CEL environment shared by every expression of a ruleset.
func newEnv() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable(varNow, cel.MapType(cel.StringType, cel.DoubleType)),
		cel.Variable(varBase, cel.MapType(cel.StringType, cel.DoubleType)),
		cel.Variable(varRatio, cel.MapType(cel.StringType, cel.DoubleType)),
		cel.Variable(varDelta, cel.MapType(cel.StringType, cel.DoubleType)),
		cel.Variable(varEngine, cel.StringType),
		cel.Variable(varScheduler, cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable(varGPU, cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable(varTargets, cel.IntType),
		cel.CrossTypeNumericComparisons(true),
		cel.OptionalTypes(),
		ext.Strings(),
		ext.Math(),
		ext.Bindings(),
	)
}

// compileBool compiles and type-checks src, requiring a bool result and that
// every signal it names through now/base/ratio/delta exists. It returns the
// problems as messages (without position).
func compileBool(env *cel.Env, src string, signals map[string]*Signal) (cel.Program, []string) {
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
	if out := checked.OutputType(); !out.IsExactType(cel.BoolType) && !out.IsExactType(cel.DynType) {
		return nil, []string{fmt.Sprintf("CEL: result must be bool, got %s", checked.OutputType())}
	}
	var msgs []string
	if signals != nil {
		for _, name := range referencedSignals(checked) {
			if signals[name] == nil {
				msgs = append(msgs, fmt.Sprintf("CEL: unknown signal %q", name))
			}
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

// referencedSignals lists the constant keys looked up in now/base/ratio/delta:
// `now.x`, `has(now.x)`, `now["x"]`, `"x" in now` and `now.?x`.
func referencedSignals(a *cel.Ast) []string {
	var names []string
	isMap := func(e ast.Expr) bool {
		return e.Kind() == ast.IdentKind && signalMaps[e.AsIdent()]
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
