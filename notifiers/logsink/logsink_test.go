package logsink

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/whyslow/whyslow/notifiers"
	"github.com/whyslow/whyslow/notifiers/notifytest"
)

func notification(kind notifiers.Transition) *notifiers.Notification {
	return &notifiers.Notification{ID: "log/inc-1/1/" + string(kind), Receiver: "log", IncidentID: "inc-1",
		IncidentKey: "k", Kind: kind, Sequence: 1, Verdict: notifytest.Anomaly()}
}

func TestFormats(t *testing.T) {
	tests := []struct {
		format string
		want   []string
	}{
		{"text", []string{"== whyslow open: incident inc-1 #1 ==", "ANOMALY (critical)", "fix: Add replicas"}},
		{"markdown", []string{"## whyslow open: incident inc-1 #1", "### ANOMALY (critical)"}},
		{"json", []string{`"schema_version":2`}},
	}
	for _, tt := range tests {
		t.Run(tt.format, func(t *testing.T) {
			var out bytes.Buffer
			logger, logs := notifytest.NewLogger()
			s, err := New(Config{Format: tt.format, Verdict: true}, &out, logger)
			if err != nil {
				t.Fatal(err)
			}
			if retry, err := s.Notify(context.Background(), notification(notifiers.TransitionOpen)); retry || err != nil {
				t.Fatalf("Notify = %v, %v", retry, err)
			}
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			if tt.format == "json" && !json.Valid(out.Bytes()) {
				t.Errorf("invalid JSON: %s", out.String())
			}
			if !strings.Contains(logs.String(), "Incident open") || !strings.Contains(logs.String(), "summary=") {
				t.Errorf("log line missing:\n%s", logs)
			}
		})
	}
}

// TestOneLinePerNotification is issue 25 item 9: the log receiver dumped
// 80-line verdicts into the daemon's log. By default it logs one line per
// notification, with the verdict link; the verdict stays on the API and
// the pages.
func TestOneLinePerNotification(t *testing.T) {
	var out bytes.Buffer
	logger, logs := notifytest.NewLogger()
	s, err := New(DefaultConfig(), &out, logger)
	if err != nil {
		t.Fatal(err)
	}
	n := notification(notifiers.TransitionOpen)
	n.VerdictURL = "https://ops.example/verdict?scope=x"
	if _, err := s.Notify(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	if out.Len() != 0 {
		t.Errorf("wrote %d bytes of verdict:\n%s", out.Len(), out.String())
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "Incident open") || !strings.Contains(lines[0], "summary=") ||
		!strings.Contains(lines[0], `verdict_url="`+n.VerdictURL+`"`) {
		t.Errorf("want one line with the summary and the verdict link, got %d:\n%s", len(lines), logs.String())
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestErrors(t *testing.T) {
	if _, err := New(Config{Format: "yaml"}, nil, nil); err == nil {
		t.Error("want error for unknown format")
	}
	if DefaultConfig().Validate() != nil {
		t.Error("default config must be valid")
	}
	cfg := DefaultConfig()
	cfg.Verdict = true
	s, err := New(cfg, failWriter{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	retry, err := s.Notify(context.Background(), notification(notifiers.TransitionResolve))
	if retry || err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("Notify on failing writer = %v, %v", retry, err)
	}
	if _, err := s.Notify(context.Background(), &notifiers.Notification{}); err == nil {
		t.Error("want error for invalid notification")
	}
}

// TestControlCharactersEscaped is finding 6 of issue 26: a label value with
// ESC[2J cleared the on-call's terminal, and an OSC 8 sequence made a link
// whose text lied about its target, in the log receiver's output.
func TestControlCharactersEscaped(t *testing.T) {
	const evil = "llama\x1b[2J\x1b]8;;https://evil.example/\x1b\\docs\x1b]8;;\x1b\\\r\u202e"
	for _, format := range []string{"text", "markdown"} {
		for _, color := range []bool{false, true} {
			n := notification(notifiers.TransitionOpen)
			n.IncidentID = "inc-\x1b[2J"
			n.Verdict.Scope.Selector = `model_name="` + evil + `"`
			n.Verdict.Scope.Labels = map[string]string{"model_name": evil}
			var out bytes.Buffer
			logger, logs := notifytest.NewLogger()
			s, err := New(Config{Format: format, Color: color, Verdict: true}, &out, logger)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Notify(context.Background(), n); err != nil {
				t.Fatal(err)
			}
			got := out.String()
			for _, raw := range []string{"\x1b[2J", "\x1b]8", "\x1b\\", "\r", "\u202e"} {
				if strings.Contains(got, raw) || strings.Contains(logs.String(), raw) {
					t.Errorf("%s color=%v: raw %q reached the output:\n%q\nlogs %q", format, color, raw, got, logs.String())
				}
			}
			for _, shown := range []string{`llama\x1b[2J\x1b]8;;https://evil.example/\x1b\`, `\r\u202e`, `inc-\x1b[2J`} {
				if !strings.Contains(got, shown) {
					t.Errorf("%s color=%v: output does not show %q:\n%s", format, color, shown, got)
				}
			}
		}
	}
}
