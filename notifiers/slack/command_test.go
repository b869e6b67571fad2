package slack

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/whyslow/whyslow/notifiers/notifytest"
	"github.com/whyslow/whyslow/verdict"
)

const signingSecret = "8f742231b10e8888abcd99yyyzzz85a5"

// responder records what the handler posts to response_url.
type responder struct {
	srv   *httptest.Server
	mu    sync.Mutex
	posts []map[string]any
}

func newResponder(t *testing.T) *responder {
	r := &responder{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		r.mu.Lock()
		r.posts = append(r.posts, m)
		r.mu.Unlock()
		io.WriteString(w, "ok")
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *responder) Posts() []map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]map[string]any(nil), r.posts...)
}

type fakeTriager struct {
	mu     sync.Mutex
	calls  []string
	err    error
	block  chan struct{}
	result *verdict.Verdict
}

func (f *fakeTriager) Triage(ctx context.Context, scope string, window time.Duration) (*verdict.Verdict, error) {
	f.mu.Lock()
	f.calls = append(f.calls, scope+" "+window.String())
	f.mu.Unlock()
	if f.block != nil {
		select {
		case <-f.block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if f.err != nil {
		return nil, f.err
	}
	return f.result, nil
}

func (f *fakeTriager) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func sign(secret, ts string, body string) string {
	m := hmac.New(sha256.New, []byte(secret))
	io.WriteString(m, "v0:"+ts+":"+body)
	return "v0=" + hex.EncodeToString(m.Sum(nil))
}

func commandBody(text, responseURL string) string {
	return url.Values{
		"command": {"/whyslow"}, "text": {text}, "response_url": {responseURL},
		"user_id": {"U123ABC"}, "channel_id": {"C999"}, "team_id": {"T1"}, "trigger_id": {"1.2.3"},
	}.Encode()
}

func commandRequest(body, secret string, at time.Time) *http.Request {
	ts := strconv.FormatInt(at.Unix(), 10)
	r := httptest.NewRequest(http.MethodPost, CommandPath, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Header.Set("X-Slack-Request-Timestamp", ts)
	r.Header.Set("X-Slack-Signature", sign(secret, ts, body))
	return r
}

func newCommand(t *testing.T, tr Triager, o CommandOptions) *CommandHandler {
	t.Helper()
	o.Triager = tr
	if o.AllowResponseURL == nil {
		o.AllowResponseURL = func(u *url.URL) bool { return u.Hostname() == "127.0.0.1" }
	}
	h, err := NewCommandHandler(CommandConfig{SigningSecret: signingSecret, MaxConcurrent: 2}, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

func serve(h http.Handler, r *http.Request) (int, string) {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code, w.Body.String()
}

// Slack's verifier checks timestamps against the wall clock, so requests
// are signed "now"; nothing here asserts how long anything takes.
func TestCommandSignature(t *testing.T) {
	resp := newResponder(t)
	tr := &fakeTriager{result: notifytest.Anomaly()}
	log, buf := notifytest.NewLogger()
	h := newCommand(t, tr, CommandOptions{Logger: log})
	body := commandBody(`model_name="llama" 15m`, resp.srv.URL+"/commands/T1/1/xyz")
	now := time.Now()

	valid := commandRequest(body, signingSecret, now)
	code, out := serve(h, valid)
	if code != http.StatusOK || !strings.Contains(out, `"response_type":"ephemeral"`) || !strings.Contains(out, "Triaging") {
		t.Fatalf("valid: %d %s", code, out)
	}
	h.Wait()
	if got := tr.Calls(); len(got) != 1 || got[0] != `model_name="llama" 15m0s` {
		t.Errorf("triage calls = %v", got)
	}
	posts := resp.Posts()
	if len(posts) != 1 || posts[0]["response_type"] != "in_channel" || posts[0]["blocks"] == nil {
		t.Fatalf("response_url posts = %v", posts)
	}
	if b, _ := json.Marshal(posts[0]["blocks"]); !strings.Contains(string(b), "asked by \\u003c@U123ABC\\u003e") {
		t.Errorf("answer does not say who asked: %s", b)
	}

	for _, tc := range []struct {
		name string
		req  *http.Request
	}{
		{"replay", commandRequest(body, signingSecret, now)},
		{"wrong secret", commandRequest(body, "not-the-secret-at-all", now)},
		{"stale timestamp", commandRequest(body, signingSecret, now.Add(-10*time.Minute))},
		{"future timestamp", commandRequest(body, signingSecret, now.Add(10*time.Minute))},
		{"tampered body", func() *http.Request {
			r := commandRequest(body, signingSecret, now.Add(-time.Second))
			r.Body = io.NopCloser(strings.NewReader(strings.Replace(body, "llama", "other", 1)))
			return r
		}()},
		{"no signature", func() *http.Request {
			r := commandRequest(body, signingSecret, now.Add(-2*time.Second))
			r.Header.Del("X-Slack-Signature")
			return r
		}()},
		{"malformed signature", func() *http.Request {
			r := commandRequest(body, signingSecret, now.Add(-3*time.Second))
			r.Header.Set("X-Slack-Signature", "v0=zz")
			return r
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _ := serve(h, tc.req)
			if code != http.StatusUnauthorized {
				t.Errorf("status = %d, want 401", code)
			}
		})
	}
	h.Wait()
	if got := tr.Calls(); len(got) != 1 {
		t.Errorf("rejected requests ran triages: %v", got)
	}
	if len(resp.Posts()) != 1 {
		t.Errorf("rejected requests posted answers")
	}
	notifytest.AssertNoSecrets(t, []string{signingSecret}, buf.String())
}

func TestCommandAnswers(t *testing.T) {
	resp := newResponder(t)
	respond := resp.srv.URL + "/commands/x"
	for _, tc := range []struct {
		name, text string
		tr         *fakeTriager
		opts       CommandOptions
		respURL    string
		wantCode   int
		wantAck    string
		wantCalls  int
		wantPost   string
	}{
		{name: "help", text: "help", tr: &fakeTriager{}, wantCode: 200, wantAck: "Usage"},
		{name: "bad scope", text: `model_name=("x" 5m`, tr: &fakeTriager{}, wantCode: 200, wantAck: "cannot read scope"},
		{name: "window too long", text: "llama 30d", tr: &fakeTriager{}, wantCode: 200, wantAck: "longer than"},
		{name: "triage error", text: "", tr: &fakeTriager{err: errors.New("prometheus unreachable")}, wantCode: 200,
			wantAck: "the default scope", wantCalls: 1, wantPost: "Triage failed: prometheus unreachable"},
		{name: "default policy refuses non-Slack response_url", text: "llama", tr: &fakeTriager{},
			opts: CommandOptions{AllowResponseURL: slackHTTPS}, wantCode: 400},
		{name: "missing response_url", text: "llama", tr: &fakeTriager{}, respURL: "-", wantCode: 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newCommand(t, tc.tr, tc.opts)
			ru := respond
			if tc.respURL == "-" {
				ru = ""
			}
			before := len(resp.Posts())
			code, out := serve(h, commandRequest(commandBody(tc.text, ru), signingSecret, time.Now()))
			h.Wait()
			if code != tc.wantCode || !strings.Contains(out, tc.wantAck) {
				t.Errorf("answer %d %q, want %d containing %q", code, out, tc.wantCode, tc.wantAck)
			}
			if got := len(tc.tr.Calls()); got != tc.wantCalls {
				t.Errorf("%d triages, want %d", got, tc.wantCalls)
			}
			posts := resp.Posts()[before:]
			if tc.wantPost == "" && len(posts) != 0 {
				t.Errorf("unexpected posts %v", posts)
			}
			if tc.wantPost != "" && (len(posts) != 1 || !strings.Contains(posts[0]["text"].(string), tc.wantPost)) {
				t.Errorf("posts %v, want one with %q", posts, tc.wantPost)
			}
		})
	}
}

func TestCommandBusy(t *testing.T) {
	resp := newResponder(t)
	tr := &fakeTriager{block: make(chan struct{}), result: notifytest.Healthy()}
	h := newCommand(t, tr, CommandOptions{})
	body := func(s string) string { return commandBody(s, resp.srv.URL+"/r") }
	for i, s := range []string{"a 1m", "b 2m"} {
		if code, out := serve(h, commandRequest(body(s), signingSecret, time.Now())); code != 200 || !strings.Contains(out, "Triaging") {
			t.Fatalf("request %d: %d %s", i, code, out)
		}
	}
	if _, out := serve(h, commandRequest(body("c 3m"), signingSecret, time.Now())); !strings.Contains(out, "busy") {
		t.Errorf("third concurrent triage: %s", out)
	}
	close(tr.block)
	h.Wait()
	if n := len(resp.Posts()); n != 2 {
		t.Errorf("%d answers, want 2", n)
	}
	if code, _ := serve(h, httptest.NewRequest(http.MethodGet, CommandPath, nil)); code != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d", code)
	}
}

func TestParseCommandText(t *testing.T) {
	for _, tc := range []struct {
		in, scope string
		window    time.Duration
		err       string
	}{
		{"", "", 5 * time.Minute, ""},
		{"15m", "", 15 * time.Minute, ""},
		{"llama-3.1-70b", `model_name="llama-3.1-70b"`, 5 * time.Minute, ""},
		{"meta-llama/Llama-3.1-8B 1h", `model_name="meta-llama/Llama-3.1-8B"`, time.Hour, ""},
		{`model_name="x",namespace="prod" 30m`, `model_name="x",namespace="prod"`, 30 * time.Minute, ""},
		{`{namespace="prod"}`, `namespace="prod"`, 5 * time.Minute, ""},
		{"namespace=prod,cluster=us-east 2h", `namespace="prod",cluster="us-east"`, 2 * time.Hour, ""},
		{"namespace=prod, pod=~vllm-.*", `namespace="prod",pod=~"vllm-.*"`, 5 * time.Minute, ""},
		{"two words", "", 0, "cannot read scope"},
		{"x 48h", "", 0, "longer than"},
		{"x 0s", "", 0, "window must be positive"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			scope, w, err := ParseCommandText(tc.in, 5*time.Minute, 24*time.Hour)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || scope != tc.scope || w != tc.window {
				t.Errorf("= %q %v %v, want %q %v", scope, w, err, tc.scope, tc.window)
			}
		})
	}
}

func TestCommandConfig(t *testing.T) {
	var c CommandConfig
	if err := yamlUnmarshal("default_window: 5m\n", &c); err == nil || !strings.Contains(err.Error(), "signing_secret is required") {
		t.Errorf("err = %v", err)
	}
	if err := yamlUnmarshal("signing_secret: abcd\ntypo: 1\n", &c); err == nil {
		t.Error("unknown key accepted")
	}
	if _, err := NewCommandHandler(CommandConfig{SigningSecret: "x"}, CommandOptions{}); err == nil {
		t.Error("no triager accepted")
	}
}
