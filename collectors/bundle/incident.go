package bundle

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
)

// Incident is the parsed incident.yaml of a bundle. Zero fields were not
// set; the caller applies its defaults.
type Incident struct {
	// At is the end of the incident window.
	At time.Time
	// Window is the incident window's length (e.g. 5m).
	Window time.Duration
	// Baseline is the offset back from At to the baseline window (e.g. 1h).
	Baseline time.Duration
	// Engine is the serving engine: the name of an engine map (a shipped
	// one, or a user's given with --ruleset); whoever loads the maps checks
	// that one names it.
	Engine string
	// Selector is PromQL label matchers without braces, e.g. `pod=~"a.*"`.
	Selector string
	// GPU is the GPU model, e.g. "H100".
	GPU string
	// Scheduler holds the engine's scheduler settings.
	Scheduler Scheduler
	// Notes is free text.
	Notes string
}

// Scheduler holds the scheduler settings a bundle records. Zero ints and a
// nil ChunkedPrefill were not set.
type Scheduler struct {
	// ChunkedPrefill says whether chunked prefill is on.
	ChunkedPrefill *bool
	// MaxNumBatchedTokens is the per-step token budget.
	MaxNumBatchedTokens int
	// MaxNumSeqs is the maximum number of running sequences.
	MaxNumSeqs int
}

// engineNameRE is the syntax of an engine map's name (rules: `engine:`).
var engineNameRE = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// ParseIncident parses incident.yaml content. name prefixes errors, which
// read "name:line:col: message"; unknown keys, bad durations, times, engines
// and selectors are all reported at once.
func ParseIncident(name string, data []byte) (*Incident, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, yamlError(name, err)
	}
	inc := &Incident{}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return inc, nil // empty file
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return inc, nil
	}
	d := &decoder{name: name}
	d.mapping(root, func(key string, v *yaml.Node) bool {
		switch key {
		case "at":
			if s, ok := d.str(key, v); ok {
				t, err := time.Parse(time.RFC3339Nano, s)
				if err != nil {
					d.errorf(v, "at: invalid RFC 3339 time %q (want e.g. 2024-05-01T12:00:00Z)", s)
				} else {
					inc.At = t
				}
			}
		case "window":
			inc.Window = d.duration(key, v)
		case "baseline":
			inc.Baseline = d.duration(key, v)
		case "engine":
			if s, ok := d.str(key, v); ok {
				if !engineNameRE.MatchString(s) {
					d.errorf(v, "engine: %q is not an engine map's name (lower case, digits, _: vllm, sglang, ...)", s)
				} else {
					inc.Engine = s
				}
			}
		case "selector":
			if s, ok := d.str(key, v); ok {
				if strings.TrimSpace(s) != "" {
					if _, err := parser.NewParser(parser.Options{}).ParseMetricSelector("{" + s + "}"); err != nil {
						d.errorf(v, "selector: invalid label matchers %q: %v", s, err)
					}
				}
				inc.Selector = s
			}
		case "gpu":
			inc.GPU, _ = d.str(key, v)
		case "notes":
			inc.Notes, _ = d.str(key, v)
		case "scheduler":
			d.mapping(v, func(key string, v *yaml.Node) bool {
				switch key {
				case "chunked_prefill":
					var b bool
					if v.Kind != yaml.ScalarNode || v.Tag != "!!bool" || v.Decode(&b) != nil {
						d.errorf(v, "scheduler.chunked_prefill: expected true or false, got %s", describe(v))
					} else {
						inc.Scheduler.ChunkedPrefill = &b
					}
				case "max_num_batched_tokens":
					inc.Scheduler.MaxNumBatchedTokens = d.positiveInt("scheduler."+key, v)
				case "max_num_seqs":
					inc.Scheduler.MaxNumSeqs = d.positiveInt("scheduler."+key, v)
				default:
					return false
				}
				return true
			}, "scheduler", "chunked_prefill, max_num_batched_tokens, max_num_seqs")
		default:
			return false
		}
		return true
	}, "", "at, window, baseline, engine, selector, gpu, scheduler, notes")
	if len(d.errs) > 0 {
		return nil, errors.Join(d.errs...)
	}
	return inc, nil
}

// decoder walks a yaml.Node tree and collects positioned errors.
type decoder struct {
	name string
	errs []error
}

func (d *decoder) errorf(n *yaml.Node, format string, args ...any) {
	d.errs = append(d.errs, &PosError{File: d.name, Line: n.Line, Col: n.Column, Msg: fmt.Sprintf(format, args...)})
}

// mapping calls fn for each key of a mapping node; fn returns false for an
// unknown key. Duplicate keys and unknown keys are errors.
func (d *decoder) mapping(n *yaml.Node, fn func(key string, v *yaml.Node) bool, path, known string) {
	where := "top level"
	if path != "" {
		where = path
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(n, "%s: expected a mapping, got %s", where, describe(n))
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		full := k.Value
		if path != "" {
			full = path + "." + k.Value
		}
		if k.Kind != yaml.ScalarNode {
			d.errorf(k, "%s: keys must be strings", where)
			continue
		}
		if seen[k.Value] {
			d.errorf(k, "%s: key %q already set", where, full)
			continue
		}
		seen[k.Value] = true
		if !fn(k.Value, v) {
			d.errorf(k, "unknown key %q (known keys: %s)", full, known)
		}
	}
}

func (d *decoder) str(key string, v *yaml.Node) (string, bool) {
	if v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
		d.errorf(v, "%s: expected a string, got %s", key, describe(v))
		return "", false
	}
	return v.Value, true
}

func (d *decoder) duration(key string, v *yaml.Node) time.Duration {
	s, ok := d.str(key, v)
	if !ok {
		return 0
	}
	dur, err := ParseDuration(s)
	if err != nil {
		d.errorf(v, "%s: invalid duration %q (want e.g. 5m, 1h30m)", key, s)
		return 0
	}
	if dur <= 0 {
		d.errorf(v, "%s: duration must be positive, got %q", key, s)
		return 0
	}
	return dur
}

func (d *decoder) positiveInt(key string, v *yaml.Node) int {
	var n int
	if v.Kind != yaml.ScalarNode || v.Tag != "!!int" || v.Decode(&n) != nil {
		d.errorf(v, "%s: expected an integer, got %s", key, describe(v))
		return 0
	}
	if n <= 0 {
		d.errorf(v, "%s: must be positive, got %d", key, n)
		return 0
	}
	return n
}

// describe names a node for an error message.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing"
		}
		return strconv.Quote(n.Value)
	default:
		return "nothing"
	}
}

// yamlError positions a yaml.v3 syntax error, which carries a line but no
// column.
func yamlError(name string, err error) error {
	msg := err.Error()
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &PosError{File: name, Line: line, Col: 1, Msg: m[2], Err: err}
	}
	return &PosError{File: name, Line: 1, Col: 1, Msg: strings.TrimPrefix(msg, "yaml: "), Err: err}
}

// ParseDuration parses a Prometheus duration ("5m", "1h30m", "1d") or,
// failing that, a Go duration ("1.5h").
func ParseDuration(s string) (time.Duration, error) {
	if d, err := model.ParseDuration(s); err == nil {
		return time.Duration(d), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q", s)
	}
	return d, nil
}
