package daemon

import (
	"fmt"
	"hash/fnv"
	"sort"
	"strings"
	"time"

	"github.com/whyslow/whyslow/detect"
	"github.com/whyslow/whyslow/incident"
	"github.com/whyslow/whyslow/notifiers"
	"github.com/whyslow/whyslow/verdict"
)

// The bounds of one cycle (issue 26): detect.max_series and
// detect.max_scopes bound what detection reads and judges (detect
// package), detect.max_open_incidents the incidents it keeps open, and
// detect.max_notifications the messages one cycle sends each receiver.
// Whatever a bound leaves out is counted in whyslow_detect_refused_total
// and makes the daemon degraded (the readiness problem "cycle").

// problemCycle is the readiness problem of a cycle that overran its
// interval or left something out.
const problemCycle = "cycle"

// groupListed is how many scopes a grouped notification names.
const groupListed = 20

// overrunsDegraded is how many cycles in a row must overrun the interval
// for the daemon to say it is degraded: one slow cycle (a GC pause, a slow
// Prometheus answer) is counted, not news.
const overrunsDegraded = 3

// openCandidate is a detection, and whether the bound on open incidents
// keeps it from opening one.
type openCandidate struct {
	detect.Detection
	Refused bool
}

// roomToOpen marks the detections that would open an incident past
// maxOpen detector-opened incidents: the critical ones get the room
// first, then by scope key. The others pass as they are.
func (d *Daemon) roomToOpen(dets []detect.Detection, maxOpen int) []openCandidate {
	out := make([]openCandidate, len(dets))
	var opening []int
	for i, det := range dets {
		out[i].Detection = det
		if det.Firing && !d.tracker.Open(det.Key) {
			opening = append(opening, i)
		}
	}
	if maxOpen <= 0 || len(opening) == 0 {
		return out
	}
	open := 0
	for _, key := range d.tracker.OpenKeys() {
		if in, _ := d.tracker.Get(key); in.Detected {
			open++
		}
	}
	room := max(maxOpen-open, 0)
	if len(opening) <= room {
		return out
	}
	sort.SliceStable(opening, func(a, b int) bool {
		return dets[opening[a]].Severity.Rank() > dets[opening[b]].Severity.Rank()
	})
	for _, i := range opening[room:] {
		out[i].Refused = true
	}
	return out
}

// checkBounds sets or clears the readiness problem of the cycle: the
// cycles keep overrunning the interval, or a bound left series, scopes or
// incidents out.
func (d *Daemon) checkBounds(cfg Config, b detect.CycleStats, took time.Duration, refusedOpen int) {
	var parts []string
	if took > cfg.ScrapeInterval {
		d.stats.cycleOverruns.Inc()
		d.overrun++
	} else {
		d.overrun = 0
	}
	if d.overrun >= overrunsDegraded {
		parts = append(parts, fmt.Sprintf("%d cycles in a row took longer than the %s interval, the last %s",
			d.overrun, cfg.ScrapeInterval, took.Round(time.Millisecond)))
	}
	if b.Truncated > 0 {
		parts = append(parts, fmt.Sprintf("a query answer held %d series, %d series dropped (detect.max_series %d)",
			b.Series, b.Truncated, cfg.Detect.MaxSeries))
	}
	if b.Skipped > 0 {
		parts = append(parts, fmt.Sprintf("%d of about %d scopes detected this cycle, each in turn about every %d cycles (detect.max_scopes %d)",
			b.Detected, b.Scopes, b.Parts, cfg.Detect.MaxScopes))
	}
	if refusedOpen > 0 {
		parts = append(parts, fmt.Sprintf("%d firing scopes have no incident: the detector keeps %d open, the most allowed (detect.max_open_incidents)",
			refusedOpen, cfg.Detect.MaxOpenIncidents))
	}
	if len(parts) == 0 {
		if d.clearProblem(problemCycle) {
			d.log.Info("Cycle within its bounds again")
		}
		return
	}
	msg := "degraded: " + strings.Join(parts, "; ")
	if d.setProblem(problemCycle, msg) {
		d.log.Warn("Cycle bounded", "problem", msg)
	}
}

// groupEvents splits a cycle's events into the messages each receiver
// gets: one per event up to maxN (0: no bound), else one per event kind
// ("12 scopes opened"), else one for all.
func groupEvents(events []incident.Event, maxN int) [][]incident.Event {
	if maxN <= 0 || len(events) <= maxN {
		out := make([][]incident.Event, len(events))
		for i, ev := range events {
			out[i] = []incident.Event{ev}
		}
		return out
	}
	var out [][]incident.Event
	index := map[incident.EventKind]int{}
	for _, ev := range events {
		i, ok := index[ev.Kind]
		if !ok {
			i = len(out)
			index[ev.Kind] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], ev)
	}
	if len(out) > maxN {
		return [][]incident.Event{events}
	}
	return out
}

// groupNotification is one receiver's message for several incident events
// of one cycle: a verdict whose scope says "N scopes opened" and whose
// warnings list the first scopes with their top causes.
func groupNotification(evs []incident.Event, receiver, externalURL string, at time.Time) *notifiers.Notification {
	kind := notificationFor(evs[0], receiver, externalURL, at).Kind
	verb := evs[0].Kind.String()
	sev := verdict.SeverityNone
	h := fnv.New64a()
	for _, ev := range evs {
		if notificationFor(ev, receiver, "", at).Kind != kind {
			kind, verb = notifiers.TransitionUpdate, "changed"
		}
		if ev.Incident.Severity.Rank() > sev.Rank() {
			sev = ev.Incident.Severity
		}
		fmt.Fprintln(h, ev.DedupeKey)
	}
	status := verdict.StatusAnomaly
	if kind == notifiers.TransitionResolve {
		status = verdict.StatusHealthy
	}
	title := fmt.Sprintf("%d scopes %s", len(evs), verb)
	lines := []string{title + " in one cycle, grouped into one message (detect.max_notifications):"}
	for i, ev := range evs {
		if i == groupListed {
			lines = append(lines, fmt.Sprintf("… and %d more (GET /api/v1/incidents lists them all)", len(evs)-groupListed))
			break
		}
		cause := ev.Incident.TopCause
		if cause == "" {
			cause = "cause not yet known"
		}
		lines = append(lines, fmt.Sprintf("%s %s: %s (%s)", ev.Incident.Scope.Selector, ev.Kind, cause, ev.Incident.Severity))
	}
	id := fmt.Sprintf("group-%d-%016x", at.Unix(), h.Sum64())
	v := &verdict.Verdict{SchemaVersion: verdict.SchemaVersion, Status: status, Severity: sev,
		Scope: verdict.Scope{Selector: title}, At: at, Warnings: lines}
	return &notifiers.Notification{
		ID: notifiers.MakeID(receiver, id, 1, kind), Receiver: receiver, IncidentID: id, IncidentKey: id,
		Kind: kind, Sequence: 1, CreatedAt: at, Verdict: v,
	}
}
