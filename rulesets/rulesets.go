// Package rulesets holds the shipped rulesets, embedded with go:embed: the
// engine-neutral rulebook (rulebook.yaml: canonical signals, verdict, the
// walk's rules), the cause catalogue (causes.yaml), and one signal map per
// engine (vllm.yaml, sglang.yaml, trtllm.yaml: canonical signal → PromQL
// over that engine's names, plus its scheduler defaults). See README.md.
package rulesets

import (
	"cmp"
	"embed"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"

	"github.com/whyslow/whyslow/rules"
)

// FS holds every shipped ruleset file.
//
//go:embed *.yaml
var FS embed.FS

// Shipped file names.
const (
	CausesFile   = "causes.yaml"
	RulebookFile = "rulebook.yaml"
	// SharedFile holds the PromQL every engine map shares (`shared:`, the
	// GPU counters), instantiated per map with its `gpu_join:`.
	SharedFile = "gpu.yaml"
)

// Engines lists the engines with a shipped signal map (a file here named
// after its `engine:`), by the maps' `order:`, then by name.
var Engines = readEngines()

func readEngines() []string {
	type head struct {
		Engine string `yaml:"engine"`
		Order  int    `yaml:"order"`
	}
	var heads []head
	names, _ := fs.Glob(FS, "*.yaml")
	for _, n := range names {
		b, _ := FS.ReadFile(n)
		var h head
		if yaml.Unmarshal(b, &h) == nil && h.Engine != "" && n == h.Engine+".yaml" {
			heads = append(heads, h)
		}
	}
	slices.SortFunc(heads, func(a, b head) int {
		if (a.Order == 0) != (b.Order == 0) {
			return cmp.Compare(b.Order, a.Order) // unordered last
		}
		return cmp.Or(cmp.Compare(a.Order, b.Order), strings.Compare(a.Engine, b.Engine))
	})
	out := make([]string, len(heads))
	for i, h := range heads {
		out[i] = h.Engine
	}
	return out
}

// Series returns the series of every shipped engine, in Engines order:
// the joins that find a target whatever engine serves it.
func Series() []rules.EngineSeries { return slices.Clone(shippedSeries) }

var shippedSeries = Shipped().Series()

// withKnown sets the series of every engine known beside rs (the shipped
// ones, and rs's own when it is not shipped) on rs and its shapes.
func withKnown(rs *rules.Ruleset) *rules.Ruleset {
	known := Series()
	if !slices.Contains(Engines, rs.Engine) {
		own := rs.Series
		own.Engine = rs.Engine
		known = append(known, own)
	}
	rs.Known = known
	for _, sh := range rs.Shapes {
		sh.Known = known
	}
	return rs
}

// Panels are a map's `chart:` section: the series of the chart's panels
// (notifiers/chart), each list's first with data wins.
type Panels struct {
	Engine string `yaml:"-"`
	// TTFT and ITL are histogram families; KVUsage gauges (max over
	// targets: the map's series.kv_usage), Queue the waiting requests
	// (summed).
	TTFT    []string `yaml:"ttft"`
	ITL     []string `yaml:"itl"`
	KVUsage []string `yaml:"-"`
	Queue   []string `yaml:"queue"`
}

// OneOf lists names for a message: "a, b or c".
func OneOf(names ...string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

func file(name string) (rules.File, error) {
	b, err := FS.ReadFile(name)
	if err != nil {
		return rules.File{}, fmt.Errorf("shipped ruleset %s: %w", name, err)
	}
	return rules.File{Name: name, Data: b}, nil
}

// Base returns the files every ruleset is built on: the cause catalogue,
// the rulebook and the signals shared by every engine map.
func Base() []rules.File {
	c, _ := file(CausesFile)
	r, _ := file(RulebookFile)
	sh, _ := file(SharedFile)
	return []rules.File{c, r, sh}
}

var (
	cacheMu sync.Mutex
	cache   = map[string]*rules.Ruleset{}
)

// Default returns the shipped, validated ruleset for the engine: the
// rulebook read through the engine's signal map. Rulesets are immutable, so
// each engine's is built once per process.
func Default(engine string) (*rules.Ruleset, error) {
	cacheMu.Lock()
	defer cacheMu.Unlock()
	if rs, ok := cache[engine]; ok {
		return rs, nil
	}
	rs, err := compileShipped(engine)
	if err != nil {
		return nil, err
	}
	cache[engine] = rs
	return rs, nil
}

// compileShipped builds the engine's shipped ruleset, uncached.
func compileShipped(engine string) (*rules.Ruleset, error) {
	f, err := file(engine + ".yaml")
	if err != nil || !slices.Contains(Engines, engine) {
		return nil, Shipped().Unknown(engine)
	}
	rs, err := rules.Parse(append(Base(), f)...)
	if err != nil {
		return nil, err
	}
	return withKnown(rs), nil
}

// Compiled returns the engines whose shipped rulesets this process has
// compiled so far (Default), sorted: what a start has built before any
// triage read them.
func Compiled() []string {
	cacheMu.Lock()
	defer cacheMu.Unlock()
	return slices.Sorted(maps.Keys(cache))
}

// All returns the shipped ruleset of every engine, for engine auto-detection.
func All() ([]*rules.Ruleset, error) {
	out := make([]*rules.Ruleset, 0, len(Engines))
	for _, e := range Engines {
		rs, err := Default(e)
		if err != nil {
			return nil, err
		}
		out = append(out, rs)
	}
	return out, nil
}

// Load parses user ruleset files on top of the shipped catalogue and
// rulebook: a signal map for another engine (`engine:` and `signals:`
// only), extra signals, steps and rules, or causes that override the
// shipped text. When no file names an engine, engine's shipped signal map
// is added (engine "" means vllm).
//
// A file with a `verdict:` block is a whole rulebook and replaces the
// shipped one; a file byte-for-byte equal to a shipped file is read once.
func Load(engine string, paths ...string) (*rules.Ruleset, error) {
	base := Base()
	var user []rules.File
	hasEngine, hasRulebook := false, false
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("read ruleset: %w", err)
		}
		shipped := false
		for _, f := range base {
			shipped = shipped || string(f.Data) == string(b)
		}
		if shipped {
			continue
		}
		hasEngine = hasEngine || rules.DeclaresEngine(b)
		hasRulebook = hasRulebook || rules.DeclaresKey(b, "verdict")
		user = append(user, rules.File{Name: p, Data: b})
	}
	files := base
	if hasRulebook {
		files = slices.DeleteFunc(slices.Clone(base), func(f rules.File) bool { return f.Name == RulebookFile })
	}
	if !hasEngine {
		if engine == "" || engine == "auto" {
			engine = "vllm"
		}
		f, err := file(engine + ".yaml")
		if err != nil {
			return nil, Shipped().Unknown(engine)
		}
		files = append(files, f)
	}
	rs, err := rules.Parse(append(files, user...)...)
	if err != nil {
		return nil, err
	}
	return withKnown(rs), nil
}

// Causes returns the shipped cause catalogue file.
func Causes() rules.File {
	f, _ := file(CausesFile)
	return f
}

// LoadAll is Load for engine auto-detection: with files that name an engine,
// the one ruleset they make; otherwise the files on top of each shipped
// engine's signal map, one ruleset per engine.
func LoadAll(paths ...string) ([]*rules.Ruleset, error) {
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("read ruleset: %w", err)
		}
		if rules.DeclaresEngine(b) {
			rs, err := Load("", paths...)
			if err != nil {
				return nil, err
			}
			return []*rules.Ruleset{rs}, nil
		}
	}
	out := make([]*rules.Ruleset, 0, len(Engines))
	for _, e := range Engines {
		rs, err := Load(e, paths...)
		if err != nil {
			return nil, err
		}
		out = append(out, rs)
	}
	return out, nil
}
