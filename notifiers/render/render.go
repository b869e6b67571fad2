// Package render turns a verdict.Verdict into text for a terminal, Markdown for
// webhooks and tickets, or the versioned JSON contract. Renderers decide
// nothing: they only present what the verdict says.
package render

import (
	"fmt"
	"io"

	"github.com/whyslow/whyslow/verdict"
)

// Format is an output format.
type Format int

// Output formats.
const (
	FormatText Format = iota
	FormatJSON
	FormatMarkdown
)

// String returns the format's name as accepted by ParseFormat.
func (f Format) String() string {
	switch f {
	case FormatText:
		return "text"
	case FormatJSON:
		return "json"
	case FormatMarkdown:
		return "markdown"
	}
	return fmt.Sprintf("format(%d)", int(f))
}

// ParseFormat parses "text", "json" or "markdown" ("md" is accepted too).
func ParseFormat(s string) (Format, error) {
	switch s {
	case "text", "":
		return FormatText, nil
	case "json":
		return FormatJSON, nil
	case "markdown", "md":
		return FormatMarkdown, nil
	}
	return 0, fmt.Errorf("unknown output format %q (want text, json or markdown)", s)
}

// DefaultWidth is the terminal width text output is wrapped to.
const DefaultWidth = 100

// Options tune a rendering. The zero value is a plain, non-explained rendering.
type Options struct {
	// Explain adds every step, rule outcome and signal value behind the verdict.
	Explain bool
	// Color adds ANSI colour to text output. Off by default.
	Color bool
	// Width is the column limit for text output; 0 means DefaultWidth.
	Width int
	// Indent pretty-prints JSON output.
	Indent bool
}

// Render writes v to w in format f.
func Render(w io.Writer, v *verdict.Verdict, f Format, opts Options) error {
	switch f {
	case FormatText:
		return Text(w, v, opts)
	case FormatJSON:
		return JSON(w, v, opts)
	case FormatMarkdown:
		return Markdown(w, v, opts)
	}
	return fmt.Errorf("render: unknown format %v", f)
}
