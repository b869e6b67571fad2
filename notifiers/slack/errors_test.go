package slack

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"log/slog"

	"go.yaml.in/yaml/v3"

	"github.com/whyslow/whyslow/notifiers"
	"github.com/whyslow/whyslow/notifiers/notifytest"
	"github.com/whyslow/whyslow/notifiers/outbox"
	"github.com/whyslow/whyslow/verdict"
)

func yamlUnmarshal(s string, v any) error { return yaml.Unmarshal([]byte(s), v) }

type classCase struct {
	name       string
	fail       *failure
	retry      bool
	reason     notifiers.Reason
	retryAfter time.Duration
}

// classCases covers every HTTP status class and the Slack error codes that
// matter for retry decisions.
func classCases() []classCase {
	cs := []classCase{
		{"429 with Retry-After", &failure{Status: 429, Header: map[string]string{"Retry-After": "7"}}, true, notifiers.ReasonRateLimited, 7 * time.Second},
		{"429 without Retry-After", &failure{Status: 429}, true, notifiers.ReasonRateLimited, DefaultRateLimitWait},
		{"400", &failure{Status: 400, Body: "invalid_payload"}, false, notifiers.ReasonClientError, 0},
		{"401", &failure{Status: 401}, false, notifiers.ReasonAuthError, 0},
		{"403", &failure{Status: 403}, false, notifiers.ReasonAuthError, 0},
		{"404", &failure{Status: 404}, false, notifiers.ReasonClientError, 0},
		{"408", &failure{Status: 408}, true, notifiers.ReasonTimeout, 0},
		{"410", &failure{Status: 410}, false, notifiers.ReasonClientError, 0},
		{"413", &failure{Status: 413}, false, notifiers.ReasonClientError, 0},
		{"500", &failure{Status: 500}, true, notifiers.ReasonServerError, 0},
		{"502", &failure{Status: 502}, true, notifiers.ReasonServerError, 0},
		{"503", &failure{Status: 503}, true, notifiers.ReasonServerError, 0},
		{"504", &failure{Status: 504}, true, notifiers.ReasonServerError, 0},
	}
	for _, c := range []string{"invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired", "missing_scope", "no_permission"} {
		cs = append(cs, classCase{"slack " + c, &failure{SlackCode: c}, false, notifiers.ReasonAuthError, 0})
	}
	for _, c := range []string{"channel_not_found", "not_in_channel", "invalid_blocks", "is_archived", "msg_too_long", "invalid_arguments", "something_new"} {
		cs = append(cs, classCase{"slack " + c, &failure{SlackCode: c}, false, notifiers.ReasonClientError, 0})
	}
	for _, c := range []string{"internal_error", "fatal_error", "service_unavailable"} {
		cs = append(cs, classCase{"slack " + c, &failure{SlackCode: c}, true, notifiers.ReasonServerError, 0})
	}
	cs = append(cs,
		classCase{"slack ratelimited", &failure{SlackCode: "ratelimited"}, true, notifiers.ReasonRateLimited, DefaultRateLimitWait},
		classCase{"slack request_timeout", &failure{SlackCode: "request_timeout"}, true, notifiers.ReasonTimeout, 0},
	)
	return cs
}

func TestClassifyBot(t *testing.T) {
	for _, tc := range classCases() {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeSlack(t)
			log, buf := notifytest.NewLogger()
			n := newBot(t, f, log)
			f.setFail(func(string) *failure { return tc.fail })
			x := sequence()[0]
			retry, err := n.Notify(context.Background(), x)
			if err == nil {
				t.Fatal("no error")
			}
			if retry != tc.retry || notifiers.ReasonOf(err) != tc.reason || notifiers.RetryAfterOf(err) != tc.retryAfter {
				t.Errorf("retry=%v reason=%v retry-after=%v, want %v %v %v (err %v)", retry, notifiers.ReasonOf(err),
					notifiers.RetryAfterOf(err), tc.retry, tc.reason, tc.retryAfter, err)
			}
			if x.State.Get(StateTS) != "" {
				t.Errorf("failed post left a parent ts in the state")
			}
			notifytest.AssertNoSecrets(t, []string{testToken}, err, buf.String())
		})
	}
}

func TestClassifyWebhook(t *testing.T) {
	for _, tc := range classCases() {
		if tc.fail.SlackCode != "" {
			continue // incoming webhooks answer with HTTP statuses
		}
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeSlack(t)
			n, err := New(Config{WebhookURL: notifiers.Secret(f.HookURL(hookSecret))}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			f.setFail(func(string) *failure { return tc.fail })
			retry, err := n.Notify(context.Background(), sequence()[0])
			if retry != tc.retry || notifiers.ReasonOf(err) != tc.reason || notifiers.RetryAfterOf(err) != tc.retryAfter {
				t.Errorf("retry=%v reason=%v retry-after=%v, want %v %v %v (err %v)", retry, notifiers.ReasonOf(err),
					notifiers.RetryAfterOf(err), tc.retry, tc.reason, tc.retryAfter, err)
			}
			notifytest.AssertNoSecrets(t, []string{hookSecret, f.HookURL(hookSecret)}, err)
		})
	}
}

func TestClassifyTransport(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	url := dead.URL
	dead.Close()
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"bot", Config{Token: testToken, Channel: "#c", APIURL: url + "/api/"}},
		{"webhook", Config{WebhookURL: notifiers.Secret(url + "/hooks/" + hookSecret)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log, buf := notifytest.NewLogger()
			n, err := New(tc.cfg, Options{Logger: log})
			if err != nil {
				t.Fatal(err)
			}
			retry, err := n.Notify(context.Background(), sequence()[0])
			if !retry || notifiers.ReasonOf(err) != notifiers.ReasonNetwork {
				t.Errorf("retry=%v reason=%v err=%v, want a retryable network error", retry, notifiers.ReasonOf(err), err)
			}
			notifytest.AssertNoSecrets(t, []string{testToken, hookSecret}, err, buf.String())
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if r, err := Classify(fmt.Errorf("x: %w", ctx.Err())); r || notifiers.ReasonOf(err) != notifiers.ReasonCanceled {
		t.Errorf("canceled: %v %v", r, err)
	}
	if r, err := Classify(nil); r || err != nil {
		t.Errorf("nil: %v %v", r, err)
	}
}

// TestNoSecretsLeak drives every failure path through the retry stage with
// a capturing logger; no error and no log line may hold the token or the
// webhook URL, even when Slack echoes them back.
func TestNoSecretsLeak(t *testing.T) {
	log, buf := notifytest.NewLogger()
	clock := notifytest.NewFakeClock(t0)
	r := notifiers.NewRetrier(notifiers.RetryOptions{MaxAttempts: 2, Clock: clock, Logger: log, Jitter: -1})
	f := newFakeSlack(t)
	bot := newBot(t, f, log)
	hook, err := New(Config{WebhookURL: notifiers.Secret(f.HookURL(hookSecret))}, Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	fails := []*failure{
		{SlackCode: testToken}, // a hostile server echoing the token as the error code
		{Status: 500, Body: testToken + " " + f.HookURL(hookSecret)},
		{Status: 429},
		{SlackCode: "invalid_auth"},
		{Status: 404, Body: "no_service " + hookSecret},
	}
	var errs []any
	for _, fl := range fails {
		f.setFail(func(string) *failure { return fl })
		for _, n := range []*Notifier{bot, hook} {
			x := sequence()[0]
			_, err := r.Deliver(context.Background(), n, x)
			errs = append(errs, err)
		}
	}
	if !strings.Contains(buf.String(), "Notification") {
		t.Fatalf("nothing logged: %q", buf.String())
	}
	errs = append(errs, buf.String())
	notifytest.AssertNoSecrets(t, []string{testToken, hookSecret, f.HookURL(hookSecret)}, errs...)
}

// TestOutageThroughOutbox: Slack answers the incident's first post, then
// goes down for 10 simulated minutes (503s and 429s) while the update and
// the resolve queue up in the durable outbox; when it comes back every
// message is delivered exactly once, in order, in the thread.
func TestOutageThroughOutbox(t *testing.T) {
	clock := notifytest.NewFakeClock(t0)
	f := newFakeSlack(t)
	var mu sync.Mutex
	parentPosted, failures := false, 0
	f.setFail(func(m string) *failure {
		mu.Lock()
		defer mu.Unlock()
		if !parentPosted && m == "chat.postMessage" {
			parentPosted = true
			return nil
		}
		if clock.Now().Before(t0.Add(10 * time.Minute)) {
			failures++
			if failures%2 == 0 {
				return &failure{Status: 429, Header: map[string]string{"Retry-After": "20"}}
			}
			return &failure{Status: 503}
		}
		return nil
	})
	log := slogDiscard()
	n := newBot(t, f, log)
	ob, err := outbox.Open(t.TempDir(), outbox.Options{Clock: clock, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	retrier := notifiers.NewRetrier(notifiers.RetryOptions{Clock: clock, Logger: log, Jitter: -1})
	d, err := outbox.NewDispatcher(ob, outbox.DispatcherOptions{Receivers: map[string]notifiers.Notifier{"oncall": n},
		Retrier: retrier, RedeliverAfter: 30 * time.Second, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	seq := sequence()
	for _, x := range []*notifiers.Notification{seq[0], seq[1], seq[3]} {
		if ok, err := ob.Enqueue(x); !ok || err != nil {
			t.Fatalf("enqueue %s: %v %v", x.ID, ok, err)
		}
	}
	d.Start()
	// The dispatcher runs on the fake clock, so it drains without waiting;
	// the real-time bound only guards against a hang.
	deadline := time.Now().Add(30 * time.Second)
	for ob.Depth() > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v (pending %v)", err, ob.PendingIDs(""))
	}
	if clock.Now().Before(t0.Add(10 * time.Minute)) {
		t.Fatalf("delivered before Slack came back? clock at %s", clock.Now().Sub(t0))
	}
	want := []string{
		"chat.postMessage", "files.getUploadURLExternal", "upload", "files.completeUploadExternal",
		"chat.postMessage", "chat.update", "files.getUploadURLExternal", "upload", "files.completeUploadExternal",
		"chat.postMessage", "chat.update",
	}
	if got := f.Methods(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("delivered calls:\n got %v\nwant %v", got, want)
	}
	calls := f.Calls()
	for _, c := range calls[1:] {
		if (c.Method == "chat.postMessage" && c.ThreadTS != calls[0].TS) || (c.Method == "chat.update" && c.TS != calls[0].TS) {
			t.Errorf("%s not attached to the parent: %+v", c.Method, c)
		}
	}
	if failures < 10 {
		t.Errorf("only %d failed calls during the outage", failures)
	}
	// The outbox forgets an incident's state once its resolve is delivered.
	if st := ob.State("oncall", "inc-42"); len(st) != 0 {
		t.Errorf("state after resolve = %v", st)
	}
	// Retry-After was honoured: some waits are at least 20s.
	honoured := false
	for _, s := range clock.Sleeps() {
		if s >= 20*time.Second && s < 30*time.Second {
			honoured = true
		}
	}
	if !honoured {
		t.Errorf("no 20s Retry-After wait among %v", clock.Sleeps())
	}
}

func TestScrub(t *testing.T) {
	err := scrubError(&notifiers.Error{Reason: notifiers.ReasonServerError, StatusCode: 500, Err: errors.New("got " + testToken)}, []string{testToken})
	if strings.Contains(err.Error(), testToken) || notifiers.ReasonOf(err) != notifiers.ReasonServerError {
		t.Errorf("scrubbed: %v", err)
	}
	var e *notifiers.Error
	if !errors.As(err, &e) || e.StatusCode != 500 {
		t.Errorf("status lost: %v", err)
	}
	plain := errors.New("harmless")
	if scrubError(plain, []string{testToken}) != plain {
		t.Error("clean error was rewrapped")
	}
	_ = verdict.StatusAnomaly
}

func slogDiscard() *slog.Logger { return slog.New(slog.DiscardHandler) }
