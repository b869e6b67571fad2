// Package remote queries a Prometheus-compatible server (Prometheus, Thanos,
// Mimir, VictoriaMetrics) over its HTTP API (api.go: the query endpoints,
// read as client_golang's api/v1 client reads them). It answers the same
// PromQL as the embedded store, so a ruleset behaves the same on a bundle
// and on the fleet.
//
// Secrets never appear in errors: URLs are printed through the shared
// redaction layer (internal/redact: password and query values hidden), and
// the bearer token, the basic-auth password (and its base64), header values
// and query values are scrubbed from every error message.
package remote

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/common/model"

	"github.com/whyslow/whyslow/internal/redact"
)

// DefaultTimeout bounds one query when Options.Timeout is zero.
const DefaultTimeout = 30 * time.Second

// Options configures a Client.
type Options struct {
	// URL is the server's base URL, e.g. http://prometheus:9090 or
	// https://mimir/prometheus. A user:password in it is used as basic auth.
	URL string
	// Timeout bounds one query, client side and as the server's query
	// timeout (default 30s).
	Timeout time.Duration
	// BearerToken is sent as "Authorization: Bearer ...".
	BearerToken string
	// BasicAuthUser and BasicAuthPassword are sent as basic auth.
	BasicAuthUser, BasicAuthPassword string
	// Headers are added to every request (e.g. X-Scope-OrgID for Mimir).
	Headers map[string]string
	// RoundTripper carries the requests (TLS settings, tests); nil uses
	// the defaults client_golang's API client has.
	RoundTripper http.RoundTripper
}

// Client runs PromQL on a remote server. It is safe for concurrent use.
type Client struct {
	api     *httpAPI
	url     string // redacted, for messages
	timeout time.Duration
	secrets *redact.Secrets
}

// New returns a client for opts.URL. It does not contact the server.
func New(opts Options) (*Client, error) {
	u, err := url.Parse(opts.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("prometheus URL %s: want http(s)://host[:port][/path]", redact.URL(opts.URL))
	}
	c := &Client{url: redact.URL(opts.URL), timeout: opts.Timeout, secrets: redact.NewSecrets()}
	c.secrets.AddURL(opts.URL, false)
	if c.timeout <= 0 {
		c.timeout = DefaultTimeout
	}
	user, pass := opts.BasicAuthUser, opts.BasicAuthPassword
	if u.User != nil {
		if user != "" {
			return nil, fmt.Errorf("prometheus %s: basic auth given both in the URL and in the options", c.url)
		}
		user = u.User.Username()
		pass, _ = u.User.Password()
		u.User = nil
	}
	if opts.BearerToken != "" && user != "" {
		return nil, fmt.Errorf("prometheus %s: set a bearer token or basic auth, not both", c.url)
	}
	c.secrets.Add(opts.BearerToken)
	c.secrets.AddBasic(user, pass)
	for _, v := range opts.Headers {
		c.secrets.AddHeader(v)
	}
	rt := opts.RoundTripper
	if rt == nil {
		rt = defaultRoundTripper
	}
	rt = &authRoundTripper{next: rt, bearer: opts.BearerToken, user: user, pass: pass, headers: opts.Headers}
	c.api, err = newHTTPAPI(u.String(), rt)
	if err != nil {
		return nil, c.scrub(fmt.Errorf("prometheus %s: %w", c.url, err))
	}
	return c, nil
}

// URL returns the server URL with any password redacted.
func (c *Client) URL() string { return c.url }

// Query runs an instant query at the given time. A scalar result is one
// sample without labels; a string or range-vector result is an error.
// Server warnings are returned.
func (c *Client) Query(ctx context.Context, expr string, at time.Time) (model.Vector, []string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	val, warnings, err := c.api.query(ctx, expr, at, c.timeout)
	if err != nil {
		return nil, warnings, c.queryError(ctx, expr, err)
	}
	switch v := val.(type) {
	case model.Vector:
		return v, warnings, nil
	case *model.Scalar:
		return model.Vector{{Metric: model.Metric{}, Value: v.Value, Timestamp: v.Timestamp}}, warnings, nil
	case model.Matrix:
		return nil, warnings, fmt.Errorf("prometheus %s: query %q: result is a range vector; use QueryRange or wrap it in a function", c.url, expr)
	case *model.String:
		return nil, warnings, fmt.Errorf("prometheus %s: query %q: result is a string, not a vector", c.url, expr)
	default:
		return nil, warnings, fmt.Errorf("prometheus %s: query %q: unexpected result type %T", c.url, expr, val)
	}
}

// QueryRange runs a range query over [start, end] at the given step.
func (c *Client) QueryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) (model.Matrix, []string, error) {
	if step <= 0 {
		return nil, nil, fmt.Errorf("query range %q: step must be positive, got %s", expr, step)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	val, warnings, err := c.api.queryRange(ctx, expr, start, end, step, c.timeout)
	if err != nil {
		return nil, warnings, c.queryError(ctx, expr, err)
	}
	m, ok := val.(model.Matrix)
	if !ok {
		return nil, warnings, fmt.Errorf("prometheus %s: query range %q: unexpected result type %T", c.url, expr, val)
	}
	return m, warnings, nil
}

// Unreachable reports whether err says the server could not be reached
// (connection refused, DNS, timeout), as opposed to a query error.
func Unreachable(err error) bool {
	var ue *unreachableError
	return errors.As(err, &ue)
}

type unreachableError struct{ err error }

func (e *unreachableError) Error() string { return e.err.Error() }
func (e *unreachableError) Unwrap() error { return e.err }

// queryError turns a client error into a message that names the server
// and the query, says "unreachable" when it is, and holds no secret.
func (c *Client) queryError(ctx context.Context, expr string, err error) error {
	var apiErr *apiError
	switch {
	case errors.As(err, &apiErr):
		msg := fmt.Sprintf("%s: %s", apiErr.Type, apiErr.Msg)
		if strings.Contains(apiErr.Msg, "401") || strings.Contains(apiErr.Msg, "403") {
			msg += " (check the bearer token or basic auth)"
		}
		return c.scrub(fmt.Errorf("prometheus %s: query %q: %s", c.url, expr, msg))
	case ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		return &unreachableError{c.scrub(fmt.Errorf("prometheus %s unreachable or too slow: query %q timed out after %s", c.url, expr, c.timeout))}
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("prometheus %s: query %q: %w", c.url, expr, context.Canceled)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // drop the request URL: it holds the query
	}
	var ne net.Error
	if errors.As(err, &ne) || isConnError(err) {
		return &unreachableError{c.scrub(fmt.Errorf("prometheus %s unreachable: %v", c.url, err))}
	}
	return c.scrub(fmt.Errorf("prometheus %s: query %q: %v", c.url, expr, err))
}

func isConnError(err error) bool {
	var oe *net.OpError
	var de *net.DNSError
	return errors.As(err, &oe) || errors.As(err, &de)
}

// scrub returns err with every secret replaced. The original error is not
// kept (it may hold the secret).
func (c *Client) scrub(err error) error {
	return errors.New(c.secrets.Scrub(err.Error()))
}

// authRoundTripper adds headers and credentials to every request.
type authRoundTripper struct {
	next       http.RoundTripper
	bearer     string
	user, pass string
	headers    map[string]string
}

// RoundTrip implements http.RoundTripper.
func (rt *authRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for k, v := range rt.headers {
		req.Header.Set(k, v)
	}
	switch {
	case rt.bearer != "":
		req.Header.Set("Authorization", "Bearer "+rt.bearer)
	case rt.user != "":
		req.SetBasicAuth(rt.user, rt.pass)
	}
	return rt.next.RoundTrip(req)
}
