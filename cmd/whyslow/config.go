package main

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/whyslow/whyslow/internal/daemon"
)

// configError is one problem in a config file, at file:line:col.
type configError struct {
	file      string
	line, col int
	msg       string
}

func (e configError) Error() string {
	switch {
	case e.line == 0:
		return fmt.Sprintf("%s: %s", e.file, e.msg)
	case e.col == 0:
		return fmt.Sprintf("%s:%d: %s", e.file, e.line, e.msg)
	}
	return fmt.Sprintf("%s:%d:%d: %s", e.file, e.line, e.col, e.msg)
}

// loadConfigFile reads and parses a daemon config file (see parseConfig).
func loadConfigFile(path string) (daemon.Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return daemon.Config{}, fmt.Errorf("read config: %w", err)
	}
	return parseConfig(path, b, os.LookupEnv)
}

// parseConfig decodes a daemon config strictly: ${ENV} (or ${ENV:-default})
// in values is expanded first, unknown keys and type errors are reported at
// file:line:col, and the result is validated. All problems are returned
// together (errors.Join of configError values), sorted by position.
func parseConfig(file string, data []byte, lookup func(string) (string, bool)) (daemon.Config, error) {
	var cfg daemon.Config
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return cfg, yamlSyntaxError(file, err)
	}
	if root.Kind == 0 || len(root.Content) == 0 {
		return cfg, configError{file: file, msg: "empty config"}
	}
	doc := root.Content[0]
	var errs []configError
	expandEnv(file, doc, lookup, &errs)
	pos := map[string][2]int{}
	// The key checker follows aliases; bound the nodes it visits so that
	// nested aliases (a "billion laughs") cannot make it run for minutes.
	limit := maxConfigVisits(&root)
	budget := &walkBudget{left: limit, limit: limit}
	checkKeys(file, doc, reflect.TypeOf(cfg), "", pos, &errs, budget)
	if budget.exceeded {
		return cfg, configError{file: file, msg: fmt.Sprintf("too much alias expansion (more than %d nodes visited): "+
			"expand the aliases or use fewer levels of them", budget.limit)}
	}
	if len(errs) == 0 {
		if err := doc.Decode(&cfg); err != nil {
			errs = append(errs, yamlTypeErrors(file, err)...)
		}
	}
	if len(errs) == 0 {
		if err := cfg.Validate(); err != nil {
			for _, e := range splitJoined(err) {
				line, col := lookupPos(pos, e.Error())
				errs = append(errs, configError{file: file, line: line, col: col, msg: e.Error()})
			}
		}
	}
	if len(errs) > 0 {
		sort.SliceStable(errs, func(i, j int) bool {
			if errs[i].line != errs[j].line {
				return errs[i].line < errs[j].line
			}
			return errs[i].col < errs[j].col
		})
		out := make([]error, len(errs))
		for i, e := range errs {
			out[i] = e
		}
		return daemon.Config{}, errors.Join(out...)
	}
	return cfg, nil
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}`)

// expandEnv replaces ${VAR} and ${VAR:-default} in every scalar value.
func expandEnv(file string, n *yaml.Node, lookup func(string) (string, bool), errs *[]configError) {
	if n.Kind == yaml.ScalarNode && strings.Contains(n.Value, "${") {
		n.Value = envRef.ReplaceAllStringFunc(n.Value, func(ref string) string {
			m := envRef.FindStringSubmatch(ref)
			if v, ok := lookup(m[1]); ok && v != "" {
				return v
			}
			if m[2] != "" {
				return m[3]
			}
			*errs = append(*errs, configError{file: file, line: n.Line, col: n.Column,
				msg: fmt.Sprintf("environment variable %s is not set (use ${%s:-default} for an optional value)", m[1], m[1])})
			return ""
		})
		return
	}
	for _, c := range n.Content {
		expandEnv(file, c, lookup, errs)
	}
}

var durationType = reflect.TypeOf(time.Duration(0))

// walkBudget bounds the nodes checkKeys visits, aliases expanded.
type walkBudget struct {
	left, limit int
	exceeded    bool
}

// maxConfigVisits allows a document's own nodes ten times over, and at least
// 100 000: plenty for aliases used to share a block, far below what nested
// aliases can expand to.
func maxConfigVisits(root *yaml.Node) int {
	n := 0
	var count func(*yaml.Node)
	count = func(x *yaml.Node) {
		n++
		for _, c := range x.Content {
			count(c)
		}
	}
	count(root)
	return max(100_000, 10*n)
}

// checkKeys reports mapping keys that do not exist in t, and records the
// position of every known key path ("detect.triggers[0].ratio").
func checkKeys(file string, n *yaml.Node, t reflect.Type, path string, pos map[string][2]int, errs *[]configError, b *walkBudget) {
	if b.left--; b.left < 0 {
		b.exceeded = true
		return
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	switch t.Kind() {
	case reflect.Struct:
		if t == reflect.TypeOf(time.Time{}) {
			return
		}
		if n.Kind != yaml.MappingNode {
			if n.Tag != "!!null" {
				*errs = append(*errs, configError{file: file, line: n.Line, col: n.Column, msg: fmt.Sprintf("%s: want a mapping", orRoot(path))})
			}
			return
		}
		fields := map[string]reflect.Type{}
		names := []string{}
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "" || name == "-" || !f.IsExported() {
				continue
			}
			fields[name] = f.Type
			names = append(names, name)
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			ft, ok := fields[k.Value]
			if !ok {
				*errs = append(*errs, configError{file: file, line: k.Line, col: k.Column,
					msg: fmt.Sprintf("unknown key %q in %s (known: %s)", k.Value, orRoot(path), strings.Join(names, ", "))})
				continue
			}
			p := joinPath(path, k.Value)
			pos[p] = [2]int{k.Line, k.Column}
			checkKeys(file, v, ft, p, pos, errs, b)
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return // the decoder reports the type error
		}
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			pos[p] = [2]int{c.Line, c.Column}
			checkKeys(file, c, t.Elem(), p, pos, errs, b)
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := joinPath(path, n.Content[i].Value)
			pos[p] = [2]int{n.Content[i].Line, n.Content[i].Column}
			checkKeys(file, n.Content[i+1], t.Elem(), p, pos, errs, b)
		}
	}
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func orRoot(path string) string {
	if path == "" {
		return "the top level"
	}
	return path
}

// lookupPos finds the position of the longest known key path that prefixes
// a validation message ("detect: trigger 1 …" → the detect key).
func lookupPos(pos map[string][2]int, msg string) (int, int) {
	key, _, _ := strings.Cut(msg, ": ")
	for key != "" {
		if p, ok := pos[key]; ok {
			return p[0], p[1]
		}
		i := strings.LastIndexAny(key, ".[")
		if i < 0 {
			break
		}
		key = key[:i]
	}
	return 0, 0
}

var yamlLine = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)

func yamlSyntaxError(file string, err error) error {
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		line, _ := strconv.Atoi(m[1])
		return configError{file: file, line: line, msg: m[2]}
	}
	return configError{file: file, msg: strings.TrimPrefix(err.Error(), "yaml: ")}
}

// yamlValue is the value a YAML type error quotes ("cannot unmarshal !!str
// `xoxb-12...` into int"): its first characters may be a secret's.
var yamlValue = regexp.MustCompile("`[^`]*`")

func yamlTypeErrors(file string, err error) []configError {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return []configError{{file: file, msg: yamlValue.ReplaceAllString(err.Error(), "a value")}}
	}
	out := make([]configError, 0, len(te.Errors))
	for _, e := range te.Errors {
		e = yamlValue.ReplaceAllString(e, "a value")
		if m := yamlLine.FindStringSubmatch(e); m != nil {
			line, _ := strconv.Atoi(m[1])
			out = append(out, configError{file: file, line: line, msg: m[2]})
			continue
		}
		out = append(out, configError{file: file, msg: e})
	}
	return out
}

// splitJoined undoes errors.Join (one level, recursively for nested joins).
func splitJoined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, splitJoined(e)...)
		}
		return out
	}
	// A validation error wrapping a joined list: keep its prefix on each.
	if inner := errors.Unwrap(err); inner != nil {
		if j, ok := inner.(interface{ Unwrap() []error }); ok {
			prefix := strings.TrimSuffix(err.Error(), inner.Error())
			var out []error
			for _, e := range j.Unwrap() {
				for _, s := range splitJoined(e) {
					out = append(out, fmt.Errorf("%s%w", prefix, s))
				}
			}
			return out
		}
	}
	return []error{err}
}
