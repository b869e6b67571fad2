// Command whyslow tells on-call engineers why an LLM inference endpoint is slow.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace/noop"
)

// Exit codes shared by every subcommand (DESIGN.md).
const (
	exitOK     = 0 // analysed, nothing wrong
	exitCause  = 1 // a cause was found (or a check failed)
	exitFailed = 2 // whyslow itself failed: bad input, unreachable source
)

// command is one subcommand; each lives in its own file and registers itself.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

var commands = map[string]command{}

func register(c command) { commands[c.name] = c }

func main() {
	noTracing()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := dispatch(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// noTracing installs a no-op global tracer provider. whyslow exports no
// traces of its own. Prometheus's query engine opens a span per node
// through the global provider, whose default delegate still allocates each
// one: an explicit no-op provider cut 5–15% of a fleet cycle's CPU. The
// tests call it too, to run what the binary runs.
func noTracing() { otel.SetTracerProvider(noop.NewTracerProvider()) }

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		if len(args) == 0 {
			return exitFailed
		}
		return exitOK
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "whyslow: unknown command %q (see 'whyslow help')\n", args[0])
		return exitFailed
	}
	if hargs, ok := helpArgs(args[1:]); ok {
		return runHelp(ctx, c, hargs, stdout, stderr)
	}
	return c.run(ctx, args[1:], stdout, stderr)
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool { return arg == "-h" || arg == "--help" || arg == "help" }

// helpArgs reports whether a command's arguments ask for its help and
// nothing else: `whyslow CMD --help|-h|help`, or `whyslow CMD SUB
// --help|-h` for a command with subcommands. It returns them with "help"
// spelled "--help", so that every command's flag set sees a help flag.
func helpArgs(args []string) ([]string, bool) {
	switch {
	case len(args) == 1 && isHelp(args[0]):
		return []string{"--help"}, true
	case len(args) == 2 && !strings.HasPrefix(args[0], "-") && args[1] != "help" && isHelp(args[1]):
		return args, true
	}
	return nil, false
}

// runHelp runs c with help arguments. Help asked for is a success: the
// usage goes to stdout and the exit code is 0, also from a command whose
// flag set returns flag.ErrHelp as a failure. Anything else it printed (a
// subcommand that takes no flags) goes to stderr with its exit code.
func runHelp(ctx context.Context, c command, args []string, stdout, stderr io.Writer) int {
	var out bytes.Buffer
	code := c.run(ctx, args, &out, &out)
	first, _, _ := strings.Cut(strings.TrimSpace(out.String()), "\n")
	if code == exitOK || (code == exitFailed && strings.HasPrefix(strings.ToLower(first), "usage")) {
		_, _ = out.WriteTo(stdout)
		return exitOK
	}
	_, _ = out.WriteTo(stderr)
	return code
}

// parseFlags parses args with fs and says whether the command is done: after
// -h or --help (the usage printed to stdout, exit 0), or after a bad flag
// (the error and the usage on fs's output, exit 2). fs.Usage, when set,
// must print to fs.Output().
func parseFlags(fs *flag.FlagSet, args []string, stdout io.Writer) (code int, done bool) {
	usage := fullUsage(fs)
	fs.Usage = func() {} // printed below, to the right writer
	err := fs.Parse(args)
	fs.Usage = usage
	switch {
	case err == nil:
		return exitOK, false
	case errors.Is(err, flag.ErrHelp):
		out := fs.Output()
		fs.SetOutput(stdout)
		usage()
		fs.SetOutput(out)
		return exitOK, true
	}
	flagHint(fs, err)
	return exitFailed, true
}

// parseQuiet parses args for a command that prints its own help: -h
// prints the usage (an error, flag.ErrHelp, as fs.Parse has it); a bad
// flag prints the flag package's one line and a hint, not the usage.
func parseQuiet(fs *flag.FlagSet, args []string) error {
	usage := fullUsage(fs)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.Usage = usage
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
		usage()
	default:
		flagHint(fs, err)
	}
	return err
}

// fullUsage is fs's usage function, or the flag package's default.
func fullUsage(fs *flag.FlagSet) func() {
	if fs.Usage != nil {
		return fs.Usage
	}
	return func() {
		fmt.Fprintf(fs.Output(), "Usage of %s:\n", fs.Name())
		fs.PrintDefaults()
	}
}

// flagHint follows the flag package's line about a bad flag (already
// printed: `invalid value "5" for flag -window: parse error`) with what a
// duration looks like, when the flag takes one, and where the flags are
// listed: the whole usage would bury the one useful line.
func flagHint(fs *flag.FlagSet, err error) {
	if _, rest, ok := strings.Cut(err.Error(), " for flag -"); ok {
		name, _, _ := strings.Cut(rest, ":")
		if fl := fs.Lookup(name); fl != nil {
			if g, ok := fl.Value.(flag.Getter); ok {
				if _, ok := g.Get().(time.Duration); ok {
					fmt.Fprintf(fs.Output(), "--%s takes a duration with a unit, e.g. 30s, 5m, 1h\n", name)
				}
			}
		}
	}
	fmt.Fprintf(fs.Output(), "Run 'whyslow %s --help' for its flags.\n", fs.Name())
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: whyslow <command> [flags]")
	fmt.Fprintln(w)
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-8s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "'whyslow COMMAND --help' shows a command's usage.")
}
