package alertmanager

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/whyslow/whyslow/incident"
	"github.com/whyslow/whyslow/notifiers"
	"github.com/whyslow/whyslow/testbed/secrettest"
	"github.com/whyslow/whyslow/verdict"
)

// fakeAM records the POSTs it gets and answers with status (200 by default).
type fakeAM struct {
	srv *httptest.Server

	mu      sync.Mutex
	posts   [][]Alert
	headers []http.Header
	paths   []string
	status  int
	reply   string
	hold    chan struct{} // when set, each request waits for it
}

func newFakeAM(t *testing.T) *fakeAM {
	f := &fakeAM{status: http.StatusOK}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		hold := f.hold
		f.mu.Unlock()
		if hold != nil {
			<-hold
		}
		var alerts []Alert
		body, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || json.Unmarshal(body, &alerts) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		f.posts = append(f.posts, alerts)
		f.headers = append(f.headers, r.Header.Clone())
		f.paths = append(f.paths, r.URL.Path)
		w.WriteHeader(f.status)
		_, _ = io.WriteString(w, f.reply)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAM) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.posts)
}

func (f *fakeAM) last() []Alert {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.posts[len(f.posts)-1]
}

func newTestSender(t *testing.T, cfg Config, reg prometheus.Registerer) *Sender {
	t.Helper()
	s, err := NewSender("am", cfg, nil, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func flush(t *testing.T, s *Sender) {
	t.Helper()
	if err := s.Flush(context.Background()); err != nil {
		t.Fatalf("flush: %v", err)
	}
}

// Sends follow the Sync times: an unchanged set waits for resend_interval,
// a change goes at once.
func TestSenderResendOnSimulatedTime(t *testing.T) {
	am := newFakeAM(t)
	s := newTestSender(t, Config{URL: am.srv.URL, ResendInterval: time.Minute}, nil)
	in := openIncident()
	steps := []struct {
		after  time.Duration
		change func()
		posts  int
	}{
		{0, nil, 1},
		{15 * time.Second, nil, 1},
		{45 * time.Second, nil, 1},
		{60 * time.Second, nil, 2}, // resend_interval since the last send
		{75 * time.Second, func() { in.TopCause = "chunked_prefill_mismatch" }, 3},
		{90 * time.Second, nil, 3},
		{135 * time.Second, nil, 4},
	}
	for _, st := range steps {
		if st.change != nil {
			st.change()
		}
		at := t0.Add(st.after)
		s.Sync([]incident.Incident{in}, at, nil)
		flush(t, s)
		if got := am.count(); got != st.posts {
			t.Fatalf("at +%s: %d posts, want %d", st.after, got, st.posts)
		}
		if got := am.last()[0].EndsAt; st.posts > 0 && got.After(at.Add(4*time.Minute)) {
			t.Fatalf("at +%s: endsAt %s is past four intervals", st.after, got)
		}
	}
}

// A severity escalation changes the labels: the next send ends the old
// alert, so Alertmanager does not hold two.
func TestSenderEscalationEndsOldLabels(t *testing.T) {
	am := newFakeAM(t)
	s := newTestSender(t, Config{URL: am.srv.URL}, nil)
	in := openIncident()
	in.Severity = verdict.SeverityWarning
	s.Sync([]incident.Incident{in}, t0, nil)
	flush(t, s)
	oldFP := am.last()[0].Fingerprint()

	in.Severity = verdict.SeverityCritical
	at := t0.Add(20 * time.Second)
	s.Sync([]incident.Incident{in}, at, nil)
	flush(t, s)
	got := am.last()
	if len(got) != 2 {
		t.Fatalf("escalation send has %d alerts, want the new one and the ended old one", len(got))
	}
	for _, a := range got {
		switch {
		case a.Fingerprint() == oldFP:
			if !a.EndsAt.Equal(at) || a.Labels["severity"] != "warning" {
				t.Errorf("old alert: severity %s endsAt %s, want warning ended at %s", a.Labels["severity"], a.EndsAt, at)
			}
		case a.Labels["severity"] == "critical":
			if !a.EndsAt.After(at) || !a.StartsAt.Equal(in.OpenedAt) {
				t.Errorf("new alert: startsAt %s endsAt %s", a.StartsAt, a.EndsAt)
			}
		default:
			t.Errorf("unexpected alert %v", a.Labels)
		}
	}
	// The ended alert keeps going out, unchanged, for resolved_retention.
	at = at.Add(DefaultResolvedRetention)
	s.Sync([]incident.Incident{in}, at, nil)
	flush(t, s)
	if got := am.last(); len(got) != 2 {
		t.Errorf("within retention: %d alerts, want 2", len(got))
	}
	s.Sync([]incident.Incident{in}, at.Add(time.Minute), nil)
	flush(t, s)
	if got := am.last(); len(got) != 1 || got[0].Labels["severity"] != "critical" {
		t.Errorf("past retention: %+v, want the critical alert alone", got)
	}
}

func TestSenderResolvedKeepsGoingOut(t *testing.T) {
	am := newFakeAM(t)
	s := newTestSender(t, Config{URL: am.srv.URL, ResendInterval: time.Minute, ResolvedRetention: 5 * time.Minute}, nil)
	in := openIncident()
	s.Sync([]incident.Incident{in}, t0, nil)
	flush(t, s)
	in.Status, in.ResolvedAt = incident.IncidentResolved, t0.Add(30*time.Second)
	for i, after := range []time.Duration{30 * time.Second, 90 * time.Second, 5*time.Minute + 30*time.Second} {
		s.Sync([]incident.Incident{in}, t0.Add(after), nil)
		flush(t, s)
		if am.count() != i+2 {
			t.Fatalf("at +%s: %d posts, want %d", after, am.count(), i+2)
		}
		if got := am.last(); len(got) != 1 || !got[0].EndsAt.Equal(in.ResolvedAt) {
			t.Fatalf("at +%s: %+v, want the alert ended at the resolve", after, got)
		}
	}
	// Past retention there is nothing to say.
	s.Sync([]incident.Incident{in}, t0.Add(6*time.Minute), nil)
	flush(t, s)
	if am.count() != 4 {
		t.Errorf("posts past retention: %d, want still 4", am.count())
	}
}

func TestSenderChunks(t *testing.T) {
	am := newFakeAM(t)
	s := newTestSender(t, Config{URL: am.srv.URL}, nil)
	var incs []incident.Incident
	for i := 0; i < 2*MaxAlertsPerPost+500; i++ {
		in := openIncident()
		in.Verdict, in.TopCause = nil, ""
		in.Scope.Labels = map[string]string{"model_name": fmt.Sprintf("m%d", i)}
		incs = append(incs, in)
	}
	s.Sync(incs, t0, nil)
	flush(t, s)
	am.mu.Lock()
	defer am.mu.Unlock()
	var sizes []int
	seen := map[string]bool{}
	for _, p := range am.posts {
		sizes = append(sizes, len(p))
		for _, a := range p {
			seen[a.Labels["model_name"]] = true
		}
	}
	if fmt.Sprint(sizes) != "[1000 1000 500]" || len(seen) != len(incs) {
		t.Errorf("posts of %v alerts, %d distinct; want [1000 1000 500], %d", sizes, len(seen), len(incs))
	}
}

func TestSenderAuthAndHeaders(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"bearer", Config{BearerToken: "tok-123456"}, "Bearer tok-123456"},
		{"basic", Config{BasicAuth: &BasicAuth{Username: "u", Password: "p4ssw0rd"}}, "Basic dTpwNHNzdzByZA=="},
		{"none", Config{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			am := newFakeAM(t)
			cfg := tt.cfg
			cfg.URL = am.srv.URL + "/prefix/"
			cfg.Headers = map[string]notifiers.Secret{"X-Scope-OrgID": "tenant-a"}
			s := newTestSender(t, cfg, nil)
			s.Sync([]incident.Incident{openIncident()}, t0, nil)
			flush(t, s)
			h := am.headers[0]
			if got := h.Get("Authorization"); got != tt.want {
				t.Errorf("Authorization = %q, want %q", got, tt.want)
			}
			if h.Get("X-Scope-OrgID") != "tenant-a" || h.Get("Content-Type") != "application/json" || h.Get("User-Agent") != "whyslow" {
				t.Errorf("headers = %v", h)
			}
			if am.paths[0] != "/prefix/api/v2/alerts" {
				t.Errorf("path = %q, want the prefix kept", am.paths[0])
			}
		})
	}
}

// A refusal is logged with Alertmanager's words, never the token, counted,
// and the same set goes again at the next Sync.
func TestSenderFailureLoggedAndRetried(t *testing.T) {
	token := secrettest.Secret("am-token")
	check := secrettest.New(t, token)
	am := newFakeAM(t)
	am.status = http.StatusBadRequest
	am.reply = `{"code":400,"message":"start time must be before end time; you sent Bearer ` + token + `"}` + strings.Repeat("x", 2000)
	reg := prometheus.NewRegistry()
	s, err := NewSender("am", Config{URL: am.srv.URL, BearerToken: notifiers.Secret(token)}, nil, reg, check.Logger())
	if err != nil {
		t.Fatal(err)
	}
	s.Sync([]incident.Incident{openIncident()}, t0, nil)
	err = s.Flush(context.Background())
	if err == nil {
		t.Fatal("flush: no error on a 400")
	}
	check.Error("flush error", err)
	logs := check.Logs()
	if !strings.Contains(logs, "start time must be before end time") || !strings.Contains(err.Error(), "bad request") {
		t.Errorf("Alertmanager's message is not quoted:\nerr %v\nlogs %s", err, logs)
	}
	if len(err.Error()) > 1000 {
		t.Errorf("error not truncated: %d bytes", len(err.Error()))
	}
	if got := testutil.ToFloat64(s.m.sends.WithLabelValues("am", "failure")); got != 1 {
		t.Errorf("failures = %v, want 1", got)
	}

	// Unchanged set, same time: sent again because the last attempt failed.
	am.mu.Lock()
	am.status = http.StatusOK
	am.mu.Unlock()
	s.Sync([]incident.Incident{openIncident()}, t0.Add(time.Second), nil)
	flush(t, s)
	if am.count() != 2 {
		t.Errorf("posts = %d, want the retry", am.count())
	}
	want := `
# HELP whyslow_alertmanager_alerts_sent Alerts (firing and ended) in the last successful send to Alertmanager, by receiver.
# TYPE whyslow_alertmanager_alerts_sent gauge
whyslow_alertmanager_alerts_sent{receiver="am"} 1
# HELP whyslow_alertmanager_last_success_timestamp_seconds Sync time of the last successful send to Alertmanager (an empty set, nothing to send, counts), by receiver.
# TYPE whyslow_alertmanager_last_success_timestamp_seconds gauge
whyslow_alertmanager_last_success_timestamp_seconds{receiver="am"} 1.700000001e+09
# HELP whyslow_alertmanager_sends_total POSTs of alerts to Alertmanager by receiver and result (success, failure).
# TYPE whyslow_alertmanager_sends_total counter
whyslow_alertmanager_sends_total{receiver="am",result="failure"} 1
whyslow_alertmanager_sends_total{receiver="am",result="success"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

func TestSenderNetworkErrorHidesURLPassword(t *testing.T) {
	pw := secrettest.Secret("urlpw")
	check := secrettest.New(t, pw)
	s, err := NewSender("am", Config{URL: "http://user:" + pw + "@127.0.0.1:1", Timeout: time.Second}, nil, nil, check.Logger())
	if err != nil {
		t.Fatal(err)
	}
	s.Sync([]incident.Incident{openIncident()}, t0, nil)
	err = s.Flush(context.Background())
	if err == nil {
		t.Fatal("no error from a closed port")
	}
	check.Error("flush error", err)
}

// Sync never waits for Alertmanager, and the loop sends the latest set.
func TestSenderSyncDoesNotBlock(t *testing.T) {
	am := newFakeAM(t)
	release := make(chan struct{})
	am.hold = release
	// No POST timeout to speak of: a send waits until release.
	s := newTestSender(t, Config{URL: am.srv.URL, Timeout: time.Hour}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	in := openIncident()
	// The 50 Syncs must all return while Alertmanager is still stuck (it is
	// released only below): a Sync that waited on the send would never
	// return. The timeout only turns that hang into a failure.
	synced := make(chan struct{})
	go func() {
		defer close(synced)
		for i := 0; i < 50; i++ {
			in.TopCause = in.Verdict.Causes[i%3].ID
			s.Sync([]incident.Incident{in}, t0.Add(time.Duration(i)*time.Second), nil)
		}
	}()
	select {
	case <-synced:
	case <-time.After(2 * time.Minute):
		close(release) // so that the fake Alertmanager can close
		t.Fatal("50 Syncs against a stuck Alertmanager did not return: Sync blocks on the send")
	}
	am.mu.Lock()
	am.hold = nil
	am.mu.Unlock()
	close(release)
	// The last set (cause index 49%3 = 1) is what Alertmanager ends with.
	deadline := time.Now().Add(2 * time.Minute) // a hang guard
	for {
		if n := am.count(); n > 0 && am.last()[0].Annotations["cause"] == in.Verdict.Causes[1].ID {
			if n > 3 {
				t.Errorf("%d posts for 50 Syncs: latest did not win", n)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("latest set not sent (%d posts)", am.count())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestNewSenderRejectsBadConfig(t *testing.T) {
	if _, err := NewSender("", Config{URL: "ftp://x"}, nil, nil, nil); err == nil ||
		!strings.Contains(err.Error(), "receiver name") || !strings.Contains(err.Error(), "scheme") {
		t.Errorf("err = %v", err)
	}
}

// Two senders share the metric families on one registry.
func TestSendersShareRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	newTestSender(t, Config{URL: "http://a"}, reg)
	newTestSender(t, Config{URL: "http://b"}, reg)
}

// TestSenderPersistentFailureLogsWithBackoff is finding 10 of issue 26: an
// Alertmanager that refused the credentials got a WARN every sync (5s),
// forever. The n-th failure in a row is logged at 1, 2, 4, 8…, and once
// sending works again an info line says so.
func TestSenderPersistentFailureLogsWithBackoff(t *testing.T) {
	check := secrettest.New(t)
	am := newFakeAM(t)
	am.status = http.StatusUnauthorized
	s, err := NewSender("am", Config{URL: am.srv.URL}, nil, nil, check.Logger())
	if err != nil {
		t.Fatal(err)
	}
	const syncs = 100
	for i := range syncs {
		s.Sync([]incident.Incident{openIncident()}, t0.Add(time.Duration(i)*5*time.Second), nil)
		if s.Flush(context.Background()) == nil {
			t.Fatal("flush: no error on a 401")
		}
	}
	if am.count() != syncs {
		t.Errorf("posts = %d, want every sync retried (%d)", am.count(), syncs)
	}
	logs := check.Logs()
	// 1, 2, 4, 8, 16, 32, 64.
	if n := strings.Count(logs, "level=WARN"); n != 7 {
		t.Errorf("%d WARN lines for %d failures in a row, want 7:\n%s", n, syncs, logs)
	}
	am.mu.Lock()
	am.status = http.StatusOK
	am.mu.Unlock()
	s.Sync([]incident.Incident{openIncident()}, t0.Add(syncs*5*time.Second), nil)
	flush(t, s)
	if logs := check.Logs(); !strings.Contains(logs, "works again") || !strings.Contains(logs, "failures_in_a_row=100") {
		t.Errorf("no line when sending recovered:\n%s", logs)
	}
}
