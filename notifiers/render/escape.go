package render

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Escape shows the characters of s that would steer a terminal rather
// than print as Go-style escapes: C0 controls (ESC starts colour, cursor
// and OSC 8 hyperlink sequences; CR rewrites a line; a newline forges
// one), DEL, C1 controls (U+009B is a one-character CSI), the bidi
// overrides and invalid UTF-8. Labels, scopes and messages come from
// engines, alerts and bundles: what they hold is shown, never run.
func Escape(s string) string { return escape(s, false) }

// EscapeLines is Escape that keeps newlines and tabs: for a rendering
// whose only controls are its own line breaks (Markdown, a joined error).
func EscapeLines(s string) string { return escape(s, true) }

func escape(s string, keepLines bool) string {
	clean := true
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if steers(r, n, keepLines) {
			clean = false
			break
		}
		i += n
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case !steers(r, n, keepLines):
			b.WriteString(s[i : i+n])
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		i += n
	}
	return b.String()
}

// steers reports whether rune r (n bytes) must be escaped.
func steers(r rune, n int, keepLines bool) bool {
	switch {
	case r == utf8.RuneError && n == 1:
		return true
	case keepLines && (r == '\n' || r == '\t'):
		return false
	case r < 0x20, r >= 0x7f && r <= 0x9f:
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x2028, r == 0x2029:
		return true
	}
	return false
}
