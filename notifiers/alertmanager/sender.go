package alertmanager

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/whyslow/whyslow/incident"
	"github.com/whyslow/whyslow/internal/redact"
	"github.com/whyslow/whyslow/notifiers"
)

// Bounds of one POST: a large fleet's alerts go in several requests.
const (
	MaxAlertsPerPost = 1000
	MaxBodyBytes     = 4 << 20
)

// maxExcerpt bounds the part of an error response quoted in logs and errors.
const maxExcerpt = 512

// Results of a POST (the result label of whyslow_alertmanager_sends_total).
const (
	resultSuccess = "success"
	resultFailure = "failure"
)

// Sender keeps one Alertmanager up to date with whyslow's incidents. Sync
// hands it the current incidents and returns at once; a background loop
// (Run) sends the latest set when it changed, when resend_interval has passed
// since the last successful send, or when the last attempt failed. Times are
// the at of each Sync, so a replay on simulated time behaves as live. Safe
// for concurrent use.
type Sender struct {
	name     string
	cfg      Config
	endpoint string
	shown    string // endpoint as logs may show it
	client   *http.Client
	log      *slog.Logger
	secrets  *redact.Secrets
	m        senderMetrics

	mu     sync.Mutex
	known  map[string]tracked // every alert of the latest set, by fingerprint
	latest *batch
	wake   chan struct{}

	sendMu sync.Mutex // one send at a time: Run's loop or Flush
	sent   sentState  // guarded by sendMu
}

// batch is one set of alerts to send, as of a Sync.
type batch struct {
	alerts []Alert
	at     time.Time
	key    string // what a change is judged on (setKey)
}

// sentState is what the last send did.
type sentState struct {
	ok     bool      // a send has succeeded
	key    string    // setKey of the last set sent successfully
	at     time.Time // its Sync time
	failed bool      // the last attempt failed: send at the next chance
	// failures counts the attempts that failed in a row: the log says so
	// at the 1st, 2nd, 4th, 8th… and every logEvery-th one, not every sync.
	failures int
}

// logEvery bounds the silence of a failure that persists: at a 5s sync,
// a line every 85 minutes.
const logEvery = 1024

// logFailure reports whether the n-th failure in a row is logged.
func logFailure(n int) bool { return n&(n-1) == 0 || n%logEvery == 0 }

type senderMetrics struct {
	sends       *prometheus.CounterVec
	alertsSent  *prometheus.GaugeVec
	lastSuccess *prometheus.GaugeVec
}

func newSenderMetrics(reg prometheus.Registerer) (senderMetrics, error) {
	m := senderMetrics{
		sends: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "whyslow_alertmanager_sends_total",
			Help: "POSTs of alerts to Alertmanager by receiver and result (success, failure).",
		}, []string{"receiver", "result"}),
		alertsSent: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "whyslow_alertmanager_alerts_sent",
			Help: "Alerts (firing and ended) in the last successful send to Alertmanager, by receiver.",
		}, []string{"receiver"}),
		lastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "whyslow_alertmanager_last_success_timestamp_seconds",
			Help: "Sync time of the last successful send to Alertmanager (an empty set, nothing to send, counts), by receiver.",
		}, []string{"receiver"}),
	}
	var err error
	if m.sends, err = notifiers.Register(reg, m.sends); err != nil {
		return m, err
	}
	if m.alertsSent, err = notifiers.Register(reg, m.alertsSent); err != nil {
		return m, err
	}
	if m.lastSuccess, err = notifiers.Register(reg, m.lastSuccess); err != nil {
		return m, err
	}
	return m, nil
}

// NewSender validates cfg (defaults applied) and returns a sender named name
// (the receiver label of its metrics and logs). client nil: a client that
// does not follow redirects; reg nil: metrics not registered; logger nil:
// slog.Default(). Start Run for background sends.
func NewSender(name string, cfg Config, client *http.Client, reg prometheus.Registerer, logger *slog.Logger) (*Sender, error) {
	cfg = cfg.WithDefaults()
	err := cfg.Validate()
	if name == "" {
		err = errors.Join(errors.New("alertmanager: receiver name is required"), err)
	}
	if err != nil {
		return nil, err
	}
	endpoint, err := cfg.endpoint()
	if err != nil {
		return nil, err
	}
	m, err := newSenderMetrics(reg)
	if err != nil {
		return nil, err
	}
	if client == nil {
		client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if logger == nil {
		logger = slog.Default()
	}
	s := &Sender{
		name: name, cfg: cfg, endpoint: endpoint, shown: redact.URL(endpoint), client: client,
		secrets: redact.NewSecrets(), m: m, known: map[string]tracked{}, wake: make(chan struct{}, 1),
	}
	cfg.AddSecrets(s.secrets)
	s.log = slog.New(redact.Handler(logger.Handler(), s.secrets)).With("notifier", "alertmanager", "receiver", name, "url", s.shown)
	for _, r := range []string{resultSuccess, resultFailure} {
		m.sends.WithLabelValues(name, r)
	}
	return s, nil
}

// Sync computes the alerts of incidents at time at (Alerts), adds the ones
// that must be ended (an incident whose labels changed, as on a severity
// escalation, or that left the tracker), and hands the set to the
// background loop. It does no I/O and never blocks on a send; only the
// latest set is kept.
func (s *Sender) Sync(incidents []incident.Incident, at time.Time, link func(incident.Incident) string) {
	cur := Alerts(incidents, at, link, s.cfg)
	s.mu.Lock()
	set, next := reconcile(s.known, cur, at, s.cfg.ResolvedRetention)
	s.known = next
	s.latest = &batch{alerts: set, at: at, key: setKey(set, at)}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Run sends after each Sync until ctx ends. It does not send on the way out:
// call Flush with a shutdown context for that.
func (s *Sender) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		}
		_ = s.send(ctx)
	}
}

// Flush sends the latest set now, when it is due (changed, resend_interval
// passed, or the last attempt failed), and waits for the result. It is for
// shutdown, and for replays and tests that drive Sync on simulated time.
func (s *Sender) Flush(ctx context.Context) error { return s.send(ctx) }

// due reports whether b must be sent; sendMu held.
func (s *Sender) due(b *batch) bool {
	return !s.sent.ok || s.sent.failed || b.key != s.sent.key || b.at.Sub(s.sent.at) >= s.cfg.ResendInterval
}

func (s *Sender) send(ctx context.Context) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	s.mu.Lock()
	b := s.latest
	s.mu.Unlock()
	if b == nil || !s.due(b) {
		return nil
	}
	if err := s.post(ctx, b.alerts); err != nil {
		s.sent.failed = true
		s.sent.failures++
		if logFailure(s.sent.failures) {
			s.log.Warn("Sending alerts to Alertmanager failed; retrying at the next sync, logging again at fewer of them",
				"alerts", len(b.alerts), "failures_in_a_row", s.sent.failures, "reason", notifiers.ReasonOf(err).String(), "err", err)
		}
		return err
	}
	if s.sent.failures > 0 {
		s.log.Info("Sending alerts to Alertmanager works again", "failures_in_a_row", s.sent.failures)
	}
	s.sent = sentState{ok: true, key: b.key, at: b.at}
	s.m.alertsSent.WithLabelValues(s.name).Set(float64(len(b.alerts)))
	s.m.lastSuccess.WithLabelValues(s.name).Set(float64(b.at.UnixNano()) / 1e9)
	return nil
}

// post sends alerts in chunks of at most MaxAlertsPerPost alerts and
// MaxBodyBytes bytes; it stops at the first failure (the whole set goes
// again next time: Alertmanager takes the same alert twice as one).
func (s *Sender) post(ctx context.Context, alerts []Alert) error {
	if len(alerts) == 0 {
		return nil
	}
	var body bytes.Buffer
	n, chunks := 0, 0
	flush := func() error {
		if n == 0 {
			return nil
		}
		body.WriteByte(']')
		err := s.postOne(ctx, body.Bytes())
		body.Reset()
		n = 0
		chunks++
		return err
	}
	for _, a := range alerts {
		enc, err := json.Marshal(a)
		if err != nil {
			return fmt.Errorf("alertmanager: encode alert: %w", err)
		}
		if n > 0 && (n == MaxAlertsPerPost || body.Len()+1+len(enc)+1 > MaxBodyBytes) {
			if err := flush(); err != nil {
				return err
			}
		}
		if n == 0 {
			body.WriteByte('[')
		} else {
			body.WriteByte(',')
		}
		body.Write(enc)
		n++
	}
	if err := flush(); err != nil {
		return err
	}
	s.log.Debug("Alerts sent", "alerts", len(alerts), "posts", chunks)
	return nil
}

// postOne POSTs one JSON array of alerts.
func (s *Sender) postOne(ctx context.Context, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	err := s.do(ctx, body)
	if err != nil {
		s.m.sends.WithLabelValues(s.name, resultFailure).Inc()
		return s.secrets.Error(err)
	}
	s.m.sends.WithLabelValues(s.name, resultSuccess).Inc()
	return nil
}

func (s *Sender) do(ctx context.Context, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.endpoint, bytes.NewReader(body))
	if err != nil {
		return notifiers.NewError(notifiers.ReasonClientError, fmt.Errorf("alertmanager: build request for %s", s.shown))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "whyslow")
	for k, v := range s.cfg.Headers {
		req.Header.Set(k, string(v))
	}
	switch {
	case s.cfg.BearerToken != "":
		req.Header.Set("Authorization", "Bearer "+string(s.cfg.BearerToken))
	case s.cfg.BasicAuth != nil:
		req.SetBasicAuth(s.cfg.BasicAuth.Username, string(s.cfg.BasicAuth.Password))
	}
	resp, err := s.client.Do(req)
	if err != nil {
		_, cerr := notifiers.ClassifyTransportError(err, s.shown)
		return fmt.Errorf("alertmanager: post alerts to %s: %w", s.shown, cerr)
	}
	defer resp.Body.Close()
	excerpt, _ := io.ReadAll(io.LimitReader(resp.Body, maxExcerpt+1))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	text := string(excerpt)
	if len(excerpt) > maxExcerpt {
		text = truncate(text, maxExcerpt)
	}
	// One line: the excerpt is quoted inside an error and a log line.
	text = strings.Join(strings.Fields(s.secrets.Scrub(text)), " ")
	_, cerr := notifiers.ClassifyStatus(resp.StatusCode, resp.Header.Get("Retry-After"), time.Now(), text)
	if cerr != nil {
		return fmt.Errorf("alertmanager: post alerts to %s: %w", s.shown, cerr)
	}
	return nil
}

// setKey identifies what a send would tell Alertmanager, leaving out the
// endsAt of firing alerts (it moves with every Sync): a set with the same
// key needs no send before resend_interval.
func setKey(alerts []Alert, at time.Time) string {
	type entry struct {
		FP          string            `json:"f"`
		Annotations map[string]string `json:"a"`
		StartsAt    time.Time         `json:"s"`
		EndsAt      time.Time         `json:"e,omitzero"`
		URL         string            `json:"u"`
	}
	entries := make([]entry, len(alerts))
	for i, a := range alerts {
		e := entry{FP: a.Fingerprint(), Annotations: a.Annotations, StartsAt: a.StartsAt, URL: a.GeneratorURL}
		if a.Resolved(at) {
			e.EndsAt = a.EndsAt
		}
		entries[i] = e
	}
	b, _ := json.Marshal(entries)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
