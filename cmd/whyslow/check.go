package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/whyslow/whyslow/daemon"
)

func init() {
	register(command{name: "check", summary: "validate a file: check config FILE", run: runCheck})
}

// checkUsage is `whyslow check --help`.
const checkUsage = `usage: whyslow check config FILE...

  Validate whyslow serve config files completely: exit 0 when every file is
  valid, 2 with every problem listed as file:line:col: message. Warnings (a
  receiver skipped because its ${ENV} is unset, an API open or locked) do not
  fail the check.`

// runCheck implements `whyslow check config FILE...`: exit 0 when every file
// is valid, 2 with every problem listed (file:line:col: message) otherwise.
func runCheck(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(fs.Output(), checkUsage) }
	if code, done := parseFlags(fs, args, stdout); done {
		return code
	}
	switch {
	case fs.NArg() == 1 && fs.Arg(0) == "help",
		fs.NArg() == 2 && fs.Arg(0) == "config" && (fs.Arg(1) == "-h" || fs.Arg(1) == "--help"):
		fmt.Fprintln(stdout, checkUsage)
		return exitOK
	case fs.NArg() < 2 || fs.Arg(0) != "config":
		fs.Usage()
		return exitFailed
	}
	code := exitOK
	for _, file := range fs.Args()[1:] {
		cfg, warnings, err := loadConfig(file)
		for _, w := range warnings {
			fmt.Fprintln(stderr, w)
		}
		if err != nil {
			code = exitFailed
			n := 0
			for _, e := range splitJoined(err) {
				fmt.Fprintln(stderr, e)
				n++
			}
			var ce configError
			if n == 1 && !errors.As(err, &ce) {
				continue
			}
			fmt.Fprintf(stderr, "%s: %d problem(s)\n", file, n)
			continue
		}
		// Valid, but say what the daemon will say at start-up about
		// authentication.
		if mode, w := daemon.APIAuth(cfg); w != "" {
			fmt.Fprintf(stderr, "%s: warning: api auth %s: %s\n", file, mode, w)
		}
		if w := daemon.OTLPAuthWarning(cfg); w != "" {
			fmt.Fprintf(stderr, "%s: warning: %s\n", file, w)
		}
		fmt.Fprintf(stdout, "%s: ok\n", file)
	}
	return code
}
