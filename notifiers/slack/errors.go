package slack

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/slack-go/slack"

	"github.com/whyslow/whyslow/internal/redact"
	"github.com/whyslow/whyslow/notifiers"
)

// Slack Web API error codes by how whyslow treats them. Codes not listed are
// client errors and are not retried.
var (
	authErrors = map[string]bool{
		"invalid_auth": true, "not_authed": true, "account_inactive": true, "token_revoked": true,
		"token_expired": true, "no_permission": true, "missing_scope": true, "not_allowed_token_type": true,
		"ekm_access_denied": true, "org_login_required": true, "team_access_not_granted": true,
		"invalid_token": true, "access_denied": true, "two_factor_setup_required": true,
	}
	rateLimitErrors = map[string]bool{
		"ratelimited": true, "rate_limited": true, "message_limit_exceeded": true,
	}
	serverErrors = map[string]bool{
		"internal_error": true, "fatal_error": true, "service_unavailable": true,
		"team_added_to_org": true, "upload_failed": true,
	}
	timeoutErrors = map[string]bool{
		"request_timeout": true,
	}
)

// Classify turns an error from slack-go (or the webhook post) into the retry
// decision and a *notifiers.Error with its reason:
//   - *slack.RateLimitedError → rateLimited with its RetryAfter;
//   - a status-code error: 429 without Retry-After → rateLimited with
//     DefaultRateLimitWait; 5xx → serverError (retried); 401/403 → authError;
//     other 4xx → clientError;
//   - Slack error codes: invalid_auth, not_authed, account_inactive,
//     token_revoked… → authError; channel_not_found, not_in_channel,
//     invalid_blocks… → clientError; ratelimited → rateLimited;
//     internal_error, fatal_error… → serverError;
//   - transport errors → network or timeout (retried), with URLs redacted.
//
// secrets are scrubbed from the error text as a last line of defence.
func Classify(err error, secrets ...string) (bool, error) {
	if err == nil {
		return false, nil
	}
	var e *notifiers.Error
	if errors.As(err, &e) {
		return e.Reason.Retryable(), scrubError(err, secrets)
	}
	var rl *slack.RateLimitedError
	var sc slack.StatusCodeError
	var se slack.SlackErrorResponse
	out := &notifiers.Error{Err: err}
	switch {
	case errors.As(err, &rl):
		out.Reason = notifiers.ReasonRateLimited
		out.StatusCode = http.StatusTooManyRequests
		out.RetryAfter = rl.RetryAfter
		if out.RetryAfter <= 0 {
			out.RetryAfter = DefaultRateLimitWait
		}
	case errors.As(err, &sc):
		out.StatusCode = sc.Code
		switch {
		case sc.Code == http.StatusTooManyRequests:
			out.Reason = notifiers.ReasonRateLimited
			out.RetryAfter = DefaultRateLimitWait
		case sc.Code == http.StatusUnauthorized || sc.Code == http.StatusForbidden:
			out.Reason = notifiers.ReasonAuthError
		case sc.Code == http.StatusRequestTimeout:
			out.Reason = notifiers.ReasonTimeout
		case sc.Code >= 500:
			out.Reason = notifiers.ReasonServerError
		case sc.Code >= 400:
			out.Reason = notifiers.ReasonClientError
		default:
			out.Reason = notifiers.ReasonOther
		}
	case errors.As(err, &se):
		code := strings.TrimSpace(se.Err)
		switch {
		case authErrors[code]:
			out.Reason = notifiers.ReasonAuthError
		case rateLimitErrors[code]:
			out.Reason = notifiers.ReasonRateLimited
			out.RetryAfter = DefaultRateLimitWait
		case serverErrors[code]:
			out.Reason = notifiers.ReasonServerError
		case timeoutErrors[code]:
			out.Reason = notifiers.ReasonTimeout
		default:
			out.Reason = notifiers.ReasonClientError
		}
	case errors.Is(err, context.Canceled):
		out.Reason = notifiers.ReasonCanceled
	case errors.Is(err, context.DeadlineExceeded):
		out.Reason = notifiers.ReasonTimeout
	default:
		retry, terr := notifiers.ClassifyTransportError(err, "<redacted>")
		return retry, scrubError(terr, secrets)
	}
	return out.Reason.Retryable(), scrubError(out, secrets)
}

// SlackErrorCode returns the Slack error code in err's chain ("" if none).
func SlackErrorCode(err error) string {
	var se slack.SlackErrorResponse
	if errors.As(err, &se) {
		return se.Err
	}
	return ""
}

// scrubbed is an error whose text had secrets removed; it deliberately does
// not unwrap to the original, which still holds them.
type scrubbed struct {
	msg string
}

func (s *scrubbed) Error() string { return s.msg }

// scrubError returns err unchanged when its text holds none of the secrets
// (in any of their escaped forms), else a *notifiers.Error with the same
// reason, status and retry-after around the scrubbed text.
func scrubError(err error, secrets []string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	clean := scrubString(msg, secrets)
	if clean == msg {
		return err
	}
	out := &notifiers.Error{Reason: notifiers.ReasonOf(err), RetryAfter: notifiers.RetryAfterOf(err)}
	var e *notifiers.Error
	if errors.As(err, &e) {
		out.StatusCode = e.StatusCode
		// Error() prefixes reason and status; keep only the cause's text.
		if e.Err != nil {
			clean = scrubString(e.Err.Error(), secrets)
		}
	}
	out.Err = &scrubbed{msg: clean}
	return out
}

// scrubString replaces every form of every secret in s with <redacted>
// (internal/redact, the one redaction layer).
func scrubString(s string, secrets []string) string {
	return redact.NewSecrets(secrets...).Scrub(s)
}
