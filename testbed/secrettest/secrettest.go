// Package secrettest fails a test in which a configured secret shows up
// where nobody may read it: a log line, an error string, a response body,
// a file the code wrote. It is Alertmanager's secret-leak test helper idea:
// configure the code under test with secrets made by Secret, route its logs
// through Logger, and pass whatever it produces through the checks.
//
// A secret counts as leaked in any of the forms it travels in (as is,
// URL-escaped, base64, inside "user:password" base64) and, for tokens, when
// any 7-character piece of it shows (YAML and some clients print the first
// characters of a value).
package secrettest

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// fragment is the length of a secret's pieces that count as a leak.
const fragment = 7

// Checker checks text against a set of secrets. Make one with New.
type Checker struct {
	t testing.TB

	mu      sync.Mutex
	forms   map[string]string // form → the secret it came from
	pieces  map[string]string // fragments of tokens → secret
	logs    bytes.Buffer
	checked int
}

// New returns a checker for secrets; at the end of the test it also checks
// everything written to Logger and Writer.
func New(t testing.TB, secrets ...string) *Checker {
	t.Helper()
	c := &Checker{t: t, forms: map[string]string{}, pieces: map[string]string{}}
	c.Add(secrets...)
	t.Cleanup(func() {
		c.mu.Lock()
		logs := c.logs.String()
		c.mu.Unlock()
		c.String("log output", logs)
	})
	return c
}

// Secret returns a random-looking secret value with a readable prefix, so
// that a leak is unmistakable and no ordinary text matches it.
func Secret(prefix string) string {
	return prefix + "-Zq8vT3xKp9RmW2sL"
}

// Add adds secrets. A URL adds its password and query values too; "user:pass"
// adds the base64 an Authorization: Basic header carries.
func (c *Checker) Add(secrets ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range secrets {
		if len(s) < 4 {
			c.t.Fatalf("secrettest: secret %q is too short to check", s)
		}
		c.addLocked(s, s)
		if u, err := url.Parse(s); err == nil && u.Scheme != "" {
			if pw, ok := u.User.Password(); ok {
				c.addLocked(pw, s)
				c.addLocked(base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+pw)), s)
			}
			for _, vs := range u.Query() {
				for _, v := range vs {
					if len(v) >= 4 {
						c.addLocked(v, s)
					}
				}
			}
			continue
		}
		if user, pw, ok := strings.Cut(s, ":"); ok && user != "" && pw != "" {
			c.addLocked(base64.StdEncoding.EncodeToString([]byte(s)), s)
		}
		if len(s) >= 10 {
			for i := 0; i+fragment <= len(s); i++ {
				c.pieces[s[i:i+fragment]] = s
			}
		}
	}
}

func (c *Checker) addLocked(form, secret string) {
	c.forms[form] = secret
	c.forms[url.QueryEscape(form)] = secret
	c.forms[base64.StdEncoding.EncodeToString([]byte(form))] = secret
}

// find returns the secret that text leaks and how, or "".
func (c *Checker) find(text string) (string, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.checked++
	for form, s := range c.forms {
		if strings.Contains(text, form) {
			return s, form
		}
	}
	for p, s := range c.pieces {
		if strings.Contains(text, p) {
			return s, p
		}
	}
	return "", ""
}

// String fails the test when s holds a secret; where names what s is.
func (c *Checker) String(where, s string) {
	c.t.Helper()
	if secret, form := c.find(s); secret != "" {
		c.t.Errorf("secret leaked in %s: %q (as %q) in:\n%s", where, secret, form, excerpt(s, form))
	}
}

// Error fails the test when err's message holds a secret.
func (c *Checker) Error(where string, err error) {
	c.t.Helper()
	if err != nil {
		c.String(where+" error", err.Error())
	}
}

// Bytes fails the test when b holds a secret.
func (c *Checker) Bytes(where string, b []byte) {
	c.t.Helper()
	c.String(where, string(b))
}

// Header fails the test when a header value holds a secret (headers the
// client sent on purpose, such as Authorization, are the caller's to skip).
func (c *Checker) Header(where string, h http.Header) {
	c.t.Helper()
	for k, vs := range h {
		for _, v := range vs {
			c.String(where+" header "+k, v)
		}
	}
}

// Recorder fails the test when a recorded response's headers or body hold a
// secret.
func (c *Checker) Recorder(where string, w *httptest.ResponseRecorder) {
	c.t.Helper()
	c.Header(where, w.Header())
	c.String(where+" body", w.Body.String())
}

// Response reads resp's body (and restores it for the caller) and fails the
// test when it or the headers hold a secret.
func (c *Checker) Response(where string, resp *http.Response) []byte {
	c.t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("secrettest: read %s: %v", where, err)
	}
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(b))
	c.Header(where, resp.Header)
	c.Bytes(where+" body", b)
	return b
}

// Dir fails the test when a file under dir (an artifact: state, outbox,
// bundle) holds a secret. Files matching one of skip (filepath.Match on the
// path relative to dir) are not read: files that hold a secret on purpose.
func (c *Checker) Dir(dir string, skip ...string) {
	c.t.Helper()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		for _, pat := range skip {
			if ok, _ := filepath.Match(pat, rel); ok {
				return nil
			}
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		c.Bytes("file "+rel, b)
		return nil
	})
	if err != nil {
		c.t.Fatalf("secrettest: walk %s: %v", dir, err)
	}
}

// Writer returns a writer whose output is checked at the end of the test
// (stderr of a command, a log receiver's output).
func (c *Checker) Writer() io.Writer { return writerFunc(c.write) }

// Logger returns a logger at debug level whose output is checked at the end
// of the test.
func (c *Checker) Logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(c.Writer(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// Logs returns what was written to Logger and Writer so far.
func (c *Checker) Logs() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.logs.String()
}

// Checked is how many texts were checked, so a test can tell that its
// checks ran.
func (c *Checker) Checked() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.checked
}

func (c *Checker) write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.logs.Write(p)
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func excerpt(s, form string) string {
	i := strings.Index(s, form)
	if i < 0 {
		return s
	}
	lo, hi := max(0, i-120), min(len(s), i+len(form)+120)
	return fmt.Sprintf("…%s…", s[lo:hi])
}
