package web

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/whyslow/whyslow/notifiers/chart"
	"github.com/whyslow/whyslow/notifiers/notifytest"
	"github.com/whyslow/whyslow/verdict"
)

// TestAnswerOnPage: the verdict and incident pages open with the answer
// block (status, top cause with its confidence, chain, first fix) before
// the facts, the table, the timeline and the charts; <title> names the
// cause; the daemon's pages refresh themselves without script, a saved
// page, the sign-in and error pages do not.
func TestAnswerOnPage(t *testing.T) {
	v := notifytest.Anomaly()
	top := v.Causes[0]
	section := Verdict(v, charts(v, time.Time{}), "")
	site := Site{Prefix: "/whyslow", Now: t0, Refresh: RefreshSeconds}
	in := sampleIncident(v)
	for name, p := range map[string]Page{
		"verdict":  VerdictPage{Site: site, Verdict: section},
		"incident": IncidentPage{Site: site, Incident: Row(site, in), Timeline: Timeline(in, nil), Verdict: &section},
	} {
		html := renderPage(t, p)
		title := html[strings.Index(html, "<title>"):strings.Index(html, "</title>")]
		if !strings.HasPrefix(title, "<title>"+top.Title+" (83%)") {
			t.Errorf("%s: %s, want the top cause first", name, title)
		}
		at := func(s string) int {
			i := strings.Index(html, s)
			if i < 0 {
				t.Fatalf("%s: no %q", name, s)
			}
			return i
		}
		cause, fix := at(`id="top-cause"`), at(`class="fix first-fix"`)
		for _, later := range []string{`class="headline"`, `class="charts"`, `id="causes-h"`, "Incident window"} {
			if i := at(later); i < fix || i < cause {
				t.Errorf("%s: %s comes before the answer", name, later)
			}
		}
		if name == "incident" && at(`id="timeline-h"`) < fix {
			t.Errorf("incident: the timeline comes before the answer")
		}
		if !strings.Contains(html, `<meta http-equiv="refresh" content="60">`) {
			t.Errorf("%s: the daemon's page does not refresh itself", name)
		}
	}
	for name, p := range map[string]Page{
		"saved":   VerdictPage{Site: Site{Standalone: true, Now: t0, Refresh: RefreshSeconds}, Verdict: section},
		"sign-in": LoginPage{Site: Site{Now: t0}},
		"index":   Index(Site{Now: t0, Refresh: RefreshSeconds}, nil, TriageForm{}),
	} {
		if html := renderPage(t, p); strings.Contains(html, `http-equiv="refresh"`) {
			t.Errorf("%s page refreshes itself", name)
		}
	}
}

// TestChartsContinuous: data fetched over one span (Section's
// chart.ContinuousSpan) is drawn on one time axis: both windows shaded where
// they lie, the onset marked, ticks at round clock times, the curve broken
// where the source had no samples, the windows' numbers summed from
// their own samples.
func TestChartsContinuous(t *testing.T) {
	v := notifytest.Anomaly() // baseline 21:08:20–21:13:20, incident 22:08:20–22:13:20
	inc, base := chart.LeadIn(v)
	span, ok := chart.ContinuousSpan(inc, base)
	if !ok || !span.Start.Equal(base.Start) || !span.End.Equal(v.Incident.End) {
		t.Fatalf("span %v %v, want %s..%s", span, ok, base.Start, v.Incident.End)
	}
	if _, ok := chart.ContinuousSpan(inc, verdict.Window{Start: inc.Start.Add(-24 * time.Hour), End: inc.End.Add(-24 * time.Hour)}); ok {
		t.Error("a baseline a day back is drawn on one axis")
	}
	// Samples every 15 s in both chart windows, none in between.
	var pts []chart.Point
	for _, w := range []verdict.Window{base, inc} {
		for t := w.Start; !t.After(w.End); t = t.Add(15 * time.Second) {
			val := 0.3
			if !t.Before(v.Incident.Start) {
				val = 30
			}
			pts = append(pts, chart.Point{T: t, V: val})
		}
	}
	d := chart.Data{Incident: span, Panels: []chart.Panel{{Title: "TTFT p95", Unit: chart.UnitSeconds, Incident: pts}}}
	onset := v.Incident.Start.Add(time.Minute)
	cs := Charts(d, v.Incident, v.Baseline, onset)
	c := cs[0]
	if !c.Continuous || c.Title != "TTFT p95 (log scale)" {
		t.Fatalf("continuous %v, title %q", c.Continuous, c.Title)
	}
	x := func(s string) float64 { return coordOf(t, s) }
	if bx, ix := x(c.Baseline.ShadeX), x(c.Incident.ShadeX); !(bx > plotLeft && bx+x(c.Baseline.ShadeWidth) < ix && ix+x(c.Incident.ShadeWidth) <= chartWidth-plotRight+0.1) {
		t.Errorf("windows shaded at baseline %s+%s, incident %s+%s", c.Baseline.ShadeX, c.Baseline.ShadeWidth, c.Incident.ShadeX, c.Incident.ShadeWidth)
	}
	if c.Onset == nil || x(c.Onset.X) <= x(c.Incident.ShadeX) {
		t.Errorf("onset %+v", c.Onset)
	}
	var labels []string
	for _, tk := range c.XTicks {
		labels = append(labels, tk.Label)
	}
	if got := strings.Join(labels, " "); got != "21:15 21:30 21:45 22:00" {
		t.Errorf("time ticks %q", got)
	}
	if len(c.Incident.Paths) != 2 || len(c.Baseline.Paths) != 0 {
		t.Errorf("paths: %d on the curve (want 2: broken over the hour without samples), %d on the baseline side",
			len(c.Incident.Paths), len(c.Baseline.Paths))
	}
	if got := c.Summary[0].Mean + " " + c.Summary[1].Mean + " " + c.Summary[1].Change; got != "300 ms 30 s ×100" {
		t.Errorf("summary %q", got)
	}
	if c.BaselineLevel == "" || math.Abs(x(c.BaselineLevel)-coordOf(t, c.YTicks[0].Y)) > float64(chartHeight) {
		t.Errorf("baseline level %q", c.BaselineLevel)
	}
}

// TestChartsReplicas: a continuous panel's per-target curves are drawn as
// lines of their own, each with its name, on the page.
func TestChartsReplicas(t *testing.T) {
	v := notifytest.Anomaly()
	inc, base := chart.LeadIn(v)
	span, _ := chart.ContinuousSpan(inc, base)
	var top, a, b []chart.Point
	for at := span.Start; !at.After(span.End); at = at.Add(time.Minute) {
		top, a, b = append(top, chart.Point{T: at, V: 0.9}), append(a, chart.Point{T: at, V: 0.9}), append(b, chart.Point{T: at, V: 0.4})
	}
	d := chart.Data{Incident: span, Span: span, Panels: []chart.Panel{{Title: "KV-cache usage (max over targets)", Unit: chart.UnitFraction,
		Incident: top, Replicas: []chart.Replica{{Name: "chat/pod-a", Points: a}, {Name: "chat/pod-b", Points: b}}}}}
	cs := Charts(d, v.Incident, v.Baseline, time.Time{})
	if len(cs[0].Replicas) != 2 || len(cs[0].Replicas[1].Paths) != 1 || cs[0].Replicas[1].Class != "line-replica-1" {
		t.Fatalf("replicas %+v", cs[0].Replicas)
	}
	html := renderPage(t, VerdictPage{Site: Site{Now: t0}, Verdict: Verdict(v, cs, "")})
	for _, want := range []string{`class="line line-replica line-replica-0"`, `class="line line-replica line-replica-1"`, `>chat/pod-b</text>`} {
		if !strings.Contains(html, want) {
			t.Errorf("page lacks %s", want)
		}
	}
}
