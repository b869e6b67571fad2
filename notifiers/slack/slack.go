// Package slack delivers verdicts to Slack. In bot mode (a bot token) each
// incident gets one living parent message, rewritten with chat.update as the
// incident changes, and a thread of updates, a latency chart and the resolve;
// in webhook mode (incoming webhooks) each transition is one message. Routes
// pick the channel from the scope labels. The package also serves the
// /whyslow slash command (see CommandHandler).
package slack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/slack-go/slack"

	"github.com/whyslow/whyslow/notifiers"
	"github.com/whyslow/whyslow/verdict"
)

// Keys this receiver keeps in the per-incident notifiers.State.
const (
	// StateChannel is the channel id of the parent message.
	StateChannel = "slack.channel"
	// StateTS is the parent message's ts; replies use it as thread_ts.
	StateTS = "slack.ts"
	// StateOpenedAt is when the incident's first message was sent (RFC 3339).
	StateOpenedAt = "slack.opened_at"
	// StateTopCause is the id of the top cause last reported.
	StateTopCause = "slack.top_cause"
	// StateTopCauseTitle is the title of the top cause last reported.
	StateTopCauseTitle = "slack.top_cause_title"
	// StateSeverity is the severity last reported.
	StateSeverity = "slack.severity"
	// StateUpdates counts the updates posted into the thread.
	StateUpdates = "slack.updates"
	// StateLastSeq is the sequence number of the last fully delivered
	// notification; a redelivery of it or an older one is a no-op.
	StateLastSeq = "slack.last_seq"
	// StateProgress records the steps done of a partly delivered
	// notification ("<seq>:parent,reply,chart") so that a retry resumes
	// after them and never posts anything twice.
	StateProgress = "slack.progress"
)

// ChartFunc renders the latency chart of a verdict as PNG, marking when
// the incident opened (opened). The daemon builds one from its metrics
// source (see notifiers/chart).
type ChartFunc func(ctx context.Context, v *verdict.Verdict, opened time.Time) ([]byte, error)

// Options are the receiver's dependencies. Zero values get defaults.
type Options struct {
	// Name is the receiver's name, for logs.
	Name string
	// Logger logs (default slog.Default()); the receiver adds notifier=Name.
	Logger *slog.Logger
	// HTTPClient makes the API and webhook calls (default: a client with
	// the configured timeout).
	HTTPClient *http.Client
	// Chart renders the chart uploaded into the thread (nil: no chart).
	Chart ChartFunc
}

// Notifier is a Slack receiver. It implements notifiers.Notifier.
type Notifier struct {
	cfg     Config
	o       Options
	api     *webAPI
	hc      *http.Client
	log     *slog.Logger
	secrets []string
}

var _ notifiers.Notifier = (*Notifier)(nil)

// New validates cfg and returns a receiver. It makes no network call.
func New(cfg Config, o Options) (*Notifier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Name == "" {
		o.Name = "slack"
	}
	hc := o.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: cfg.Timeout}
	}
	n := &Notifier{cfg: cfg, o: o, hc: hc, log: o.Logger.With("notifier", o.Name, "mode", cfg.Mode().String())}
	n.secrets = appendSecret(n.secrets, string(cfg.Token))
	n.secrets = appendSecret(n.secrets, string(cfg.WebhookURL))
	for _, r := range cfg.Routes {
		n.secrets = appendSecret(n.secrets, string(r.WebhookURL))
	}
	if cfg.Mode() == ModeBot {
		n.api = &webAPI{token: string(cfg.Token), endpoint: cfg.APIURL, hc: hc}
	}
	return n, nil
}

func appendSecret(list []string, s string) []string {
	if s == "" {
		return list
	}
	return append(list, s)
}

// Mode returns the delivery mode.
func (n *Notifier) Mode() Mode { return n.cfg.Mode() }

// MaxAttempts implements notifiers.MaxAttempter (0: the retry stage's default).
func (n *Notifier) MaxAttempts() int { return n.cfg.MaxAttempts }

// Notify delivers one notification. It is safe to call again with the same
// notification and state after any failure: steps already done (recorded in
// the state) are not repeated, so nothing is posted twice.
func (n *Notifier) Notify(ctx context.Context, notif *notifiers.Notification) (bool, error) {
	if err := notif.Validate(); err != nil {
		return false, notifiers.NewError(notifiers.ReasonEncode, err)
	}
	if notif.State == nil {
		notif.State = notifiers.State{}
	}
	st := notif.State
	if last, err := strconv.Atoi(st.Get(StateLastSeq)); err == nil && notif.Sequence > 0 && notif.Sequence <= last {
		n.log.Debug("Notification already delivered", "notification", notif.ID, "sequence", notif.Sequence)
		return false, nil
	}
	d := &delivery{n: n, notif: notif, st: st, done: progressOf(st, notif.Sequence)}
	var retry bool
	var err error
	if n.cfg.Mode() == ModeWebhook {
		retry, err = d.webhook(ctx)
	} else {
		retry, err = d.bot(ctx)
	}
	if err != nil {
		return retry, err
	}
	d.finish()
	return false, nil
}

// delivery is one Notify call's working state.
type delivery struct {
	n     *Notifier
	notif *notifiers.Notification
	st    notifiers.State
	done  map[string]bool
}

// Steps of a bot-mode delivery.
const (
	stepParent = "parent"
	stepReply  = "reply"
	stepUpdate = "update"
	stepChart  = "chart"
)

func progressOf(st notifiers.State, seq int) map[string]bool {
	done := map[string]bool{}
	p := st.Get(StateProgress)
	prefix := strconv.Itoa(seq) + ":"
	if !strings.HasPrefix(p, prefix) {
		return done
	}
	for _, s := range strings.Split(strings.TrimPrefix(p, prefix), ",") {
		if s != "" {
			done[s] = true
		}
	}
	return done
}

// mark records a finished step in the state before anything else can fail.
func (d *delivery) mark(step string) {
	d.done[step] = true
	steps := make([]string, 0, len(d.done))
	for _, s := range []string{stepParent, stepReply, stepUpdate, stepChart} {
		if d.done[s] {
			steps = append(steps, s)
		}
	}
	d.st[StateProgress] = strconv.Itoa(d.notif.Sequence) + ":" + strings.Join(steps, ",")
}

// finish records the notification as delivered and remembers what the next
// notification of the incident compares against.
func (d *delivery) finish() {
	v := d.notif.Verdict
	delete(d.st, StateProgress)
	d.st[StateLastSeq] = strconv.Itoa(d.notif.Sequence)
	if d.st.Get(StateOpenedAt) == "" && !d.notif.CreatedAt.IsZero() {
		d.st[StateOpenedAt] = d.notif.CreatedAt.UTC().Format(time.RFC3339)
	}
	if d.notif.Kind == notifiers.TransitionUpdate || d.notif.Kind == notifiers.TransitionRepeat {
		d.st[StateUpdates] = strconv.Itoa(d.updates())
	}
	if v.Status == verdict.StatusAnomaly {
		d.st[StateSeverity] = string(v.Severity)
		if len(v.Causes) > 0 {
			d.st[StateTopCause] = v.Causes[0].ID
			d.st[StateTopCauseTitle] = titleOr(v.Causes[0].Title, v.Causes[0].ID)
		}
	}
}

// updates is the number of thread updates including this notification.
func (d *delivery) updates() int {
	u, _ := strconv.Atoi(d.st.Get(StateUpdates))
	if d.notif.Kind == notifiers.TransitionUpdate || d.notif.Kind == notifiers.TransitionRepeat {
		u++
	}
	return u
}

func (d *delivery) opts(kind MessageKind) RenderOptions {
	return RenderOptions{
		Kind:       kind,
		Transition: d.notif.Kind.String(),
		Resolved:   d.notif.Kind == notifiers.TransitionResolve,
		IncidentID: d.notif.IncidentID,
		VerdictURL: d.notif.VerdictURL,
		MaxCauses:  d.n.cfg.MaxCauses,
		Updates:    d.updates(),
	}
}

// bot delivers in bot mode: the parent, the thread reply, the parent's
// rewrite and the chart, each step once.
func (d *delivery) bot(ctx context.Context) (bool, error) {
	notif := d.notif
	if d.st.Get(StateTS) == "" || d.done[stepParent] {
		// No parent yet (an open, or a later notification whose open was
		// lost): this notification becomes the parent.
		if !d.done[stepParent] {
			o := d.opts(KindParent)
			if notif.Kind != notifiers.TransitionOpen {
				o.Change = d.change()
			}
			m := Blocks(notif.Verdict, o)
			channel := d.n.Route(notif.Verdict.Scope).Channel
			ch, ts, err := d.post(ctx, channel, "", m)
			if err != nil {
				return d.n.fail("post parent", err)
			}
			d.st[StateChannel], d.st[StateTS] = ch, ts
			d.mark(stepParent)
		}
	} else {
		if !d.done[stepReply] {
			o := d.opts(KindReply)
			o.Change = d.change()
			if _, _, err := d.post(ctx, d.st.Get(StateChannel), d.st.Get(StateTS), Blocks(notif.Verdict, o)); err != nil {
				return d.n.fail("post thread reply", err)
			}
			d.mark(stepReply)
		}
		if !d.done[stepUpdate] {
			o := d.opts(KindParent)
			if o.Resolved {
				o.Change = d.change()
			}
			if err := d.update(ctx, Blocks(notif.Verdict, o)); err != nil {
				code := SlackErrorCode(err)
				if code != "message_not_found" && code != "cant_update_message" && code != "edit_window_closed" {
					return d.n.fail("update parent", err)
				}
				d.n.log.Warn("Parent message can no longer be updated", "notification", notif.ID, "code", code)
			}
			d.mark(stepUpdate)
		}
	}
	if !d.done[stepChart] && d.wantChart() {
		if retry, err := d.chart(ctx); err != nil {
			if retry {
				return retry, err
			}
			d.n.log.Warn("Chart not uploaded", "notification", notif.ID, "reason", notifiers.ReasonOf(err), "err", err)
		}
		d.mark(stepChart)
	}
	return false, nil
}

func (d *delivery) wantChart() bool {
	k := d.notif.Kind
	return d.n.o.Chart != nil && d.n.cfg.ChartEnabled() && d.notif.Verdict.Status == verdict.StatusAnomaly &&
		(k == notifiers.TransitionOpen || k == notifiers.TransitionUpdate)
}

// chart renders and uploads the chart into the thread. A chart that cannot
// be rendered is skipped (false, err).
func (d *delivery) chart(ctx context.Context) (bool, error) {
	cctx, cancel := context.WithTimeout(ctx, d.n.cfg.Timeout)
	// The incident opened with its first message: its time is in the
	// state from then on (finish), the open notification's own before.
	opened := d.notif.CreatedAt
	if t, err := time.Parse(time.RFC3339, d.st.Get(StateOpenedAt)); err == nil {
		opened = t
	}
	png, err := d.n.o.Chart(cctx, d.notif.Verdict, opened)
	cancel()
	if err != nil {
		return false, notifiers.NewError(notifiers.ReasonOther, fmt.Errorf("render chart: %w", err))
	}
	if len(png) == 0 {
		return false, notifiers.NewError(notifiers.ReasonOther, errors.New("render chart: empty image"))
	}
	name := "whyslow-" + safeName(d.notif.IncidentID) + "-" + strconv.Itoa(d.notif.Sequence) + ".png"
	cctx, cancel = context.WithTimeout(ctx, d.n.cfg.Timeout)
	defer cancel()
	err = d.n.api.uploadFile(cctx, upload{
		Content:  png,
		Filename: name,
		Title:    "Latency, KV cache and queue: baseline vs incident",
		AltText:  "TTFT p95, ITL p95, KV-cache usage, queue depth, request rate and preemptions over the baseline and incident windows",
		Channel:  d.st.Get(StateChannel),
		ThreadTS: d.st.Get(StateTS),
	})
	if err != nil {
		return d.n.fail("upload chart", err)
	}
	return false, nil
}

func safeName(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "incident"
	}
	return b.String()
}

// post sends a message (a thread reply when threadTS is set) and returns
// the channel id and ts.
func (d *delivery) post(ctx context.Context, channel, threadTS string, m Message) (string, string, error) {
	ctx, cancel := context.WithTimeout(ctx, d.n.cfg.Timeout)
	defer cancel()
	return d.n.api.postMessage(ctx, channel, threadTS, m.Text, m.Blocks)
}

func (d *delivery) update(ctx context.Context, m Message) error {
	ctx, cancel := context.WithTimeout(ctx, d.n.cfg.Timeout)
	defer cancel()
	return d.n.api.updateMessage(ctx, d.st.Get(StateChannel), d.st.Get(StateTS), m.Text, m.Blocks)
}

// webhook posts one self-contained message to the route's incoming webhook.
func (d *delivery) webhook(ctx context.Context) (bool, error) {
	o := d.opts(KindStandalone)
	o.Change = d.change()
	m := Blocks(d.notif.Verdict, o)
	hook := d.n.Route(d.notif.Verdict.Scope).WebhookURL
	ctx, cancel := context.WithTimeout(ctx, d.n.cfg.Timeout)
	defer cancel()
	err := slack.PostWebhookCustomHTTPContext(ctx, string(hook), d.n.hc, &slack.WebhookMessage{
		Text:   m.Text,
		Blocks: &slack.Blocks{BlockSet: m.Blocks},
	})
	if err != nil {
		return d.n.fail("post webhook", err)
	}
	return false, nil
}

// change is the one-line mrkdwn summary of what this notification reports
// against the incident's previous state.
func (d *delivery) change() string {
	v, st := d.notif.Verdict, d.st
	var top, topTitle string
	if len(v.Causes) > 0 {
		top, topTitle = v.Causes[0].ID, titleOr(v.Causes[0].Title, v.Causes[0].ID)
	}
	prevTop, prevTitle, prevSev := st.Get(StateTopCause), st.Get(StateTopCauseTitle), st.Get(StateSeverity)
	open := ""
	if t, err := time.Parse(time.RFC3339, st.Get(StateOpenedAt)); err == nil && d.notif.CreatedAt.After(t) {
		open = durationText(d.notif.CreatedAt.Sub(t))
	}
	switch d.notif.Kind {
	case notifiers.TransitionOpen:
		return ":rotating_light: *New incident*"
	case notifiers.TransitionResolve:
		s := ":white_check_mark: *Resolved*"
		if open != "" {
			s += " after " + open
		}
		if prevTitle != "" {
			s += ". Was: *" + esc(prevTitle) + "*"
			if prevSev != "" {
				s += " (" + esc(prevSev) + ")"
			}
		}
		return s + "."
	case notifiers.TransitionRepeat:
		s := ":repeat: *Still open*"
		if open != "" {
			s += " after " + open
		}
		if topTitle != "" {
			s += ". Top cause: *" + esc(topTitle) + "*"
		}
		return s + "."
	}
	var parts []string
	if top != "" && prevTop != "" && top != prevTop {
		parts = append(parts, ":arrows_counterclockwise: *Top cause changed:* "+esc(titleOr(prevTitle, prevTop))+" → *"+esc(topTitle)+"*")
	}
	if sev := string(v.Severity); prevSev != "" && v.Status == verdict.StatusAnomaly && sev != prevSev {
		if severityRank(sev) > severityRank(prevSev) {
			parts = append(parts, ":arrow_up: *Escalated:* "+esc(prevSev)+" → *"+esc(sev)+"*")
		} else {
			parts = append(parts, ":arrow_down: *De-escalated:* "+esc(prevSev)+" → *"+esc(sev)+"*")
		}
	}
	if len(parts) == 0 {
		return ":information_source: *Update*"
	}
	return strings.Join(parts, "\n")
}

func severityRank(s string) int {
	switch verdict.Severity(s) {
	case verdict.SeverityWarning:
		return 1
	case verdict.SeverityCritical:
		return 2
	}
	return 0
}

// fail classifies err, scrubs secrets and logs nothing (the retry stage
// logs every attempt).
func (n *Notifier) fail(op string, err error) (bool, error) {
	retry, cerr := Classify(err, n.secrets...)
	var e *notifiers.Error
	if errors.As(cerr, &e) {
		// Prefix the operation to the cause so logs say which call failed.
		e2 := *e
		e2.Err = fmt.Errorf("slack %s: %w", op, e.Err)
		return retry, &e2
	}
	return retry, fmt.Errorf("slack %s: %w", op, cerr)
}

// Target is where a notification goes.
type Target struct {
	// Channel is the channel (bot mode).
	Channel string
	// WebhookURL is the incoming webhook (webhook mode).
	WebhookURL notifiers.Secret
	// Route is the index of the matching route, -1 for the default.
	Route int
}

// Route chooses the channel or webhook for a scope: the first route whose
// matchers all match the scope labels (plus the equality matchers of the
// scope's selector), else the default.
func (n *Notifier) Route(s verdict.Scope) Target {
	labels := ScopeLabels(s)
	for i := range n.cfg.Routes {
		r := &n.cfg.Routes[i]
		if r.matches(labels) {
			t := Target{Channel: r.Channel, WebhookURL: r.WebhookURL, Route: i}
			if t.WebhookURL == "" {
				t.WebhookURL = n.cfg.WebhookURL
			}
			return t
		}
	}
	return Target{Channel: n.cfg.Channel, WebhookURL: n.cfg.WebhookURL, Route: -1}
}

// ScopeLabels returns the scope's labels merged with the equality matchers
// of its selector (labels win).
func ScopeLabels(s verdict.Scope) map[string]string {
	out := map[string]string{}
	if s.Selector != "" {
		ms, err := parser.NewParser(parser.Options{}).ParseMetricSelector("{" + s.Selector + "}")
		if err == nil {
			for _, m := range ms {
				if m.Type == labels.MatchEqual {
					out[m.Name] = m.Value
				}
			}
		}
	}
	for k, v := range s.Labels {
		out[k] = v
	}
	return out
}
