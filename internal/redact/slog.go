package redact

import (
	"context"
	"fmt"
	"log/slog"
)

// Handler returns a slog.Handler that scrubs the message and every attribute
// of each record with s (see Secrets.Scrub) before passing it to next. It is
// the last line of defence: code should not log secrets in the first place,
// but a server that echoes a credential into an error message still ends
// up masked.
func Handler(next slog.Handler, s *Secrets) slog.Handler {
	return &handler{next: next, s: s}
}

type handler struct {
	next slog.Handler
	s    *Secrets
}

func (h *handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, h.s.Scrub(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	scrubbed := make([]slog.Attr, len(as))
	for i, a := range as {
		scrubbed[i] = h.attr(a)
	}
	return &handler{next: h.next.WithAttrs(scrubbed), s: h.s}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{next: h.next.WithGroup(name), s: h.s}
}

func (h *handler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, h.s.Scrub(v.String()))
	case slog.KindGroup:
		g := v.Group()
		out := make([]any, len(g))
		for i, ga := range g {
			out[i] = h.attr(ga)
		}
		return slog.Group(a.Key, out...)
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			return slog.String(a.Key, h.s.Scrub(x.Error()))
		case fmt.Stringer:
			return slog.String(a.Key, h.s.Scrub(x.String()))
		case []byte:
			return slog.String(a.Key, h.s.Scrub(string(x)))
		default:
			text := fmt.Sprint(x)
			if scrubbed := h.s.Scrub(text); scrubbed != text {
				return slog.String(a.Key, scrubbed)
			}
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}
