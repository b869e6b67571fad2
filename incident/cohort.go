package incident

import (
	"fmt"
	"sort"
	"time"

	"github.com/whyslow/whyslow/detect"
	"github.com/whyslow/whyslow/verdict"
)

const (
	// CohortWindow is how close together incidents must open to count as
	// one slowdown.
	CohortWindow = 5 * time.Minute
	// MinCohort is the least number of scopes that make a cohort: two
	// slowing at once happens by chance in a large fleet.
	MinCohort = 3
	// MaxCohortScopes bounds the keys a Cohort lists.
	MaxCohortScopes = 10
)

// FindCohorts returns, for each open detector incident, the largest cohort
// it belongs to: at least MinCohort scopes and at least half of the scopes
// that share the label value (or of the whole fleet), opened within
// CohortWindow of each other. dets are the detector's scopes (all of them,
// firing or not), groupBy its scope labels. Alert-only incidents have no
// detector scope and are left out.
func FindCohorts(incidents []Incident, dets []detect.Detection, groupBy []string, at time.Time) map[string]*verdict.Cohort {
	open := map[string]Incident{}
	for _, in := range incidents {
		if in.Status == IncidentOpen && in.Detected {
			open[in.Key] = in
		}
	}
	if len(open) < MinCohort {
		return nil
	}
	type group struct {
		label, value string
		total        []string
	}
	groups := map[string]*group{"": {}}
	for _, d := range dets {
		groups[""].total = append(groups[""].total, d.Key)
		// The last group_by label tells scopes apart (model_name); the
		// others are what several scopes can share.
		for _, l := range groupBy[:max(len(groupBy)-1, 0)] {
			v, ok := d.Scope.Labels[l]
			if !ok || v == "" {
				continue
			}
			id := l + "\x00" + v
			if groups[id] == nil {
				groups[id] = &group{label: l, value: v}
			}
			groups[id].total = append(groups[id].total, d.Key)
		}
	}
	out := map[string]*verdict.Cohort{}
	ids := make([]string, 0, len(groups))
	for id := range groups {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		g := groups[id]
		var members []Incident
		for _, key := range g.total {
			if in, ok := open[key]; ok {
				members = append(members, in)
			}
		}
		for _, c := range cohortsOf(members, len(g.total), g.label, g.value) {
			for _, key := range c.keys {
				if prev := out[key]; prev == nil || c.cohort.Slowed > prev.Slowed ||
					(c.cohort.Slowed == prev.Slowed && c.cohort.Label != "" && prev.Label == "") {
					out[key] = c.cohort
				}
			}
		}
	}
	return out
}

type cohortMembers struct {
	cohort *verdict.Cohort
	keys   []string
}

// cohortsOf finds the runs of incidents opened within CohortWindow of the
// run's first one that are large enough to be a cohort of total scopes.
func cohortsOf(members []Incident, total int, label, value string) []cohortMembers {
	sort.Slice(members, func(i, j int) bool {
		if !members[i].OpenedAt.Equal(members[j].OpenedAt) {
			return members[i].OpenedAt.Before(members[j].OpenedAt)
		}
		return members[i].Key < members[j].Key
	})
	var out []cohortMembers
	for i := 0; i < len(members); {
		j := i
		for j < len(members) && members[j].OpenedAt.Sub(members[i].OpenedAt) <= CohortWindow {
			j++
		}
		run := members[i:j]
		if len(run) >= MinCohort && 2*len(run) >= total {
			c := &verdict.Cohort{Label: label, Value: value, Slowed: len(run), Total: total, Since: run[0].OpenedAt}
			keys := make([]string, len(run))
			for k, in := range run {
				keys[k] = in.Key
			}
			c.Scopes = keys[:min(len(keys), MaxCohortScopes)]
			c.Message = cohortMessage(c, run[len(run)-1].OpenedAt)
			out = append(out, cohortMembers{cohort: c, keys: keys})
			i = j
			continue
		}
		i++
	}
	return out
}

func cohortMessage(c *verdict.Cohort, last time.Time) string {
	where := "in the fleet"
	if c.Label != "" {
		where = fmt.Sprintf("with %s=%q", c.Label, c.Value)
	}
	when := "at " + c.Since.UTC().Format("15:04")
	if last.Sub(c.Since) >= time.Minute {
		when = fmt.Sprintf("between %s and %s UTC", c.Since.UTC().Format("15:04"), last.UTC().Format("15:04"))
	} else {
		when += " UTC"
	}
	share := "what they share"
	if c.Label != "" {
		share = "what the " + c.Label + " shares"
	}
	return fmt.Sprintf("%d of %d scopes %s slowed together %s: one shared cause (%s: a GPU node, the gateway, a dependency) is likelier than %d separate faults",
		c.Slowed, c.Total, where, when, share, c.Slowed)
}
