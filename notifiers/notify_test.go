package notifiers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/whyslow/whyslow/notifiers/notifytest"
)

var t0 = time.Unix(1700000000, 0).UTC()

func TestClassifyStatus(t *testing.T) {
	tests := []struct {
		code       int
		retryAfter string
		wantErr    bool
		wantRetry  bool
		reason     Reason
		wantAfter  time.Duration
	}{
		{200, "", false, false, 0, 0},
		{202, "", false, false, 0, 0},
		{204, "", false, false, 0, 0},
		{301, "", true, false, ReasonOther, 0},
		{400, "", true, false, ReasonClientError, 0},
		{401, "", true, false, ReasonAuthError, 0},
		{403, "", true, false, ReasonAuthError, 0},
		{404, "", true, false, ReasonClientError, 0},
		{408, "", true, true, ReasonTimeout, 0},
		{413, "", true, false, ReasonClientError, 0},
		{429, "", true, true, ReasonRateLimited, 0},
		{429, "30", true, true, ReasonRateLimited, 30 * time.Second},
		{429, t0.Add(2 * time.Minute).Format(http.TimeFormat), true, true, ReasonRateLimited, 2 * time.Minute},
		{429, "soon", true, true, ReasonRateLimited, 0},
		{500, "", true, true, ReasonServerError, 0},
		{502, "", true, true, ReasonServerError, 0},
		{503, "7", true, true, ReasonServerError, 7 * time.Second},
		{504, "", true, true, ReasonServerError, 0},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d_%s", tt.code, tt.retryAfter), func(t *testing.T) {
			retry, err := ClassifyStatus(tt.code, tt.retryAfter, t0, "body text")
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if retry != tt.wantRetry {
				t.Errorf("retry = %v, want %v", retry, tt.wantRetry)
			}
			if err == nil {
				return
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("not an *Error: %T", err)
			}
			if e.Reason != tt.reason || e.StatusCode != tt.code || e.RetryAfter != tt.wantAfter {
				t.Errorf("got reason %v status %d retry-after %v; want %v %d %v", e.Reason, e.StatusCode, e.RetryAfter,
					tt.reason, tt.code, tt.wantAfter)
			}
			if !strings.Contains(err.Error(), "body text") {
				t.Errorf("error lacks the response excerpt: %v", err)
			}
		})
	}
}

func TestErrorWrapping(t *testing.T) {
	base := errors.New("boom")
	err := fmt.Errorf("post: %w", &Error{Reason: ReasonRateLimited, RetryAfter: 5 * time.Second, Err: base})
	if !errors.Is(err, base) {
		t.Error("errors.Is through *Error failed")
	}
	if ReasonOf(err) != ReasonRateLimited || RetryAfterOf(err) != 5*time.Second {
		t.Errorf("ReasonOf/RetryAfterOf = %v/%v", ReasonOf(err), RetryAfterOf(err))
	}
	if ReasonOf(context.Canceled) != ReasonCanceled || ReasonOf(fmt.Errorf("x: %w", context.DeadlineExceeded)) != ReasonTimeout {
		t.Error("context errors misclassified")
	}
	if ReasonOf(base) != ReasonOther || ReasonRateLimited.String() != "rateLimited" || Reason(99).String() != "reason(99)" {
		t.Error("reason names")
	}
}

func TestClassifyTransportError(t *testing.T) {
	secretURL := "https://user:hunter2@hooks.example.com/T000/B000/XXXXsecretXXXX?token=abc123secret"
	client := &http.Client{}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, secretURL, nil)
	_, err := client.Do(req)
	retry, cerr := ClassifyTransportError(err, RedactURL(secretURL))
	if retry || ReasonOf(cerr) != ReasonCanceled {
		t.Errorf("cancelled request: retry=%v reason=%v", retry, ReasonOf(cerr))
	}
	notifytest.AssertNoSecrets(t, []string{"hunter2", "XXXXsecretXXXX", "abc123secret"}, cerr)

	req, _ = http.NewRequest(http.MethodPost, "http://127.0.0.1:1/secret-path-token", nil)
	_, err = client.Do(req)
	retry, cerr = ClassifyTransportError(err, RedactURL("http://127.0.0.1:1/secret-path-token"))
	if !retry || ReasonOf(cerr) != ReasonNetwork {
		t.Errorf("refused connection: retry=%v reason=%v err=%v", retry, ReasonOf(cerr), cerr)
	}
	notifytest.AssertNoSecrets(t, []string{"secret-path-token"}, cerr)
}

func TestRedactURL(t *testing.T) {
	tests := map[string]string{
		"https://hooks.example.com/services/T/B/secret": "https://hooks.example.com/<redacted>",
		"https://u:p@example.com":                       "https://example.com/<redacted>",
		"http://example.com/":                           "http://example.com",
		"http://example.com?token=x":                    "http://example.com/<redacted>",
		"::not a url":                                   "<redacted>",
	}
	for in, want := range tests {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSecret(t *testing.T) {
	s := Secret("hunter2")
	notifytest.AssertNoSecrets(t, []string{"hunter2"}, s.String(), fmt.Sprintf("%v %s %#v %+v", s, s, s, struct{ S Secret }{s}))
	b, _ := s.MarshalJSON()
	y, _ := s.MarshalYAML()
	notifytest.AssertNoSecrets(t, []string{"hunter2"}, string(b), y)
	if got := Scrub("echo hunter2 back", "hunter2", ""); got != "echo <redacted> back" {
		t.Errorf("Scrub = %q", got)
	}
}

// scripted is a notifier that returns scripted results and counts calls.
type scripted struct {
	results []error
	calls   int
	max     int
}

func (s *scripted) Notify(context.Context, *Notification) (bool, error) {
	s.calls++
	var err error
	if s.calls <= len(s.results) {
		err = s.results[s.calls-1]
	}
	if err == nil {
		return false, nil
	}
	return ReasonOf(err).Retryable(), err
}

func (s *scripted) MaxAttempts() int { return s.max }

func testNotification() *Notification {
	return &Notification{ID: "r/inc-1/1/open", Receiver: "r", IncidentID: "inc-1", Kind: TransitionOpen, Sequence: 1,
		Verdict: notifytest.Anomaly()}
}

func TestRetrier(t *testing.T) {
	e5xx := &Error{Reason: ReasonServerError, StatusCode: 503}
	e429 := &Error{Reason: ReasonRateLimited, StatusCode: 429, RetryAfter: 45 * time.Second}
	e429big := &Error{Reason: ReasonRateLimited, StatusCode: 429, RetryAfter: time.Hour}
	e4xx := &Error{Reason: ReasonClientError, StatusCode: 400}
	eNet := &Error{Reason: ReasonNetwork, Err: errors.New("connection refused")}
	tests := []struct {
		name       string
		results    []error
		max        int
		wantErr    bool
		wantRetry  bool
		wantCalls  int
		wantSleeps []time.Duration
		wantResult string
	}{
		{"success", nil, 0, false, false, 1, nil, ResultSuccess},
		{"5xx then ok", []error{e5xx, e5xx}, 0, false, false, 3, []time.Duration{time.Second, 2 * time.Second}, ResultSuccess},
		{"network then ok", []error{eNet}, 0, false, false, 2, []time.Duration{time.Second}, ResultSuccess},
		{"429 honours retry-after", []error{e429}, 0, false, false, 2, []time.Duration{45 * time.Second}, ResultSuccess},
		{"429 retry-after capped", []error{e429big}, 0, false, false, 2, []time.Duration{10 * time.Minute}, ResultSuccess},
		{"4xx not retried", []error{e4xx}, 0, true, false, 1, nil, ResultFailure},
		{"exhausted", []error{e5xx, e5xx, e5xx, e5xx, e5xx, e5xx, e5xx}, 0, true, true, 5,
			[]time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}, ResultRetryLater},
		{"max_attempts from receiver", []error{e5xx, e5xx, e5xx}, 2, true, true, 2, []time.Duration{time.Second}, ResultRetryLater},
		{"backoff capped", []error{e5xx, e5xx, e5xx, e5xx, e5xx, e5xx, e5xx, e5xx}, 9, false, false, 9,
			[]time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second,
				32 * time.Second, time.Minute, time.Minute}, ResultSuccess},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := notifytest.NewFakeClock(t0)
			reg := prometheus.NewRegistry()
			m, err := NewMetrics(reg)
			if err != nil {
				t.Fatal(err)
			}
			logger, logs := notifytest.NewLogger()
			r := NewRetrier(RetryOptions{Clock: clock, Rand: func() float64 { return 0 }, Metrics: m, Logger: logger})
			n := &scripted{results: tt.results, max: tt.max}
			retry, err := r.Deliver(context.Background(), n, testNotification())
			if (err != nil) != tt.wantErr || retry != tt.wantRetry || n.calls != tt.wantCalls {
				t.Fatalf("Deliver = %v, %v after %d calls; want error %v retry %v calls %d", retry, err, n.calls,
					tt.wantErr, tt.wantRetry, tt.wantCalls)
			}
			if got := clock.Sleeps(); fmt.Sprint(got) != fmt.Sprint(tt.wantSleeps) {
				t.Errorf("sleeps = %v, want %v", got, tt.wantSleeps)
			}
			if got := testutil.ToFloat64(m.notifications.WithLabelValues("r", tt.wantResult)); got != 1 {
				t.Errorf("whyslow_notifications_total{result=%q} = %v, want 1\n%s", tt.wantResult, got, logs)
			}
			if fails := testutil.CollectAndCount(m.failures); (len(tt.results) > 0) != (fails > 0) {
				t.Errorf("failure series = %d", fails)
			}
		})
	}
}

func TestRetrierJitter(t *testing.T) {
	// Two server errors, then success: two waits, after attempts 1 and 2,
	// whose unjittered backoffs are 1s and 2s (the defaults). Jitter takes
	// Jitter·Rand() of each off.
	for _, tc := range []struct {
		name   string
		jitter float64
		rand   float64
		want   [2]time.Duration
	}{
		{"half at the top of Rand", 0.5, 0.999, [2]time.Duration{500500 * time.Microsecond, 1001 * time.Millisecond}},
		{"half at Rand 0.5", 0.5, 0.5, [2]time.Duration{750 * time.Millisecond, 1500 * time.Millisecond}},
		{"default 0.2", 0, 0.5, [2]time.Duration{900 * time.Millisecond, 1800 * time.Millisecond}},
		{"Rand 0 takes nothing off", 0.5, 0, [2]time.Duration{time.Second, 2 * time.Second}},
		{"disabled", -1, 0.999, [2]time.Duration{time.Second, 2 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := notifytest.NewFakeClock(t0)
			logger, _ := notifytest.NewLogger()
			draws := 0
			r := NewRetrier(RetryOptions{Clock: clock, Rand: func() float64 { draws++; return tc.rand }, Jitter: tc.jitter, Logger: logger})
			n := &scripted{results: []error{&Error{Reason: ReasonServerError}, &Error{Reason: ReasonServerError}}}
			if _, err := r.Deliver(context.Background(), n, testNotification()); err != nil {
				t.Fatal(err)
			}
			if n.calls != 3 {
				t.Errorf("%d attempts, want 3", n.calls)
			}
			sleeps := clock.Sleeps()
			if len(sleeps) != len(tc.want) {
				t.Fatalf("sleeps %v, want %v", sleeps, tc.want)
			}
			for i, d := range sleeps {
				// float rounding may cost a nanosecond
				if diff := d - tc.want[i]; diff < -time.Nanosecond || diff > time.Nanosecond {
					t.Errorf("sleep %d = %v, want %v", i, d, tc.want[i])
				}
				if full := r.Backoff(i + 1); d > full || d < full/2 {
					t.Errorf("sleep %d = %v outside [%v, %v]", i, d, full/2, full)
				}
			}
			if tc.jitter >= 0 && draws != 2 {
				t.Errorf("Rand drawn %d times, want once per wait (2)", draws)
			}
		})
	}
}

func TestRetrierCancelledIsNotPermanent(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	logger, _ := notifytest.NewLogger()
	r := NewRetrier(RetryOptions{Clock: notifytest.NewFakeClock(t0), Logger: logger})
	n := NotifierFunc(func(ctx context.Context, _ *Notification) (bool, error) {
		return false, &Error{Reason: ReasonCanceled, Err: ctx.Err()}
	})
	if retry, err := r.Deliver(ctx, n, testNotification()); err == nil || !retry {
		t.Errorf("cancelled delivery = %v, %v; want retry later", retry, err)
	}
}

func TestMetricsRegisterTwice(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	if a.notifications != b.notifications {
		t.Error("second NewMetrics should reuse the registered collectors")
	}
}

func TestNotificationValidate(t *testing.T) {
	ok := testNotification()
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := []*Notification{nil, {}, {ID: "x"}, {ID: "x", Receiver: "r", Kind: "bogus"}, {ID: "x", Receiver: "r", Kind: TransitionOpen}}
	for i, n := range bad {
		if err := n.Validate(); err == nil {
			t.Errorf("case %d: want error", i)
		}
	}
	if MakeID("slack", "inc-7", 3, TransitionUpdate) != "slack/inc-7/3/update" {
		t.Error("MakeID")
	}
}
