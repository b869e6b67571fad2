package rules

import (
	"fmt"
	"sort"
	"strings"

	"github.com/whyslow/whyslow/internal/yamlpos"
)

// Pos is a position in a ruleset file (1-based line and column; the
// daemon's config decoder writes its positions the same way).
type Pos = yamlpos.Pos

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
