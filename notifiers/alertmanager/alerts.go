package alertmanager

import (
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/common/model"

	"github.com/whyslow/whyslow/incident"
	"github.com/whyslow/whyslow/notifiers/render"
	"github.com/whyslow/whyslow/verdict"
)

// Annotations whyslow sets. The cause is an annotation, not a label, so a
// change of cause updates the same alert (same fingerprint) instead of
// starting another one.
const (
	AnnotationCause       = "cause"
	AnnotationConfidence  = "confidence"
	AnnotationSummary     = "summary"
	AnnotationDescription = "description"
	AnnotationFix         = "fix"
	AnnotationPhase       = "phase"
	AnnotationVerdictURL  = "verdict_url"
	AnnotationIncidentID  = "incident_id"
	// AnnotationState is the verdict's state when it names no cause:
	// learning_baseline, degraded_baseline or the insufficient-data code.
	AnnotationState = "state"
)

// MaxAnnotationBytes bounds one annotation value: an alert stays small
// however much evidence a verdict carries.
const MaxAnnotationBytes = 4096

// resendFactor is how many resend intervals ahead an open alert's endsAt
// lies (Prometheus uses 4): a few lost sends do not resolve it, and an alert
// nobody sends any more expires by itself.
const resendFactor = 4

// Alert is one alert as Alertmanager's API v2 takes it (postableAlert).
type Alert struct {
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations,omitempty"`
	StartsAt     time.Time         `json:"startsAt,omitzero"`
	EndsAt       time.Time         `json:"endsAt,omitzero"`
	GeneratorURL string            `json:"generatorURL,omitempty"`
}

// Fingerprint is the alert's identity in Alertmanager: the hash of its label
// set, as Alertmanager computes it (hex, as GET /api/v2/alerts shows it).
func (a Alert) Fingerprint() string {
	ls := make(model.LabelSet, len(a.Labels))
	for k, v := range a.Labels {
		ls[model.LabelName(k)] = model.LabelValue(v)
	}
	return ls.Fingerprint().String()
}

// Resolved reports whether the alert has ended at t.
func (a Alert) Resolved(t time.Time) bool { return !a.EndsAt.IsZero() && !a.EndsAt.After(t) }

// Alerts returns the alerts for incidents at time at: one per open incident,
// ending resendFactor resend intervals after at, and one per incident
// resolved within cfg.ResolvedRetention of at, ending at its ResolvedAt.
// link gives an incident's verdict URL (nil or "" for none). Two incidents
// with the same labels (a scope that resolved and opened again) make one
// alert: the open one, or else the last resolved. The result is sorted by
// fingerprint. It is pure: time comes in as at.
func Alerts(incidents []incident.Incident, at time.Time, link func(incident.Incident) string, cfg Config) []Alert {
	cfg = cfg.WithDefaults()
	byFP := map[string]Alert{}
	for _, in := range incidents {
		var endsAt time.Time
		switch {
		case in.Status == incident.IncidentOpen:
			endsAt = at.Add(resendFactor * cfg.ResendInterval)
		case in.Status == incident.IncidentResolved && !in.ResolvedAt.IsZero() && at.Sub(in.ResolvedAt) <= cfg.ResolvedRetention:
			endsAt = in.ResolvedAt
		default:
			continue
		}
		a := alertOf(in, endsAt, link, cfg)
		fp := a.Fingerprint()
		if prev, ok := byFP[fp]; ok && !preferred(a, prev, at) {
			continue
		}
		byFP[fp] = a
	}
	return sortedAlerts(byFP)
}

// preferred reports whether a should replace b, both with the same labels:
// a firing alert over a resolved one, else the later end.
func preferred(a, b Alert, at time.Time) bool {
	if a.Resolved(at) != b.Resolved(at) {
		return !a.Resolved(at)
	}
	return a.EndsAt.After(b.EndsAt)
}

func sortedAlerts(byFP map[string]Alert) []Alert {
	fps := make([]string, 0, len(byFP))
	for fp := range byFP {
		fps = append(fps, fp)
	}
	sort.Strings(fps)
	out := make([]Alert, 0, len(fps))
	for _, fp := range fps {
		out = append(out, byFP[fp])
	}
	return out
}

func alertOf(in incident.Incident, endsAt time.Time, link func(incident.Incident) string, cfg Config) Alert {
	labels := make(map[string]string, len(cfg.Labels)+len(in.Scope.Labels)+2)
	for k, v := range cfg.Labels {
		labels[k] = v
	}
	for k, v := range in.Scope.Labels {
		// An empty value is no label in Prometheus; leave it out so the
		// fingerprint matches what Alertmanager keeps.
		if v != "" {
			labels[k] = v
		}
	}
	sev := in.Severity
	if sev == "" || sev == verdict.SeverityNone {
		sev = verdict.SeverityWarning
	}
	labels[AlertNameLabel] = AlertName
	labels[SeverityLabel] = string(sev)

	ann := map[string]string{AnnotationIncidentID: in.ID}
	set := func(k, v string) {
		if v = strings.TrimSpace(v); v != "" {
			ann[k] = truncate(v, MaxAnnotationBytes)
		}
	}
	v := in.Verdict
	if v != nil {
		set(AnnotationSummary, render.Summary(v))
		if v.Phase != verdict.PhaseNone {
			set(AnnotationPhase, string(v.Phase))
		}
	} else {
		set(AnnotationSummary, pendingSummary(in))
	}
	if c := topCause(in); c != nil {
		set(AnnotationCause, c.ID)
		set(AnnotationConfidence, strconv.FormatFloat(c.Confidence, 'f', 2, 64))
		set(AnnotationDescription, description(*c))
		set(AnnotationFix, strings.Join(c.Remediation, "\n"))
	} else {
		set(AnnotationCause, in.TopCause)
		if v != nil {
			state, why := stateOf(v)
			set(AnnotationState, state)
			set(AnnotationDescription, why)
		}
	}
	var url string
	if link != nil {
		url = link(in)
	}
	set(AnnotationVerdictURL, url)
	return Alert{Labels: labels, Annotations: ann, StartsAt: in.OpenedAt, EndsAt: endsAt, GeneratorURL: url}
}

// stateOf is why a verdict names no cause, as a code and a sentence: a
// page without a cause still says what whyslow is doing about it.
func stateOf(v *verdict.Verdict) (state, why string) {
	switch {
	case v.InsufficientReason != nil:
		return string(v.InsufficientReason.Code), v.InsufficientReason.Message
	case v.Learning != nil:
		return string(verdict.InsufficientLearning), v.Learning.Message
	case v.DegradedBaseline != nil:
		return "degraded_baseline", v.DegradedBaseline.Message
	}
	return "", ""
}

// topCause is the incident's top cause in its verdict, or nil.
func topCause(in incident.Incident) *verdict.Cause {
	if in.Verdict == nil || in.TopCause == "" {
		return nil
	}
	for i := range in.Verdict.Causes {
		if in.Verdict.Causes[i].ID == in.TopCause {
			return &in.Verdict.Causes[i]
		}
	}
	return nil
}

// description is the cause's title, its chain, and one line per piece of
// evidence (the rules' own sentences, which carry their numbers).
func description(c verdict.Cause) string {
	lines := make([]string, 0, len(c.Evidence)+2)
	if c.Title != "" {
		lines = append(lines, c.Title)
	}
	if ch := render.ChainText(c); ch != "" {
		lines = append(lines, ch)
	}
	for _, e := range c.Evidence {
		t := e.Text
		if t == "" {
			t = e.Rule
		}
		if t != "" {
			lines = append(lines, "- "+t)
		}
	}
	return strings.Join(lines, "\n")
}

// pendingSummary is the summary of an incident not triaged yet.
func pendingSummary(in incident.Incident) string {
	s := "Inference latency degraded, triage pending"
	if len(in.Triggers) > 0 {
		s += " (triggers: " + strings.Join(in.Triggers, ", ") + ")"
	}
	return s
}

// truncate cuts s to at most n bytes on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

// tracked is an alert as last computed; since is set once whyslow stopped
// producing it (its labels changed, or its incident left the tracker): it is
// then sent ended (endsAt = the time it vanished, or its own end when it had
// resolved) until ResolvedRetention after that.
type tracked struct {
	alert Alert
	since time.Time
}

// reconcile adds to cur the alerts of prev that are gone from cur, ended
// (at at when they were still firing), for retention after they ended. It
// returns the set to send, sorted by fingerprint, and the state for the
// next call.
func reconcile(prev map[string]tracked, cur []Alert, at time.Time, retention time.Duration) ([]Alert, map[string]tracked) {
	next := make(map[string]tracked, len(cur))
	byFP := make(map[string]Alert, len(cur))
	for _, a := range cur {
		fp := a.Fingerprint()
		byFP[fp] = a
		next[fp] = tracked{alert: a}
	}
	for fp, e := range prev {
		if _, ok := byFP[fp]; ok {
			continue
		}
		if e.since.IsZero() {
			if e.alert.Resolved(at) {
				// A resolved incident's alert: retained from its end.
				e.since = e.alert.EndsAt
			} else {
				// Vanished while firing: end it now.
				e.alert.EndsAt, e.since = at, at
			}
		}
		if at.Sub(e.since) > retention {
			continue
		}
		byFP[fp] = e.alert
		next[fp] = e
	}
	return sortedAlerts(byFP), next
}
