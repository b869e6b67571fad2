package logsink

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"

	"github.com/whyslow/whyslow/notifiers"
	"github.com/whyslow/whyslow/notifiers/render"
)

// Sink writes notifications to a writer. It is safe for concurrent use.
type Sink struct {
	mu      sync.Mutex
	w       io.Writer
	log     *slog.Logger
	format  render.Format
	opts    render.Options
	verdict bool // Config.Verdict
}

// New returns a sink logging a summary line to logger (slog.Default() when
// nil) and, with cfg.Verdict, writing verdicts to w (os.Stdout when nil).
func New(cfg Config, w io.Writer, logger *slog.Logger) (*Sink, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	f, _ := render.ParseFormat(cfg.Format)
	if w == nil {
		w = os.Stdout
	}
	if logger == nil {
		logger = slog.Default()
	}
	return &Sink{w: w, log: logger.With("notifier", "log"), format: f, verdict: cfg.Verdict,
		opts: render.Options{Explain: cfg.Explain, Color: cfg.Color}}, nil
}

// Notify logs one line naming the incident, the transition, the verdict's
// summary and its link; with Verdict it first writes the rendering of n's
// verdict, preceded (for text and Markdown) by a line naming the incident
// and transition. A failed write is not retried.
func (s *Sink) Notify(_ context.Context, n *notifiers.Notification) (bool, error) {
	if err := n.Validate(); err != nil {
		return false, notifiers.NewError(notifiers.ReasonEncode, err)
	}
	if s.verdict {
		if err := s.write(n); err != nil {
			return false, err
		}
	}
	attrs := []any{"incident", n.IncidentID, "key", n.IncidentKey, "sequence", n.Sequence,
		"summary", render.Summary(n.Verdict)}
	if n.VerdictURL != "" {
		attrs = append(attrs, "verdict_url", n.VerdictURL)
	}
	s.log.Info("Incident "+n.Kind.String(), attrs...)
	return false, nil
}

// write writes the rendering of n's verdict to the sink's writer.
func (s *Sink) write(n *notifiers.Notification) error {
	var buf bytes.Buffer
	switch s.format {
	case render.FormatText:
		fmt.Fprintf(&buf, "== whyslow %s: incident %s #%d ==\n", n.Kind, render.Escape(n.IncidentID), n.Sequence)
	case render.FormatMarkdown:
		fmt.Fprintf(&buf, "## whyslow %s: incident %s #%d\n\n", n.Kind, render.Escape(n.IncidentID), n.Sequence)
	}
	if err := render.Render(&buf, n.Verdict, s.format, s.opts); err != nil {
		return notifiers.NewError(notifiers.ReasonEncode, err)
	}
	if s.format != render.FormatJSON {
		buf.WriteByte('\n')
	}
	s.mu.Lock()
	_, err := s.w.Write(buf.Bytes())
	s.mu.Unlock()
	if err != nil {
		return notifiers.NewError(notifiers.ReasonOther, fmt.Errorf("write: %w", err))
	}
	return nil
}
