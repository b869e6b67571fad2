package daemon

import (
	"bytes"
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"

	"github.com/whyslow/whyslow/daemon/web"
	"github.com/whyslow/whyslow/incident"
	"github.com/whyslow/whyslow/internal/httplimit"
	"github.com/whyslow/whyslow/notifiers/outbox"
	"github.com/whyslow/whyslow/verdict"
)

// The pages (daemon/web renders them): `/` lists the incidents and
// triages a scope, `/incidents/{id}` is one incident with its timeline and
// verdict, `/verdict?scope=…&at=…&window=…` any triage. They take the API's
// token: as a bearer header, or once as `?token=` or through the sign-in
// form, after which a cookie holds it; like /api/* they are open without a
// token on a loopback address (or with api.insecure), and locked otherwise.

// Page routes, relative to the external URL's path.
const (
	pathIncidents = "/incidents/"
	pathVerdict   = "/verdict"
	pathLogin     = "/login"
)

// sessionCookie holds a signed-in browser's session id (session.go): a
// random value the daemon remembers with the token's MAC, so the cookie
// never holds the token, signing out revokes it and a new token signs
// everyone out.
const (
	sessionCookie = "whyslow_session"
	sessionLabel  = "whyslow page session v1"
	sessionMaxAge = 24 * time.Hour
)

// maxFormBytes bounds the body of the pages' forms.
const maxFormBytes = 64 << 10

func (d *Daemon) registerPages(mux *http.ServeMux) {
	mux.Handle("GET /{$}", d.pageAuth(d.pageIndex))
	mux.Handle("GET "+pathIncidents+"{id}", d.pageAuth(d.pageIncident))
	mux.Handle("GET "+pathVerdict, d.pageAuth(d.pageVerdict))
	mux.Handle("POST /triage", d.pageAuth(d.pageTriage))
	mux.HandleFunc("GET "+pathLogin, d.pageLoginForm)
	mux.HandleFunc("POST "+pathLogin, d.pageSignIn)
	mux.HandleFunc("POST /logout", d.pageSignOut)
}

// pagePrefix is the path of api.external_url without its trailing slash
// ("" or "/whyslow"): the pages link under it.
func pagePrefix(cfg Config) string {
	u, err := url.Parse(cfg.API.ExternalURL)
	if err != nil || cfg.API.ExternalURL == "" {
		return ""
	}
	return strings.TrimSuffix(u.EscapedPath(), "/")
}

// underPrefix serves h at its own paths and under the external URL's path
// too: behind a reverse proxy that strips the prefix and one that passes it
// on, the links the pages and notifications carry work. The prefix is read
// per request, so a reload that changes it applies at once.
func (d *Daemon) underPrefix(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := pagePrefix(d.Config())
		// The escaped path: an incident id may hold a "/" (%2F), which the
		// decoded path would turn into two segments.
		ep := r.URL.EscapedPath()
		if p != "" && (ep == p || strings.HasPrefix(ep, p+"/")) {
			rest := strings.TrimPrefix(ep, p)
			if rest == "" {
				rest = "/"
			}
			path, err := url.PathUnescape(rest)
			if err != nil {
				http.Error(w, "bad path: "+err.Error(), http.StatusBadRequest)
				return
			}
			r2 := r.Clone(r.Context())
			r2.URL.Path, r2.URL.RawPath = path, rest
			r = r2
		}
		h.ServeHTTP(w, r)
	})
}

// site is what every page for r needs to know about the daemon (r nil:
// no sign-out form).
func (d *Daemon) site(cfg Config, r *http.Request) web.Site {
	mode, _ := APIAuth(cfg)
	s := web.Site{Prefix: pagePrefix(cfg), SignOut: mode == AuthToken, Now: d.opts.Now(), Refresh: web.RefreshSeconds}
	if s.SignOut && r != nil {
		s.CSRF = d.sessions.csrf(sessionID(r))
	}
	return s
}

// writePage renders p and answers it with code and the pages' headers: the
// Content-Security-Policy (no script, nothing fetched, no framing), no
// caching (incident data), no referrer.
func (d *Daemon) writePage(w http.ResponseWriter, code int, p web.Page) {
	var b bytes.Buffer
	if err := web.Render(&b, p); err != nil {
		d.log.Error("Render page failed", "err", err)
		http.Error(w, "render page: internal error", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", web.CSP()+"; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = b.WriteTo(w)
}

// pageError answers an error page, its message scrubbed of secrets.
func (d *Daemon) pageError(w http.ResponseWriter, r *http.Request, cfg Config, code int, title string, err error) {
	site := d.site(cfg, r)
	site.Refresh = 0
	d.writePage(w, code, web.ErrorPage{Site: site, Code: code, Title: title, Message: d.secrets.Scrub(err.Error())})
}

// setSession gives the browser the session cookie: only for the pages'
// path, not readable by scripts, sent on links from elsewhere (a Slack
// message) but not on another site's form posts, and only over HTTPS when
// the daemon is reached over HTTPS (secureRequest).
func setSession(w http.ResponseWriter, r *http.Request, cfg Config, value string, maxAge time.Duration) {
	secure := secureRequest(cfg, r)
	c := &http.Cookie{Name: sessionCookie, Value: value, Path: pagePrefix(cfg) + "/", HttpOnly: true, Secure: secure,
		SameSite: http.SameSiteLaxMode, MaxAge: int(maxAge / time.Second)}
	if maxAge < 0 {
		c.MaxAge = -1
	}
	http.SetCookie(w, c)
}

const errWrongToken = "That token is not the daemon's api.token."

// loginPage answers the sign-in form, to come back to next.
func (d *Daemon) loginPage(w http.ResponseWriter, cfg Config, code int, next, msg string) {
	site := d.site(cfg, nil)
	site.SignOut, site.Refresh = false, 0 // a form being typed into must not reload
	d.writePage(w, code, web.LoginPage{Site: site, Next: next, Error: msg})
}

// tokenOK compares a token typed or passed in a URL with api.token in
// constant time.
func tokenOK(got, want string) bool { return httplimit.BearerOK("Bearer "+got, want) }

// pageAuth guards a page with the API's authentication (see APIAuth). With a
// token, a valid ?token= becomes the session cookie and the page is
// reloaded without it (it would stay in the history and in screenshots);
// without the token or the cookie the answer is 401 with the sign-in form.
func (d *Daemon) pageAuth(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cfg := d.Config()
		mode, _ := APIAuth(cfg)
		switch mode {
		case AuthLocked:
			d.stats.authFailures.WithLabelValues("locked").Inc()
			d.pageError(w, r, cfg, http.StatusForbidden, "Locked", errLocked)
			return
		case AuthToken:
			q := r.URL.Query()
			if _, given := q["token"]; given && r.Method == http.MethodGet {
				if d.tokenThrottled(w, r) {
					return
				}
				if !tokenOK(q.Get("token"), cfg.API.Token) {
					d.tokenFailed(r)
					d.loginPage(w, cfg, http.StatusUnauthorized, pageNext(cfg, r, "token"), errWrongToken)
					return
				}
				setSession(w, r, cfg, d.sessions.start(cfg.API.Token, d.opts.Now()), sessionMaxAge)
				http.Redirect(w, r, pageNext(cfg, r, "token"), http.StatusSeeOther)
				return
			}
			ok, answered := d.bearer(w, r, cfg)
			if answered {
				return
			}
			if !ok && !d.sessionOK(r, cfg.API.Token) {
				d.stats.authFailures.WithLabelValues("token").Inc()
				back := pagePrefix(cfg) + "/"
				if r.Method == http.MethodGet {
					back = pageNext(cfg, r, "")
				}
				d.loginPage(w, cfg, http.StatusUnauthorized, back, "")
				return
			}
		}
		next(w, r)
	})
}

// pageNext is r's page URL under the prefix, without the query parameter
// drop: where to go back to after signing in.
func pageNext(cfg Config, r *http.Request, drop string) string {
	q := r.URL.Query()
	if drop != "" {
		q.Del(drop)
	}
	s := pagePrefix(cfg) + r.URL.EscapedPath()
	if len(q) > 0 {
		s += "?" + q.Encode()
	}
	return s
}

// safeNext keeps a sign-in's "next" on this site: a path (not //host or a
// URL with a scheme), else the index.
func safeNext(cfg Config, next string) string {
	home := pagePrefix(cfg) + "/"
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || !strings.HasPrefix(next, "/") ||
		strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") {
		return home
	}
	return next
}

// parseForm reads a page form's body, bounded; it answers 400 or 413 itself.
func (d *Daemon) parseForm(w http.ResponseWriter, r *http.Request, cfg Config) bool {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		code := http.StatusBadRequest
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			code = http.StatusRequestEntityTooLarge
			err = fmt.Errorf("form larger than %d bytes", maxFormBytes)
		}
		d.pageError(w, r, cfg, code, "Bad form", err)
		return false
	}
	return true
}

func (d *Daemon) pageLoginForm(w http.ResponseWriter, r *http.Request) {
	cfg := d.Config()
	if mode, _ := APIAuth(cfg); mode != AuthToken {
		http.Redirect(w, r, pagePrefix(cfg)+"/", http.StatusSeeOther)
		return
	}
	d.loginPage(w, cfg, http.StatusOK, safeNext(cfg, r.URL.Query().Get("next")), "")
}

func (d *Daemon) pageSignIn(w http.ResponseWriter, r *http.Request) {
	cfg := d.Config()
	if !d.parseForm(w, r, cfg) {
		return
	}
	next := safeNext(cfg, r.PostForm.Get("next"))
	if mode, _ := APIAuth(cfg); mode != AuthToken {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	if d.tokenThrottled(w, r) {
		return
	}
	if !tokenOK(r.PostForm.Get("token"), cfg.API.Token) {
		d.tokenFailed(r)
		d.loginPage(w, cfg, http.StatusUnauthorized, next, errWrongToken)
		return
	}
	setSession(w, r, cfg, d.sessions.start(cfg.API.Token, d.opts.Now()), sessionMaxAge)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// pageSignOut ends the browser's session. It takes the form's CSRF value
// (only this daemon's pages have it), so another site cannot sign a
// browser out; without a session there is nothing to end.
func (d *Daemon) pageSignOut(w http.ResponseWriter, r *http.Request) {
	cfg := d.Config()
	if !d.parseForm(w, r, cfg) {
		return
	}
	if id := sessionID(r); id != "" {
		if !hmac.Equal([]byte(r.PostForm.Get("csrf")), []byte(d.sessions.csrf(id))) {
			d.pageError(w, r, cfg, http.StatusForbidden, "Sign-out refused", errors.New("the sign-out form's CSRF value is missing or wrong: sign out from a page of this daemon"))
			return
		}
		d.sessions.end(id)
	}
	setSession(w, r, cfg, "", -1)
	http.Redirect(w, r, pagePrefix(cfg)+pathLogin, http.StatusSeeOther)
}

func (d *Daemon) pageIndex(w http.ResponseWriter, r *http.Request) {
	cfg := d.Config()
	d.writePage(w, http.StatusOK, web.Index(d.site(cfg, r), d.Incidents(), web.TriageForm{Placeholder: cfg.Detect.Selector}))
}

// incidentByID returns the incident with that id, open or resolved.
func (d *Daemon) incidentByID(id string) (incident.Incident, bool) {
	for _, in := range d.Incidents() {
		if in.ID == id {
			return in, true
		}
	}
	return incident.Incident{}, false
}

// journaler is the outbox's memory of each incident's notifications
// (*outbox.Outbox has it; an outbox without one leaves the timeline to the
// incident's own open and resolve).
type journaler interface {
	Journal(incidentID string) []outbox.JournalEntry
}

// notices are an incident's notifications as the outbox journal has them.
func (d *Daemon) notices(id string) []web.Notice {
	j, ok := d.opts.Outbox.(journaler)
	if !ok {
		return nil
	}
	var out []web.Notice
	for _, e := range j.Journal(id) {
		out = append(out, web.Notice{Sequence: e.Sequence, Kind: string(e.Kind), CreatedAt: e.CreatedAt, Cause: e.Cause,
			CauseTitle: e.CauseTitle, Severity: string(e.Severity), Receiver: e.Receiver, Status: e.Status.String(), StatusAt: e.StatusAt})
	}
	return out
}

func (d *Daemon) pageIncident(w http.ResponseWriter, r *http.Request) {
	cfg := d.Config()
	in, ok := d.incidentByID(r.PathValue("id"))
	if !ok {
		d.pageError(w, r, cfg, http.StatusNotFound, "No such incident",
			fmt.Errorf("no incident %q: it may have been resolved long ago (whyslow keeps the newest incidents.keep_resolved)", r.PathValue("id")))
		return
	}
	site := d.site(cfg, r)
	p := web.IncidentPage{Site: site, Incident: web.Row(site, in), Timeline: web.Timeline(in, d.notices(in.ID))}
	if in.Verdict != nil {
		section := d.verdictSection(r.Context(), cfg, in.Verdict, in.OpenedAt)
		section.JSONHref = site.Link("/api/v1/verdict?scope=" + url.QueryEscape(in.Scope.Selector))
		section.Predictions = predictionsView(d.predictionFor(in))
		p.Verdict = &section
	}
	d.writePage(w, http.StatusOK, p)
}

// verdictSection lays out v with its curves from the daemon's metrics,
// bounded by api.triage_timeout; onset (zero: none) is marked on them.
func (d *Daemon) verdictSection(ctx context.Context, cfg Config, v *verdict.Verdict, onset time.Time) web.VerdictSection {
	ctx, cancel := context.WithTimeout(ctx, cfg.API.TriageTimeout)
	defer cancel()
	s := web.Section(ctx, d.opts.Metrics, v, onset, d.opts.Maps)
	s.ChartNote = d.secrets.Scrub(s.ChartNote)
	return s
}

// pageVerdict is GET /verdict: with only a scope, the scope's latest
// verdict (its incident's), else a triage now; with at, window or baseline,
// that triage (as POST /api/v1/triage). Bad parameters are a 400 page.
func (d *Daemon) pageVerdict(w http.ResponseWriter, r *http.Request) {
	cfg := d.Config()
	q := r.URL.Query()
	scopes := append(append([]string(nil), q["scope"]...), q["selector"]...)
	if len(scopes) > 1 {
		d.pageError(w, r, cfg, http.StatusBadRequest, "Bad request", errors.New("scope: give at most one scope (scope= or selector=)"))
		return
	}
	raw := ""
	if len(scopes) == 1 {
		raw = scopes[0]
	}
	sel, err := d.scopeSelector(raw)
	if err != nil {
		d.pageError(w, r, cfg, http.StatusBadRequest, "Bad scope", err)
		return
	}
	site := d.site(cfg, r)
	body := TriageBody{Selector: sel, At: q.Get("at"), Window: q.Get("window"), Baseline: q.Get("baseline")}
	latest := body.At == "" && body.Window == "" && body.Baseline == ""
	v, held := (*verdict.Verdict)(nil), false
	if latest {
		v, held = d.Verdict(raw)
	}
	if !held {
		req, err := body.Request(cfg, d.opts.Now())
		if err != nil {
			d.pageError(w, r, cfg, http.StatusBadRequest, "Bad request", err)
			return
		}
		var terr *triageError
		if v, terr = d.adHocTriage(r.Context(), cfg, req); terr != nil {
			if terr.retryAfter > 0 {
				w.Header().Set("Retry-After", strconv.Itoa(int(terr.retryAfter/time.Second)))
			}
			d.pageError(w, r, cfg, terr.code, "Triage failed", terr.err)
			return
		}
	}
	// The scope's incident is linked; its open is marked on the curves
	// when the triage is of a time during the incident.
	in, ok := d.incidentOf(v)
	onset := time.Time{}
	if ok && !v.At.Before(in.OpenedAt) && (in.ResolvedAt.IsZero() || !v.At.After(in.ResolvedAt)) {
		onset = in.OpenedAt
	}
	section := d.verdictSection(r.Context(), cfg, v, onset)
	if ok {
		section.IncidentHref, section.IncidentID = site.Link(pathIncidents+url.PathEscape(in.ID)), in.ID
	}
	if latest {
		section.JSONHref = site.Link("/api/v1/verdict?scope=" + url.QueryEscape(raw))
	}
	if held && ok && in.Verdict == v {
		section.Predictions = predictionsView(d.predictionFor(in))
	}
	d.writePage(w, http.StatusOK, web.VerdictPage{Site: site, Verdict: section})
}

// incidentOf returns the incident of v's scope: the open one, else the
// newest resolved one.
func (d *Daemon) incidentOf(v *verdict.Verdict) (incident.Incident, bool) {
	want := canonicalSelector(v.Scope.Selector)
	var found incident.Incident
	ok := false
	for _, in := range d.Incidents() {
		if canonicalSelector(in.Scope.Selector) != want {
			continue
		}
		if in.Status == incident.IncidentOpen {
			return in, true
		}
		if !ok || in.ResolvedAt.After(found.ResolvedAt) {
			found, ok = in, true
		}
	}
	return found, ok
}

// pageTriage is the index's form: the same fields and checks as POST
// /api/v1/triage; a valid request is answered with a redirect to its
// verdict page, whose URL names the time, so it can be shared.
func (d *Daemon) pageTriage(w http.ResponseWriter, r *http.Request) {
	cfg := d.Config()
	if !d.parseForm(w, r, cfg) {
		return
	}
	f := r.PostForm
	body := TriageBody{Selector: strings.TrimSpace(f.Get("selector")), At: strings.TrimSpace(f.Get("at")),
		Window: strings.TrimSpace(f.Get("window")), Baseline: strings.TrimSpace(f.Get("baseline"))}
	sel, err := d.scopeSelector(body.Selector)
	var req TriageRequest
	if err == nil {
		body.Selector = sel
		req, err = body.Request(cfg, d.opts.Now())
	}
	if err != nil {
		form := web.TriageForm{Selector: f.Get("selector"), At: f.Get("at"), Window: f.Get("window"), Baseline: f.Get("baseline"),
			Placeholder: cfg.Detect.Selector, Error: err.Error()}
		d.writePage(w, http.StatusBadRequest, web.Index(d.site(cfg, r), d.Incidents(), form))
		return
	}
	q := url.Values{}
	q.Set("scope", req.Selector)
	q.Set("at", req.At.UTC().Format(time.RFC3339))
	q.Set("window", model.Duration(req.Window).String())
	q.Set("baseline", model.Duration(req.Baseline).String())
	http.Redirect(w, r, pagePrefix(cfg)+pathVerdict+"?"+q.Encode(), http.StatusSeeOther)
}
