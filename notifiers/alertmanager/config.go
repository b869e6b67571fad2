// Package alertmanager sends whyslow's incidents to Alertmanager as alerts
// (API v2, POST /api/v2/alerts), the way Prometheus's notifier sends its
// rules' alerts: the whole set of open alerts is re-sent at least every
// resend_interval with endsAt four intervals ahead, so an alert whyslow
// stops sending expires by itself; resolved incidents keep being sent with
// their endsAt for resolved_retention, so an Alertmanager that missed one
// still resolves it.
//
// It is state-based, not an outbox receiver: Sync hands the current
// incidents over without blocking, and a background loop sends the latest
// set (Sender).
package alertmanager

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/common/model"

	"github.com/whyslow/whyslow/internal/redact"
	"github.com/whyslow/whyslow/notifiers"
)

// Defaults.
const (
	DefaultTimeout           = 10 * time.Second
	DefaultResendInterval    = time.Minute
	DefaultResolvedRetention = 15 * time.Minute
)

// Labels whyslow sets on every alert; config labels cannot override them.
const (
	AlertNameLabel = "alertname"
	SeverityLabel  = "severity"
	// AlertName is the alertname of every alert whyslow sends.
	AlertName = "WhyslowVerdict"
)

// APIPath is the path, below the configured URL, alerts are posted to.
const APIPath = "/api/v2/alerts"

// Config configures an Alertmanager receiver (`alertmanager:` of a
// receiver in the daemon config).
type Config struct {
	// URL is Alertmanager's base URL; alerts go to URL + /api/v2/alerts,
	// keeping any path prefix (http://am:9093/alertmanager). A password in
	// it is a secret.
	URL string `yaml:"url" json:"url"`
	// BearerToken is sent as "Authorization: Bearer <token>".
	BearerToken notifiers.Secret `yaml:"bearer_token,omitempty" json:"-"`
	// BasicAuth is sent as HTTP basic authentication.
	BasicAuth *BasicAuth `yaml:"basic_auth,omitempty" json:"basic_auth,omitempty"`
	// Headers are added to every request (e.g. X-Scope-OrgID for a
	// multi-tenant Alertmanager); values are treated as secrets.
	Headers map[string]notifiers.Secret `yaml:"headers,omitempty" json:"headers,omitempty"`
	// Timeout bounds one POST (default 10s).
	Timeout time.Duration `yaml:"timeout,omitempty" json:"timeout,omitempty"`
	// ResendInterval is the longest time between two sends of an unchanged
	// set (default 1m); open alerts' endsAt is four of them ahead.
	ResendInterval time.Duration `yaml:"resend_interval,omitempty" json:"resend_interval,omitempty"`
	// ResolvedRetention is how long a resolved incident (or an alert whose
	// labels changed) keeps being sent with its endsAt (default 15m).
	ResolvedRetention time.Duration `yaml:"resolved_retention,omitempty" json:"resolved_retention,omitempty"`
	// Labels are added to every alert (e.g. cluster: prod); an incident's
	// scope labels win over them, and alertname and severity cannot be set.
	Labels map[string]string `yaml:"labels,omitempty" json:"labels,omitempty"`
}

// BasicAuth is HTTP basic authentication.
type BasicAuth struct {
	Username string           `yaml:"username" json:"username"`
	Password notifiers.Secret `yaml:"password" json:"-"`
}

// reservedHeaders are set by the sender and cannot be configured.
var reservedHeaders = map[string]bool{
	"Content-Type": true, "Content-Length": true, "Host": true, "User-Agent": true,
}

// WithDefaults returns c with zero values replaced by defaults.
func (c Config) WithDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.ResendInterval == 0 {
		c.ResendInterval = DefaultResendInterval
	}
	if c.ResolvedRetention == 0 {
		c.ResolvedRetention = DefaultResolvedRetention
	}
	return c
}

// Validate reports every problem with c, joined, each naming its key.
// Messages never contain the URL's credentials or other secrets.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("alertmanager: "+format, a...))
	}
	if c.URL == "" {
		bad("url is required")
	} else if u, err := url.Parse(c.URL); err != nil {
		bad("url %q is not a valid URL", redact.URL(c.URL))
	} else {
		switch {
		case u.Scheme != "http" && u.Scheme != "https":
			bad("url scheme must be http or https, not %q", u.Scheme)
		case u.Host == "":
			bad("url %q has no host", redact.URL(c.URL))
		case u.RawQuery != "" || u.Fragment != "":
			bad("url must not have a query or fragment (alerts go to <url>%s)", APIPath)
		}
	}
	if c.Timeout < 0 {
		bad("timeout must not be negative, got %s", c.Timeout)
	}
	if c.ResendInterval < 0 {
		bad("resend_interval must not be negative, got %s", c.ResendInterval)
	}
	if c.ResolvedRetention < 0 {
		bad("resolved_retention must not be negative, got %s", c.ResolvedRetention)
	}
	auth := c.BearerToken != ""
	if c.BasicAuth != nil {
		if c.BasicAuth.Username == "" {
			bad("basic_auth.username is required")
		}
		if auth {
			bad("bearer_token and basic_auth are both set; use one")
		}
		auth = true
	}
	for name, v := range c.Headers {
		canon := http.CanonicalHeaderKey(name)
		switch {
		case name == "" || strings.ContainsAny(name, " :\r\n\t"):
			bad("headers: name %q is invalid", name)
		case reservedHeaders[canon]:
			bad("headers: %q is set by whyslow and cannot be configured", canon)
		case canon == "Authorization" && auth:
			bad("headers: Authorization conflicts with bearer_token or basic_auth")
		}
		if strings.ContainsAny(string(v), "\r\n") {
			bad("headers: %q value contains a line break", name)
		}
	}
	for name, v := range c.Labels {
		switch {
		case name == AlertNameLabel || name == SeverityLabel:
			bad("labels: %q is set by whyslow and cannot be overridden", name)
		case !model.LegacyValidation.IsValidLabelName(name):
			bad("labels: %q is not a valid label name ([a-zA-Z_][a-zA-Z0-9_]*)", name)
		case strings.HasPrefix(name, "__"):
			bad("labels: %q: names starting with __ are reserved", name)
		}
		if v == "" {
			bad("labels: %q has an empty value (an empty label is no label)", name)
		} else if !model.LabelValue(v).IsValid() {
			bad("labels: %q value is not valid UTF-8", name)
		}
	}
	return errors.Join(errs...)
}

// AddSecrets adds c's secrets to s so that logs and errors never show
// them: the bearer token, the basic auth password, header values and the
// URL's password.
func (c Config) AddSecrets(s *redact.Secrets) {
	s.AddURL(c.URL, false)
	if c.BearerToken != "" {
		s.AddHeader("Bearer " + string(c.BearerToken))
	}
	if c.BasicAuth != nil {
		s.AddBasic(c.BasicAuth.Username, string(c.BasicAuth.Password))
	}
	for _, v := range c.Headers {
		s.AddHeader(string(v))
	}
}

// endpoint is the URL alerts are posted to: the base URL's path prefix
// kept, /api/v2/alerts appended.
func (c Config) endpoint() (string, error) {
	u, err := url.Parse(c.URL)
	if err != nil {
		return "", errors.New("alertmanager: url is not a valid URL")
	}
	u.Path = strings.TrimRight(u.Path, "/") + APIPath
	u.RawPath = ""
	return u.String(), nil
}
