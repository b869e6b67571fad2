package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/whyslow/whyslow/notifiers"
	"github.com/whyslow/whyslow/notifiers/render"
	"github.com/whyslow/whyslow/triage"
)

// Headers the webhook sets.
const (
	// SignatureHeader carries "sha256=<hex>" when an HMAC secret is set.
	SignatureHeader = "X-Whyslow-Signature"
	// IDHeader carries the notification id so receivers can dedupe.
	IDHeader = "X-Whyslow-Notification-Id"
)

// PayloadVersion is the version of the webhook envelope.
const PayloadVersion = "1"

// Payload is the JSON body of a webhook POST (SCHEMA.md, "Webhook envelope").
type Payload struct {
	Version     string          `json:"version"`
	Receiver    string          `json:"receiver"`
	ID          string          `json:"id"`
	IncidentID  string          `json:"incident_id"`
	IncidentKey string          `json:"incident_key"`
	Kind        string          `json:"kind"`
	Sequence    int             `json:"sequence"`
	CreatedAt   time.Time       `json:"created_at"`
	VerdictURL  string          `json:"verdict_url,omitempty"`
	Summary     string          `json:"summary"`
	Verdict     *triage.Verdict `json:"verdict"`
}

// Options are the non-configuration dependencies of a webhook.
type Options struct {
	// Client sends requests (default: a client that does not follow redirects).
	Client *http.Client
	// Clock dates Retry-After (default notifiers.RealClock).
	Clock notifiers.Clock
	// Logger (default slog.Default()).
	Logger *slog.Logger
}

// Webhook is a webhook receiver.
type Webhook struct {
	cfg      Config
	client   *http.Client
	clock    notifiers.Clock
	log      *slog.Logger
	redacted string
	secrets  []string
}

// New validates cfg and returns a webhook receiver.
func New(cfg Config, o Options) (*Webhook, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if o.Client == nil {
		o.Client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if o.Clock == nil {
		o.Clock = notifiers.RealClock
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	w := &Webhook{cfg: cfg, client: o.Client, clock: o.Clock, redacted: notifiers.RedactURL(string(cfg.URL))}
	w.log = o.Logger.With("notifier", "webhook", "url", w.redacted)
	w.secrets = append(notifiers.URLSecrets(string(cfg.URL)), string(cfg.HMACSecret))
	for _, v := range cfg.Headers {
		w.secrets = append(w.secrets, string(v))
	}
	return w, nil
}

// MaxAttempts implements notifiers.MaxAttempter.
func (w *Webhook) MaxAttempts() int { return w.cfg.MaxAttempts }

// Sign returns the signature header value for body: "sha256=<hex>".
func Sign(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// Verify reports whether header is a valid signature of body with secret
// (constant-time). Receivers written in Go can use it.
func Verify(secret, body []byte, header string) bool {
	return hmac.Equal([]byte(header), []byte(Sign(secret, body)))
}

// Body returns the JSON body posted for n.
func Body(n *notifiers.Notification) ([]byte, error) {
	p := Payload{
		Version: PayloadVersion, Receiver: n.Receiver, ID: n.ID, IncidentID: n.IncidentID,
		IncidentKey: n.IncidentKey, Kind: n.Kind.String(), Sequence: n.Sequence, CreatedAt: n.CreatedAt,
		VerdictURL: n.VerdictURL, Summary: render.Summary(n.Verdict), Verdict: render.Normalize(n.Verdict),
	}
	return json.Marshal(&p)
}

// Notify posts n. 2xx is success; 429 and 5xx are retried (honouring
// Retry-After), network errors and timeouts too; other 4xx are not.
func (w *Webhook) Notify(ctx context.Context, n *notifiers.Notification) (bool, error) {
	if err := n.Validate(); err != nil {
		return false, notifiers.NewError(notifiers.ReasonEncode, err)
	}
	body, err := Body(n)
	if err != nil {
		return false, notifiers.NewError(notifiers.ReasonEncode, fmt.Errorf("encode payload: %w", err))
	}
	ctx, cancel := context.WithTimeout(ctx, w.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, string(w.cfg.URL), bytes.NewReader(body))
	if err != nil {
		return false, notifiers.NewError(notifiers.ReasonClientError, fmt.Errorf("build request for %s", w.redacted))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "whyslow")
	req.Header.Set(IDHeader, n.ID)
	for k, v := range w.cfg.Headers {
		req.Header.Set(k, string(v))
	}
	if w.cfg.HMACSecret != "" {
		req.Header.Set(SignatureHeader, Sign([]byte(w.cfg.HMACSecret), body))
	}
	resp, err := w.client.Do(req)
	if err != nil {
		retry, cerr := notifiers.ClassifyTransportError(err, w.redacted)
		return retry, fmt.Errorf("post webhook %s: %w", w.redacted, cerr)
	}
	defer resp.Body.Close()
	excerpt, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	retry, cerr := notifiers.ClassifyStatus(resp.StatusCode, resp.Header.Get("Retry-After"), w.clock.Now(),
		notifiers.Scrub(string(excerpt), w.secrets...))
	if cerr != nil {
		return retry, fmt.Errorf("post webhook %s: %w", w.redacted, cerr)
	}
	w.log.Debug("Webhook delivered", "notification", n.ID, "status", resp.StatusCode)
	return false, nil
}
