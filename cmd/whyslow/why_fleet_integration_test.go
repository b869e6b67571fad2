package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/whyslow/whyslow/testbed/fleettest"
	"github.com/whyslow/whyslow/testbed/promtest"
)

// TestWhyGroupByShortHistory: a Prometheus holding 10 minutes of eight
// deployments, three of them slowed down (TTFT ×5) in the last 1m45s and
// nothing else changed (no queue growth, no errors: only a ratio trigger
// can see them). `why --group-by --window 2m --baseline 5m` ranks exactly
// the three; without --baseline (1h, more than the history) the ranking
// and the triages compare with the history there is, and say so.
func TestWhyGroupByShortHistory(t *testing.T) {
	fleettest.SkipUnlessAvailable(t)
	ctx, cancel := context.WithTimeout(context.Background(), fleetHangGuard)
	defer cancel()
	at := time.Date(2026, 1, 1, 2, 0, 0, 0, time.UTC)
	var om bytes.Buffer
	windows := [][2]time.Time{{at.Add(-10 * time.Minute), at.Add(-2 * time.Minute)}, {at.Add(-2*time.Minute + fleettest.SteadyStep), at}}
	const scopes, slow = 8, 3
	if err := fleettest.WriteFleet(&om, scopes, slow, windows); err != nil {
		t.Fatal(err)
	}
	// Without the waiting queue the slowed deployments' queue_growth
	// (an absolute trigger, which needs no baseline) stays silent.
	var kept bytes.Buffer
	for line := range bytes.Lines(om.Bytes()) {
		if !bytes.Contains(line, []byte("vllm:num_requests_waiting")) {
			kept.Write(line)
		}
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "fleet.om")
	if err := os.WriteFile(file, kept.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	if err := fleettest.Backfill(ctx, file, data); err != nil {
		t.Fatal(err)
	}
	prom := promtest.StartWithData(ctx, t, data)
	var want []string
	for i := range slow {
		want = append(want, fmt.Sprintf("steady-%03d", i))
	}

	run := func(extra ...string) fleetReport {
		t.Helper()
		var out, errb bytes.Buffer
		args := append([]string{"why", "--prometheus", prom, "--group-by", "namespace,model_name", "--output", "json",
			"--at", at.Format(time.RFC3339), "--window", "2m"}, extra...)
		if code := dispatch(ctx, args, &out, &errb); code != exitCause {
			t.Fatalf("%s: exit %d\nstderr: %s\nstdout: %s", strings.Join(args[3:], " "), code, errb.String(), out.String())
		}
		var rep fleetReport
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range rep.Anomalous {
			got = append(got, r.Scope.Labels["namespace"])
			t.Logf("#%d %s %s %v", r.Rank, r.Scope.Labels["namespace"], r.Severity, r.Triggers)
		}
		slices.Sort(got)
		if rep.Scopes != scopes || !slices.Equal(got, want) {
			t.Errorf("%s: anomalous %v of %d scopes, want %v of %d", strings.Join(extra, " "), got, rep.Scopes, want, scopes)
		}
		return rep
	}

	rep := run("--baseline", "5m")
	if rep.Window != "2m" || rep.Baseline != "5m" || rep.Note != "" {
		t.Errorf("--baseline 5m: window %q baseline %q note %q, want 2m, 5m and no note", rep.Window, rep.Baseline, rep.Note)
	}

	rep = run()
	if rep.Baseline != "8m" || rep.Note != "baseline 8m (learning: 10 of 60 minutes of history)" {
		t.Errorf("default 1h baseline on 10 minutes: baseline %q note %q, want the history's 8m, said", rep.Baseline, rep.Note)
	}
	var out, errb bytes.Buffer
	dispatch(ctx, []string{"why", "--prometheus", prom, "--group-by", "namespace,model_name",
		"--at", at.Format(time.RFC3339), "--window", "2m"}, &out, &errb)
	if head := "3 of 8 scopes (by namespace, model_name) anomalous at 2026-01-01T02:00:00Z (window 2m, baseline 8m)\n" +
		"note: baseline 8m (learning: 10 of 60 minutes of history)\n"; !strings.HasPrefix(out.String(), head) {
		t.Errorf("text output does not start with %q:\n%s%s", head, out.String(), errb.String())
	}
	for _, r := range rep.Anomalous {
		if r.Verdict == nil {
			t.Errorf("%s: no verdict: %s", r.Scope.Selector, r.Error)
		} else if !slices.Contains(r.Verdict.Warnings, "baseline 8m (learning: 10 of 60 minutes of history)") {
			t.Errorf("%s: verdict warnings %q lack the shortened baseline", r.Scope.Selector, r.Verdict.Warnings)
		}
	}
}
