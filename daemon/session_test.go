package daemon

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSessionRevokedBySignOut is finding 9 of issue 26: the cookie was
// HMAC(token), the same for every browser and forever: signing out ended
// nothing (a copied cookie kept working) and anyone could sign a browser
// out. Each sign-in now has its own session, signing out revokes it alone,
// and POST /logout takes the page's CSRF value.
func TestSessionRevokedBySignOut(t *testing.T) {
	cfg := testConfig()
	cfg.API.Token = pageToken
	h := newHarness(t, cfg)
	signIn := func() *http.Cookie {
		resp, _ := pageReq(t, h, "POST", "/login", url.Values{"token": {pageToken}, "next": {"/"}})
		return sessionOf(t, resp)
	}
	a, b := signIn(), signIn()
	if a.Value == b.Value || strings.Contains(a.Value, tokenMAC(pageToken)) {
		t.Fatalf("sessions share a value or hold the token's MAC: %q %q", a.Value, b.Value)
	}
	// Without the CSRF value (another site's form), or with b's: refused,
	// and a stays signed in.
	for _, form := range []url.Values{{}, {"csrf": {"x"}}, {"csrf": {csrfOf(t, h, b)}}} {
		if resp, _ := pageReq(t, h, "POST", "/logout", form, a); resp.StatusCode != http.StatusForbidden {
			t.Errorf("sign-out with csrf %q: %d, want 403", form.Get("csrf"), resp.StatusCode)
		}
	}
	if resp, _ := pageReq(t, h, "GET", "/", nil, a); resp.StatusCode != http.StatusOK {
		t.Fatalf("a refused sign-out ended the session: %d", resp.StatusCode)
	}
	if resp, _ := pageReq(t, h, "POST", "/logout", url.Values{"csrf": {csrfOf(t, h, a)}}, a); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-out: %d", resp.StatusCode)
	}
	// The cookie, kept (copied) after signing out, opens nothing; b is
	// still signed in.
	if resp, _ := pageReq(t, h, "GET", "/", nil, a); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a signed-out cookie still opens the pages: %d", resp.StatusCode)
	}
	if resp, _ := pageReq(t, h, "GET", "/api/v1/incidents", nil, a); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a signed-out cookie still reads the API: %d", resp.StatusCode)
	}
	if resp, _ := pageReq(t, h, "GET", "/", nil, b); resp.StatusCode != http.StatusOK {
		t.Errorf("signing a out signed b out: %d", resp.StatusCode)
	}
	// A session ends after a day.
	h.now = h.now.Add(sessionMaxAge)
	if resp, _ := pageReq(t, h, "GET", "/", nil, b); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a day-old session: %d", resp.StatusCode)
	}
}

// TestSessionCookieSecure is finding 9 of issue 26: the cookie was Secure
// only with an https external_url; behind a TLS-terminating proxy it went
// out without it. X-Forwarded-Proto: https counts from api.trusted_proxies
// only.
func TestSessionCookieSecure(t *testing.T) {
	for _, tc := range []struct {
		name    string
		proxies []string
		proto   string
		secure  bool
	}{
		{"plain http", nil, "", false},
		{"forwarded https, proxy not trusted", nil, "https", false},
		{"forwarded https from another proxy", []string{"10.0.0.0/8"}, "https", false},
		{"forwarded https from a trusted proxy", []string{"10.0.0.0/8", "127.0.0.1"}, "https", true},
		{"forwarded http from a trusted proxy", []string{"127.0.0.0/8"}, "http", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.API.Token = pageToken
			cfg.API.TrustedProxies = tc.proxies
			h := newHarness(t, cfg)
			req, _ := http.NewRequest(http.MethodGet, h.srv.URL+"/?token="+pageToken, nil)
			if tc.proto != "" {
				req.Header.Set("X-Forwarded-Proto", tc.proto)
			}
			c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if got := sessionOf(t, resp).Secure; got != tc.secure {
				t.Errorf("Secure = %v, want %v", got, tc.secure)
			}
		})
	}
}

// TestWrongTokensLimited is finding 9 of issue 26: nothing slowed a client
// guessing the token. Past 10 wrong tokens in a minute from one address
// every token check (API bearer, ?token=, the sign-in form) is a 429 with
// Retry-After until the minute is over; other addresses are not held.
func TestWrongTokensLimited(t *testing.T) {
	cfg := testConfig()
	cfg.API.Token = pageToken
	h := newHarness(t, cfg)
	for i := range signInFailures {
		path := "/api/v1/incidents"
		if i%2 == 1 {
			path = "/?token=guess"
		}
		if code, _ := h.do(t, http.MethodGet, path, "guess", nil); code != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %d, want 401", i, code)
		}
	}
	check := func(name string, resp *http.Response, body string) {
		t.Helper()
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "60" || !strings.Contains(body, "too many wrong tokens") {
			t.Errorf("%s: %d Retry-After %q %.200s", name, resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, h.srv.URL+"/api/v1/incidents", nil)
	req.Header.Set("Authorization", "Bearer "+pageToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	check("the right bearer while limited", resp, "too many wrong tokens")
	resp, body := pageReq(t, h, "POST", "/login", url.Values{"token": {pageToken}})
	check("sign-in form while limited", resp, body)
	resp, body = pageReq(t, h, "GET", "/?token="+pageToken, nil)
	check("?token= while limited", resp, body)
	// Another client is not held.
	if wait := h.d.limiter.wait("127.0.0.2", h.now); wait != 0 {
		t.Errorf("another address waits %s", wait)
	}
	// 59 s on, 1 s left; after the minute the right token works again.
	h.now = h.now.Add(59 * time.Second)
	resp, body = pageReq(t, h, "POST", "/login", url.Values{"token": {pageToken}})
	if resp.Header.Get("Retry-After") != "1" {
		t.Errorf("Retry-After %q after 59s: %d %.100s", resp.Header.Get("Retry-After"), resp.StatusCode, body)
	}
	h.now = h.now.Add(time.Second)
	if code, _ := h.do(t, http.MethodGet, "/api/v1/incidents", pageToken, nil); code != http.StatusOK {
		t.Errorf("after the window: %d", code)
	}
	if !strings.Contains(h.get(t, "/metrics", "", http.StatusOK), `whyslow_api_refused_total{reason="sign_in_rate"} 4`) {
		t.Error("/metrics does not count the limited attempts")
	}
}

// TestLimiterBounded: a flood of addresses does not grow the limiter past
// maxLimited; the newcomers share one count.
func TestLimiterBounded(t *testing.T) {
	l := newLimiter()
	now := time.Unix(1700000000, 0)
	for i := range maxLimited + 100 {
		l.fail("10.0."+strconv.Itoa(i/256)+"."+strconv.Itoa(i%256), now)
	}
	if n := len(l.clients); n > maxLimited+1 {
		t.Errorf("%d clients remembered, more than %d", n, maxLimited+1)
	}
	if l.wait("192.0.2.1", now) == 0 {
		t.Error("a newcomer past the bound is not held by the shared count (100 failures)")
	}
}

// TestWrongTokensBehindProxy: behind a trusted proxy the limiter counts the
// address the proxy forwards, so one guesser does not hold every user; an
// untrusted sender's X-Forwarded-For is ignored.
func TestWrongTokensBehindProxy(t *testing.T) {
	cfg := testConfig()
	cfg.API.Token = pageToken
	cfg.API.TrustedProxies = []string{"127.0.0.1"}
	req := func(xff string) *http.Request {
		r, _ := http.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "127.0.0.1:5555"
		if xff != "" {
			r.Header.Set("X-Forwarded-For", xff)
		}
		return r
	}
	if got := limitKey(cfg, req("203.0.113.9, 198.51.100.7")); got != "198.51.100.7" {
		t.Errorf("behind the proxy: %q, want the address it forwarded", got)
	}
	if got := limitKey(cfg, req("")); got != "127.0.0.1" {
		t.Errorf("no X-Forwarded-For: %q", got)
	}
	cfg.API.TrustedProxies = nil
	if got := limitKey(cfg, req("198.51.100.7")); got != "127.0.0.1" {
		t.Errorf("untrusted X-Forwarded-For taken: %q", got)
	}
}
