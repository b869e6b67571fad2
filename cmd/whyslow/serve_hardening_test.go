package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/whyslow/whyslow/testbed/secrettest"
)

// syncBuffer is a bytes.Buffer safe for the daemon's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// TestServeLogsNoSecret is finding 6 of issue 14 (its first part): the
// engine URL's password was in the `Serving` start-up line. It also checks
// that start-up says how the API is protected (finding 7).
func TestServeLogsNoSecret(t *testing.T) {
	pw := secrettest.Secret("engine-pw")
	qtok := secrettest.Secret("qtok")
	sc := secrettest.New(t, pw, qtok)
	cfgFile := filepath.Join(t.TempDir(), "w.yml")
	os.WriteFile(cfgFile, []byte("listen: \":0\"\ngpu: {enabled: false}\notlp: {http: \"\", grpc: \"\"}\n"), 0o600)
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- dispatch(ctx, []string{"serve", "--config", cfgFile, "--engine-url",
			"http://scraper:" + pw + "@127.0.0.1:1/metrics?token=" + qtok, "--scrape-interval", "1s"}, &stdout, &stderr)
	}()
	deadline := time.Now().Add(2 * time.Minute) // a hang guard
	for !strings.Contains(stderr.String(), "Engine scrape failed") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	<-done
	out := stderr.String()
	if !strings.Contains(out, "msg=Serving") || !strings.Contains(out, "scraper:xxxxx@127.0.0.1:1") {
		t.Fatalf("no Serving line with the redacted engine:\n%s", out)
	}
	if !strings.Contains(out, `api_auth="locked (no api.token)"`) || !strings.Contains(out, "refuses every request") {
		t.Errorf("start-up does not say the API is locked:\n%s", out)
	}
	sc.String("serve stderr", out)
	sc.String("serve stdout", stdout.String())
}

// TestCheckConfigSaysAuth: check config warns (exit 0) when the API would
// be locked or open, as serve does at start-up.
func TestCheckConfigSaysAuth(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, src, want string }{
		{"locked", "listen: \":9109\"\n", "refuses every request"},
		{"insecure", "listen: \":9109\"\napi: {insecure: true}\n", "api.insecure is set"},
		{"otlp open", "listen: \"127.0.0.1:9109\"\n", "OTLP receivers on :4318 and :4317"},
		{"quiet", "listen: \"127.0.0.1:9109\"\notlp: {http: \"127.0.0.1:4318\", grpc: \"\"}\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name+".yml")
			os.WriteFile(path, []byte(tc.src), 0o600)
			r := runCLI(t, "check", "config", path)
			if r.code != exitOK {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			if tc.want == "" && r.stderr != "" || tc.want != "" && !strings.Contains(r.stderr, tc.want) {
				t.Errorf("stderr %q, want %q", r.stderr, tc.want)
			}
		})
	}
}

// TestWhyServerErrorHidesToken is finding 6 of issue 14 (the --server part):
// `why --server` printed an error body that echoed the bearer token.
func TestWhyServerErrorHidesToken(t *testing.T) {
	tok := secrettest.Secret("bearer")
	sc := secrettest.New(t, tok)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprintf(w, `{"error":"token %s not allowed","authorization":%q}`, strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), r.Header.Get("Authorization"))
	}))
	defer srv.Close()
	r := runCLI(t, "why", "--server", srv.URL, "--bearer-token", tok)
	if r.code != exitFailed || !strings.Contains(r.stderr, "403") {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	sc.String("why --server stderr", r.stderr)
}
