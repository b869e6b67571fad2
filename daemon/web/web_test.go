package web

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/whyslow/whyslow/incident"
	"github.com/whyslow/whyslow/notifiers/chart"
	"github.com/whyslow/whyslow/notifiers/notifytest"
	"github.com/whyslow/whyslow/verdict"
)

var t0 = notifytest.T0

// sampleChart is chart data over chart.LeadIn(v) (a 5-minute lead-in
// before each 5-minute window), a sample every 5 s: TTFT flat at 300 ms but
// for a ramp to 2.5 s through the incident window, with a gap in it; KV
// usage over 100%; an empty queue panel.
func sampleChart(v *verdict.Verdict) chart.Data {
	incSpan, baseSpan := chart.LeadIn(v)
	d := chart.Data{Incident: incSpan, Baseline: baseSpan}
	var inc, base []chart.Point
	for i := 0; i <= 120; i++ {
		off := time.Duration(i) * 5 * time.Second
		base = append(base, chart.Point{T: baseSpan.Start.Add(off), V: 0.3})
		val := 0.3
		if i >= 60 {
			val += 2.2 * float64(i-60) / 60
		}
		if i == 90 {
			val = math.NaN()
		}
		inc = append(inc, chart.Point{T: incSpan.Start.Add(off), V: val})
	}
	d.Panels = []chart.Panel{
		{Title: "TTFT p95", Unit: chart.UnitSeconds, Query: `histogram_quantile(0.95, …)`, Incident: inc, Baseline: base},
		{Title: "KV-cache usage (max over targets)", Unit: chart.UnitFraction,
			Incident: []chart.Point{{T: v.Incident.Start, V: 0.97}, {T: v.Incident.End, V: 1.2}}},
		{Title: "Queue depth (waiting requests)", Unit: chart.UnitCount},
	}
	return d
}

// charts lays out sampleChart for v.
func charts(v *verdict.Verdict, onset time.Time) []ChartView {
	return Charts(sampleChart(v), v.Incident, v.Baseline, onset)
}

func renderPage(t testing.TB, p Page) string {
	t.Helper()
	var b bytes.Buffer
	if err := Render(&b, p); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func sampleIncident(v *verdict.Verdict) incident.Incident {
	return incident.Incident{ID: "inc-1", Key: v.Scope.Selector, Scope: v.Scope, Status: incident.IncidentOpen,
		Severity: v.Severity, TopCause: v.Causes[0].ID, OpenedAt: t0.Add(-3 * time.Minute), Detected: true,
		Triggers: []string{"ttft_ratio"}, Verdict: v, Notified: incident.Notified{Count: 2}}
}

// TestHostileLabelsAreEscaped: a scope whose labels and selector carry
// markup, in every page, comes out as text: no element, no attribute, no
// link it could open.
func TestHostileLabelsAreEscaped(t *testing.T) {
	const hostile = `<script>alert(1)</script>"><img src=x onerror=alert(2)>`
	v := notifytest.Anomaly()
	v.Scope = verdict.Scope{Selector: `model_name="` + hostile + `"`, Labels: map[string]string{"model_name": hostile}}
	v.Causes[0].Title = hostile
	v.Causes[0].Remediation = []string{"javascript:alert(3)"}
	v.Warnings = []string{hostile}
	in := sampleIncident(v)
	in.ID = `inc-"><script>alert(4)</script>`
	in.Alerts = map[string]incident.AlertRef{"fp": {Name: hostile}}
	site := Site{Prefix: "/whyslow", Now: t0, SignOut: true}
	section := Verdict(v, charts(v, in.OpenedAt), "")
	pages := map[string]Page{
		"index":    Index(site, []incident.Incident{in}, TriageForm{Selector: hostile, Error: hostile}),
		"incident": IncidentPage{Site: site, Incident: Row(site, in), Timeline: Timeline(in, nil), Verdict: &section},
		"verdict":  VerdictPage{Site: site, Verdict: section},
		"login":    LoginPage{Site: site, Next: hostile, Error: hostile},
		"error":    ErrorPage{Site: site, Code: 400, Title: "Bad request", Message: hostile},
	}
	for name, p := range pages {
		html := renderPage(t, p)
		low := strings.ToLower(html)
		if strings.Contains(low, "<script") || strings.Contains(low, "<img") {
			t.Errorf("%s: markup from a label reached the page:\n%s", name, around(html, "alert"))
		}
		if !strings.Contains(html, "&lt;script&gt;alert(1)&lt;/script&gt;") {
			t.Errorf("%s: the hostile label is not shown as text", name)
		}
	}
	// The incident link escapes the id in the path.
	if html := renderPage(t, pages["index"]); !strings.Contains(html, `href="/whyslow/incidents/inc-%22%3E%3Cscript%3Ealert%284%29%3C%2Fscript%3E"`) {
		t.Errorf("incident link not path-escaped:\n%s", around(html, "/incidents/"))
	}
}

func around(s, sub string) string {
	i := strings.Index(s, sub)
	if i < 0 {
		return "(not found)"
	}
	return s[max(0, i-200):min(len(s), i+200)]
}

// TestPageIsSelfContained: the stylesheet is inline and allowed by the
// page's CSP hash; nothing is loaded from anywhere (no src, no external
// href, no script).
func TestPageIsSelfContained(t *testing.T) {
	v := notifytest.Anomaly()
	html := renderPage(t, VerdictPage{Site: Site{Standalone: true, Now: t0}, Verdict: Verdict(v, charts(v, time.Time{}), "")})
	m := regexp.MustCompile(`(?s)<style>(.*?)</style>`).FindStringSubmatch(html)
	if m == nil {
		t.Fatal("no <style> element")
	}
	sum := sha256.Sum256([]byte(m[1]))
	if want := "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"; !strings.Contains(CSP(), want) {
		t.Errorf("CSP %q does not allow the inline stylesheet (%s)", CSP(), want)
	}
	if !strings.Contains(html, `http-equiv="Content-Security-Policy"`) {
		t.Error("no CSP meta element: a saved page would not keep it")
	}
	for _, bad := range []string{"<script", " src=", `href="http`, "<form", "<link rel=\"stylesheet\""} {
		if strings.Contains(html, bad) {
			t.Errorf("standalone page contains %q:\n%s", bad, around(html, bad))
		}
	}
	for _, want := range []string{"Causes, most likely first", "Requests are queueing", "Ruled out", "Where the time went",
		"Slowest requests", "<svg class=\"chart-svg\"", "Every sample"} {
		if !strings.Contains(html, want) {
			t.Errorf("verdict page lacks %q", want)
		}
	}
}

// TestCharts: both sides are drawn next to each other on one value axis,
// each window shaded at the end of its lead-in; a gap in the data splits
// the curve; the onset is marked; the numbers summed up are the windows'
// (not the lead-in's); fractions stop at 100%; every sample is in the
// table.
func TestCharts(t *testing.T) {
	v := notifytest.Anomaly()
	onset := v.Incident.Start.Add(2 * time.Minute)
	cs := charts(v, onset)
	if len(cs) != 3 {
		t.Fatalf("%d charts, want 3", len(cs))
	}
	ttft := cs[0]
	if len(ttft.Incident.Paths) != 2 || len(ttft.Baseline.Paths) != 1 {
		t.Errorf("paths: incident %d (want 2: split at the gap), baseline %d", len(ttft.Incident.Paths), len(ttft.Baseline.Paths))
	}
	if ttft.Incident.Points != 120 || ttft.Baseline.Points != 121 {
		t.Errorf("points drawn: incident %d, baseline %d", ttft.Incident.Points, ttft.Baseline.Points)
	}
	x := func(s string) float64 { return coordOf(t, s) }
	inc := ttft.Incident
	if shadeMid := x(inc.X0) + (x(inc.X1)-x(inc.X0))/2; math.Abs(x(inc.ShadeX)-shadeMid) > 0.2 || math.Abs(x(inc.ShadeX)+x(inc.ShadeWidth)-x(inc.X1)) > 0.2 {
		t.Errorf("incident window shaded at %s+%s, want the second half of %s..%s", inc.ShadeX, inc.ShadeWidth, inc.X0, inc.X1)
	}
	if ttft.Onset == nil || x(ttft.Onset.X) <= x(inc.ShadeX) || x(ttft.Onset.X) >= x(inc.X1) {
		t.Errorf("onset %+v not inside the incident window", ttft.Onset)
	}
	if x(ttft.Baseline.X1) >= x(inc.X0) {
		t.Errorf("baseline %s..%s overlaps the incident %s..", ttft.Baseline.X0, ttft.Baseline.X1, inc.X0)
	}
	// The value axis is the chart model's (as on the PNG): up to 2.5 s ×
	// 1.1, ticked every 0.5 s, the top tick below the plot area's top.
	if got := fmt.Sprint(ttft.YTicks); !strings.HasPrefix(got, "[{210.0 0 s} ") || !strings.HasSuffix(got, " {44.5 2.5 s}]") || len(ttft.YTicks) != 6 {
		t.Errorf("value ticks %s, want 0 s to 2.5 s every 0.5 s, 2.5 s at 2.5/2.75 of the plot height", got)
	}
	if got := fmt.Sprint(ttft.Summary); got != "[{baseline 300 ms 300 ms 21:08:20 } {incident 1.4 s 2.5 s 22:13:20 ×4.67}]" {
		t.Errorf("summary %s", got)
	}
	if len(ttft.Rows) != 121 || ttft.Rows[0].Offset != "−5:00" || ttft.Rows[60].Offset != "+0:00" || ttft.Rows[90].Incident != "—" {
		t.Errorf("data rows: %d, first %+v, row 90 %+v", len(ttft.Rows), ttft.Rows[0], ttft.Rows[90])
	}
	if want := "TTFT p95: baseline mean 300 ms, peak 300 ms at 21:08:20 UTC; incident mean 1.4 s, peak 2.5 s at 22:13:20 UTC (×4.67 the baseline)."; ttft.Alt != want {
		t.Errorf("alt text %q", ttft.Alt)
	}
	if kv := cs[1]; kv.YTicks[len(kv.YTicks)-1].Label != "100%" {
		t.Errorf("KV usage axis tops at %q, want 100%%", kv.YTicks[len(kv.YTicks)-1].Label)
	}
	if q := cs[2]; !q.Empty || q.Alt != "Queue depth (waiting requests): no data in either window." {
		t.Errorf("empty panel: empty %v, alt %q", q.Empty, q.Alt)
	}
}

func coordOf(t *testing.T, s string) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestTimeline: an incident's notifications become its timeline, one line
// per change with every receiver it went to; an update says whether the
// cause changed or the severity rose; the resolve carries its reason.
func TestTimeline(t *testing.T) {
	v := notifytest.Anomaly()
	in := sampleIncident(v)
	in.Status, in.ResolvedAt, in.ResolveReason = incident.IncidentResolved, t0.Add(20*time.Minute), "engine-a down"
	at := func(m int) time.Time { return in.OpenedAt.Add(time.Duration(m) * time.Minute) }
	var notices []Notice
	for _, recv := range []string{"slack", "hook"} {
		notices = append(notices,
			Notice{Sequence: 1, Kind: "open", CreatedAt: at(1), Cause: "kv", CauseTitle: "KV cache pressure", Severity: "warning",
				Receiver: recv, Status: "delivered", StatusAt: at(1)},
			Notice{Sequence: 2, Kind: "update", CreatedAt: at(6), Cause: "kv", Severity: "critical", Receiver: recv, Status: "delivered"},
			Notice{Sequence: 3, Kind: "update", CreatedAt: at(12), Cause: "queue", CauseTitle: "Queueing", Receiver: recv, Status: "pending"},
			Notice{Sequence: 4, Kind: "resolve", CreatedAt: at(23), Cause: "queue", Receiver: recv, Status: "dropped"},
		)
	}
	got := Timeline(in, notices)
	want := []struct{ kind, text string }{
		{"opened", "Incident opened"},
		{"notified", "Notified: top cause KV cache pressure (warning)"},
		{"escalated", "Escalated to critical"},
		{"cause_changed", "Top cause changed to Queueing"},
		{"resolved", "Resolved: engine-a down"},
	}
	if len(got) != len(want) {
		t.Fatalf("timeline %+v", got)
	}
	for i, w := range want {
		if got[i].Kind != w.kind || got[i].Text != w.text {
			t.Errorf("item %d: %s %q, want %s %q", i, got[i].Kind, got[i].Text, w.kind, w.text)
		}
	}
	if d := got[1].Deliveries; len(d) != 2 || d[0].Receiver != "hook" || d[1].Receiver != "slack" || d[0].Status != "delivered" {
		t.Errorf("deliveries %+v", d)
	}
	// Without notices (a restarted daemon), the incident's own open and resolve.
	if got := Timeline(in, nil); len(got) != 2 || got[1].Kind != "resolved" {
		t.Errorf("timeline without notices %+v", got)
	}
}

// TestIndexOrder: open incidents newest first, then resolved newest first.
func TestIndexOrder(t *testing.T) {
	v := notifytest.Anomaly()
	mk := func(id string, opened int, resolved bool) incident.Incident {
		in := sampleIncident(v)
		in.ID, in.OpenedAt = id, t0.Add(time.Duration(opened)*time.Minute)
		if resolved {
			in.Status, in.ResolvedAt = incident.IncidentResolved, in.OpenedAt.Add(time.Minute)
		}
		return in
	}
	p := Index(Site{Now: t0.Add(time.Hour)}, []incident.Incident{mk("a", 1, false), mk("b", 5, false), mk("c", 2, true), mk("d", 9, true)}, TriageForm{})
	ids := func(rows []IncidentRow) string {
		var s []string
		for _, r := range rows {
			s = append(s, r.ID)
		}
		return strings.Join(s, ",")
	}
	if got := ids(p.Open) + "|" + ids(p.Resolved); got != "b,a|d,c" {
		t.Errorf("order %s", got)
	}
	if r := p.Open[0]; r.Age != "55m" || r.Confident != "83%" || r.TopCause != "Requests are queueing: the engine is saturated" {
		t.Errorf("row %+v", r)
	}
	html := renderPage(t, p)
	if !strings.Contains(html, `action="/triage"`) || !strings.Contains(html, "Requests are queueing") {
		t.Errorf("index page lacks the form or the top cause")
	}
}

func TestAgeText(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second: "0 s", 45 * time.Second: "45 s", 12*time.Minute + 30*time.Second: "12m", 125 * time.Minute: "2h5m", 75 * time.Hour: "3d3h",
	} {
		if got := ageText(d); got != want {
			t.Errorf("ageText(%s) = %q, want %q", d, got, want)
		}
	}
}

// fourReplicaVerdict is the anomaly of a scope served by four replicas,
// with slow requests from traces.
func fourReplicaVerdict() *verdict.Verdict {
	v := notifytest.Anomaly()
	v.Targets = nil
	for _, pod := range []string{"vllm-0", "vllm-1", "vllm-2", "vllm-3"} {
		v.Targets = append(v.Targets, verdict.Target{Labels: map[string]string{"pod": pod}, Signal: "ttft_p95", Value: 2.1, Unit: "seconds"})
	}
	for i := range 12 {
		v.Requests = append(v.Requests, verdict.Request{TraceID: strings.Repeat("ab", 16), Pod: v.Targets[i%4].Labels["pod"],
			Start: t0.Add(-time.Duration(i) * time.Second), E2E: 9, TTFT: 3, Dominant: "queue",
			Parts: map[string]float64{"queue": 2.5, "prefill": 0.5, "decode": 6}})
	}
	return v
}

// BenchmarkRenderIncidentPage renders a 4-replica incident's page with its
// four charts (the template work of GET /incidents/{id}; the daemon's
// benchmark adds the range queries).
func BenchmarkRenderIncidentPage(b *testing.B) {
	v := fourReplicaVerdict()
	in := sampleIncident(v)
	site := Site{Now: t0}
	d := sampleChart(v)
	d.Panels = append(d.Panels, d.Panels[0])
	var buf bytes.Buffer
	b.ReportAllocs()
	for b.Loop() {
		section := Verdict(v, Charts(d, v.Incident, v.Baseline, in.OpenedAt), "")
		buf.Reset()
		if err := Render(&buf, IncidentPage{Site: site, Incident: Row(site, in), Timeline: Timeline(in, nil), Verdict: &section}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(buf.Len()), "bytes/page")
}
