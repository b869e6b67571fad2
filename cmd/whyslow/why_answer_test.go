package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/whyslow/whyslow/detect"
	"github.com/whyslow/whyslow/notifiers/render"
	"github.com/whyslow/whyslow/verdict"
)

// firstScreen is the terminal's first screen: the answer must fit in it.
const firstScreen = 24

// TestWhyAnswerFirstScreen: for every shipped bundle (testdata/incidents,
// testdata/fluid) and for `whyslow demo`, the text output names the top
// cause and its first fix within the first 24 lines, and the status line
// comes first.
func TestWhyAnswerFirstScreen(t *testing.T) {
	var dirs []string
	for _, d := range []string{incidentsDir, "../../testdata/fluid"} {
		m, err := filepath.Glob(filepath.Join(d, "*"))
		if err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, m...)
	}
	if len(dirs) < 20 {
		t.Fatalf("only %d bundles", len(dirs))
	}
	withCause := 0
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			j := runShared(t, "why", "--bundle", dir, "--output", "json")
			if j.code == exitFailed {
				t.Fatalf("exit 2: %s", j.stderr)
			}
			v := decodeVerdict(t, j.stdout)
			r := runShared(t, "why", "--bundle", dir)
			if checkFirstScreen(t, v, r.stdout, 0) {
				withCause++
			}
		})
	}
	t.Run("demo", func(t *testing.T) {
		j := runShared(t, "demo", "--output", "json")
		if j.code == exitFailed {
			t.Fatalf("exit 2: %s", j.stderr)
		}
		v := decodeVerdict(t, j.stdout)
		r := runShared(t, "demo")
		// The demo says what it runs in two lines before the verdict.
		checkFirstScreen(t, v, r.stdout, 2)
	})
	if withCause < 15 {
		t.Errorf("only %d bundles have a cause to show", withCause)
	}
}

// checkFirstScreen checks that the status line opens the verdict (after
// skip lines) and that the top cause and its first fix (or why it has none
// shown) are within the first screen; it reports whether v has a cause.
func checkFirstScreen(t *testing.T, v *verdict.Verdict, out string, skip int) bool {
	t.Helper()
	lines := strings.Split(out, "\n")
	if len(lines) > firstScreen {
		lines = lines[:firstScreen]
	}
	a := render.AnswerOf(v)
	status, _, _ := strings.Cut(a.Status, ":")
	if len(lines) <= skip || !strings.HasPrefix(lines[skip], status) {
		t.Errorf("the status does not open the output:\n%s", out)
	}
	screen := strings.Join(lines, "\n")
	// Text wraps at 100 columns: compare without the line breaks.
	flat := strings.Join(strings.Fields(screen), " ")
	if len(v.Causes) == 0 {
		return false
	}
	c := v.Causes[0]
	for _, want := range []string{a.CauseLine(), "fix: " + firstOr(c.Remediation), a.NoFixWhy} {
		want = strings.Join(strings.Fields(want), " ")
		if strings.TrimSpace(want) == "fix:" || want == "" {
			continue
		}
		if !strings.Contains(flat, want) {
			t.Errorf("the first %d lines do not hold %q:\n%s", firstScreen, want, screen)
		}
	}
	if !strings.Contains(flat, "["+c.ID+"]") {
		t.Errorf("top cause %s is not on the first screen:\n%s", c.ID, screen)
	}
	if len(c.Remediation) > 0 && render.ShowFixes(c) && !strings.Contains(flat, strings.Join(strings.Fields(c.Remediation[0]), " ")) {
		t.Errorf("the first fix of %s is not on the first screen", c.ID)
	}
	return true
}

func firstOr(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// TestTriggerText: `why --group-by` prints a trigger's values in units and
// in the verdicts' formats, not as raw floats ("613.3 is 3771.60× baseline
// 0.1626", issue 25).
func TestTriggerText(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	below := 0.98
	for _, tt := range []struct {
		r    detect.TriggerResult
		t    detect.Trigger
		want string
	}{
		{detect.TriggerResult{Name: "ttft_p95", Short: f(613.3), Baseline: f(0.1626)}, detect.DefaultTriggers()[0],
			"ttft_p95 10m13s ×3772 (baseline 163 ms; fires at ×2)"},
		{detect.TriggerResult{Name: "tpot_p95", Short: f(0.0697), Baseline: f(0.0152)}, detect.DefaultTriggers()[1],
			"tpot_p95 69.7 ms ×4.59 (baseline 15.2 ms; fires at ×1.5, mean at ×1.2)"},
		{detect.TriggerResult{Name: "success_rate", Short: f(0.912)}, detect.Trigger{Name: "success_rate", Signal: detect.SignalSuccessRate, Below: &below},
			"success_rate 91.2% (fires below 98%)"},
		{detect.TriggerResult{Name: "custom", Reason: "7 > 5"}, detect.Trigger{Name: "custom"}, "custom: 7 > 5"},
	} {
		if got := triggerText(tt.r, tt.t); got != tt.want {
			t.Errorf("triggerText(%s) = %q, want %q", tt.r.Name, got, tt.want)
		}
	}
}
