package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/whyslow/whyslow/diagnose"
	"github.com/whyslow/whyslow/rules"
	"github.com/whyslow/whyslow/rulesets"
)

func init() {
	register(command{name: "rules", summary: "check or test ruleset files (rules check FILE..., rules test FILE...)", run: runRules})
}

// rulesUsage is `whyslow rules --help`.
const rulesUsage = `usage: whyslow rules check FILE... | whyslow rules test FILE...

  check  validate ruleset files on top of the shipped ones: every problem as
         file:line:col: message; exit 0 when all are valid, 2 otherwise
  test   run rule test files (input series, an evaluation time, the expected
         causes); exit 0 when every test passes, 1 when one fails, 2 on bad input`

func runRules(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, rulesUsage)
		return exitFailed
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprintln(stdout, rulesUsage)
		return exitOK
	case "check":
		return rulesCheck(args[1:], stdout, stderr)
	case "test":
		return rulesTest(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "whyslow rules: unknown subcommand %q (check or test)\n", args[0])
	return exitFailed
}

// rulesCheck validates each file on top of the shipped cause catalogue and
// prints every problem as file:line:col; exit 2 on any problem.
func rulesCheck(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rules check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(fs.Output(), "usage: whyslow rules check FILE...") }
	if code, done := parseFlags(fs, args, stdout); done {
		return code
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "usage: whyslow rules check FILE...")
		return exitFailed
	}
	failed := false
	for _, path := range fs.Args() {
		data, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", path, err)
			failed = true
			continue
		}
		// A file is checked the way it is used: on top of the shipped
		// catalogue and rulebook, and, unless it is a signal map itself, read
		// through the shipped vLLM map.
		_ = data
		rs, err := rulesets.Load("", path)
		if err != nil {
			var es rules.Errors
			if errors.As(err, &es) {
				for _, e := range es {
					fmt.Fprintln(stderr, e)
				}
				fmt.Fprintf(stderr, "%s: %d error(s)\n", path, len(es))
			} else {
				fmt.Fprintf(stderr, "%s: %v\n", path, err)
			}
			failed = true
			continue
		}
		// A default that stands in for a missing series is refused: a data
		// gap must not tip a rule (DESIGN.md).
		if es := rs.CheckDefaults(); len(es) > 0 {
			for _, e := range es {
				fmt.Fprintln(stderr, e)
			}
			fmt.Fprintf(stderr, "%s: %d error(s)\n", path, len(es))
			failed = true
			continue
		}
		for _, w := range rs.UnknownChainLinks {
			fmt.Fprintln(stderr, "warning: "+w)
		}
		rulesN := 0
		for _, st := range rs.Steps {
			rulesN += len(st.Rules)
		}
		fmt.Fprintf(stdout, "%s: ok (%d signals, %d steps, %d rules, %d causes)\n", path, len(rs.Signals), len(rs.Steps), rulesN, len(rs.Causes))
	}
	if failed {
		return exitFailed
	}
	return exitOK
}

// ruleTestFile is the format of `whyslow rules test` files.
type ruleTestFile struct {
	// Rulesets are the ruleset files under test, relative to the test file; empty means the shipped one for Engine.
	Rulesets []string       `yaml:"rulesets"`
	Engine   string         `yaml:"engine"`
	Tests    []ruleTestCase `yaml:"tests"`
}

type ruleTestCase struct {
	Name string             `yaml:"name"`
	Now  map[string]float64 `yaml:"now"`
	Base map[string]float64 `yaml:"base"`
	GPU  string             `yaml:"gpu"`
	// Model is the served model's name, for the step model of the
	// attribution (its size, e.g. "Llama-3.1-70B").
	Model     string `yaml:"model"`
	Targets   int    `yaml:"targets"`
	Scheduler *struct {
		ChunkedPrefill      bool `yaml:"chunked_prefill"`
		MaxNumBatchedTokens int  `yaml:"max_num_batched_tokens"`
		MaxNumSeqs          int  `yaml:"max_num_seqs"`
	} `yaml:"scheduler"`
	// Status is anomaly, healthy or insufficient_data (optional).
	Status string `yaml:"status"`
	// Causes are the expected reported causes, in rank order (a prefix check).
	Causes []string `yaml:"causes"`
	// RuledOut are causes that must be ruled out.
	RuledOut []string `yaml:"ruled_out"`
}

// rulesTest runs rule unit tests in the spirit of promtool test rules: given
// signal values, the ranked causes must match. Exit 0 all pass, 1 a test failed, 2 bad input.
func rulesTest(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rules test", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(fs.Output(), "usage: whyslow rules test FILE...") }
	if code, done := parseFlags(fs, args, stdout); done {
		return code
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "usage: whyslow rules test FILE...")
		return exitFailed
	}
	code := exitOK
	for _, path := range fs.Args() {
		c := runRuleTestFile(path, stdout, stderr)
		if c > code {
			code = c
		}
	}
	return code
}

func runRuleTestFile(path string, stdout, stderr io.Writer) int {
	data, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", path, err)
		return exitFailed
	}
	var tf ruleTestFile
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&tf); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", path, err)
		return exitFailed
	}
	var rs *rules.Ruleset
	if len(tf.Rulesets) > 0 {
		paths := make([]string, len(tf.Rulesets))
		for i, p := range tf.Rulesets {
			paths[i] = relTo(path, p)
		}
		rs, err = rulesets.Load(tf.Engine, paths...)
	} else {
		engine := tf.Engine
		if engine == "" {
			engine = "vllm"
		}
		rs, err = rulesets.Default(engine)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: ruleset:\n%v\n", path, err)
		return exitFailed
	}
	failed := 0
	for i, tc := range tf.Tests {
		name := tc.Name
		if name == "" {
			name = fmt.Sprintf("test %d", i+1)
		}
		var undeclared []string
		for _, m := range []map[string]float64{tc.Now, tc.Base} {
			for k := range m {
				if rs.Declared(k) == nil {
					undeclared = append(undeclared, k)
				}
			}
		}
		if len(undeclared) > 0 {
			sort.Strings(undeclared)
			fmt.Fprintf(stderr, "%s: %s: undeclared signal(s) %s (the rulebook declares the signals a test may set)\n",
				path, name, strings.Join(undeclared, ", "))
			return exitFailed
		}
		// Triage computes the attribution from the same values before the walk.
		attr := diagnose.AttrMap(diagnose.Attribute(tc.Now, tc.Base, tc.GPU, tc.Model))
		f := rules.Facts{Now: tc.Now, Base: tc.Base, Engine: rs.Engine, GPU: rules.GPU{Class: tc.GPU, MemoryGiB: diagnose.GPUMemoryGiB(tc.GPU)},
			Targets: tc.Targets, Attr: attr}
		if tc.Scheduler != nil {
			f.Scheduler = rules.Scheduler{Known: true, ChunkedPrefill: tc.Scheduler.ChunkedPrefill,
				MaxNumBatchedTokens: tc.Scheduler.MaxNumBatchedTokens, MaxNumSeqs: tc.Scheduler.MaxNumSeqs, Source: "incident"}
		}
		out := rs.Walk(f)
		var problems []string
		status := "healthy"
		switch {
		case out.Insufficient:
			status = "insufficient_data"
		case out.Anomaly:
			status = "anomaly"
		}
		if tc.Status != "" && tc.Status != status {
			problems = append(problems, fmt.Sprintf("status %s, want %s", status, tc.Status))
		}
		got := make([]string, len(out.Causes))
		for j, c := range out.Causes {
			got[j] = c.Cause.ID
		}
		if tc.Causes != nil && !prefixEqual(got, tc.Causes) {
			problems = append(problems, fmt.Sprintf("causes %v, want %v", got, tc.Causes))
		}
		ro := map[string]bool{}
		for _, r := range out.RuledOut {
			ro[r.Cause.ID] = true
		}
		for _, want := range tc.RuledOut {
			if !ro[want] {
				keys := make([]string, 0, len(ro))
				for k := range ro {
					keys = append(keys, k)
				}
				sort.Strings(keys)
				problems = append(problems, fmt.Sprintf("%s not ruled out (ruled out: %v)", want, keys))
			}
		}
		if len(problems) > 0 {
			failed++
			fmt.Fprintf(stdout, "FAIL %s: %s: %s\n", path, name, strings.Join(problems, "; "))
		} else {
			fmt.Fprintf(stdout, "ok   %s: %s\n", path, name)
		}
	}
	if failed > 0 {
		fmt.Fprintf(stdout, "%s: %d of %d tests failed\n", path, failed, len(tf.Tests))
		return exitCause
	}
	return exitOK
}

func prefixEqual(got, want []string) bool {
	if len(got) < len(want) {
		return false
	}
	for i := range want {
		if got[i] != want[i] {
			return false
		}
	}
	return len(want) > 0 || len(got) == 0
}

func relTo(file, p string) string {
	if strings.HasPrefix(p, "/") {
		return p
	}
	if i := strings.LastIndex(file, "/"); i >= 0 {
		return file[:i+1] + p
	}
	return p
}
