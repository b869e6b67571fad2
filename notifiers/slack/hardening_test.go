package slack

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/whyslow/whyslow/notifiers/notifytest"
)

// TestReplayWithChangedHexCase is finding 5 of issue 14: the identical
// replay was refused, but a copy with the signature's hex upper-cased
// verified too and ran a second triage.
func TestReplayWithChangedHexCase(t *testing.T) {
	resp := newResponder(t)
	tr := &fakeTriager{result: notifytest.Anomaly()}
	h := newCommand(t, tr, CommandOptions{})
	body := commandBody(`model_name="llama" 15m`, resp.srv.URL+"/commands/T1/1/xyz")
	now := time.Now()
	first := commandRequest(body, signingSecret, now)
	sig := first.Header.Get("X-Slack-Signature")
	if code, out := serve(h, first); code != http.StatusOK {
		t.Fatalf("first: %d %s", code, out)
	}
	for _, spelled := range []string{
		"v0=" + strings.ToUpper(strings.TrimPrefix(sig, "v0=")),
		"v0=" + strings.ToUpper(strings.TrimPrefix(sig, "v0="))[:10] + strings.TrimPrefix(sig, "v0=")[10:],
	} {
		r := commandRequest(body, signingSecret, now)
		r.Header.Set("X-Slack-Signature", spelled)
		if code, _ := serve(h, r); code != http.StatusUnauthorized {
			t.Errorf("replay spelled %q: status %d, want 401", spelled, code)
		}
	}
	h.Wait()
	if got := tr.Calls(); len(got) != 1 {
		t.Errorf("triages = %v, want one", got)
	}
}

// TestScopeRefusesMetricName is part of finding 12: a __name__ matcher is
// not a scope (the rules choose the metric).
func TestScopeRefusesMetricName(t *testing.T) {
	for _, text := range []string{`__name__="up"`, `{__name__=~".+",model_name="m"}`, "__name__=up"} {
		if _, _, err := ParseCommandText(text, 5*time.Minute, time.Hour); err == nil || !strings.Contains(err.Error(), "__name__") {
			t.Errorf("%q: err = %v", text, err)
		}
	}
}

// FuzzCommandForm feeds arbitrary, correctly signed form bodies to the
// slash command handler: it answers 200, 400 or 401 (a replay), never
// panics, and never runs more than one triage per accepted request.
func FuzzCommandForm(f *testing.F) {
	answers := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	f.Cleanup(answers.Close)
	f.Add(commandBody(`model_name="llama" 15m`, answers.URL+"/commands/T1/1/x"))
	f.Add(commandBody("help", answers.URL))
	f.Add(commandBody("llama-70b 2h", answers.URL))
	f.Add("command=%2Fwhyslow&text=%ZZ&response_url=")
	f.Add("text=a%3Db%2Cc&response_url=https%3A%2F%2Fexample.com%2F")
	tr := &fakeTriager{result: notifytest.Anomaly()}
	h, err := NewCommandHandler(CommandConfig{SigningSecret: signingSecret, MaxConcurrent: 1}, CommandOptions{
		Triager: tr, Logger: slog.New(slog.DiscardHandler),
		// Answers go only to the local sink.
		AllowResponseURL: func(u *url.URL) bool { return u.Host == strings.TrimPrefix(answers.URL, "http://") },
	})
	if err != nil {
		f.Fatal(err)
	}
	defer h.Close()
	n := 0
	f.Fuzz(func(t *testing.T, body string) {
		n++
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		// A distinct body per run: the same one again is a replay (401).
		body += "&nonce=" + strconv.Itoa(n)
		r := httptest.NewRequest(http.MethodPost, CommandPath, bytes.NewReader([]byte(body)))
		r.Header.Set("X-Slack-Request-Timestamp", ts)
		r.Header.Set("X-Slack-Signature", sign(signingSecret, ts, body))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		switch w.Code {
		case http.StatusOK, http.StatusBadRequest, http.StatusUnauthorized:
		default:
			t.Fatalf("status %d for %q: %s", w.Code, body, w.Body)
		}
	})
}
