package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
)

// The two query endpoints of Prometheus's HTTP API, read the way
// client_golang's api/prometheus/v1 client reads them (v1.25.0: POST with a
// GET fallback, the same error types and messages), without linking that
// client: on Go before 1.27 it links json-iterator only to register
// decoders it does not use for queries.

// defaultRoundTripper carries the requests when Options.RoundTripper is
// nil, set as client_golang's api.DefaultRoundTripper is.
var defaultRoundTripper http.RoundTripper = &http.Transport{
	Proxy: http.ProxyFromEnvironment,
	DialContext: (&net.Dialer{
		Timeout:   30 * time.Second,
		KeepAlive: 30 * time.Second,
	}).DialContext,
	ForceAttemptHTTP2:     true,
	MaxIdleConns:          100,
	IdleConnTimeout:       90 * time.Second,
	TLSHandshakeTimeout:   10 * time.Second,
	ExpectContinueTimeout: 1 * time.Second,
}

// The Prometheus HTTP API's error types (errorType) and the ones a client
// gives a response without one.
const (
	errBadResponse = "bad_response"
	errServer      = "server_error"
	errClient      = "client_error"
)

// apiError is an error the server answered, or a response that could not
// be read.
type apiError struct {
	Type string
	Msg  string
}

func (e *apiError) Error() string { return e.Type + ": " + e.Msg }

// apiResponse is the envelope of every answer.
type apiResponse struct {
	Status    string          `json:"status"`
	Data      json.RawMessage `json:"data"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
	Warnings  []string        `json:"warnings,omitempty"`
}

// queryData is the data of a query answer.
type queryData struct {
	Type   model.ValueType `json:"resultType"`
	Result json.RawMessage `json:"result"`
}

func (d queryData) value() (model.Value, error) {
	switch d.Type {
	case model.ValScalar:
		var sv model.Scalar
		err := json.Unmarshal(d.Result, &sv)
		return &sv, err
	case model.ValVector:
		var vv model.Vector
		err := json.Unmarshal(d.Result, &vv)
		return vv, err
	case model.ValMatrix:
		var mv model.Matrix
		err := json.Unmarshal(d.Result, &mv)
		return mv, err
	}
	return nil, fmt.Errorf("unexpected value type %q", d.Type)
}

// httpAPI sends queries to one server.
type httpAPI struct {
	endpoint *url.URL
	client   *http.Client
}

func newHTTPAPI(address string, rt http.RoundTripper) (*httpAPI, error) {
	u, err := url.Parse(address)
	if err != nil {
		return nil, err
	}
	u.Path = strings.TrimRight(u.Path, "/")
	return &httpAPI{endpoint: u, client: &http.Client{Transport: rt}}, nil
}

// query runs an instant query at ts with the server-side timeout.
func (a *httpAPI) query(ctx context.Context, expr string, ts time.Time, timeout time.Duration) (model.Value, []string, error) {
	args := url.Values{}
	args.Set("timeout", timeout.String())
	args.Set("query", expr)
	if !ts.IsZero() {
		args.Set("time", formatTime(ts))
	}
	return a.do(ctx, "/api/v1/query", args)
}

// queryRange runs a range query over [start, end] at step.
func (a *httpAPI) queryRange(ctx context.Context, expr string, start, end time.Time, step, timeout time.Duration) (model.Value, []string, error) {
	args := url.Values{}
	args.Set("timeout", timeout.String())
	args.Set("query", expr)
	args.Set("start", formatTime(start))
	args.Set("end", formatTime(end))
	args.Set("step", strconv.FormatFloat(step.Seconds(), 'f', -1, 64))
	return a.do(ctx, "/api/v1/query_range", args)
}

// do POSTs the form and, where a proxy or server refuses POST (403, 405,
// 501), sends it again as a GET.
func (a *httpAPI) do(ctx context.Context, endpoint string, args url.Values) (model.Value, []string, error) {
	u := *a.endpoint
	u.Path = path.Join(a.endpoint.Path, endpoint)
	encoded := args.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), strings.NewReader(encoded))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	// An empty Idempotency-Key lets the transport retry the POST on a
	// broken keep-alive connection, as it would a GET; it is not sent.
	req.Header["Idempotency-Key"] = nil
	code, val, warnings, err := a.send(req)
	if code == http.StatusForbidden || code == http.StatusMethodNotAllowed || code == http.StatusNotImplemented {
		u.RawQuery = encoded
		req, err = http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
		if err != nil {
			return nil, warnings, err
		}
		_, val, warnings, err = a.send(req)
	}
	return val, warnings, err
}

// send runs one request and reads its answer; code is 0 when none came.
func (a *httpAPI) send(req *http.Request) (code int, val model.Value, warnings []string, err error) {
	resp, err := a.client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	var body bytes.Buffer
	_, err = body.ReadFrom(resp.Body)
	resp.Body.Close()
	code = resp.StatusCode
	if err != nil {
		if ctxErr := req.Context().Err(); ctxErr != nil {
			err = ctxErr
		}
		return code, nil, nil, err
	}
	val, warnings, err = decodeAnswer(code, body.Bytes())
	return code, val, warnings, err
}

// decodeAnswer reads a query answer with its status code.
func decodeAnswer(code int, body []byte) (model.Value, []string, error) {
	var r apiResponse
	if code/100 != 2 {
		// Prometheus answers a bad query with 400 or 422 and a JSON error;
		// anything else is an HTTP error.
		if code != http.StatusBadRequest && code != http.StatusUnprocessableEntity {
			return nil, nil, statusError(code)
		}
		if json.Unmarshal(body, &r) != nil {
			return nil, nil, statusError(code)
		}
		if r.Status == "success" {
			return nil, r.Warnings, &apiError{Type: errBadResponse, Msg: "inconsistent body for response code"}
		}
		e := &apiError{Type: r.ErrorType, Msg: r.Error}
		if e.Type == "" {
			e.Type = errClient
		}
		if e.Msg == "" {
			e.Msg = fmt.Sprintf("client error: %d", code)
		}
		return nil, r.Warnings, e
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, nil, &apiError{Type: errBadResponse, Msg: err.Error()}
	}
	if r.Status == "error" {
		return nil, r.Warnings, &apiError{Type: r.ErrorType, Msg: r.Error}
	}
	if len(r.Data) == 0 || string(r.Data) == "null" {
		return nil, r.Warnings, nil
	}
	var d queryData
	if err := json.Unmarshal(r.Data, &d); err != nil {
		return nil, r.Warnings, &apiError{Type: errBadResponse, Msg: err.Error()}
	}
	val, err := d.value()
	if err != nil {
		return nil, r.Warnings, &apiError{Type: errBadResponse, Msg: err.Error()}
	}
	return val, r.Warnings, nil
}

func statusError(code int) *apiError {
	switch code / 100 {
	case 4:
		return &apiError{Type: errClient, Msg: fmt.Sprintf("client error: %d", code)}
	case 5:
		return &apiError{Type: errServer, Msg: fmt.Sprintf("server error: %d", code)}
	}
	return &apiError{Type: errBadResponse, Msg: fmt.Sprintf("bad response code %d", code)}
}

// formatTime writes t as Unix seconds with the fraction the API accepts.
func formatTime(t time.Time) string {
	return strconv.FormatFloat(float64(t.Unix())+float64(t.Nanosecond())/1e9, 'f', -1, 64)
}
