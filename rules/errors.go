package rules

import (
	"fmt"
	"sort"
	"strings"
)

// Pos is a position in a ruleset file.
type Pos struct {
	File string
	Line int // 1-based
	Col  int // 1-based
}

// String formats the position as file:line:col.
func (p Pos) String() string {
	if p.Line == 0 {
		return p.File
	}
	return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Col)
}

// Error is one validation problem, anchored at a place in a file.
type Error struct {
	Pos Pos
	// Context names the element, e.g. `step "kv_cache", rule 2`.
	Context string
	Msg     string
}

// Error formats the problem as `file:line:col: context: message`.
func (e *Error) Error() string {
	if e.Context == "" {
		return fmt.Sprintf("%s: %s", e.Pos, e.Msg)
	}
	return fmt.Sprintf("%s: %s: %s", e.Pos, e.Context, e.Msg)
}

// Errors is every problem found in a ruleset; parsing returns all of them at once.
type Errors []*Error

// Error joins the problems, one per line.
func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

func (es *Errors) add(pos Pos, ctx, format string, args ...any) {
	*es = append(*es, &Error{Pos: pos, Context: ctx, Msg: fmt.Sprintf(format, args...)})
}

// sorted orders the problems by file and position so output is stable.
func (es Errors) sorted() Errors {
	sort.SliceStable(es, func(i, j int) bool {
		a, b := es[i].Pos, es[j].Pos
		if a.File != b.File {
			return a.File < b.File
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Col < b.Col
	})
	return es
}
