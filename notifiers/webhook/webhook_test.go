package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/whyslow/whyslow/notifiers"
	"github.com/whyslow/whyslow/notifiers/notifytest"
	"github.com/whyslow/whyslow/verdict"
)

func notification() *notifiers.Notification {
	return &notifiers.Notification{
		ID: "hook/inc-1/1/open", Receiver: "hook", IncidentID: "inc-1", IncidentKey: `model_name="llama"/queue_saturation`,
		Kind: notifiers.TransitionOpen, Sequence: 1, CreatedAt: notifytest.T0,
		VerdictURL: "http://whyslow:9109/api/v1/verdict?scope=x", Verdict: notifytest.Anomaly(),
	}
}

func TestPostSignedPayload(t *testing.T) {
	const secret = "hmac-secret-value"
	var got Payload
	var sigOK bool
	var hdr http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		sigOK = Verify([]byte(secret), body, r.Header.Get(TimestampHeader), r.Header.Get(SignatureHeader), time.Now(), 0) == nil
		hdr = r.Header.Clone()
		if err := json.Unmarshal(body, &got); err != nil {
			t.Errorf("payload: %v", err)
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	w, err := New(Config{URL: notifiers.Secret(srv.URL + "/hook"), HMACSecret: secret,
		Headers: map[string]notifiers.Secret{"Authorization": "Bearer tok-123"}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if retry, err := w.Notify(context.Background(), notification()); err != nil || retry {
		t.Fatalf("Notify = %v, %v", retry, err)
	}
	if !sigOK {
		t.Error("the test server could not verify the HMAC signature")
	}
	if !strings.HasPrefix(hdr.Get(SignatureHeader), "v1=") || hdr.Get(TimestampHeader) == "" || hdr.Get("Authorization") != "Bearer tok-123" ||
		hdr.Get("Content-Type") != "application/json" || hdr.Get(IDHeader) != "hook/inc-1/1/open" {
		t.Errorf("headers: %v", hdr)
	}
	if got.Version != PayloadVersion || got.Kind != "open" || got.IncidentKey != `model_name="llama"/queue_saturation` ||
		got.Verdict == nil || got.Verdict.Causes[0].ID != "queue_saturation" || got.Verdict.SchemaVersion != verdict.SchemaVersion ||
		!strings.HasPrefix(got.Summary, "ANOMALY (critical)") {
		t.Errorf("payload: %+v", got)
	}
	now := time.Now()
	if Verify([]byte("wrong"), []byte("{}"), strconv.FormatInt(now.Unix(), 10), Sign([]byte(secret), now.Unix(), []byte("{}")), now, 0) == nil {
		t.Error("Verify accepted a wrong secret")
	}
}

func TestNoSignatureWithoutSecret(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(SignatureHeader) != "" {
			t.Error("signature sent without a secret")
		}
	}))
	defer srv.Close()
	w, err := New(Config{URL: notifiers.Secret(srv.URL)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Notify(context.Background(), notification()); err != nil {
		t.Fatal(err)
	}
}

func TestStatusClasses(t *testing.T) {
	tests := []struct {
		status     int
		retryAfter string
		wantErr    bool
		wantRetry  bool
		reason     notifiers.Reason
		after      time.Duration
	}{
		{200, "", false, false, 0, 0},
		{201, "", false, false, 0, 0},
		{204, "", false, false, 0, 0},
		{302, "", true, false, notifiers.ReasonOther, 0},
		{400, "", true, false, notifiers.ReasonClientError, 0},
		{401, "", true, false, notifiers.ReasonAuthError, 0},
		{403, "", true, false, notifiers.ReasonAuthError, 0},
		{404, "", true, false, notifiers.ReasonClientError, 0},
		{422, "", true, false, notifiers.ReasonClientError, 0},
		{429, "", true, true, notifiers.ReasonRateLimited, 0},
		{429, "12", true, true, notifiers.ReasonRateLimited, 12 * time.Second},
		{500, "", true, true, notifiers.ReasonServerError, 0},
		{502, "", true, true, notifiers.ReasonServerError, 0},
		{503, "3", true, true, notifiers.ReasonServerError, 3 * time.Second},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.status, tt.retryAfter), func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tt.retryAfter != "" {
					w.Header().Set("Retry-After", tt.retryAfter)
				}
				if tt.status == 302 {
					w.Header().Set("Location", "/elsewhere")
				}
				w.WriteHeader(tt.status)
			}))
			defer srv.Close()
			w, err := New(Config{URL: notifiers.Secret(srv.URL)}, Options{Clock: notifytest.NewFakeClock(notifytest.T0)})
			if err != nil {
				t.Fatal(err)
			}
			retry, err := w.Notify(context.Background(), notification())
			if (err != nil) != tt.wantErr || retry != tt.wantRetry {
				t.Fatalf("Notify = %v, %v; want error %v retry %v", retry, err, tt.wantErr, tt.wantRetry)
			}
			if err != nil && (notifiers.ReasonOf(err) != tt.reason || notifiers.RetryAfterOf(err) != tt.after) {
				t.Errorf("reason %v retry-after %v; want %v %v", notifiers.ReasonOf(err), notifiers.RetryAfterOf(err), tt.reason, tt.after)
			}
		})
	}
}

func TestNetworkErrorsRetry(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	w, err := New(Config{URL: notifiers.Secret(url)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	retry, err := w.Notify(context.Background(), notification())
	if !retry || notifiers.ReasonOf(err) != notifiers.ReasonNetwork {
		t.Errorf("closed server: retry %v, reason %v, err %v", retry, notifiers.ReasonOf(err), err)
	}

	block := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(block)
	w, err = New(Config{URL: notifiers.Secret(slow.URL), Timeout: 20 * time.Millisecond}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	retry, err = w.Notify(context.Background(), notification())
	if !retry || notifiers.ReasonOf(err) != notifiers.ReasonTimeout {
		t.Errorf("slow server: retry %v, reason %v, err %v", retry, notifiers.ReasonOf(err), err)
	}
}

// TestNoSecretLeaks drives every failure path with secrets in the URL's
// credentials, path and query, in a header and in the HMAC key, and checks
// that no error or log line contains any of them.
func TestNoSecretLeaks(t *testing.T) {
	secrets := []string{"pa55w0rd-user", "T0KEN-in-path-9f8e", "query-t0ken-77aa", "Bearer-hdr-secret-4242", "hmac-key-31337"}
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A hostile or buggy receiver that echoes the request back in its error.
		status := http.StatusInternalServerError
		if strings.Contains(r.URL.Path, "/bad") {
			status = http.StatusBadRequest
		}
		w.WriteHeader(status)
		fmt.Fprintf(w, "echo %s %s %v", r.URL.String(), r.Header.Get("Authorization"), r.Header)
	}))
	defer echo.Close()
	host := strings.TrimPrefix(echo.URL, "http://")
	closed := httptest.NewServer(http.NotFoundHandler())
	closedHost := strings.TrimPrefix(closed.URL, "http://")
	closed.Close()

	urls := []string{
		"http://user:pa55w0rd-user@" + host + "/hooks/T0KEN-in-path-9f8e?token=query-t0ken-77aa",
		"http://user:pa55w0rd-user@" + host + "/bad/T0KEN-in-path-9f8e?token=query-t0ken-77aa",
		"http://user:pa55w0rd-user@" + closedHost + "/hooks/T0KEN-in-path-9f8e?token=query-t0ken-77aa",
	}
	logger, logs := notifytest.NewLogger()
	var outputs []any
	for _, u := range urls {
		cfg := Config{URL: notifiers.Secret(u), HMACSecret: "hmac-key-31337", MaxAttempts: 2,
			Headers: map[string]notifiers.Secret{"Authorization": "Bearer-hdr-secret-4242"}}
		w, err := New(cfg, Options{Logger: logger, Clock: notifytest.NewFakeClock(notifytest.T0)})
		if err != nil {
			t.Fatal(err)
		}
		r := notifiers.NewRetrier(notifiers.RetryOptions{Logger: logger, Clock: notifytest.NewFakeClock(notifytest.T0)})
		_, err = r.Deliver(context.Background(), w, notification())
		if err == nil {
			t.Fatalf("%s: want an error", notifiers.RedactURL(u))
		}
		outputs = append(outputs, err, fmt.Sprintf("%+v %#v", cfg, cfg))
		y, _ := yaml.Marshal(cfg)
		j, _ := json.Marshal(cfg)
		outputs = append(outputs, string(y), string(j))
	}
	// Invalid configurations must not echo the URL either.
	for _, bad := range []string{"ftp://x:pa55w0rd-user@h/T0KEN-in-path-9f8e", "http://[::1%pa55w0rd-user"} {
		_, err := New(Config{URL: notifiers.Secret(bad)}, Options{Logger: logger})
		if err == nil {
			t.Fatalf("want a validation error")
		}
		outputs = append(outputs, err)
	}
	outputs = append(outputs, logs.String())
	if !strings.Contains(logs.String(), "Notification failed") {
		t.Fatalf("expected failure logs, got:\n%s", logs)
	}
	notifytest.AssertNoSecrets(t, secrets, outputs...)
}

func TestConfig(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		wantErr []string
	}{
		{"minimal", "url: https://hooks.example.com/x\n", nil},
		{"full", "url: https://hooks.example.com/x\ntimeout: 3s\nmax_attempts: 2\nhmac_secret: abc\nheaders:\n  Authorization: Bearer x\n", nil},
		{"missing url", "timeout: 3s\n", []string{"url is required"}},
		{"bad scheme", "url: ftp://h/x\n", []string{"scheme must be http or https"}},
		{"no host", "url: http:///x\n", []string{"has no host"}},
		{"negatives", "url: http://h\ntimeout: -1s\nmax_attempts: -1\n", []string{"timeout must not be negative", "max_attempts must not be negative"}},
		{"reserved header", "url: http://h\nheaders:\n  x-whyslow-signature: forged\n  content-type: text/plain\n",
			[]string{`"X-Whyslow-Signature" is set by whyslow`, `"Content-Type" is set by whyslow`}},
		{"bad header", "url: http://h\nheaders:\n  \"a b\": x\n", []string{`header name "a b" is invalid`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c Config
			dec := yaml.NewDecoder(strings.NewReader(tt.yaml))
			dec.KnownFields(true)
			if err := dec.Decode(&c); err != nil {
				t.Fatal(err)
			}
			err := c.WithDefaults().Validate()
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("want error")
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	d := Config{URL: "http://h"}.WithDefaults()
	if d.Timeout != DefaultTimeout || d.MaxAttempts != DefaultMaxAttempts {
		t.Errorf("defaults: %+v", d)
	}
	var c Config
	dec := yaml.NewDecoder(strings.NewReader("url: http://h\nmax_attempt: 3\n"))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err == nil {
		t.Error("unknown key must be rejected with KnownFields")
	}
}

func TestInvalidNotification(t *testing.T) {
	w, err := New(Config{URL: "http://127.0.0.1:1"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	retry, err := w.Notify(context.Background(), &notifiers.Notification{ID: "x"})
	var e *notifiers.Error
	if retry || !errors.As(err, &e) || e.Reason != notifiers.ReasonEncode {
		t.Errorf("Notify(invalid) = %v, %v", retry, err)
	}
	if w.MaxAttempts() != DefaultMaxAttempts {
		t.Errorf("MaxAttempts = %d", w.MaxAttempts())
	}
}
