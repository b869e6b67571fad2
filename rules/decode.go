package rules

import (
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/whyslow/whyslow/internal/yamlpos"
)

// decoder walks yaml.v3 nodes, keeping positions and collecting every problem.
type decoder struct {
	file string
	errs *Errors
}

func (d *decoder) pos(n *yaml.Node) Pos {
	return yamlpos.At(d.file, n)
}

func (d *decoder) errorf(n *yaml.Node, ctx, format string, args ...any) {
	d.errs.add(d.pos(n), ctx, format, args...)
}

// fields visits a mapping, rejecting unknown and duplicate keys.
func (d *decoder) fields(n *yaml.Node, ctx string, handlers map[string]func(key, val *yaml.Node)) bool {
	if n.Kind != yaml.MappingNode {
		d.errorf(n, ctx, "expected a mapping, got %s", kindName(n))
		return false
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		h, ok := handlers[k.Value]
		if !ok {
			d.errorf(k, ctx, "unknown key %q (known: %s)", k.Value, knownKeys(handlers))
			continue
		}
		if seen[k.Value] {
			d.errorf(k, ctx, "duplicate key %q", k.Value)
			continue
		}
		seen[k.Value] = true
		h(k, v)
	}
	return true
}

func knownKeys(h map[string]func(key, val *yaml.Node)) string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, ", ")
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return "a scalar"
	case yaml.AliasNode:
		return "an alias"
	}
	return "a document"
}

func (d *decoder) str(n *yaml.Node, ctx, key string) string {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		d.errorf(n, ctx, "%s: expected a string, got %s", key, kindName(n))
		return ""
	}
	return n.Value
}

func (d *decoder) float(n *yaml.Node, ctx, key string) float64 {
	if n.Kind == yaml.ScalarNode && (n.Tag == "!!int" || n.Tag == "!!float") {
		f, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
		if err == nil {
			return f
		}
	}
	d.errorf(n, ctx, "%s: expected a number, got %q", key, n.Value)
	return 0
}

func (d *decoder) int(n *yaml.Node, ctx, key string) int {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!int" {
		i, err := strconv.Atoi(strings.ReplaceAll(n.Value, "_", ""))
		if err == nil {
			return i
		}
	}
	d.errorf(n, ctx, "%s: expected an integer, got %q", key, n.Value)
	return 0
}

func (d *decoder) bool(n *yaml.Node, ctx, key string) bool {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!bool" {
		var b bool
		if err := n.Decode(&b); err == nil {
			return b
		}
	}
	d.errorf(n, ctx, "%s: expected true or false, got %q", key, n.Value)
	return false
}

func (d *decoder) strList(n *yaml.Node, ctx, key string) []string {
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, ctx, "%s: expected a list of strings, got %s", key, kindName(n))
		return nil
	}
	out := make([]string, 0, len(n.Content))
	for _, c := range n.Content {
		out = append(out, d.str(c, ctx, key))
	}
	return out
}

func (d *decoder) seq(n *yaml.Node, ctx, key string) []*yaml.Node {
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, ctx, "%s: expected a list, got %s", key, kindName(n))
		return nil
	}
	return n.Content
}

// yamlError turns a yaml.v3 syntax error into positioned errors.
func yamlError(file string, err error, errs *Errors) {
	msg := err.Error()
	for _, line := range strings.Split(msg, "\n") {
		line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "yaml:"))
		if line == "" || strings.HasPrefix(line, "unmarshal errors:") {
			continue
		}
		p := Pos{File: file, Line: 1, Col: 1}
		if n, _, ok := yamlpos.ErrorLine(line); ok {
			p.Line = n
		}
		errs.add(p, "", "YAML: %s", strings.TrimSpace(line))
	}
}

var identRe = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// metricNameRe is Prometheus's metric name syntax (model.MetricNameRE in
// prometheus/common, legacy validation).
var metricNameRe = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)
