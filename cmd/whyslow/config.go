package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/whyslow/whyslow/daemon"
	"github.com/whyslow/whyslow/internal/yamlpos"
)

// configError is one problem in a config file, at file:line:col.
type configError struct {
	pos yamlpos.Pos
	msg string
}

func (e configError) Error() string { return e.pos.String() + ": " + e.msg }

// loadConfigFile reads and parses a daemon config file (see parseConfig) for
// serve: its warnings (receivers skipped for an unset ${ENV}) are logged.
func loadConfigFile(path string) (daemon.Config, error) {
	cfg, warnings, err := loadConfig(path)
	for _, w := range warnings {
		slog.Warn("Config warning", "warning", w.Error())
	}
	return cfg, err
}

// loadConfig reads and parses a daemon config file and returns its
// warnings apart (see parseConfigWarnings).
func loadConfig(path string) (daemon.Config, []configError, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return daemon.Config{}, nil, fmt.Errorf("read config: %w", err)
	}
	return parseConfigWarnings(path, b, os.LookupEnv)
}

// parseConfig is parseConfigWarnings without the warnings.
func parseConfig(file string, data []byte, lookup func(string) (string, bool)) (daemon.Config, error) {
	cfg, _, err := parseConfigWarnings(file, data, lookup)
	return cfg, err
}

// parseConfigWarnings decodes a daemon config strictly: ${ENV} (or
// ${ENV:-default}) in values is expanded first, unknown keys and type errors
// are reported at file:line:col, and the result is validated. All problems
// are returned together (errors.Join of configError values), sorted by
// position. An empty file is the defaults.
//
// A receiver that uses an unset ${ENV} (without a default) is not an error:
// it is left out, with a warning, so that a config shipped with optional
// receivers (the example's webhook) runs until its variables are set. Its
// keys and types are still checked.
func parseConfigWarnings(file string, data []byte, lookup func(string) (string, bool)) (daemon.Config, []configError, error) {
	var cfg daemon.Config
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return cfg, nil, yamlSyntaxError(file, err)
	}
	if root.Kind == 0 || len(root.Content) == 0 {
		return cfg, nil, nil // empty, or only comments: the defaults
	}
	doc := root.Content[0]
	var errs, warnings []configError
	recv := receiversNode(doc)
	skipped := map[int]bool{}
	unsetAt := map[[2]int]bool{}
	if recv != nil {
		for i, item := range recv.Content {
			unset := unsetEnv(item, lookup, map[*yaml.Node]bool{})
			if len(unset) == 0 {
				continue
			}
			skipped[i] = true
			var vars []string
			for _, u := range unset {
				unsetAt[[2]int{u.line, u.col}] = true
				if !slices.Contains(vars, u.name) {
					vars = append(vars, u.name)
				}
			}
			name := fmt.Sprintf("receivers[%d]", i)
			if n := receiverName(item); n != "" {
				name += fmt.Sprintf(" %q", n)
			}
			noun, them := "variable "+vars[0]+" is", "it"
			if len(vars) > 1 {
				noun, them = "variables "+strings.Join(vars, ", ")+" are", "them"
			}
			warnings = append(warnings, configError{pos: yamlpos.Pos{File: file, Line: unset[0].line, Col: unset[0].col},
				msg: fmt.Sprintf("warning: %s skipped: environment %s not set (set %s to enable the receiver)", name, noun, them)})
		}
	}
	var envErrs []configError
	expandEnv(file, doc, lookup, &envErrs)
	for _, e := range envErrs {
		if !unsetAt[[2]int{e.pos.Line, e.pos.Col}] {
			errs = append(errs, e)
		}
	}
	pos := map[string][2]int{}
	// The key checker follows aliases; bound the nodes it visits so that
	// nested aliases (a "billion laughs") cannot make it run for minutes.
	limit := maxConfigVisits(&root)
	budget := &walkBudget{left: limit, limit: limit}
	checkKeys(file, doc, reflect.TypeOf(cfg), "", pos, &errs, budget)
	if budget.exceeded {
		return cfg, nil, configError{pos: yamlpos.Pos{File: file}, msg: fmt.Sprintf("too much alias expansion (more than %d nodes visited): "+
			"expand the aliases or use fewer levels of them", budget.limit)}
	}
	// Receivers kept, by their index in the file.
	var kept []int
	if recv != nil && len(skipped) > 0 && len(errs) == 0 {
		all := recv.Content
		recv.Content = nil
		for i, item := range all {
			if !skipped[i] {
				recv.Content = append(recv.Content, item)
				kept = append(kept, i)
			}
		}
	}
	if len(errs) == 0 {
		if err := doc.Decode(&cfg); err != nil {
			errs = append(errs, yamlTypeErrors(file, err)...)
		}
		besideConfig(file, cfg.Rulesets)
	}
	if len(errs) == 0 {
		var verrs []error
		if err := cfg.Validate(); err != nil {
			verrs = splitJoined(err)
		}
		verrs = append(verrs, validateListenAddrs(cfg)...)
		for _, e := range verrs {
			msg := fileReceiverIndex(e.Error(), kept)
			line, col := lookupPos(pos, msg)
			errs = append(errs, configError{pos: yamlpos.Pos{File: file, Line: line, Col: col}, msg: msg})
		}
	}
	if len(errs) > 0 {
		sortByPosition(errs)
		out := make([]error, len(errs))
		for i, e := range errs {
			out[i] = e
		}
		return daemon.Config{}, warnings, errors.Join(out...)
	}
	return cfg, warnings, nil
}

// besideConfig makes relative rulesets paths relative to the config
// file's directory, as Prometheus reads its rule_files: the config and
// its maps move together.
func besideConfig(file string, paths []string) {
	for i, p := range paths {
		if p != "" && !filepath.IsAbs(p) {
			paths[i] = filepath.Join(filepath.Dir(file), p)
		}
	}
}

func sortByPosition(errs []configError) {
	sort.SliceStable(errs, func(i, j int) bool {
		if errs[i].pos.Line != errs[j].pos.Line {
			return errs[i].pos.Line < errs[j].pos.Line
		}
		return errs[i].pos.Col < errs[j].pos.Col
	})
}

// receiversNode returns the sequence under the top-level receivers key, or nil.
func receiversNode(doc *yaml.Node) *yaml.Node {
	if doc.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(doc.Content); i += 2 {
		if doc.Content[i].Value != "receivers" {
			continue
		}
		v := doc.Content[i+1]
		if v.Kind == yaml.AliasNode && v.Alias != nil {
			v = v.Alias
		}
		if v.Kind == yaml.SequenceNode {
			return v
		}
	}
	return nil
}

// receiverName is a receiver item's name value, "" when it has none.
func receiverName(item *yaml.Node) string {
	if item.Kind == yaml.AliasNode && item.Alias != nil {
		item = item.Alias
	}
	if item.Kind != yaml.MappingNode {
		return ""
	}
	for i := 0; i+1 < len(item.Content); i += 2 {
		if item.Content[i].Value == "name" && item.Content[i+1].Kind == yaml.ScalarNode {
			return item.Content[i+1].Value
		}
	}
	return ""
}

// unsetRef is a ${VAR} without a default whose variable is unset (or empty).
type unsetRef struct {
	name      string
	line, col int
}

// unsetEnv lists the unset ${VAR} references under n (aliases followed,
// each node once), without expanding anything.
func unsetEnv(n *yaml.Node, lookup func(string) (string, bool), seen map[*yaml.Node]bool) []unsetRef {
	if n == nil || seen[n] {
		return nil
	}
	seen[n] = true
	if n.Kind == yaml.AliasNode {
		return unsetEnv(n.Alias, lookup, seen)
	}
	var out []unsetRef
	if n.Kind == yaml.ScalarNode {
		for _, m := range envRef.FindAllStringSubmatch(n.Value, -1) {
			if v, ok := lookup(m[1]); (!ok || v == "") && m[2] == "" {
				out = append(out, unsetRef{name: m[1], line: n.Line, col: n.Column})
			}
		}
		return out
	}
	for _, c := range n.Content {
		out = append(out, unsetEnv(c, lookup, seen)...)
	}
	return out
}

var receiverIndex = regexp.MustCompile(`^receivers\[(\d+)\]`)

// fileReceiverIndex rewrites a validation message about receivers[N] of the
// config (skipped receivers left out) to the receiver's index in the file.
func fileReceiverIndex(msg string, kept []int) string {
	if kept == nil {
		return msg
	}
	m := receiverIndex.FindStringSubmatch(msg)
	if m == nil {
		return msg
	}
	i, err := strconv.Atoi(m[1])
	if err != nil || i >= len(kept) {
		return msg
	}
	return fmt.Sprintf("receivers[%d]", kept[i]) + msg[len(m[0]):]
}

// validateListenAddrs checks the addresses the daemon listens on: host:port
// with a numeric port (the host may be empty: every interface).
func validateListenAddrs(cfg daemon.Config) []error {
	addrs := []struct{ key, addr string }{{"listen", cfg.Listen}}
	if cfg.OTLP.HTTP != nil {
		addrs = append(addrs, struct{ key, addr string }{"otlp.http", *cfg.OTLP.HTTP})
	}
	if cfg.OTLP.GRPC != nil {
		addrs = append(addrs, struct{ key, addr string }{"otlp.grpc", *cfg.OTLP.GRPC})
	}
	var errs []error
	for _, a := range addrs {
		if a.addr == "" {
			continue // the default, or (otlp) disabled
		}
		if err := checkListenAddr(a.addr); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", a.key, err))
		}
	}
	return errs
}

// checkListenAddr accepts host:port, [ipv6]:port and :port with a port
// from 0 to 65535.
func checkListenAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port (e.g. \":9109\" or \"127.0.0.1:9109\")", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q of %q is not a number from 0 to 65535", port, addr)
	}
	return nil
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
			*errs = append(*errs, configError{pos: yamlpos.At(file, n),
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
				*errs = append(*errs, configError{pos: yamlpos.At(file, n), msg: fmt.Sprintf("%s: want a mapping", orRoot(path))})
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
				*errs = append(*errs, configError{pos: yamlpos.At(file, k),
					msg: fmt.Sprintf("unknown key %q in %s (known: %s)", k.Value, orRoot(path), strings.Join(names, ", "))})
				continue
			}
			p := joinPath(path, k.Value)
			pos[p] = [2]int{k.Line, k.Column}
			checkKeys(file, v, ft, p, pos, errs, b)
		}
	case reflect.Bool, reflect.String, reflect.Float32, reflect.Float64,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if msg := scalarTypeError(n, t); msg != "" {
			*errs = append(*errs, configError{pos: yamlpos.At(file, n), msg: orRoot(path) + ": " + msg})
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			if n.Tag != "!!null" {
				*errs = append(*errs, configError{pos: yamlpos.At(file, n), msg: fmt.Sprintf("%s: want a list, not %s", orRoot(path), nodeKind(n))})
			}
			return
		}
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			pos[p] = [2]int{c.Line, c.Column}
			checkKeys(file, c, t.Elem(), p, pos, errs, b)
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			if n.Tag != "!!null" {
				*errs = append(*errs, configError{pos: yamlpos.At(file, n), msg: fmt.Sprintf("%s: want a mapping, not %s", orRoot(path), nodeKind(n))})
			}
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := joinPath(path, n.Content[i].Value)
			pos[p] = [2]int{n.Content[i].Line, n.Content[i].Column}
			checkKeys(file, n.Content[i+1], t.Elem(), p, pos, errs, b)
		}
	}
}

// scalarTypeError decodes n into a value of type t, as the decoder will,
// and says what is wrong when it does not fit: every type error of a file
// is found this way, each at its line and column (yaml.v3 gives lines
// only, and a receiver's own decoder stops at its first). The value itself
// is never quoted: it may be a secret.
func scalarTypeError(n *yaml.Node, t reflect.Type) string {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return ""
	}
	if n.Kind == yaml.ScalarNode && n.Decode(reflect.New(t).Interface()) == nil {
		return ""
	}
	want := "a string"
	switch {
	case t == durationType:
		want = "a duration such as 30s or 5m"
	case t.Kind() == reflect.Bool:
		want = "true or false"
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		want = "a number"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		want = "an integer"
	case t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uint64:
		want = "a non-negative integer"
	}
	got := nodeKind(n)
	if got == want {
		return want + " out of range"
	}
	return fmt.Sprintf("want %s, not %s", want, got)
}

// nodeKind names what a node holds, for type errors.
func nodeKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	switch n.ShortTag() {
	case "!!str":
		return "a string"
	case "!!int":
		return "an integer"
	case "!!float":
		return "a number"
	case "!!bool":
		return "true or false"
	case "!!timestamp":
		return "a timestamp"
	}
	return "a value of type " + n.ShortTag()
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

func yamlSyntaxError(file string, err error) error {
	if line, rest, ok := yamlpos.ErrorLine(err.Error()); ok {
		return configError{pos: yamlpos.Pos{File: file, Line: line}, msg: rest}
	}
	return configError{pos: yamlpos.Pos{File: file}, msg: strings.TrimPrefix(err.Error(), "yaml: ")}
}

// yamlValue is the value a YAML type error quotes ("cannot unmarshal !!str
// `xoxb-12...` into int"): its first characters may be a secret's.
var yamlValue = regexp.MustCompile("`[^`]*`")

func yamlTypeErrors(file string, err error) []configError {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return []configError{{pos: yamlpos.Pos{File: file}, msg: yamlValue.ReplaceAllString(err.Error(), "a value")}}
	}
	out := make([]configError, 0, len(te.Errors))
	for _, e := range te.Errors {
		e = yamlValue.ReplaceAllString(e, "a value")
		if line, rest, ok := yamlpos.ErrorLine(e); ok {
			out = append(out, configError{pos: yamlpos.Pos{File: file, Line: line}, msg: rest})
			continue
		}
		out = append(out, configError{pos: yamlpos.Pos{File: file}, msg: e})
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
