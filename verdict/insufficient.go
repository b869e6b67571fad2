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
