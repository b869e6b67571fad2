// Package logsink is the simplest receiver: it writes each notification,
// rendered as text, Markdown or JSON, to an io.Writer (stdout by default)
// and logs a one-line summary with slog.
package logsink

import (
	"fmt"

	"github.com/whyslow/whyslow/notifiers/render"
)

// Config configures a log sink.
type Config struct {
	// Format is text (default), markdown or json.
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
