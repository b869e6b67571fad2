// Package rulesets holds the shipped rulesets, embedded with go:embed: one per
// engine plus the shared cause catalogue (causes.yaml). See README.md for the format.
package rulesets

import (
	"embed"
	"fmt"
	"os"

	"github.com/whyslow/whyslow/rules"
)

// FS holds every shipped ruleset file.
//
//go:embed *.yaml
var FS embed.FS

// CausesFile is the shared cause catalogue every engine ruleset uses.
const CausesFile = "causes.yaml"

// Engines lists the engines with a shipped ruleset (engines.md §1, §5, §6.2).
var Engines = []string{"vllm", "sglang", "trtllm"}

func file(name string) (rules.File, error) {
	b, err := FS.ReadFile(name)
	if err != nil {
		return rules.File{}, fmt.Errorf("shipped ruleset %s: %w", name, err)
	}
	return rules.File{Name: name, Data: b}, nil
}

// Default returns the shipped, validated ruleset for the engine.
func Default(engine string) (*rules.Ruleset, error) {
	causes, err := file(CausesFile)
	if err != nil {
		return nil, err
	}
	f, err := file(engine + ".yaml")
	if err != nil {
		return nil, fmt.Errorf("no shipped ruleset for engine %q", engine)
	}
	return rules.Parse(causes, f)
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

// Load parses user ruleset files on top of the shipped cause catalogue, so a
// file only needs its signals and steps (a cause it defines overrides the shipped one).
func Load(paths ...string) (*rules.Ruleset, error) {
	causes, err := file(CausesFile)
	if err != nil {
		return nil, err
	}
	files := []rules.File{causes}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("read ruleset: %w", err)
		}
		files = append(files, rules.File{Name: p, Data: b})
	}
	return rules.Parse(files...)
}

// Causes returns the shipped cause catalogue file, for callers that build a
// ruleset from their own bytes.
func Causes() rules.File {
	f, _ := file(CausesFile)
	return f
}
