package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestRulesCommand(t *testing.T) {
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"rules", "check", "../../rulesets/vllm.yaml"}, exitOK, "ok ("},
		{[]string{"rules", "check", "../../rules/testdata/three_errors.yaml"}, exitFailed, "three_errors.yaml:12:15: step \"split\", rule 1: CEL: undeclared reference to 'nwo'"},
		{[]string{"rules", "check", "missing.yaml"}, exitFailed, "missing.yaml"},
		// A default that stands in for a missing series is refused with its
		// place (issue 22): a missing arrival rate read as "traffic unchanged",
		// a rule-out that rules out on a success rate that is not there.
		{[]string{"rules", "check", "../../rules/testdata/unsafe_default.yaml"}, exitFailed,
			"unsafe_default.yaml:10:16: step \"site\", rule \"slow_at_steady_traffic\": ratio.?arrival_rate.orValue(1): the default stands in for a missing arrival_rate"},
		{[]string{"rules", "check", "../../rules/testdata/unsafe_default.yaml"}, exitFailed,
			"rule \"nothing_failed\": a rule_out must name the signals it stands on"},
		{[]string{"rules", "check", "../../rules/testdata/safe_default.yaml"}, exitOK, "safe_default.yaml: ok ("},
		{[]string{"rules", "test", "../../rulesets/testdata/vllm_test.yaml"}, exitOK, "ok   "},
		{[]string{"rules", "check", "../../rulesets/rulebook.yaml", "../../rulesets/sglang.yaml", "../../rulesets/trtllm.yaml"}, exitOK, "trtllm.yaml: ok ("},
		// The shipped rulebook's own tests: the cause chains of issue 10's
		// failure classes (a load rise that fills the KV cache, context
		// growth, a signal just under a bar, absence read as evidence).
		{[]string{"rules", "test", "../../rulesets/testdata/rulebook_test.yaml"}, exitOK, "ok   ../../rulesets/testdata/rulebook_test.yaml: each request carries longer context"},
		// A rule test naming a signal the rulebook does not declare is bad
		// input, not a silently ignored value.
		{[]string{"rules", "test", "testdata/rules/undeclared_test.yaml"}, exitFailed, "undeclared signal(s) ttft_maen"},
		{[]string{"rules", "frob"}, exitFailed, "unknown subcommand"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args[1:], " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := dispatch(context.Background(), tt.args, &out, &errOut)
			if code != tt.code {
				t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.code, out.String(), errOut.String())
			}
			if !strings.Contains(out.String()+errOut.String(), tt.want) {
				t.Errorf("output lacks %q:\n%s%s", tt.want, out.String(), errOut.String())
			}
		})
	}
}

// TestSubcommandHelp: every command group, and each of rules'
// subcommands, prints its usage on stdout and exits 0 for --help, -h and
// help (no more "unknown subcommand").
func TestSubcommandHelp(t *testing.T) {
	tests := []struct {
		args []string
		want string // start of stdout
	}{
		{[]string{"rules", "--help"}, "usage: whyslow rules check FILE... | whyslow rules test FILE..."},
		{[]string{"rules", "-h"}, "usage: whyslow rules check FILE... | whyslow rules test FILE..."},
		{[]string{"rules", "help"}, "usage: whyslow rules check FILE... | whyslow rules test FILE..."},
		{[]string{"rules", "check", "--help"}, "usage: whyslow rules check FILE..."},
		{[]string{"rules", "test", "-h"}, "usage: whyslow rules test FILE..."},
		{[]string{"check", "help"}, "usage: whyslow check config FILE..."},
		{[]string{"sim", "--help"}, "usage:"},
		{[]string{"gpu", "--help"}, "usage: whyslow gpu"},
		{[]string{"gpu", "help"}, "usage: whyslow gpu"},
		{[]string{"why", "-h"}, "Usage of why:"},
		{[]string{"why", "help"}, "Usage of why:"},
		{[]string{"demo", "help"}, "Usage of demo:"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := dispatch(context.Background(), tt.args, &out, &errOut)
			if code != exitOK || !strings.HasPrefix(out.String(), tt.want) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 0 and usage %q", code, out.String(), errOut.String(), tt.want)
			}
		})
	}
	// A bad flag is still a failure: the one line that says what is wrong
	// and where the flags are, not the whole usage (issue 25, finding 11).
	var out, errOut bytes.Buffer
	if code := dispatch(context.Background(), []string{"rules", "check", "--frob"}, &out, &errOut); code != exitFailed ||
		errOut.String() != "flag provided but not defined: -frob\nRun 'whyslow rules check --help' for its flags.\n" {
		t.Errorf("bad flag: exit %d, stderr %q", code, errOut.String())
	}
	for _, args := range [][]string{{"why", "--window", "5"}, {"replay", "--step", "5"}, {"serve", "--scrape-interval", "5"}, {"sim", "record", "--sample", "x"}} {
		out.Reset()
		errOut.Reset()
		code := dispatch(context.Background(), args, &out, &errOut)
		lines := strings.Split(strings.TrimSpace(errOut.String()), "\n")
		if code != exitFailed || len(lines) > 3 || !strings.Contains(lines[len(lines)-1], "--help' for its flags") {
			t.Errorf("%v: exit %d, stderr (%d lines) %q; want exit 2, the error line and a hint", args, code, len(lines), errOut.String())
		}
	}
	errOut.Reset()
	dispatch(context.Background(), []string{"why", "--window", "5"}, &out, &errOut)
	if want := "invalid value \"5\" for flag -window: parse error\n--window takes a duration with a unit, e.g. 30s, 5m, 1h\nRun 'whyslow why --help' for its flags.\n"; errOut.String() != want {
		t.Errorf("why --window 5: stderr %q, want %q", errOut.String(), want)
	}
}
