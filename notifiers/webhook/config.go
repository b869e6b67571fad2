// Package webhook is the generic webhook receiver: it POSTs the verdict and
// the notification's incident metadata as JSON (see
// notifiers/render/SCHEMA.md), optionally signed with HMAC-SHA256 over a
// timestamp and the body, as Slack signs its requests:
//
//	X-Whyslow-Timestamp: 1700000000
//	X-Whyslow-Signature: v1=hex(HMAC-SHA256(secret, "v1:1700000000:" + body))
//
// A receiver recomputes the HMAC over the raw body, compares it in constant
// time, and refuses a timestamp more than SignatureMaxAge (5 minutes) away
// from its clock; with the notification id (X-Whyslow-Notification-Id) to
// dedupe within that window, a captured delivery cannot be replayed.
package webhook

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/whyslow/whyslow/notifiers"
)

// Defaults.
const (
	DefaultTimeout     = 10 * time.Second
	DefaultMaxAttempts = 5
)

// Config configures a webhook receiver.
type Config struct {
	// URL receives the POST. It may carry credentials or a token; it is never
	// logged or put in errors (only scheme and host are shown).
	URL notifiers.Secret `yaml:"url"`
	// Timeout bounds one attempt (default 10s).
	Timeout time.Duration `yaml:"timeout"`
	// Headers are added to every request; their values are treated as
	// secrets (e.g. Authorization).
	Headers map[string]notifiers.Secret `yaml:"headers"`
	// HMACSecret, when set, signs each attempt: X-Whyslow-Timestamp: <Unix
	// seconds> and X-Whyslow-Signature: v1=<hex of HMAC-SHA256(secret,
	// "v1:<timestamp>:<body>")>. Receivers verify both (webhook.Verify) and
	// refuse timestamps more than five minutes off, so a captured delivery
	// cannot be replayed.
	HMACSecret notifiers.Secret `yaml:"hmac_secret"`
	// MaxAttempts per retry round (default 5).
	MaxAttempts int `yaml:"max_attempts"`
}

// reservedHeaders are set by the receiver and cannot be configured.
var reservedHeaders = map[string]bool{
	"Content-Type": true, "Content-Length": true, "Host": true, "User-Agent": true,
	SignatureHeader: true, TimestampHeader: true, IDHeader: true,
}

// WithDefaults returns c with zero values replaced by defaults.
func (c Config) WithDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	return c
}

// Validate checks c, returning every problem at once. Messages never contain
// the URL or secrets.
func (c Config) Validate() error {
	var errs []error
	if c.URL == "" {
		errs = append(errs, errors.New("webhook: url is required"))
	} else if u, err := url.Parse(string(c.URL)); err != nil {
		errs = append(errs, errors.New("webhook: url is not a valid URL"))
	} else if u.Scheme != "http" && u.Scheme != "https" {
		errs = append(errs, fmt.Errorf("webhook: url scheme must be http or https, not %q", u.Scheme))
	} else if u.Host == "" {
		errs = append(errs, errors.New("webhook: url has no host"))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("webhook: timeout must not be negative, got %s", c.Timeout))
	}
	if c.MaxAttempts < 0 {
		errs = append(errs, fmt.Errorf("webhook: max_attempts must not be negative, got %d", c.MaxAttempts))
	}
	for name := range c.Headers {
		canon := http.CanonicalHeaderKey(name)
		switch {
		case name == "" || strings.ContainsAny(name, " :\r\n\t"):
			errs = append(errs, fmt.Errorf("webhook: header name %q is invalid", name))
		case reservedHeaders[canon]:
			errs = append(errs, fmt.Errorf("webhook: header %q is set by whyslow and cannot be configured", canon))
		}
	}
	for name, v := range c.Headers {
		if strings.ContainsAny(string(v), "\r\n") {
			errs = append(errs, fmt.Errorf("webhook: header %q value contains a line break", name))
		}
	}
	return errors.Join(errs...)
}
