// Package yamlpos is the position half of whyslow's positioned YAML
// decoding, shared by the daemon's config (cmd/whyslow) and the rulesets
// (rules): where in a file a problem is, how that place is written, and the
// line a yaml.v3 error names.
package yamlpos

import (
	"fmt"
	"regexp"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// Pos is a place in a file; Line and Col are 1-based, 0 when unknown.
type Pos struct {
	File string
	Line int
	Col  int
}

// At is the position of n in file.
func At(file string, n *yaml.Node) Pos {
	return Pos{File: file, Line: n.Line, Col: n.Column}
}

// String formats the position as file:line:col, leaving out what is
// unknown (a YAML syntax error has a line only).
func (p Pos) String() string {
	switch {
	case p.Line == 0:
		return p.File
	case p.Col == 0:
		return fmt.Sprintf("%s:%d", p.File, p.Line)
	}
	return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Col)
}

var errLine = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)

// ErrorLine splits one line of a yaml.v3 error ("yaml: line 3: did not find
// expected key") into the line it names and the rest; ok is false when it
// names none.
func ErrorLine(msg string) (line int, rest string, ok bool) {
	m := errLine.FindStringSubmatch(msg)
	if m == nil {
		return 0, "", false
	}
	line, _ = strconv.Atoi(m[1])
	return line, m[2], true
}
