package verdict

// InsufficientCode names why a triage could not decide.
type InsufficientCode string

// Insufficient-data reasons, in the order they are checked: the first that
// holds is the one reported.
const (
	// InsufficientNoEngine: the source holds no series of the engine(s) asked for.
	InsufficientNoEngine InsufficientCode = "no_engine_series"
	// InsufficientSelector: the engine's series exist but the selector matches none.
	InsufficientSelector InsufficientCode = "selector_matched_nothing"
	// InsufficientOutsideData: the scope has data, but not in the incident window.
	InsufficientOutsideData InsufficientCode = "window_outside_data"
	// InsufficientBaseline: the baseline window lies before the data starts
	// (or in a gap of it).
	InsufficientBaseline InsufficientCode = "baseline_not_covered"
	// InsufficientSignal: a signal the verdict needs has no value.
	InsufficientSignal InsufficientCode = "signal_missing"
)

// String returns the code.
func (c InsufficientCode) String() string { return string(c) }

// InsufficientReason says why a verdict has status insufficient_data, and
// what to do about it.
type InsufficientReason struct {
	Code InsufficientCode `json:"code"`
	// Message is one sentence for a person: the cause and the fix.
	Message string `json:"message"`
	// Signal and Window name the missing signal (signal_missing only).
	Signal string `json:"signal,omitempty"`
	Window string `json:"window,omitempty"`
}

// InsufficientLearning: a daemon's history is shorter than the baseline
// it needs; it is still learning the baseline (see Verdict.Learning).
const InsufficientLearning InsufficientCode = "learning_baseline"

// Learning says a daemon's triage ran on less history than its configured
// baseline: the state comes first in every rendering.
type Learning struct {
	// HistoryMinutes is how much history the daemon holds, in whole minutes.
	HistoryMinutes int `json:"history_minutes"`
	// BaselineMinutes is the baseline offset configured, in minutes.
	BaselineMinutes int `json:"baseline_minutes"`
	// NeededMinutes is the least history a baseline is taken from; 0
	// when the history holds it (the baseline is shortened to it).
	NeededMinutes int `json:"needed_minutes,omitempty"`
	// Message is the state in words: "learning the baseline (2 of 60
	// minutes); using the 2 minutes there are".
	Message string `json:"message"`
}

// DegradedBaseline says the baseline window already showed the incident's
// signature (KV cache full, preemptions, a growing queue): a comparison
// with it understates the incident.
type DegradedBaseline struct {
	// Signs are the signatures seen, each with its value: "KV cache 100%".
	Signs []string `json:"signs"`
	// Message is the state in words, for the top of a rendering.
	Message string `json:"message"`
}
