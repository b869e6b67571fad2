package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/whyslow/whyslow/internal/redact"
	"github.com/whyslow/whyslow/notifiers"
	"github.com/whyslow/whyslow/notifiers/render"
	"github.com/whyslow/whyslow/verdict"
)

// Headers the webhook sets.
const (
	// SignatureHeader carries "v1=<hex>" when an HMAC secret is set: the
	// HMAC-SHA256, keyed with the secret, of "v1:" + TimestampHeader's value
	// + ":" + the body (as Slack signs "v0:timestamp:body").
	SignatureHeader = "X-Whyslow-Signature"
	// TimestampHeader carries the Unix time (seconds) of the attempt; it is
	// signed, so a receiver that refuses stale timestamps (SignatureMaxAge)
	// cannot be fed a captured delivery again later.
	TimestampHeader = "X-Whyslow-Timestamp"
	// IDHeader carries the notification id so receivers can dedupe.
	IDHeader = "X-Whyslow-Notification-Id"
)

// SignatureVersion prefixes the signature and the signed text.
const SignatureVersion = "v1"

// SignatureMaxAge is how far from its receiver's clock a signed delivery's
// timestamp may be (Slack's five minutes); Verify refuses others.
const SignatureMaxAge = 5 * time.Minute

// PayloadVersion is the version of the webhook envelope.
const PayloadVersion = "1"

// Payload is the JSON body of a webhook POST (SCHEMA.md, "Webhook envelope").
type Payload struct {
	Version     string           `json:"version"`
	Receiver    string           `json:"receiver"`
	ID          string           `json:"id"`
	IncidentID  string           `json:"incident_id"`
	IncidentKey string           `json:"incident_key"`
	Kind        string           `json:"kind"`
	Sequence    int              `json:"sequence"`
	CreatedAt   time.Time        `json:"created_at"`
	VerdictURL  string           `json:"verdict_url,omitempty"`
	Summary     string           `json:"summary"`
	Verdict     *verdict.Verdict `json:"verdict"`
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
	secrets  *redact.Secrets
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
	w.secrets = redact.NewSecrets(string(cfg.HMACSecret))
	w.secrets.AddURL(string(cfg.URL), true)
	for _, v := range cfg.Headers {
		w.secrets.AddHeader(string(v))
	}
	return w, nil
}

// MaxAttempts implements notifiers.MaxAttempter.
func (w *Webhook) MaxAttempts() int { return w.cfg.MaxAttempts }

// Sign returns the SignatureHeader value for body sent at timestamp ts
// (Unix seconds): "v1=" + hex(HMAC-SHA256(secret, "v1:<ts>:<body>")).
func Sign(secret []byte, ts int64, body []byte) string {
	return SignatureVersion + "=" + hex.EncodeToString(mac(secret, strconv.FormatInt(ts, 10), body))
}

func mac(secret []byte, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(SignatureVersion + ":" + ts + ":"))
	m.Write(body)
	return m.Sum(nil)
}

// Errors of Verify.
var (
	ErrBadSignature = errors.New("webhook signature does not match")
	ErrStale        = errors.New("webhook timestamp too old or in the future")
)

// Verify checks a delivery as a receiver should, over the raw body before
// parsing it: the signature (compared as bytes in constant time, so the
// spelling of its hex does not matter) over the timestamp and the body, and
// the timestamp within maxAge of now (SignatureMaxAge when zero). Receivers
// written in Go can use it; others follow the same steps.
func Verify(secret, body []byte, timestamp, signature string, now time.Time, maxAge time.Duration) error {
	if maxAge <= 0 {
		maxAge = SignatureMaxAge
	}
	ts, err := strconv.ParseInt(strings.TrimSpace(timestamp), 10, 64)
	if err != nil {
		return fmt.Errorf("%w: timestamp %q is not Unix seconds", ErrStale, timestamp)
	}
	if d := now.Sub(time.Unix(ts, 0)); d > maxAge || d < -maxAge {
		return fmt.Errorf("%w: %s from now", ErrStale, d.Round(time.Second))
	}
	version, hexSig, ok := strings.Cut(strings.TrimSpace(signature), "=")
	if !ok || !strings.EqualFold(version, SignatureVersion) {
		return fmt.Errorf("%w: want %s=<hex>", ErrBadSignature, SignatureVersion)
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil || !hmac.Equal(got, mac(secret, strconv.FormatInt(ts, 10), body)) {
		return ErrBadSignature
	}
	return nil
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
		// Each attempt is signed at its own time: a retry is not stale.
		ts := w.clock.Now().Unix()
		req.Header.Set(TimestampHeader, strconv.FormatInt(ts, 10))
		req.Header.Set(SignatureHeader, Sign([]byte(w.cfg.HMACSecret), ts, body))
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
		w.secrets.Scrub(string(excerpt)))
	if cerr != nil {
		return retry, fmt.Errorf("post webhook %s: %w", w.redacted, cerr)
	}
	w.log.Debug("Webhook delivered", "notification", n.ID, "status", resp.StatusCode)
	return false, nil
}
