package verdict

// SLO is a bound a user sets on one signal of the incident window, e.g.
// "ttft_p95 > 2s": when the window's value crosses it, the verdict is an
// anomaly whatever the baseline says (a slowdown that crept in over weeks
// has no baseline to stand out from, but it still breaks the promise).
type SLO struct {
	// Signal is a rulebook signal name (ttft_p95, tpot_p95, e2e_p95,
	// success_rate, ...).
	Signal string `json:"signal"`
	// Op is ">" (breached above Bound) or "<" (breached below it).
	Op    string  `json:"op"`
	Bound float64 `json:"bound"`
	// Text is the bound as written.
	Text string `json:"text"`
}

// SLOBreach is an SLO the incident window crossed.
type SLOBreach struct {
	SLO
	Value float64 `json:"value"`
	Unit  string  `json:"unit,omitempty"`
}
