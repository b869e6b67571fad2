// Package amtest starts the real Alertmanager (Debian's
// prometheus-alertmanager) for integration tests: on a free loopback port,
// without clustering, with its data in the test's temporary directory; and
// gives a webhook receiver that records what Alertmanager notifies.
package amtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/whyslow/whyslow/testbed/promtest"
)

// Bin is where Debian's prometheus-alertmanager package installs the server.
const Bin = "/usr/bin/prometheus-alertmanager"

// SkipUnlessAvailable skips the test under -short or when Alertmanager is
// not installed.
func SkipUnlessAvailable(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping integration test in -short mode")
	}
	if _, err := os.Stat(Bin); err != nil {
		t.Skipf("skipping: %s not installed (apt-get install prometheus-alertmanager, or make test-deps)", Bin)
	}
}

// Start runs Alertmanager with config (its YAML) and returns its base URL
// once /-/ready answers (at most 20 s). The server is killed when the test
// ends; its log is shown if the test failed.
func Start(ctx context.Context, t testing.TB, config string) string {
	t.Helper()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "alertmanager.yml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := promtest.FreeLoopbackAddr(t)
	return promtest.StartServer(ctx, t, "alertmanager", addr, Bin,
		"--config.file="+cfgPath,
		"--storage.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--cluster.listen-address=",
		"--log.level=warn",
	)
}

// Alert is an alert as Alertmanager holds it (GET /api/v2/alerts) or
// notifies it (webhook).
type Alert struct {
	Fingerprint string            `json:"fingerprint"`
	Status      json.RawMessage   `json:"status"` // an object in the API, a string in webhooks
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	StartsAt    time.Time         `json:"startsAt"`
	EndsAt      time.Time         `json:"endsAt"`
}

// Alerts returns the alerts Alertmanager at base holds unresolved (GET
// /api/v2/alerts leaves resolved ones out).
func Alerts(t testing.TB, base string) []Alert {
	t.Helper()
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(base + "/api/v2/alerts")
	if err != nil {
		t.Fatalf("get alerts: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("get alerts: status %d: %s", resp.StatusCode, body)
	}
	var out []Alert
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("decode alerts: %v", err)
	}
	return out
}

// Notification is one webhook message of Alertmanager.
type Notification struct {
	Receiver string  `json:"receiver"`
	Status   string  `json:"status"` // firing or resolved
	Alerts   []Alert `json:"alerts"`
}

// Receiver is a webhook endpoint that records Alertmanager's notifications.
type Receiver struct {
	URL string

	mu    sync.Mutex
	notes []Notification
	bad   []string
}

// NewReceiver starts a receiver, closed when the test ends. A message that
// does not decode fails the test there.
func NewReceiver(t testing.TB) *Receiver {
	t.Helper()
	r := &Receiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var n Notification
		err := json.NewDecoder(io.LimitReader(req.Body, 8<<20)).Decode(&n)
		r.mu.Lock()
		if err != nil {
			r.bad = append(r.bad, err.Error())
		} else {
			r.notes = append(r.notes, n)
		}
		r.mu.Unlock()
	}))
	t.Cleanup(func() {
		srv.Close()
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, b := range r.bad {
			t.Errorf("undecodable webhook message: %s", b)
		}
	})
	r.URL = srv.URL
	return r
}

// Notifications returns the notifications received so far.
func (r *Receiver) Notifications() []Notification {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Notification(nil), r.notes...)
}

// WaitNotifications polls (bounded) until the receiver has n
// notifications and fails if it gets more.
func (r *Receiver) WaitNotifications(t testing.TB, n int, limit time.Duration) []Notification {
	t.Helper()
	var notes []Notification
	WaitFor(t, limit, "alertmanager notifications", func() bool {
		notes = r.Notifications()
		if len(notes) > n {
			t.Fatalf("%d notifications, want %d: %s", len(notes), n, Dump(notes))
		}
		return len(notes) == n
	})
	return notes
}

// Quiet watches the receiver for d and fails at once if it does not hold
// exactly n notifications.
func (r *Receiver) Quiet(t testing.TB, n int, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if notes := r.Notifications(); len(notes) != n {
			t.Fatalf("%d notifications, want %d: %s", len(notes), n, Dump(notes))
		}
	}
}

// WaitFor polls ok every 100 ms until it holds, failing after limit.
func WaitFor(t testing.TB, limit time.Duration, what string, ok func() bool) {
	t.Helper()
	for end := time.Now().Add(limit); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatalf("timed out after %s waiting for %s", limit, what)
}

// Dump renders v as indented JSON, for failure messages.
func Dump(v any) string {
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}

// WebhookConfig returns an Alertmanager configuration that routes every
// alert, grouped by groupBy, to url with send_resolved, group_wait and
// group_interval 1 s and repeat_interval 1 h (no repeats in a test).
func WebhookConfig(url string, groupBy ...string) string {
	gb, _ := json.Marshal(groupBy)
	return fmt.Sprintf(`route:
  receiver: test
  group_by: %s
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: test
    webhook_configs:
      - url: %s
        send_resolved: true
`, gb, url)
}
