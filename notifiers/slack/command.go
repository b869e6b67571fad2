package slack

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/slack-go/slack"
	"go.yaml.in/yaml/v3"

	"github.com/whyslow/whyslow/notifiers"
	"github.com/whyslow/whyslow/verdict"
)

// CommandPath is where the daemon mounts the slash command handler.
const CommandPath = "/slack/commands"

// Slash command defaults.
const (
	DefaultCommandWindow  = 5 * time.Minute
	DefaultMaxWindow      = 24 * time.Hour
	DefaultCommandTimeout = 2 * time.Minute
	DefaultMaxConcurrent  = 4
	// SignatureMaxAge is how old a request's timestamp may be (Slack's
	// recommendation); a signature seen again within it is a replay.
	SignatureMaxAge = 5 * time.Minute
	maxCommandBody  = 64 << 10
	maxReplayCache  = 100000
)

// Triager runs a triage for a scope (PromQL label matchers without braces,
// "" for the daemon's default scope) over the last window. The daemon
// implements it; the handler does not import the daemon.
type Triager interface {
	Triage(ctx context.Context, scope string, window time.Duration) (*verdict.Verdict, error)
}

// TriagerFunc adapts a function to Triager.
type TriagerFunc func(ctx context.Context, scope string, window time.Duration) (*verdict.Verdict, error)

// Triage calls f.
func (f TriagerFunc) Triage(ctx context.Context, scope string, window time.Duration) (*verdict.Verdict, error) {
	return f(ctx, scope, window)
}

// CommandConfig is the `slack_command:` section of the daemon config.
type CommandConfig struct {
	// SigningSecret is the Slack app's signing secret (${ENV} expanded).
	SigningSecret notifiers.Secret `yaml:"signing_secret" json:"signing_secret"`
	// DefaultWindow is the window when the command gives none (default 5m).
	DefaultWindow time.Duration `yaml:"default_window,omitempty" json:"default_window,omitempty"`
	// MaxWindow bounds the window a user may ask for (default 24h).
	MaxWindow time.Duration `yaml:"max_window,omitempty" json:"max_window,omitempty"`
	// Timeout bounds one triage (default 2m).
	Timeout time.Duration `yaml:"timeout,omitempty" json:"timeout,omitempty"`
	// MaxConcurrent bounds triages running at once (default 4); more are
	// answered "busy".
	MaxConcurrent int `yaml:"max_concurrent,omitempty" json:"max_concurrent,omitempty"`
}

// UnmarshalYAML decodes strictly and validates.
func (c *CommandConfig) UnmarshalYAML(n *yaml.Node) error {
	type plain CommandConfig
	var p plain
	if err := decodeStrict(n, &p); err != nil {
		return err
	}
	*c = CommandConfig(p)
	if err := expandSecret(&c.SigningSecret, "signing_secret"); err != nil {
		return err
	}
	return c.Validate()
}

// Validate reports every problem with c, joined.
func (c *CommandConfig) Validate() error {
	var errs []error
	if c.SigningSecret == "" {
		errs = append(errs, errors.New("slack_command: signing_secret is required"))
	}
	if c.DefaultWindow < 0 || c.MaxWindow < 0 || c.Timeout < 0 || c.MaxConcurrent < 0 {
		errs = append(errs, errors.New("slack_command: default_window, max_window, timeout and max_concurrent must not be negative"))
	}
	if c.MaxWindow > 0 && c.DefaultWindow > c.MaxWindow {
		errs = append(errs, errors.New("slack_command: default_window is larger than max_window"))
	}
	return errors.Join(errs...)
}

// WithDefaults returns c with zero values replaced by defaults.
func (c CommandConfig) WithDefaults() CommandConfig {
	if c.DefaultWindow == 0 {
		c.DefaultWindow = DefaultCommandWindow
	}
	if c.MaxWindow == 0 {
		c.MaxWindow = DefaultMaxWindow
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultCommandTimeout
	}
	if c.MaxConcurrent == 0 {
		c.MaxConcurrent = DefaultMaxConcurrent
	}
	return c
}

// CommandOptions are the handler's dependencies. Zero values get defaults.
type CommandOptions struct {
	// Triager runs the triage (required).
	Triager Triager
	// Logger logs (default slog.Default()).
	Logger *slog.Logger
	// HTTPClient posts to response_url (default: 10s timeout).
	HTTPClient *http.Client
	// Now is the clock for the timestamp and replay checks (default time.Now).
	Now func() time.Time
	// AllowResponseURL says whether the handler may post to a response_url
	// (default: https on slack.com or one of its subdomains).
	AllowResponseURL func(u *url.URL) bool
	// VerdictURL optionally links a verdict in whyslow's API.
	VerdictURL func(v *verdict.Verdict) string
}

// CommandHandler serves POST /slack/commands: it verifies Slack's request
// signature, acknowledges at once with an ephemeral "triaging…", runs the
// triage in the background and posts the verdict to the command's
// response_url. A request with a bad, stale or replayed signature gets 401
// and runs nothing.
type CommandHandler struct {
	cfg    CommandConfig
	o      CommandOptions
	log    *slog.Logger
	sem    chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex
	seen map[[32]byte]time.Time // hash of the signed content → request timestamp
}

// NewCommandHandler validates cfg and returns the handler.
func NewCommandHandler(cfg CommandConfig, o CommandOptions) (*CommandHandler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if o.Triager == nil {
		return nil, errors.New("slack_command: no triager")
	}
	cfg = cfg.WithDefaults()
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: DefaultTimeout}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.AllowResponseURL == nil {
		o.AllowResponseURL = slackHTTPS
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &CommandHandler{
		cfg: cfg, o: o, log: o.Logger.With("component", "slack_command"),
		sem: make(chan struct{}, cfg.MaxConcurrent), ctx: ctx, cancel: cancel,
		seen: map[[32]byte]time.Time{},
	}, nil
}

// slackHTTPS allows https URLs on slack.com and its subdomains.
func slackHTTPS(u *url.URL) bool {
	h := strings.ToLower(u.Hostname())
	return u.Scheme == "https" && (h == "slack.com" || strings.HasSuffix(h, ".slack.com"))
}

// Close cancels running triages and waits for them to finish.
func (h *CommandHandler) Close() {
	h.cancel()
	h.wg.Wait()
}

// Wait waits for the background triages started so far.
func (h *CommandHandler) Wait() { h.wg.Wait() }

// ephemeral is the immediate answer to a command.
type ephemeral struct {
	ResponseType string `json:"response_type"`
	Text         string `json:"text"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Usage is the command's help text.
const Usage = "Usage: `/whyslow [scope] [window]`, e.g. `/whyslow model_name=\"llama-70b\" 15m`, " +
	"`/whyslow namespace=prod,cluster=us-east 1h` or `/whyslow llama-70b`. " +
	"Scope is PromQL label matchers (a bare word is a model name); window defaults to 5m."

// ServeHTTP implements http.Handler.
func (h *CommandHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxCommandBody))
	if err != nil {
		http.Error(w, "request body too large or unreadable", http.StatusRequestEntityTooLarge)
		return
	}
	if err := h.verify(r.Header, body); err != nil {
		h.log.Warn("Slash command rejected", "remote", r.RemoteAddr, "err", err)
		http.Error(w, "invalid request signature", http.StatusUnauthorized)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	cmd, err := slack.SlashCommandParse(r)
	if err != nil {
		http.Error(w, "bad form", http.StatusBadRequest)
		return
	}
	ru, err := url.Parse(cmd.ResponseURL)
	if err != nil || cmd.ResponseURL == "" || !h.o.AllowResponseURL(ru) {
		h.log.Warn("Slash command has an unusable response_url", "user", cmd.UserID, "response_url", notifiers.RedactURL(cmd.ResponseURL))
		http.Error(w, "missing or disallowed response_url", http.StatusBadRequest)
		return
	}
	text := strings.TrimSpace(cmd.Text)
	if text == "help" || text == "-h" || text == "--help" {
		writeJSON(w, http.StatusOK, ephemeral{"ephemeral", Usage})
		return
	}
	scope, window, err := ParseCommandText(text, h.cfg.DefaultWindow, h.cfg.MaxWindow)
	if err != nil {
		writeJSON(w, http.StatusOK, ephemeral{"ephemeral", ":warning: " + esc(err.Error()) + "\n" + Usage})
		return
	}
	select {
	case h.sem <- struct{}{}:
	default:
		writeJSON(w, http.StatusOK, ephemeral{"ephemeral", ":hourglass: whyslow is busy with other triages; try again in a minute."})
		return
	}
	h.wg.Add(1)
	go h.run(cmd, scope, window)
	shown := scope
	if shown == "" {
		shown = "the default scope"
	} else {
		shown = code(shown)
	}
	writeJSON(w, http.StatusOK, ephemeral{"ephemeral",
		fmt.Sprintf(":hourglass_flowing_sand: Triaging %s over the last %s…", shown, model.Duration(window))})
}

// verify checks the signature, the timestamp's age (both against Slack's
// verifier and the handler's clock) and replays.
func (h *CommandHandler) verify(hdr http.Header, body []byte) error {
	sv, err := slack.NewSecretsVerifier(hdr, string(h.cfg.SigningSecret))
	if err != nil {
		return fmt.Errorf("verify signature: %w", err)
	}
	if _, err := sv.Write(body); err != nil {
		return fmt.Errorf("verify signature: %w", err)
	}
	if err := sv.Ensure(); err != nil {
		return fmt.Errorf("verify signature: %w", err)
	}
	ts, err := strconv.ParseInt(hdr.Get("X-Slack-Request-Timestamp"), 10, 64)
	if err != nil {
		return errors.New("verify signature: bad timestamp")
	}
	now := h.o.Now()
	at := time.Unix(ts, 0)
	if d := now.Sub(at); d > SignatureMaxAge || d < -SignatureMaxAge {
		return fmt.Errorf("verify signature: %w", slack.ErrExpiredTimestamp)
	}
	// The replay key is what was signed (timestamp and body), not the
	// header's spelling: the hex of a signature verifies in either case, so
	// keying on the header let an upper-cased copy through.
	key := sha256.Sum256([]byte("v0:" + hdr.Get("X-Slack-Request-Timestamp") + ":" + string(body)))
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, t := range h.seen {
		if now.Sub(t) > SignatureMaxAge {
			delete(h.seen, k)
		}
	}
	if _, dup := h.seen[key]; dup {
		return errors.New("verify signature: replayed request")
	}
	if len(h.seen) >= maxReplayCache {
		return errors.New("verify signature: too many requests in the replay window")
	}
	h.seen[key] = at
	return nil
}

// run triages in the background and posts the answer to response_url.
func (h *CommandHandler) run(cmd slack.SlashCommand, scope string, window time.Duration) {
	defer h.wg.Done()
	defer func() { <-h.sem }()
	ctx, cancel := context.WithTimeout(h.ctx, h.cfg.Timeout)
	defer cancel()
	log := h.log.With("user", cmd.UserID, "channel", cmd.ChannelID, "scope", scope, "window", window)
	v, err := h.o.Triager.Triage(ctx, scope, window)
	var msg *slack.WebhookMessage
	switch {
	case err != nil:
		log.Warn("Slash command triage failed", "err", err)
		msg = &slack.WebhookMessage{ResponseType: "ephemeral",
			Text: ":x: Triage failed: " + esc(truncate(err.Error(), 500))}
	case v == nil:
		msg = &slack.WebhookMessage{ResponseType: "ephemeral", Text: ":x: Triage returned no verdict."}
	default:
		o := RenderOptions{Kind: KindStandalone}
		if cmd.UserID != "" && validID(cmd.UserID) {
			o.Change = fmt.Sprintf(":mag: `/whyslow` asked by <@%s>", cmd.UserID)
		}
		if h.o.VerdictURL != nil {
			o.VerdictURL = h.o.VerdictURL(v)
		}
		m := Blocks(v, o)
		msg = &slack.WebhookMessage{ResponseType: "in_channel", Text: m.Text, Blocks: &slack.Blocks{BlockSet: m.Blocks}}
	}
	pctx, pcancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultTimeout)
	defer pcancel()
	if err := slack.PostWebhookCustomHTTPContext(pctx, cmd.ResponseURL, h.o.HTTPClient, msg); err != nil {
		_, cerr := Classify(err, cmd.ResponseURL)
		log.Error("Slash command answer not delivered", "reason", notifiers.ReasonOf(cerr), "err", cerr)
		return
	}
	log.Info("Slash command answered")
}

var idRE = regexp.MustCompile(`^[A-Z0-9]+$`)

func validID(s string) bool { return idRE.MatchString(s) }

var (
	bareWord = regexp.MustCompile(`^[A-Za-z0-9_.:/-]+$`)
	kvPair   = regexp.MustCompile(`^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!=|!~|=)\s*([^"',]*?)\s*$`)
)

// ParseCommandText reads "/whyslow [scope] [window]": a trailing Prometheus
// duration is the window (default def, at most max); the rest is the scope,
// PromQL label matchers with or without braces, unquoted values accepted
// (namespace=prod), or a bare word taken as a model name.
func ParseCommandText(text string, def, max time.Duration) (scope string, window time.Duration, err error) {
	window = def
	fields := strings.Fields(text)
	if n := len(fields); n > 0 {
		if d, derr := model.ParseDuration(fields[n-1]); derr == nil {
			window = time.Duration(d)
			fields = fields[:n-1]
		}
	}
	if window <= 0 {
		return "", 0, errors.New("window must be positive")
	}
	if max > 0 && window > max {
		return "", 0, fmt.Errorf("window %s is longer than the %s allowed", model.Duration(window), model.Duration(max))
	}
	scope, err = NormalizeScope(strings.Join(fields, " "))
	return scope, window, err
}

// NormalizeScope turns what a user typed into PromQL label matchers without
// braces, checked by the PromQL parser.
func NormalizeScope(s string) (string, error) {
	s = strings.TrimSpace(s)
	s = strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(s, "{"), "}"))
	if s == "" {
		return "", nil
	}
	p := parser.NewParser(parser.Options{})
	if ms, err := p.ParseMetricSelector("{" + s + "}"); err == nil {
		return s, noMetricName(ms)
	}
	if bareWord.MatchString(s) && !strings.Contains(s, "=") {
		return `model_name=` + strconv.Quote(s), nil
	}
	parts := strings.Split(s, ",")
	out := make([]string, 0, len(parts))
	for _, part := range parts {
		m := kvPair.FindStringSubmatch(part)
		if m == nil {
			return "", fmt.Errorf("cannot read scope %q: want label matchers like model_name=\"llama\"", truncate(s, 200))
		}
		out = append(out, m[1]+m[2]+strconv.Quote(m[3]))
	}
	norm := strings.Join(out, ",")
	ms, err := p.ParseMetricSelector("{" + norm + "}")
	if err != nil {
		return "", fmt.Errorf("cannot read scope %q: %v", truncate(s, 200), err)
	}
	return norm, noMetricName(ms)
}

// noMetricName refuses a __name__ matcher: the scope narrows the rules'
// queries by labels, and each query picks its own metric.
func noMetricName(ms []*labels.Matcher) error {
	for _, m := range ms {
		if m.Name == labels.MetricName {
			return errors.New("the scope cannot match __name__: give label matchers such as model_name=\"llama\"")
		}
	}
	return nil
}
