package store

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestReopenLogsQuietly is issue 25 item 9: every daemon start logged six
// TSDB WAL-replay lines at info. They are kept, at debug.
func TestReopenLogsQuietly(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	fill(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		var buf bytes.Buffer
		s, err := Open(Options{Dir: dir, Retention: time.Hour,
			Logger: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: level}))})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		replay := grep(buf.String(), "replay")
		switch {
		case level == slog.LevelInfo && (replay != "" || strings.Contains(buf.String(), "level=INFO")):
			t.Errorf("reopen logged at info:\n%s", buf.String())
		case level == slog.LevelDebug && !strings.Contains(replay, "level=DEBUG"):
			t.Errorf("no WAL replay line at debug:\n%s", buf.String())
		}
	}
}

func grep(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(strings.ToLower(l), sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
