package web

import (
	"sort"
	"time"

	"github.com/whyslow/whyslow/incident"
	"github.com/whyslow/whyslow/verdict"
)

// Notice is one notification of an incident to one receiver, as the outbox
// knows it: what it said and what became of it.
type Notice struct {
	// Sequence numbers the incident's notifications from 1; the receivers
	// of one change share it.
	Sequence int
	// Kind is the transition: open, update, repeat or resolve.
	Kind      string
	CreatedAt time.Time
	// Cause is the top cause it named (id and title), Severity the
	// verdict's.
	Cause, CauseTitle string
	Severity          string
	Receiver          string
	// Status is pending, delivered or dropped; StatusAt when it became so.
	Status   string
	StatusAt time.Time
}

// TimelineItem is one line of an incident's timeline.
type TimelineItem struct {
	At string
	// Kind is opened, notified, cause_changed, escalated, repeated or
	// resolved.
	Kind       string
	Text       string
	Deliveries []Delivery
}

// Delivery is where one notification went.
type Delivery struct {
	Receiver, Status, At string
}

type timed struct {
	at   time.Time
	item TimelineItem
}

// Timeline is the incident's history, oldest first: its open, every
// notification with its receivers (an update says whether the top cause
// changed or the severity rose), and its resolve. notices may be empty
// (a daemon restarted since): the open and the resolve are the incident's own.
func Timeline(in incident.Incident, notices []Notice) []TimelineItem {
	var out []timed
	opened := "Incident opened"
	if len(in.Alerts) > 0 && !in.Detected {
		opened += " by Alertmanager"
	}
	out = append(out, timed{in.OpenedAt, TimelineItem{At: timeText(in.OpenedAt), Kind: "opened", Text: opened}})

	bySeq := map[int][]Notice{}
	var seqs []int
	for _, n := range notices {
		if _, ok := bySeq[n.Sequence]; !ok {
			seqs = append(seqs, n.Sequence)
		}
		bySeq[n.Sequence] = append(bySeq[n.Sequence], n)
	}
	sort.Ints(seqs)
	prevCause, resolveNoticed := "", false
	for _, seq := range seqs {
		group := bySeq[seq]
		sort.SliceStable(group, func(i, j int) bool { return group[i].Receiver < group[j].Receiver })
		n := group[0]
		it := TimelineItem{At: timeText(n.CreatedAt)}
		cause := orText(n.CauseTitle, n.Cause)
		switch n.Kind {
		case "open":
			it.Kind, it.Text = "notified", "Notified: "+causeText(cause)+severityText(n.Severity)
		case "update":
			if n.Cause != prevCause {
				it.Kind, it.Text = "cause_changed", "Top cause changed to "+orText(cause, "none")
			} else {
				it.Kind, it.Text = "escalated", "Escalated to "+orText(n.Severity, "a higher severity")
			}
		case "repeat":
			it.Kind, it.Text = "repeated", "Reminder: still open, "+causeText(cause)
		case "resolve":
			resolveNoticed = true
			it.Kind, it.Text = "resolved", resolvedText(in)
		default:
			it.Kind, it.Text = "notified", "Notified ("+n.Kind+")"
		}
		prevCause = n.Cause
		for _, g := range group {
			it.Deliveries = append(it.Deliveries, Delivery{Receiver: g.Receiver, Status: g.Status, At: timeText(g.StatusAt)})
		}
		out = append(out, timed{n.CreatedAt, it})
	}
	if in.Status == incident.IncidentResolved && !resolveNoticed {
		out = append(out, timed{in.ResolvedAt, TimelineItem{At: timeText(in.ResolvedAt), Kind: "resolved", Text: resolvedText(in)}})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].at.Before(out[j].at) })
	items := make([]TimelineItem, len(out))
	for i, t := range out {
		items[i] = t.item
	}
	return items
}

func causeText(cause string) string {
	if cause == "" {
		return "no cause named yet"
	}
	return "top cause " + cause
}

func severityText(s string) string {
	if s == "" || s == string(verdict.SeverityNone) {
		return ""
	}
	return " (" + s + ")"
}

func resolvedText(in incident.Incident) string {
	if in.ResolveReason != "" {
		return "Resolved: " + in.ResolveReason
	}
	return "Resolved"
}

func orText(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}
