package slack

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/whyslow/whyslow/notifiers"
)

// Defaults.
const (
	// DefaultAPIURL is Slack's Web API base URL.
	DefaultAPIURL = "https://slack.com/api/"
	// DefaultTimeout bounds one Slack API call.
	DefaultTimeout = 10 * time.Second
	// DefaultRateLimitWait is the wait hinted to the retry stage when Slack
	// answers 429 (or error "ratelimited") without a Retry-After header.
	DefaultRateLimitWait = 30 * time.Second
	// DefaultMaxCauses caps the causes rendered into one message so that it
	// stays below Slack's 50-block limit.
	DefaultMaxCauses = 5
)

// Mode is how the receiver talks to Slack.
type Mode int

// Modes.
const (
	// ModeBot posts with a bot token (chat.postMessage, chat.update, files):
	// one living parent message per incident with a thread of updates.
	ModeBot Mode = iota
	// ModeWebhook posts to incoming webhooks: one message per transition.
	ModeWebhook
)

// String returns "bot" or "webhook".
func (m Mode) String() string {
	switch m {
	case ModeBot:
		return "bot"
	case ModeWebhook:
		return "webhook"
	}
	return fmt.Sprintf("mode(%d)", int(m))
}

// LookupEnv is the environment lookup used to expand ${NAME} secrets; tests
// may replace it.
var LookupEnv = os.LookupEnv

var envRef = regexp.MustCompile(`^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$`)

// expandSecret replaces a secret written exactly as ${NAME} with the
// environment variable NAME (when the daemon's loader has not already
// expanded it). The error names the variable, never a value.
func expandSecret(s *notifiers.Secret, field string) error {
	m := envRef.FindStringSubmatch(strings.TrimSpace(string(*s)))
	if m == nil {
		return nil
	}
	v, ok := LookupEnv(m[1])
	if !ok || v == "" {
		return fmt.Errorf("slack: %s: environment variable %s is not set", field, m[1])
	}
	*s = notifiers.Secret(v)
	return nil
}

// Route sends incidents whose scope labels match to a channel (bot mode) or
// an incoming webhook (webhook mode). Routes are tried in order and the
// first match wins, like Alertmanager's routes without nesting.
type Route struct {
	// Match holds label values that must be equal.
	Match map[string]string `yaml:"match,omitempty" json:"match,omitempty"`
	// MatchRE holds anchored regular expressions that label values must match.
	MatchRE map[string]string `yaml:"match_re,omitempty" json:"match_re,omitempty"`
	// Channel is the channel id or #name (bot mode).
	Channel string `yaml:"channel,omitempty" json:"channel,omitempty"`
	// WebhookURL is the incoming webhook (webhook mode); empty uses the
	// receiver's webhook_url.
	WebhookURL notifiers.Secret `yaml:"webhook_url,omitempty" json:"webhook_url,omitempty"`

	res map[string]*regexp.Regexp
}

// Config is the `slack:` section of a receiver.
type Config struct {
	// Token is the bot token (xoxb-…); it selects bot mode.
	Token notifiers.Secret `yaml:"token,omitempty" json:"token,omitempty"`
	// WebhookURL is an incoming webhook URL; it selects webhook mode.
	WebhookURL notifiers.Secret `yaml:"webhook_url,omitempty" json:"webhook_url,omitempty"`
	// Channel is the default channel (bot mode) when no route matches.
	Channel string `yaml:"channel,omitempty" json:"channel,omitempty"`
	// Routes choose the channel or webhook from the scope labels.
	Routes []Route `yaml:"routes,omitempty" json:"routes,omitempty"`
	// APIURL is the Web API base URL (default https://slack.com/api/).
	APIURL string `yaml:"api_url,omitempty" json:"api_url,omitempty"`
	// Timeout bounds one API call (default 10s).
	Timeout time.Duration `yaml:"timeout,omitempty" json:"timeout,omitempty"`
	// SendChart uploads the latency chart into the thread on open and update
	// (bot mode, needs files:write and a chart source; default true).
	SendChart *bool `yaml:"send_chart,omitempty" json:"send_chart,omitempty"`
	// MaxCauses caps the causes shown in one message (default 5).
	MaxCauses int `yaml:"max_causes,omitempty" json:"max_causes,omitempty"`
	// MaxAttempts overrides the retry stage's attempts per round (0: its default).
	MaxAttempts int `yaml:"max_attempts,omitempty" json:"max_attempts,omitempty"`
}

// Mode returns the delivery mode the configuration selects.
func (c *Config) Mode() Mode {
	if c.Token == "" && c.WebhookURL != "" {
		return ModeWebhook
	}
	if c.Token == "" {
		for _, r := range c.Routes {
			if r.WebhookURL != "" {
				return ModeWebhook
			}
		}
	}
	return ModeBot
}

// ChartEnabled reports whether charts are uploaded (default true).
func (c *Config) ChartEnabled() bool { return c.SendChart == nil || *c.SendChart }

// UnmarshalYAML decodes strictly (unknown keys are errors) and validates.
func (c *Config) UnmarshalYAML(n *yaml.Node) error {
	type plain Config
	var p plain
	if err := decodeStrict(n, &p); err != nil {
		return err
	}
	*c = Config(p)
	errs := []error{expandSecret(&c.Token, "token"), expandSecret(&c.WebhookURL, "webhook_url")}
	for i := range c.Routes {
		errs = append(errs, expandSecret(&c.Routes[i].WebhookURL, fmt.Sprintf("routes[%d].webhook_url", i)))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return c.Validate()
}

// decodeStrict decodes n into v rejecting unknown keys, as yaml.v3's
// KnownFields only applies to a Decoder.
func decodeStrict(n *yaml.Node, v any) error {
	b, err := yaml.Marshal(n)
	if err != nil {
		return err
	}
	d := yaml.NewDecoder(strings.NewReader(string(b)))
	d.KnownFields(true)
	if err := d.Decode(v); err != nil {
		// Line numbers refer to the re-encoded node; point at the section.
		return fmt.Errorf("slack config at line %d: %w", n.Line, err)
	}
	return nil
}

// WithDefaults returns c with zero values replaced by defaults.
func (c Config) WithDefaults() Config {
	if c.APIURL == "" {
		c.APIURL = DefaultAPIURL
	}
	if !strings.HasSuffix(c.APIURL, "/") {
		c.APIURL += "/"
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxCauses == 0 {
		c.MaxCauses = DefaultMaxCauses
	}
	return c
}

// Validate reports every problem with c, joined. Messages never contain
// secret values.
func (c *Config) Validate() error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if c.Token != "" && c.WebhookURL != "" {
		add("slack: token and webhook_url are mutually exclusive (bot mode or webhook mode)")
	}
	mode := c.Mode()
	if c.Token == "" && c.WebhookURL == "" && mode == ModeBot {
		add("slack: one of token (bot mode) or webhook_url (webhook mode) is required")
	}
	if c.Token != "" && !strings.HasPrefix(string(c.Token), "xox") {
		add("slack: token does not look like a Slack token (want xoxb-…)")
	}
	if c.WebhookURL != "" {
		if err := checkURL(string(c.WebhookURL)); err != nil {
			add("slack: webhook_url: %v", err)
		}
	}
	if c.APIURL != "" {
		if err := checkURL(c.APIURL); err != nil {
			add("slack: api_url: %v", err)
		}
	}
	if c.Timeout < 0 {
		add("slack: timeout must not be negative")
	}
	if c.MaxCauses < 0 {
		add("slack: max_causes must not be negative")
	}
	if c.MaxAttempts < 0 {
		add("slack: max_attempts must not be negative")
	}
	if mode == ModeBot && c.Token != "" && c.Channel == "" {
		add("slack: channel (the default channel) is required in bot mode")
	}
	for i := range c.Routes {
		r := &c.Routes[i]
		if len(r.Match) == 0 && len(r.MatchRE) == 0 {
			add("slack: routes[%d]: needs match or match_re", i)
		}
		r.res = make(map[string]*regexp.Regexp, len(r.MatchRE))
		for _, k := range sortedKeys(r.MatchRE) {
			re, err := regexp.Compile("^(?:" + r.MatchRE[k] + ")$")
			if err != nil {
				add("slack: routes[%d]: match_re %s: %v", i, k, err)
				continue
			}
			r.res[k] = re
		}
		switch mode {
		case ModeBot:
			if r.Channel == "" {
				add("slack: routes[%d]: channel is required in bot mode", i)
			}
			if r.WebhookURL != "" {
				add("slack: routes[%d]: webhook_url is only for webhook mode", i)
			}
		case ModeWebhook:
			if r.WebhookURL == "" && c.WebhookURL == "" {
				add("slack: routes[%d]: webhook_url is required (no default webhook_url)", i)
			}
			if r.WebhookURL != "" {
				if err := checkURL(string(r.WebhookURL)); err != nil {
					add("slack: routes[%d]: webhook_url: %v", i, err)
				}
			}
		}
	}
	return errors.Join(errs...)
}

// checkURL checks an absolute http(s) URL without echoing it (it may hold a
// token).
func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return errors.New("not a valid URL")
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return errors.New("scheme must be http or https")
	}
	if u.Host == "" {
		return errors.New("URL has no host")
	}
	return nil
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// matches reports whether labels satisfy the route.
func (r *Route) matches(labels map[string]string) bool {
	for k, v := range r.Match {
		if labels[k] != v {
			return false
		}
	}
	for k, expr := range r.MatchRE {
		re := r.res[k]
		if re == nil {
			var err error
			if re, err = regexp.Compile("^(?:" + expr + ")$"); err != nil {
				return false
			}
		}
		if !re.MatchString(labels[k]) {
			return false
		}
	}
	return true
}
