package notifiers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/whyslow/whyslow/internal/redact"
)

// Reason classifies why a delivery failed; it is the `reason` label of
// whyslow_notification_failures_total.
type Reason int

// Failure reasons.
const (
	ReasonOther Reason = iota
	ReasonClientError
	ReasonServerError
	ReasonRateLimited
	ReasonAuthError
	ReasonNetwork
	ReasonTimeout
	ReasonCanceled
	ReasonEncode
)

var reasonNames = [...]string{
	ReasonOther:       "other",
	ReasonClientError: "clientError",
	ReasonServerError: "serverError",
	ReasonRateLimited: "rateLimited",
	ReasonAuthError:   "authError",
	ReasonNetwork:     "network",
	ReasonTimeout:     "timeout",
	ReasonCanceled:    "canceled",
	ReasonEncode:      "encode",
}

// String returns the reason's label value (e.g. "rateLimited").
func (r Reason) String() string {
	if r >= 0 && int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "reason(" + strconv.Itoa(int(r)) + ")"
}

// Retryable reports whether failures of this reason are usually worth
// retrying: server errors, rate limits, network errors and timeouts.
func (r Reason) Retryable() bool {
	switch r {
	case ReasonServerError, ReasonRateLimited, ReasonNetwork, ReasonTimeout:
		return true
	}
	return false
}

// Error is a classified delivery failure. It wraps the underlying error.
type Error struct {
	// Reason classifies the failure.
	Reason Reason
	// StatusCode is the HTTP status, when there was one.
	StatusCode int
	// RetryAfter is the receiver's hint of how long to wait (0: none).
	RetryAfter time.Duration
	// Err is the underlying error; it must not contain secrets.
	Err error
}

// NewError returns an *Error of the given reason wrapping err.
func NewError(reason Reason, err error) *Error {
	return &Error{Reason: reason, Err: err}
}

// Error implements error.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Reason.String())
	if e.StatusCode != 0 {
		fmt.Fprintf(&b, " (status %d)", e.StatusCode)
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, " (retry after %s)", e.RetryAfter)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the wrapped error.
func (e *Error) Unwrap() error { return e.Err }

// ReasonOf returns the reason of the first *Error in err's chain; context
// cancellation and deadline errors are classified when no *Error is found.
func ReasonOf(err error) Reason {
	var e *Error
	switch {
	case err == nil:
		return ReasonOther
	case errors.As(err, &e):
		return e.Reason
	case errors.Is(err, context.Canceled):
		return ReasonCanceled
	case errors.Is(err, context.DeadlineExceeded):
		return ReasonTimeout
	}
	return ReasonOther
}

// RetryAfterOf returns the retry-after hint in err's chain, 0 when none.
func RetryAfterOf(err error) time.Duration {
	var e *Error
	if errors.As(err, &e) {
		return e.RetryAfter
	}
	return 0
}

// ParseRetryAfter parses a Retry-After header value: delay seconds or an
// HTTP date (relative to now). It returns 0 for an empty or invalid value.
func ParseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if !(s > 0 && s <= 1e7) { // also rejects NaN
			return 0
		}
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

// ClassifyStatus turns an HTTP response status into a delivery result:
// 2xx is success (nil, false); 429 is rateLimited with the Retry-After hint;
// 401/403 authError; 408 timeout; other 4xx clientError, not retried; 5xx
// serverError, retried (503 with its Retry-After hint). body is a short
// excerpt of the response for the error message (never the request).
func ClassifyStatus(code int, retryAfter string, now time.Time, body string) (bool, error) {
	if code >= 200 && code < 300 {
		return false, nil
	}
	e := &Error{StatusCode: code}
	msg := strings.ToLower(http.StatusText(code))
	if body = strings.TrimSpace(body); body != "" {
		msg += ": " + body
	}
	e.Err = errors.New(msg)
	switch {
	case code == http.StatusTooManyRequests:
		e.Reason = ReasonRateLimited
		e.RetryAfter = ParseRetryAfter(retryAfter, now)
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		e.Reason = ReasonAuthError
	case code == http.StatusRequestTimeout:
		e.Reason = ReasonTimeout
	case code >= 500:
		e.Reason = ReasonServerError
		e.RetryAfter = ParseRetryAfter(retryAfter, now)
	case code >= 400:
		e.Reason = ReasonClientError
	default:
		e.Reason = ReasonOther
		e.Err = fmt.Errorf("unexpected status: %s", msg)
	}
	return e.Reason.Retryable(), e
}

// ClassifyTransportError classifies an error from an HTTP client call
// (network, timeout, cancellation) and replaces the request URL that
// *url.Error carries with redacted so that secrets in URLs never leak.
func ClassifyTransportError(err error, redacted string) (bool, error) {
	if err == nil {
		return false, nil
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = &url.Error{Op: ue.Op, URL: redacted, Err: ue.Err}
	}
	reason := ReasonNetwork
	var ne net.Error
	switch {
	case errors.Is(err, context.Canceled):
		reason = ReasonCanceled
	case errors.Is(err, context.DeadlineExceeded):
		reason = ReasonTimeout
	case errors.As(err, &ne) && ne.Timeout():
		reason = ReasonTimeout
	}
	return reason.Retryable(), &Error{Reason: reason, Err: err}
}

// URLSecrets returns the parts of u that may be secret, for Scrub: the whole
// URL, the user info, the path and the query and its values.
func URLSecrets(u string) []string {
	out := []string{u}
	p, err := url.Parse(u)
	if err != nil {
		return out
	}
	if p.User != nil {
		out = append(out, p.User.Username())
		if pw, ok := p.User.Password(); ok {
			out = append(out, pw)
		}
	}
	if len(p.Path) > 1 {
		out = append(out, p.Path, p.EscapedPath())
		for _, seg := range strings.Split(p.Path, "/") {
			out = append(out, seg)
		}
	}
	if p.RawQuery != "" {
		out = append(out, p.RawQuery)
		for _, vs := range p.Query() {
			out = append(out, vs...)
		}
	}
	return out
}

// RedactURL returns u without credentials, path or query: only scheme and
// host remain ("https://hooks.example.com/<redacted>"), since webhook paths
// and queries often carry tokens. An unparsable URL is fully redacted. It
// is redact.SecretURL.
func RedactURL(u string) string { return redact.SecretURL(u) }
