package notifytest

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// LogBuffer is a concurrency-safe buffer that collects log output in tests.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// NewLogger returns a debug-level text logger that writes into the returned
// buffer, so a test can inspect every log line.
func NewLogger() (*slog.Logger, *LogBuffer) {
	b := &LogBuffer{}
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug})), b
}

// SecretForms returns the ways a secret may show up in output: as is, and
// escaped for a URL query or path.
func SecretForms(secret string) []string {
	forms := []string{secret}
	for _, f := range []string{url.QueryEscape(secret), url.PathEscape(secret)} {
		if f != secret {
			forms = append(forms, f)
		}
	}
	return forms
}

// AssertNoSecrets fails t when any secret, in any of its SecretForms,
// appears in any of the texts (error strings, log output, rendered bodies).
// Errors passed in texts are rendered with %v and %+v.
func AssertNoSecrets(t testing.TB, secrets []string, texts ...any) {
	t.Helper()
	for _, s := range secrets {
		if s == "" {
			t.Fatalf("AssertNoSecrets: empty secret (a test bug)")
		}
	}
	for i, x := range texts {
		var outs []string
		switch v := x.(type) {
		case nil:
			continue
		case string:
			outs = []string{v}
		case error:
			outs = []string{v.Error(), fmt.Sprintf("%+v", v)}
		case fmt.Stringer:
			outs = []string{v.String()}
		default:
			outs = []string{fmt.Sprintf("%+v", v)}
		}
		for _, out := range outs {
			for _, s := range secrets {
				for _, form := range SecretForms(s) {
					if strings.Contains(out, form) {
						t.Errorf("text %d leaks a secret (%d chars): %q", i, len(s), out)
					}
				}
			}
		}
	}
}
