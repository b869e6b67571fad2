package incident

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/whyslow/whyslow/detect"
	"github.com/whyslow/whyslow/verdict"
)

func cohortFixture(ns []string) ([]detect.Detection, map[string]verdict.Scope) {
	var dets []detect.Detection
	scopes := map[string]verdict.Scope{}
	for i, n := range ns {
		key := fmt.Sprintf("namespace=%q,model_name=\"m%d\"", n, i)
		sc := verdict.Scope{Selector: key, Labels: map[string]string{"namespace": n, "model_name": fmt.Sprintf("m%d", i)}}
		dets = append(dets, detect.Detection{Key: key, Scope: sc})
		scopes[key] = sc
	}
	return dets, scopes
}

func TestFindCohorts(t *testing.T) {
	at := time.Date(2026, 1, 1, 10, 45, 0, 0, time.UTC)
	// 5 scopes in prod, 3 in dev.
	dets, scopes := cohortFixture([]string{"prod", "prod", "prod", "prod", "prod", "dev", "dev", "dev"})
	open := func(i int, opened time.Time) Incident {
		d := dets[i]
		return Incident{Key: d.Key, Scope: scopes[d.Key], Status: IncidentOpen, Detected: true, OpenedAt: opened}
	}
	t0 := time.Date(2026, 1, 1, 10, 42, 0, 0, time.UTC)

	t.Run("namespace slows together", func(t *testing.T) {
		incs := []Incident{open(0, t0), open(1, t0.Add(30*time.Second)), open(2, t0.Add(2*time.Minute)), open(6, t0.Add(-2*time.Hour))}
		got := FindCohorts(incs, dets, []string{"namespace", "model_name"}, at)
		for _, i := range []int{0, 1, 2} {
			c := got[dets[i].Key]
			if c == nil {
				t.Fatalf("scope %d: no cohort", i)
			}
			if c.Label != "namespace" || c.Value != "prod" || c.Slowed != 3 || c.Total != 5 || !c.Since.Equal(t0) {
				t.Errorf("scope %d: cohort %+v", i, c)
			}
			if !strings.Contains(c.Message, `3 of 5 scopes with namespace="prod" slowed together between 10:42 and 10:44 UTC`) {
				t.Errorf("message %q", c.Message)
			}
		}
		if c := got[dets[6].Key]; c != nil {
			t.Errorf("a dev incident opened 2h earlier joined a cohort: %+v", c)
		}
	})
	t.Run("two are chance", func(t *testing.T) {
		incs := []Incident{open(0, t0), open(1, t0)}
		if got := FindCohorts(incs, dets, []string{"namespace", "model_name"}, at); len(got) != 0 {
			t.Errorf("cohort of two: %+v", got)
		}
	})
	t.Run("a minority of the namespace is not its cohort", func(t *testing.T) {
		// 3 of 8 in the fleet, spread over both namespaces: 2 of 5 prod, 1 of 3 dev.
		incs := []Incident{open(0, t0), open(1, t0), open(5, t0)}
		if got := FindCohorts(incs, dets, []string{"namespace", "model_name"}, at); len(got) != 0 {
			t.Errorf("3 of 8 formed a cohort: %+v", got)
		}
	})
	t.Run("fleet-wide without shared labels", func(t *testing.T) {
		d, sc := cohortFixture([]string{"a", "b", "c", "d"})
		var incs []Incident
		for i := 0; i < 3; i++ {
			incs = append(incs, Incident{Key: d[i].Key, Scope: sc[d[i].Key], Status: IncidentOpen, Detected: true, OpenedAt: t0})
		}
		got := FindCohorts(incs, d, []string{"model_name"}, at)
		c := got[d[0].Key]
		if c == nil || c.Label != "" || c.Slowed != 3 || c.Total != 4 {
			t.Fatalf("fleet cohort %+v", c)
		}
		if !strings.Contains(c.Message, "3 of 4 scopes in the fleet slowed together at 10:42 UTC") {
			t.Errorf("message %q", c.Message)
		}
	})
	t.Run("far apart in time", func(t *testing.T) {
		incs := []Incident{open(0, t0), open(1, t0.Add(6*time.Minute)), open(2, t0.Add(12*time.Minute))}
		if got := FindCohorts(incs, dets, []string{"namespace", "model_name"}, at); len(got) != 0 {
			t.Errorf("incidents 6 min apart formed a cohort: %+v", got)
		}
	})
}
