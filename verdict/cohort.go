package verdict

import "time"

// Cohort is a set of scopes that slowed together: they share a label value
// (a namespace, a cluster) or make up much of the fleet, and their incidents
// opened within CohortWindow of each other. Several scopes going bad at
// once points at what they share — a GPU node, the gateway, a shared
// dependency — rather than at as many separate faults.
type Cohort struct {
	// Label and Value are what the scopes share; both empty: the whole
	// fleet (every scope the detector sees).
	Label string `json:"label,omitempty"`
	Value string `json:"value,omitempty"`
	// Slowed is how many of the Total scopes with this label value have an
	// incident that opened within the window.
	Slowed int `json:"slowed"`
	Total  int `json:"total"`
	// Since is when the first of them opened.
	Since time.Time `json:"since"`
	// Scopes are the slowed scopes' keys, at most MaxCohortScopes.
	Scopes  []string `json:"scopes"`
	Message string   `json:"message"`
}
