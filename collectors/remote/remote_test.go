package remote

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

var t0 = time.Unix(1700000000, 0).UTC()

const (
	token    = "s3cr3t-t0ken"
	password = "hunter2-pass"
	tenant   = "tenant-xyz-secret"
)

// fakeAPI answers /api/v1/query and /api/v1/query_range with canned
// responses chosen by the query text, and records the last request's
// headers.
type fakeAPI struct {
	mu     sync.Mutex
	header http.Header
	form   map[string]string
	block  chan struct{}
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_ = r.ParseForm()
	f.mu.Lock()
	f.header = r.Header.Clone()
	f.form = map[string]string{}
	for k := range r.Form {
		f.form[k] = r.Form.Get(k)
	}
	f.mu.Unlock()
	q := r.Form.Get("query")
	w.Header().Set("Content-Type", "application/json")
	write := func(code int, v any) {
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(v)
	}
	switch {
	case q == "slow":
		<-f.block
	case q == "denied":
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte("unauthorized " + token))
	case q == "scalar":
		write(200, map[string]any{"status": "success", "data": map[string]any{"resultType": "scalar", "result": []any{1700000000, "42"}}})
	case q == "string":
		write(200, map[string]any{"status": "success", "data": map[string]any{"resultType": "string", "result": []any{1700000000, "x"}}})
	case q == "matrix" || strings.HasSuffix(r.URL.Path, "query_range"):
		write(200, map[string]any{"status": "success", "data": map[string]any{"resultType": "matrix", "result": []any{
			map[string]any{"metric": map[string]string{"pod": "a"}, "values": []any{[]any{1700000000, "1"}, []any{1700000060, "2"}}},
		}}})
	case strings.Contains(q, "("):
		if strings.Count(q, "(") != strings.Count(q, ")") {
			write(400, map[string]any{"status": "error", "errorType": "bad_data", "error": "1:5: parse error: unclosed left parenthesis"})
			return
		}
		fallthrough
	default:
		write(200, map[string]any{
			"status":   "success",
			"warnings": []string{"PromQL warning: encountered a mix of histograms and floats"},
			"data": map[string]any{"resultType": "vector", "result": []any{
				map[string]any{"metric": map[string]string{"__name__": "up", "pod": "a"}, "value": []any{1700000000, "1"}},
			}},
		})
	}
}

func TestQuery(t *testing.T) {
	f := &fakeAPI{}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c, err := New(Options{URL: srv.URL, BearerToken: token, Headers: map[string]string{"X-Scope-OrgID": tenant}})
	if err != nil {
		t.Fatal(err)
	}

	v, warns, err := c.Query(context.Background(), "up", t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(v) != 1 || v[0].Value != 1 || v[0].Metric["pod"] != "a" {
		t.Errorf("vector = %v", v)
	}
	if len(warns) != 1 || !strings.Contains(warns[0], "mix of histograms") {
		t.Errorf("warnings = %v", warns)
	}
	f.mu.Lock()
	if got := f.header.Get("Authorization"); got != "Bearer "+token {
		t.Errorf("Authorization = %q", got)
	}
	if got := f.header.Get("X-Scope-OrgID"); got != tenant {
		t.Errorf("X-Scope-OrgID = %q", got)
	}
	if f.form["time"] != "1700000000" || f.form["timeout"] == "" {
		t.Errorf("form = %v", f.form)
	}
	f.mu.Unlock()

	v, _, err = c.Query(context.Background(), "scalar", t0)
	if err != nil || len(v) != 1 || v[0].Value != 42 || len(v[0].Metric) != 0 {
		t.Errorf("scalar: %v, %v", v, err)
	}

	m, _, err := c.QueryRange(context.Background(), "up", t0, t0.Add(time.Minute), time.Minute)
	if err != nil || len(m) != 1 || len(m[0].Values) != 2 || m[0].Values[1].Value != 2 {
		t.Errorf("range: %v, %v", m, err)
	}
}

func TestBasicAuth(t *testing.T) {
	f := &fakeAPI{}
	srv := httptest.NewServer(f)
	defer srv.Close()
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"options", Options{URL: srv.URL, BasicAuthUser: "me", BasicAuthPassword: password}},
		{"in url", Options{URL: strings.Replace(srv.URL, "http://", "http://me:"+password+"@", 1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(c.URL(), password) {
				t.Errorf("URL() leaks the password: %s", c.URL())
			}
			if _, _, err := c.Query(context.Background(), "up", t0); err != nil {
				t.Fatal(err)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			req := &http.Request{Header: f.header}
			u, p, ok := req.BasicAuth()
			if !ok || u != "me" || p != password {
				t.Errorf("basic auth = %q %q %v", u, p, ok)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	f := &fakeAPI{block: make(chan struct{})}
	srv := httptest.NewServer(f)
	defer srv.Close()
	defer close(f.block)
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL
	down.Close()

	withPass := func(u string) string { return strings.Replace(u, "http://", "http://me:"+password+"@", 1) }
	tests := []struct {
		name        string
		url, query  string
		want        []string
		unreachable bool
	}{
		{"parse error", srv.URL, "rate(up[5m]", []string{srv.URL, `query "rate(up[5m]"`, "bad_data", "parse error"}, false},
		{"unauthorised", withPass(srv.URL), "denied", []string{"401", "check the bearer token"}, false},
		{"string result", srv.URL, "string", []string{`query "string"`, "string"}, false},
		{"matrix result", srv.URL, "matrix", []string{"range vector"}, false},
		{"down", withPass(downURL), "up", []string{"prometheus http://me:xxxxx@" + strings.TrimPrefix(downURL, "http://") + " unreachable", "connection refused"}, true},
		{"timeout", srv.URL, "slow", []string{srv.URL + " unreachable or too slow", "timed out after 200ms"}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(Options{URL: tc.url, Timeout: 200 * time.Millisecond, Headers: map[string]string{"X-Scope-OrgID": tenant}})
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = c.Query(context.Background(), tc.query, t0)
			if err == nil {
				t.Fatal("want error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			assertNoSecret(t, err)
			if Unreachable(err) != tc.unreachable {
				t.Errorf("Unreachable = %v, want %v", Unreachable(err), tc.unreachable)
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"no scheme", Options{URL: "prometheus:9090"}, "want http(s)"},
		{"empty", Options{}, "want http(s)"},
		{"token and basic", Options{URL: "http://p", BearerToken: token, BasicAuthUser: "me"}, "not both"},
		{"basic twice", Options{URL: "http://me:" + password + "@p", BasicAuthUser: "me"}, "both in the URL"},
		{"bad url with password", Options{URL: "http://me:" + password + "@p:bad port"}, "want http(s)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
			assertNoSecret(t, err)
		})
	}
}

// assertNoSecret fails if an error message holds any test secret.
func assertNoSecret(t *testing.T, err error) {
	t.Helper()
	for _, s := range []string{token, password, tenant} {
		if strings.Contains(err.Error(), s) {
			t.Fatalf("secret %q leaked in %q", s, err)
		}
	}
}

// TestGetFallback: a proxy in front of Prometheus that refuses POST (403,
// 405, 501) gets the query again as a GET with the form in the URL, as
// client_golang's API client sends it; another error status is not
// retried.
func TestGetFallback(t *testing.T) {
	for _, refuse := range []int{http.StatusForbidden, http.StatusMethodNotAllowed, http.StatusNotImplemented, http.StatusBadGateway} {
		var methods []string
		f := &fakeAPI{}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			methods = append(methods, r.Method)
			if r.Method == http.MethodPost {
				w.WriteHeader(refuse)
				return
			}
			if r.URL.Query().Get("query") != "up" {
				t.Errorf("GET %s: the form is not in the URL", r.URL)
			}
			f.ServeHTTP(w, r)
		}))
		c, err := New(Options{URL: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		v, _, err := c.Query(context.Background(), "up", t0)
		srv.Close()
		if refuse == http.StatusBadGateway {
			if err == nil || !strings.Contains(err.Error(), "502") || len(methods) != 1 {
				t.Errorf("POST answered 502: err %v after %v, want the server error and no GET", err, methods)
			}
			continue
		}
		if err != nil || len(v) != 1 || strings.Join(methods, ",") != "POST,GET" {
			t.Errorf("POST answered %d: %v, %v after %v, want the vector after POST,GET", refuse, v, err, methods)
		}
	}
}
