// Package web renders whyslow's pages: the open incidents, one incident
// with its timeline and verdict, and any verdict, as HTML from html/template
// with the stylesheet and the charts (SVG) inline. The pages run no script
// and fetch nothing (their Content-Security-Policy forbids it), so a page
// saved to a file is the same page (`whyslow why --html` writes one). The
// package renders and reads the curves through query.Metrics; the daemon
// (daemon/pages.go) routes, authenticates and gathers the rest.
package web

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"fmt"
	"html/template"
	"io"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/whyslow/whyslow/incident"
	"github.com/whyslow/whyslow/internal/format"
	"github.com/whyslow/whyslow/notifiers/render"
	"github.com/whyslow/whyslow/verdict"
)

//go:embed templates/*.html style.css
var files embed.FS

var (
	stylesheet = mustRead("style.css")
	// templates are one set per page: the layout, the shared parts and the
	// page's own "title" and "content". They are parsed on first use, so a
	// daemon whose pages nobody opens, and every other command, does not
	// hold their parse trees (~0.7 MB of a sidecar's ~6 MB live heap).
	templates = sync.OnceValue(func() map[string]*template.Template {
		out := map[string]*template.Template{}
		for _, page := range []string{"index.html", "incident.html", "verdict.html", "login.html", "error.html"} {
			out[page] = template.Must(template.New(page).Funcs(funcs).ParseFS(files,
				"templates/layout.html", "templates/verdict_section.html", "templates/"+page))
		}
		return out
	})
)

func mustRead(name string) string {
	b, err := files.ReadFile(name)
	if err != nil {
		panic(err) // embedded at build time: cannot be missing
	}
	return string(b)
}

// CSP is the Content-Security-Policy of every page: its own stylesheet (by
// hash) and forms posting to the same origin, nothing else: no script, no
// image, font or request to anywhere.
func CSP() string {
	sum := sha256.Sum256([]byte(stylesheet))
	return "default-src 'none'; style-src 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'; " +
		"img-src data:; form-action 'self'; base-uri 'none'"
}

// Site is what every page shares.
type Site struct {
	// Prefix is the path the pages are served under ("" or "/whyslow",
	// from api.external_url), put before every link.
	Prefix string
	// Standalone is a page written to a file (why --html): no navigation
	// and no forms, as there is no daemon behind it.
	Standalone bool
	// SignOut shows the sign-out button (the pages take a token).
	SignOut bool
	// CSRF is the sign-out form's value for this browser's session.
	CSRF string
	// Now is when the page is made (the daemon's clock).
	Now time.Time
	// Refresh reloads the page after this many seconds, without script
	// (<meta http-equiv="refresh">): the daemon's live pages set it, a
	// form or a saved page does not.
	Refresh int
}

// RefreshSeconds is how often the daemon's incident and verdict pages
// reload themselves: about a triage cycle, so an open page follows the
// incident.
const RefreshSeconds = 60

// Link is path under the site's prefix.
func (s Site) Link(path string) string { return s.Prefix + path }

// Generated is the page's time, for its footer.
func (s Site) Generated() string { return timeText(s.Now) }

// CSS is the stylesheet, for the page's <style> element.
func (Site) CSS() template.CSS { return template.CSS(stylesheet) }

// CSP is the page's Content-Security-Policy, also in a <meta> element so a
// saved page keeps it.
func (Site) CSP() string { return CSP() }

// Page is a page to render.
type Page interface {
	template() string
}

// Render writes p as HTML to w. It renders into memory first, so a template
// error never leaves half a page.
func Render(w io.Writer, p Page) error {
	var b bytes.Buffer
	if err := templates()[p.template()].ExecuteTemplate(&b, "layout", p); err != nil {
		return fmt.Errorf("render page %s: %w", p.template(), err)
	}
	_, err := b.WriteTo(w)
	return err
}

// IndexPage is `/`: the open incidents, newest first, the recently resolved
// ones and the triage form.
type IndexPage struct {
	Site
	Open     []IncidentRow
	Resolved []IncidentRow
	Form     TriageForm
}

func (IndexPage) template() string { return "index.html" }

// MaxResolved is how many resolved incidents the index lists.
const MaxResolved = 20

// Index lays out the index from the daemon's incidents.
func Index(site Site, incidents []incident.Incident, form TriageForm) IndexPage {
	p := IndexPage{Site: site, Form: form}
	p.Site.Refresh = 0 // it holds the triage form: a reload would lose what is typed
	var open, resolved []incident.Incident
	for _, in := range incidents {
		if in.Status == incident.IncidentOpen {
			open = append(open, in)
		} else {
			resolved = append(resolved, in)
		}
	}
	sort.SliceStable(open, func(i, j int) bool { return open[i].OpenedAt.After(open[j].OpenedAt) })
	sort.SliceStable(resolved, func(i, j int) bool { return resolved[i].ResolvedAt.After(resolved[j].ResolvedAt) })
	for _, in := range open {
		p.Open = append(p.Open, Row(site, in))
	}
	for _, in := range resolved[:min(len(resolved), MaxResolved)] {
		p.Resolved = append(p.Resolved, Row(site, in))
	}
	return p
}

// TriageForm is the index's "triage a scope now" form, with what was typed
// and why it was refused.
type TriageForm struct {
	Selector, At, Window, Baseline string
	// Placeholder is the detector's selector, used when Selector is empty.
	Placeholder string
	Error       string
}

// IncidentRow is one incident in a list, and the head of its page.
type IncidentRow struct {
	ID, Href  string
	Scope     string
	Status    string
	Severity  string
	Phase     string
	TopCause  string
	CauseID   string
	Confident string
	Opened    string
	Age       string
	Resolved  string
	Triggers  string
	Alerts    string
	Notified  int
	// Condition is the incident's condition message; ResolveReason why it
	// resolved other than by its detector going clear.
	Condition     string
	ResolveReason string
}

// Row lays out one incident.
func Row(site Site, in incident.Incident) IncidentRow {
	r := IncidentRow{ID: in.ID, Href: site.Link("/incidents/" + url.PathEscape(in.ID)), Scope: render.ScopeText(in.Scope),
		Status: in.Status.String(), Severity: string(in.Severity), Opened: timeText(in.OpenedAt),
		Triggers: strings.Join(in.Triggers, ", "), Notified: in.Notified.Count, Condition: in.Condition.Message,
		ResolveReason: in.ResolveReason}
	end := site.Now
	if in.Status == incident.IncidentResolved {
		end = in.ResolvedAt
		r.Resolved = timeText(in.ResolvedAt)
	}
	r.Age = ageText(end.Sub(in.OpenedAt))
	if v := in.Verdict; v != nil {
		r.Phase = string(v.Phase)
		if len(v.Causes) > 0 {
			c := v.Causes[0]
			r.TopCause, r.CauseID = c.Title, c.ID
			r.Confident = render.ConfidenceText(c)
		}
	}
	if r.TopCause == "" && in.TopCause != "" {
		r.TopCause, r.CauseID = in.TopCause, in.TopCause
	}
	var names []string
	for _, a := range in.Alerts {
		names = append(names, a.Name)
	}
	sort.Strings(names)
	r.Alerts = strings.Join(names, ", ")
	return r
}

// IncidentPage is `/incidents/{id}`: the incident, its timeline and its
// current verdict in full.
type IncidentPage struct {
	Site
	Incident IncidentRow
	Timeline []TimelineItem
	// Verdict is nil until the incident has one.
	Verdict *VerdictSection
}

func (IncidentPage) template() string { return "incident.html" }

// VerdictPage is `/verdict?scope=…` and the file `why --html` writes.
type VerdictPage struct {
	Site
	Verdict VerdictSection
}

func (VerdictPage) template() string { return "verdict.html" }

// VerdictSection is a verdict rendered in full, with its curves.
type VerdictSection struct {
	render.View
	Charts []ChartView
	// ChartNote says why there are no curves ("" when there are).
	ChartNote string
	// JSONHref links the verdict JSON of the API ("" on a standalone page).
	JSONHref string
	// IncidentHref links the incident this verdict belongs to, IncidentID
	// names it.
	IncidentHref, IncidentID string
	// Predictions are what each fix is predicted to do (nil: not asked
	// for); the daemon sets them from its own computation.
	Predictions *PredictionsView
}

// MarksOnset reports whether a chart marks the incident's open (for the
// legend).
func (s VerdictSection) MarksOnset() bool {
	for _, c := range s.Charts {
		if c.Onset != nil {
			return true
		}
	}
	return false
}

// Continuous reports whether the charts are drawn on one continuous time
// axis (for the legend).
func (s VerdictSection) Continuous() bool {
	return len(s.Charts) > 0 && s.Charts[0].Continuous
}

// Verdict lays out v with its charts; chartNote says why charts is empty.
func Verdict(v *verdict.Verdict, charts []ChartView, chartNote string) VerdictSection {
	return VerdictSection{View: render.ViewOf(v), Charts: charts, ChartNote: chartNote, Predictions: Predictions(v.Predicted)}
}

// LoginPage asks for the API token.
type LoginPage struct {
	Site
	// Next is where to go after signing in (a path on this site).
	Next  string
	Error string
}

func (LoginPage) template() string { return "login.html" }

// ErrorPage says why a page could not be shown.
type ErrorPage struct {
	Site
	Code    int
	Title   string
	Message string
}

func (ErrorPage) template() string { return "error.html" }

// timeText renders an instant in UTC to the second ("" when zero).
func timeText(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

// ageText renders an incident's age as every duration is rendered
// (internal/format), to the minute from a minute on: 45 s, 12m, 2h5m,
// 3d3h.
func ageText(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	if d < time.Minute {
		return format.Duration(d.Truncate(time.Second))
	}
	return format.Duration(d.Truncate(time.Minute))
}
