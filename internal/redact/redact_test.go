package redact

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"http://127.0.0.1:8000/metrics", "http://127.0.0.1:8000/metrics"},
		{"http://user:hunter22@prom:9090/", "http://user:xxxxx@prom:9090/"},
		{"https://mimir/prometheus?token=abc123&org=x", "https://mimir/prometheus?token=<redacted>&org=<redacted>"},
		{"http://h/p#frag", "http://h/p"},
		{"://user:pw@host\x7f", "<redacted>@host\x7f"},
		{"http://me:pw@h:port/?token=abc", "<redacted>@h:port/?<redacted>"},
		{"127.0.0.1:9090", "127.0.0.1:9090"},
		{"%%%?k=v", "%%%?<redacted>"},
	}
	for _, tt := range tests {
		if got := URL(tt.in); got != tt.want {
			t.Errorf("URL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestHeader(t *testing.T) {
	if got := Header("authorization", "Bearer abc.def"); got != "Bearer <redacted>" {
		t.Errorf("Authorization: %q", got)
	}
	if got := Header("X-Scope-OrgID", "tenant-1"); got != "tenant-1" {
		t.Errorf("X-Scope-OrgID: %q", got)
	}
	if got := Header("X-Vault-Token", "s.abcdef"); got != Mask {
		t.Errorf("X-Vault-Token: %q", got)
	}
	h := Headers(http.Header{"Cookie": {"a=b"}, "Accept": {"json"}})
	if h.Get("Cookie") != Mask || h.Get("Accept") != "json" {
		t.Errorf("Headers: %v", h)
	}
}

func TestText(t *testing.T) {
	tests := []struct{ in, bad string }{
		{`{"headers":{"Authorization":"Basic dXNlcjpodW50ZXIy"}}`, "dXNlcjpodW50ZXIy"},
		{"echo: authorization: Bearer tok-ABCDEF123", "tok-ABCDEF123"},
		{"bearer tok-ABCDEF123 was refused", "tok-ABCDEF123"},
		{"GET http://alice:s3cr3tpw@tempo/api failed", "s3cr3tpw"},
		{"GET /api/v1/query?query=up&token=abc999 failed", "abc999"},
	}
	for _, tt := range tests {
		got := Text(tt.in)
		if strings.Contains(got, tt.bad) || !strings.Contains(got, Mask) {
			t.Errorf("Text(%q) = %q", tt.in, got)
		}
	}
	if got := Text("the token budget of 8192 tokens"); got != "the token budget of 8192 tokens" {
		t.Errorf("ordinary text changed: %q", got)
	}
}

func TestSecretsScrubForms(t *testing.T) {
	s := NewSecrets("tok/with+chars", "ab") // "ab" is too short to scrub
	s.AddBasic("alice", "pa55word")
	s.AddURL("https://hooks.example.com/T000/B000/XXXXXXXXXXXXXXXX?sig=q1w2e3r4", true)
	text := strings.Join([]string{
		"tok/with+chars", "tok%2Fwith%2Bchars", `tok\/with+chars`,
		base64.StdEncoding.EncodeToString([]byte("alice:pa55word")),
		"/T000/B000/XXXXXXXXXXXXXXXX", "q1w2e3r4", "about",
	}, " ")
	got := s.Scrub(text)
	for _, bad := range []string{"tok", "pa55", "YWxpY2U6", "XXXXXXXXXXXXXXXX", "q1w2e3r4"} {
		if strings.Contains(got, bad) {
			t.Errorf("Scrub left %q in %q", bad, got)
		}
	}
	if !strings.Contains(got, "about") {
		t.Errorf("Scrub removed a short ordinary word: %q", got)
	}
	merged := NewSecrets("first-one")
	merged.Merge(NewSecrets("second-one"))
	if got := merged.Scrub("first-one second-one"); got != Mask+" "+Mask {
		t.Errorf("after Merge: %q", got)
	}
	other := NewSecrets("replacement")
	s.Replace(other)
	if got := s.Scrub("tok/with+chars replacement"); got != "tok/with+chars "+Mask {
		t.Errorf("after Replace: %q", got)
	}
}

func TestSecretsError(t *testing.T) {
	s := NewSecrets("hunter2hunter2")
	err := s.Error(fmt.Errorf("open hunter2hunter2: %w", fs.ErrNotExist))
	if strings.Contains(err.Error(), "hunter2") || !errors.Is(err, fs.ErrNotExist) || !Is(err) {
		t.Errorf("Error() = %v", err)
	}
	plain := errors.New("nothing secret")
	if s.Error(plain) != plain || s.Error(nil) != nil {
		t.Error("Error changed an error without secrets")
	}
}

type stringer struct{ s string }

func (s stringer) String() string { return s.s }

func TestHandler(t *testing.T) {
	var buf bytes.Buffer
	s := NewSecrets("hunter2hunter2")
	log := slog.New(Handler(slog.NewTextHandler(&buf, nil), s)).With("url", "http://u:hunter2hunter2@h/")
	log.Info("Serving hunter2hunter2", "err", errors.New("echo hunter2hunter2"), "s", stringer{"hunter2hunter2"},
		slog.Group("g", "v", "hunter2hunter2"), "n", 3, "b", []byte("hunter2hunter2"), "m", map[string]string{"k": "hunter2hunter2"})
	log.WithGroup("grp").Warn("x", "y", "Bearer abcdefgh")
	if out := buf.String(); strings.Contains(out, "hunter2") || strings.Contains(out, "abcdefgh") || !strings.Contains(out, "n=3") {
		t.Errorf("log output:\n%s", out)
	}
}
