package render

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzEscape: what Escape returns is valid UTF-8 with no character that
// steers a terminal, and text without one comes back unchanged.
func FuzzEscape(f *testing.F) {
	for _, s := range []string{"llama", "a\x1b[2Jb", "\x1b]8;;https://evil.example/\x1b\\x\x1b]8;;\x1b\\", "\r\n\t", "\u202e\u009b", "\xff\xfe", "ok: 3.2 s ×1.5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, keep := range []bool{false, true} {
			out := escape(s, keep)
			if !utf8.ValidString(out) {
				t.Fatalf("%q: invalid UTF-8 out: %q", s, out)
			}
			for i, r := range out {
				if steers(r, utf8.RuneLen(r), keep) {
					t.Fatalf("%q: out %q keeps %U at %d", s, out, r, i)
				}
			}
			clean := true
			for i := 0; i < len(s); {
				r, n := utf8.DecodeRuneInString(s[i:])
				clean = clean && !steers(r, n, keep)
				i += n
			}
			if clean && out != s {
				t.Fatalf("%q changed to %q", s, out)
			}
			if !clean && !strings.Contains(out, `\`) {
				t.Fatalf("%q: nothing escaped in %q", s, out)
			}
		}
	})
}
