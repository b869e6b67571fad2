package daemon

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// siteReq sends one request to h's server with the given Host, Origin and
// Content-Type ("" leaves each out) and returns the response, body read.
func siteReq(t *testing.T, h *harness, method, path, host, origin, ctype, body string, fetchSite ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, h.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	for _, f := range fetchSite {
		req.Header.Set("Sec-Fetch-Site", f)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestNoCrossSiteWrites is finding 4 of issue 26: another site's page could
// POST text/plain to /api/v1/alerts (a CORS "simple" request) and open
// incidents, and a DNS-rebound name (evil.example → 127.0.0.1) could read
// and write the tokenless loopback API.
func TestNoCrossSiteWrites(t *testing.T) {
	cfg := testConfig()
	cfg.API.ExternalURL = "https://whyslow.example.com/ops"
	h := newHarness(t, cfg)
	self := strings.TrimPrefix(h.srv.URL, "http://")
	alert := alertBody("firing", "fp1", map[string]string{"alertname": "HighTTFT", "model_name": "llama"})
	tests := []struct {
		name, method, path, host, origin, ctype, body string
		code                                          int
		msg                                           string
		fetchSite                                     []string
	}{
		{"cross-site text/plain", "POST", "/api/v1/alerts", "", "https://evil.example", "text/plain", alert, 403, "another site", nil},
		{"cross-site null origin", "POST", "/api/v1/alerts", "", "null", "application/json", alert, 403, "another site", nil},
		{"text/plain without origin", "POST", "/api/v1/alerts", "", "", "text/plain", alert, 415, "application/json", nil},
		{"form to the API", "POST", "/api/v1/triage", "", "", "application/x-www-form-urlencoded", "selector=x", 415, "application/json", nil},
		{"cross-site page form", "POST", "/triage", "", "https://evil.example", "application/x-www-form-urlencoded", "selector=", 403, "another site", nil},
		{"rebound host reads", "GET", "/api/v1/incidents", "evil.example:9109", "", "", "", 421, "not this daemon's", nil},
		{"rebound host page", "GET", "/", "evil.example", "", "", "", 421, "DNS rebinding", nil},
		{"rebound host writes", "POST", "/api/v1/alerts", "evil.example", "", "application/json", alert, 421, "not this daemon's", nil},
		{"rebound host under the prefix", "GET", "/ops/api/v1/incidents", "evil.example", "", "", "", 421, "not this daemon's", nil},
		{"rebound host health", "GET", "/healthz", "evil.example", "", "", "", 200, "ok", nil},
		{"rebound host metrics", "GET", "/metrics", "evil.example", "", "", "", 200, "whyslow_", nil},
		{"localhost reads", "GET", "/api/v1/incidents", "localhost:9109", "", "", "", 200, "incidents", nil},
		{"external_url host reads", "GET", "/api/v1/incidents", "whyslow.example.com", "", "", "", 200, "incidents", nil},
		{"external_url origin writes", "POST", "/api/v1/triage", "whyslow.example.com", "https://whyslow.example.com", "application/json", `{"selector":"model_name=\"x\""}`, 200, "status", nil},
		{"same-origin write", "POST", "/api/v1/triage", "", "http://" + self, "application/json; charset=utf-8", `{}`, 200, "status", nil},
		{"curl write (no origin)", "POST", "/api/v1/alerts", "", "", "application/json", alert, 200, "processed", nil},
		// The pages send no referrer: their forms carry Origin: null, and
		// the browser vouches with Sec-Fetch-Site.
		{"own page form (Origin null)", "POST", "/triage", "", "null", "application/x-www-form-urlencoded", "selector=", 200, "doctype", []string{"same-origin"}},
		{"cross-site by Sec-Fetch-Site", "POST", "/api/v1/triage", "", "", "application/json", `{}`, 403, "another site", []string{"cross-site"}},
		{"same-site other port", "POST", "/api/v1/triage", "", "http://127.0.0.1:1", "application/json", `{}`, 403, "another site", []string{"same-site"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := siteReq(t, h, tc.method, tc.path, tc.host, tc.origin, tc.ctype, tc.body, tc.fetchSite...)
			if resp.StatusCode != tc.code || !strings.Contains(body, tc.msg) {
				t.Fatalf("%d %.300q, want %d containing %q", resp.StatusCode, body, tc.code, tc.msg)
			}
		})
	}
	metrics := h.get(t, "/metrics", "", http.StatusOK)
	for _, want := range []string{`whyslow_api_refused_total{reason="origin"} 5`, `whyslow_api_refused_total{reason="content_type"} 2`,
		`whyslow_api_refused_total{reason="host"} 4`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestForeignHostWithToken: with api.token the Host is not checked (a
// Service or ingress name keeps working; a rebound name has no token), but
// another site's writes still are.
func TestForeignHostWithToken(t *testing.T) {
	cfg := testConfig()
	cfg.API.Token = "tok"
	h := newHarness(t, cfg)
	req, _ := http.NewRequest(http.MethodGet, h.srv.URL+"/api/v1/incidents", nil)
	req.Host = "whyslow.monitoring.svc:9109"
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("a Service name with the token: %d", resp.StatusCode)
	}
	if resp, body := siteReq(t, h, "POST", "/login", "", "https://evil.example", "application/x-www-form-urlencoded",
		url.Values{"token": {"tok"}}.Encode()); resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-site sign-in: %d %.200s", resp.StatusCode, body)
	}
}

// TestNosniffEverywhere is finding 10 of issue 26: only the pages carried
// X-Content-Type-Options: nosniff; a JSON error echoing a label could be
// sniffed as HTML.
func TestNosniffEverywhere(t *testing.T) {
	cfg := testConfig()
	cfg.API.Token = "tok"
	h := newHarness(t, cfg)
	for _, c := range []struct{ method, path, origin, ctype string }{
		{"GET", "/healthz", "", ""},
		{"GET", "/readyz", "", ""},
		{"GET", "/metrics", "", ""},
		{"GET", "/api/v1/incidents", "", ""},
		{"POST", "/api/v1/alerts", "https://evil.example", "text/plain"},
		{"GET", "/no/such/path", "", ""},
		{"GET", "/login", "", ""},
		{"GET", "/debug/pprof/", "", ""},
	} {
		resp, _ := siteReq(t, h, c.method, c.path, "", c.origin, c.ctype, "")
		if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("%s %s (%d): X-Content-Type-Options %q", c.method, c.path, resp.StatusCode, got)
		}
	}
}
