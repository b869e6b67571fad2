package secrettest

import (
	"encoding/base64"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeT records failures instead of failing.
type fakeT struct {
	testing.TB
	errs     []string
	cleanups []func()
}

func (f *fakeT) Helper()                        {}
func (f *fakeT) Errorf(format string, a ...any) { f.errs = append(f.errs, format) }
func (f *fakeT) Fatalf(format string, a ...any) { f.errs = append(f.errs, "fatal: "+format) }
func (f *fakeT) Cleanup(fn func())              { f.cleanups = append(f.cleanups, fn) }

func (f *fakeT) finish() {
	for _, fn := range f.cleanups {
		fn()
	}
}

func TestCheckerFindsEveryForm(t *testing.T) {
	tok := Secret("tok")
	leaks := map[string]string{
		"plain":    "token " + tok,
		"escaped":  "url ?t=" + strings.ReplaceAll(tok, "-", "%2D"),
		"base64":   base64.StdEncoding.EncodeToString([]byte(tok)),
		"fragment": "cannot unmarshal !!str `" + tok[:7] + "...`",
		"basic":    "Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("alice:"+Secret("pw"))),
		"url pw":   "GET http://bob:" + Secret("urlpw") + "@h/",
	}
	for name, text := range leaks {
		t.Run(name, func(t *testing.T) {
			ft := &fakeT{TB: t}
			c := New(ft, tok, "alice:"+Secret("pw"), "http://bob:"+Secret("urlpw")+"@h/")
			c.String("text", text)
			if len(ft.errs) == 0 {
				t.Errorf("%s leak not found in %q", name, text)
			}
		})
	}
}

func TestCheckerLogsErrorsRecorderDir(t *testing.T) {
	ft := &fakeT{TB: t}
	s := Secret("api")
	c := New(ft, s)
	c.Logger().Info("Serving", "token", "<redacted>")
	c.Error("call", errors.New("nothing here"))
	w := httptest.NewRecorder()
	w.WriteString(`{"ok":true}`)
	c.Recorder("resp", w)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "state.json"), []byte(`{"x":1}`), 0o600)
	os.WriteFile(filepath.Join(dir, "config.yml"), []byte("token: "+s), 0o600)
	c.Dir(dir, "config.yml")
	ft.finish()
	if len(ft.errs) != 0 || c.Checked() < 4 {
		t.Fatalf("clean run failed: %v (checked %d)", ft.errs, c.Checked())
	}
	c.Logger().Warn("Echo", "body", "Bearer "+s)
	c.Dir(dir)
	ft.finish()
	if len(ft.errs) != 2 { // the file and the log
		t.Fatalf("failures = %v", ft.errs)
	}
}
