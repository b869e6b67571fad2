// Package logsink is the simplest receiver: it logs a one-line summary of
// each notification with slog and, with Config.Verdict, writes the whole
// verdict, rendered as text, Markdown or JSON, to an io.Writer (stdout by
// default).
package logsink

import (
	"fmt"

	"github.com/whyslow/whyslow/notifiers/render"
)

// Config configures a log sink.
type Config struct {
	// Verdict also writes each notification's whole verdict, rendered in
	// Format, to the sink's writer (stdout). Off, the sink logs one line
	// per notification (status, top cause, the verdict link): a daemon's
	// log stays readable, and the full verdict is on its API and pages.
	Verdict bool `yaml:"verdict"`
	// Format is text (default), markdown or json: the rendering of
	// Verdict.
	Format string `yaml:"format"`
	// Explain adds every step, rule outcome and signal value.
	Explain bool `yaml:"explain"`
	// Color adds ANSI colour to text output.
	Color bool `yaml:"color"`
}

// DefaultConfig returns the defaults: plain text, no colour.
func DefaultConfig() Config { return Config{Format: "text"} }

// Validate checks the configuration.
func (c Config) Validate() error {
	if _, err := render.ParseFormat(c.Format); err != nil {
		return fmt.Errorf("logsink: %w", err)
	}
	return nil
}
