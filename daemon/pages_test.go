package daemon

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/whyslow/whyslow/incident"
)

const pageToken = "page-t0ken-5ecret"

// pageReq sends one request to the harness without following redirects,
// with the given cookies and form; it returns the response and its body.
func pageReq(t *testing.T, h *harness, method, path string, form url.Values, cookies ...*http.Cookie) (*http.Response, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, h.srv.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for _, c := range cookies {
		req.AddCookie(c)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func sessionOf(t *testing.T, resp *http.Response) *http.Cookie {
	t.Helper()
	for _, c := range resp.Cookies() {
		if c.Name == sessionCookie {
			return c
		}
	}
	t.Fatalf("no %s cookie in %v", sessionCookie, resp.Header["Set-Cookie"])
	return nil
}

// csrfOf is the sign-out form's CSRF value on the index page for cookie.
func csrfOf(t *testing.T, h *harness, cookie *http.Cookie) string {
	t.Helper()
	_, body := pageReq(t, h, "GET", "/", nil, cookie)
	_, rest, ok := strings.Cut(body, `name="csrf" value="`)
	v, _, _ := strings.Cut(rest, `"`)
	if !ok || v == "" {
		t.Fatalf("no CSRF value in the sign-out form:\n%s", body)
	}
	return v
}

// incidentHarness is a daemon with one open incident (cause
// kv_cache_pressure) and cfg's API settings.
func incidentHarness(t *testing.T, edit func(*Config)) *harness {
	t.Helper()
	cfg := testConfig()
	if edit != nil {
		edit(&cfg)
	}
	h := newHarness(t, cfg)
	h.ticks(t, 15*12)
	h.eng.setSlow(true)
	h.tri.cause = "kv_cache_pressure"
	h.ticks(t, 6)
	if incs := h.d.Incidents(); len(incs) != 1 || incs[0].Status != incident.IncidentOpen {
		t.Fatalf("incidents %+v", incs)
	}
	return h
}

// TestPagesTakeTheToken: with api.token the pages refuse a browser without
// it (401, the sign-in form, nothing of the incidents); ?token= and the
// sign-in form turn it into a cookie that opens the pages and reads the
// API, but does not write to it; a wrong token is refused; signing out
// ends the cookie.
func TestPagesTakeTheToken(t *testing.T) {
	h := incidentHarness(t, func(c *Config) { c.API.Token = pageToken })
	id := url.PathEscape(h.d.Incidents()[0].ID)

	resp, body := pageReq(t, h, "GET", "/incidents/"+id, nil)
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, `name="token"`) || strings.Contains(body, "kv_cache_pressure") {
		t.Fatalf("without the token: %d\n%s", resp.StatusCode, body)
	}
	if !strings.Contains(body, `name="next" value="/incidents/`+id+`"`) {
		t.Errorf("sign-in form does not come back to the page:\n%s", body)
	}
	if resp, _ := pageReq(t, h, "GET", "/?token=wrong", nil); resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
		t.Errorf("wrong ?token: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}

	resp, _ = pageReq(t, h, "GET", "/incidents/"+id+"?token="+pageToken+"&x=1", nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/incidents/"+id+"?x=1" {
		t.Fatalf("?token: %d, Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	cookie := sessionOf(t, resp)
	if !cookie.HttpOnly || cookie.SameSite != http.SameSiteLaxMode || cookie.Path != "/" || strings.Contains(cookie.Value, pageToken) {
		t.Errorf("session cookie %+v", cookie)
	}
	resp, body = pageReq(t, h, "GET", "/incidents/"+id, nil, cookie)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "kv_cache_pressure") {
		t.Fatalf("with the cookie: %d\n%s", resp.StatusCode, body)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("CSP %q", csp)
	}
	if resp, _ := pageReq(t, h, "GET", "/api/v1/incidents", nil, cookie); resp.StatusCode != http.StatusOK {
		t.Errorf("cookie does not read the API: %d", resp.StatusCode)
	}
	if resp, _ := pageReq(t, h, "POST", "/api/v1/triage", url.Values{}, cookie); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("cookie wrote to the API: %d", resp.StatusCode)
	}
	if code, _ := h.do(t, "GET", "/", pageToken, nil); code != http.StatusOK {
		t.Errorf("bearer header: %d", code)
	}

	resp, body = pageReq(t, h, "POST", "/login", url.Values{"token": {"nope"}, "next": {"/"}})
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "not the daemon") {
		t.Errorf("wrong sign-in: %d", resp.StatusCode)
	}
	resp, _ = pageReq(t, h, "POST", "/login", url.Values{"token": {pageToken}, "next": {"//evil.example/x"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Errorf("sign-in with a foreign next: %d, Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	other := sessionOf(t, resp)

	resp, _ = pageReq(t, h, "POST", "/logout", url.Values{"csrf": {csrfOf(t, h, cookie)}}, cookie)
	if c := sessionOf(t, resp); c.MaxAge >= 0 || c.Value != "" {
		t.Errorf("sign-out cookie %+v", c)
	}
	cookie = other

	// A new token signs everyone out.
	cfg := h.d.Config()
	cfg.API.Token = "another-token"
	if err := h.d.Reload(cfg, nil, nil); err != nil {
		t.Fatal(err)
	}
	if resp, _ := pageReq(t, h, "GET", "/", nil, cookie); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("old cookie after a token change: %d", resp.StatusCode)
	}
}

// TestPagesAuthModes: open on loopback without a token, locked (403)
// beyond it.
func TestPagesAuthModes(t *testing.T) {
	h := newHarness(t, testConfig())
	if resp, body := pageReq(t, h, "GET", "/", nil); resp.StatusCode != http.StatusOK || strings.Contains(body, "Sign out") {
		t.Errorf("loopback without a token: %d", resp.StatusCode)
	}
	cfg := testConfig()
	cfg.Listen = ":9109"
	h = newHarness(t, cfg)
	if resp, body := pageReq(t, h, "GET", "/", nil); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "api.token") {
		t.Errorf("beyond loopback without a token: %d\n%s", resp.StatusCode, body)
	}
}

// TestPagesUnderPrefix: with an external URL that has a path, every page
// links under it, and the daemon answers both with and without it (a proxy
// that passes the prefix on, one that strips it).
func TestPagesUnderPrefix(t *testing.T) {
	h := incidentHarness(t, func(c *Config) { c.API.ExternalURL = "https://ops.example/whyslow/" })
	id := url.PathEscape(h.d.Incidents()[0].ID)
	for _, path := range []string{"/whyslow/", "/"} {
		resp, body := pageReq(t, h, "GET", path, nil)
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, `href="/whyslow/incidents/`+id+`"`) ||
			!strings.Contains(body, `action="/whyslow/triage"`) {
			t.Errorf("GET %s: %d\n%s", path, resp.StatusCode, body)
		}
	}
	if resp, _ := pageReq(t, h, "GET", "/whyslow/api/v1/incidents", nil); resp.StatusCode != http.StatusOK {
		t.Errorf("API under the prefix: %d", resp.StatusCode)
	}
	n := notificationFor(incident.Event{Incident: h.d.Incidents()[0]}, "hook", h.d.Config().API.ExternalURL, h.now)
	if want := "https://ops.example/whyslow/verdict?scope=" + url.QueryEscape(`model_name="m"`); n.VerdictURL != want {
		t.Errorf("notification links %q, want %q", n.VerdictURL, want)
	}
	u, _ := url.Parse(n.VerdictURL)
	resp, body := pageReq(t, h, "GET", u.RequestURI(), nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "kv_cache_pressure") || !strings.Contains(body, `href="/whyslow/incidents/`+id+`"`) {
		t.Errorf("the notification's link: %d\n%s", resp.StatusCode, body)
	}
}

// TestPageBadInput: malformed parameters and forms are a 400 page that says
// what is wrong; an unknown incident a 404.
func TestPageBadInput(t *testing.T) {
	h := incidentHarness(t, nil)
	for _, tc := range []struct {
		path string
		code int
		want string
	}{
		{"/verdict?scope=" + url.QueryEscape(`model_name="m`), http.StatusBadRequest, "scope:"},
		{"/verdict?scope=a&selector=b", http.StatusBadRequest, "at most one scope"},
		{"/verdict?scope=" + url.QueryEscape(`model_name="m"`) + "&window=soon", http.StatusBadRequest, "window: &#34;soon&#34; is not a positive duration"},
		{"/verdict?scope=" + url.QueryEscape(`model_name="m"`) + "&at=yesterday", http.StatusBadRequest, "not RFC 3339"},
		{"/verdict?scope=" + url.QueryEscape(`__name__="x"`), http.StatusBadRequest, "__name__ cannot be part of a scope"},
		{"/incidents/nope", http.StatusNotFound, "no incident &#34;nope&#34;"},
	} {
		resp, body := pageReq(t, h, "GET", tc.path, nil)
		if resp.StatusCode != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("GET %s: %d, want %d with %q\n%s", tc.path, resp.StatusCode, tc.code, tc.want, around(body, "error"))
		}
	}
	resp, body := pageReq(t, h, "POST", "/triage", url.Values{"selector": {`model_name="m"`}, "window": {"5m"}, "baseline": {"1m"}})
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "shorter than the window") || !strings.Contains(body, `value="1m"`) {
		t.Errorf("bad triage form: %d\n%s", resp.StatusCode, around(body, "error"))
	}
	resp, _ = pageReq(t, h, "POST", "/triage", url.Values{"selector": {strings.Repeat("x", maxFormBytes)}})
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized form: %d", resp.StatusCode)
	}
}

func around(s, sub string) string {
	i := strings.Index(s, sub)
	if i < 0 {
		return s
	}
	return s[max(0, i-300):min(len(s), i+300)]
}

// TestPageTriageForm: the index's form runs the same triage as POST
// /api/v1/triage through a redirect to a verdict page whose URL names the
// time, so the link can be shared; that page marks the incident's open.
func TestPageTriageForm(t *testing.T) {
	h := incidentHarness(t, nil)
	resp, _ := pageReq(t, h, "POST", "/triage", url.Values{"selector": {`{model_name="m"}`}, "window": {"1m"}})
	loc := resp.Header.Get("Location")
	want := "/verdict?at=" + url.QueryEscape(h.now.UTC().Format(time.RFC3339)) + "&baseline=10m&scope=" +
		url.QueryEscape(`model_name="m"`) + "&window=1m"
	if resp.StatusCode != http.StatusSeeOther || loc != want {
		t.Fatalf("form: %d, Location %q, want %q", resp.StatusCode, loc, want)
	}
	runs := h.tri.runs
	resp, body := pageReq(t, h, "GET", loc, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "kv_cache_pressure") || h.tri.runs != runs+1 {
		t.Errorf("verdict page: %d, triage runs %d → %d\n%s", resp.StatusCode, runs, h.tri.runs, body)
	}
	if h.tri.last.Window != time.Minute || !h.tri.last.At.Equal(h.now) {
		t.Errorf("triage request %+v", h.tri.last)
	}
	if !strings.Contains(body, `href="/incidents/`+url.PathEscape(h.d.Incidents()[0].ID)+`"`) {
		t.Error("verdict page does not link the scope's incident")
	}
}

// TestUnderPrefixKeepsEscapes: an incident id with a "/" (a model name such
// as meta-llama/Llama-3.1-8B) stays one path segment under the prefix.
func TestUnderPrefixKeepsEscapes(t *testing.T) {
	cfg := testConfig()
	cfg.API.ExternalURL = "http://127.0.0.1:9109/whyslow"
	d := newHarness(t, cfg).d
	mux := http.NewServeMux()
	mux.HandleFunc("GET /incidents/{id}", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, r.PathValue("id")) })
	for _, path := range []string{"/whyslow/incidents/a%2Fb%22", "/incidents/a%2Fb%22"} {
		rec := httptest.NewRecorder()
		d.underPrefix(mux).ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if rec.Code != http.StatusOK || rec.Body.String() != `a/b"` {
			t.Errorf("GET %s: %d %q", path, rec.Code, rec.Body.String())
		}
	}
}

// TestPageCookieUnderPrefix: behind a prefix the cookie is scoped to it,
// marked Secure for an https external URL, and ?token= comes back under
// the prefix.
func TestPageCookieUnderPrefix(t *testing.T) {
	cfg := testConfig()
	cfg.API.Token = pageToken
	cfg.API.ExternalURL = "https://ops.example/whyslow"
	h := newHarness(t, cfg)
	resp, _ := pageReq(t, h, "GET", "/whyslow/?token="+pageToken, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/whyslow/" {
		t.Fatalf("?token under the prefix: %d, Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	if c := sessionOf(t, resp); c.Path != "/whyslow/" || !c.Secure {
		t.Errorf("cookie %+v, want path /whyslow/ and Secure", c)
	}
}
