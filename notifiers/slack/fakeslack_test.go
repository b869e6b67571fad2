package slack

import (
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// call is one request the fake Slack server received.
type call struct {
	Method   string // chat.postMessage, chat.update, files.getUploadURLExternal, upload, files.completeUploadExternal, webhook
	Channel  string
	TS       string // chat.update: the message rewritten; postMessage: the ts answered
	ThreadTS string
	Text     string
	Blocks   json.RawMessage
	Auth     string // Authorization header
	Token    string // form token
	Body     string // upload: the file bytes; webhook: the JSON
	Failed   bool   // answered with an injected failure
}

// failure is an injected answer: an HTTP status with headers and body, or a
// Slack error code in a 200 {"ok":false} answer.
type failure struct {
	Status    int
	Header    map[string]string
	Body      string
	SlackCode string
}

// fakeSlack is a Slack-compatible HTTP server on 127.0.0.1 that records
// every call. fail, when set, can inject a failure per method.
type fakeSlack struct {
	t   testing.TB
	srv *httptest.Server

	mu    sync.Mutex
	calls []call
	ts    int
	fail  func(method string) *failure
}

func newFakeSlack(t testing.TB) *fakeSlack {
	f := &fakeSlack{t: t}
	f.srv = httptest.NewServer(http.HandlerFunc(f.handle))
	t.Cleanup(f.srv.Close)
	return f
}

// APIURL is what OptionAPIURL gets.
func (f *fakeSlack) APIURL() string { return f.srv.URL + "/api/" }

// HookURL is an incoming webhook URL on the fake server.
func (f *fakeSlack) HookURL(path string) string { return f.srv.URL + "/hooks/" + path }

func (f *fakeSlack) setFail(fn func(method string) *failure) {
	f.mu.Lock()
	f.fail = fn
	f.mu.Unlock()
}

// Calls returns the successful calls, in order.
func (f *fakeSlack) Calls() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []call
	for _, c := range f.calls {
		if !c.Failed {
			out = append(out, c)
		}
	}
	return out
}

// All returns every call including failed ones.
func (f *fakeSlack) All() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]call(nil), f.calls...)
}

// Methods returns the methods of the successful calls.
func (f *fakeSlack) Methods() []string {
	var out []string
	for _, c := range f.Calls() {
		out = append(out, c.Method)
	}
	return out
}

func (f *fakeSlack) handle(w http.ResponseWriter, r *http.Request) {
	var c call
	c.Auth = r.Header.Get("Authorization")
	raw, _ := io.ReadAll(r.Body)
	switch {
	case strings.HasPrefix(r.URL.Path, "/api/"):
		c.Method = strings.TrimPrefix(r.URL.Path, "/api/")
		ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
		vals := url.Values{}
		if ct == "application/x-www-form-urlencoded" {
			vals, _ = url.ParseQuery(string(raw))
		}
		c.Token = vals.Get("token")
		c.Channel = firstOf(vals.Get("channel"), vals.Get("channel_id"))
		c.ThreadTS = vals.Get("thread_ts")
		c.TS = vals.Get("ts")
		c.Text = vals.Get("text")
		if b := vals.Get("blocks"); b != "" {
			c.Blocks = json.RawMessage(b)
		}
	case strings.HasPrefix(r.URL.Path, "/upload/"):
		c.Method = "upload"
		c.Body = string(raw)
	case strings.HasPrefix(r.URL.Path, "/hooks/"):
		c.Method = "webhook"
		c.Body = string(raw)
		var m struct {
			Text   string          `json:"text"`
			Blocks json.RawMessage `json:"blocks"`
		}
		_ = json.Unmarshal(raw, &m)
		c.Text, c.Blocks = m.Text, m.Blocks
	default:
		http.NotFound(w, r)
		return
	}

	f.mu.Lock()
	var fl *failure
	if f.fail != nil {
		fl = f.fail(c.Method)
	}
	if fl != nil {
		c.Failed = true
		f.calls = append(f.calls, c)
		f.mu.Unlock()
		for k, v := range fl.Header {
			w.Header().Set(k, v)
		}
		if fl.SlackCode != "" {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"ok":false,"error":%q}`, fl.SlackCode)
			return
		}
		w.WriteHeader(fl.Status)
		io.WriteString(w, fl.Body)
		return
	}
	var resp any
	switch c.Method {
	case "chat.postMessage":
		f.ts++
		c.TS = fmt.Sprintf("1700000000.%06d", f.ts)
		ch := c.Channel
		if strings.HasPrefix(ch, "#") {
			ch = "C" + strings.ToUpper(strings.TrimPrefix(ch, "#"))
		}
		resp = map[string]any{"ok": true, "channel": ch, "ts": c.TS}
	case "chat.update":
		resp = map[string]any{"ok": true, "channel": c.Channel, "ts": c.TS}
	case "files.getUploadURLExternal":
		resp = map[string]any{"ok": true, "upload_url": f.srv.URL + "/upload/F1", "file_id": "F1"}
	case "files.completeUploadExternal":
		resp = map[string]any{"ok": true, "files": []map[string]string{{"id": "F1", "title": "chart"}}}
	case "upload":
		f.calls = append(f.calls, c)
		f.mu.Unlock()
		io.WriteString(w, "OK - 1")
		return
	case "webhook":
		f.calls = append(f.calls, c)
		f.mu.Unlock()
		io.WriteString(w, "ok")
		return
	default:
		resp = map[string]any{"ok": false, "error": "unknown_method"}
	}
	f.calls = append(f.calls, c)
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

func firstOf(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}
