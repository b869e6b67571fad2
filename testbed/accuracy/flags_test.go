package accuracy

import (
	"flag"
	"fmt"
	"strings"
)

var (
	seedFlag    = flag.Int64("accuracy.seed", 11, "seed for drawing instance seeds (0: time-based, a fresh draw)")
	verboseCase = flag.Bool("accuracy.explain", false, "print every verdict's signals for misses")
	allFlag     = flag.Bool("accuracy.all", false, "print every instance's verdict, not only misses")
	onlyFlag    = flag.String("accuracy.only", "", "draw only the scenarios whose name contains one of these comma-separated strings")
	parallel    = flag.Int("accuracy.parallel", 2, "instances recorded and triaged at once")
)

// summary is one result in a line, for misses of the engine and trace tests.
func summary(r *Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "status=%s phase=%s params=%v causes=[", r.Verdict.Status, r.Verdict.Phase, r.Params)
	for _, c := range r.Verdict.Causes {
		fmt.Fprintf(&b, "%s:%.0f ", c.ID, c.Score)
	}
	b.WriteString("] headline:")
	for _, h := range r.Verdict.Headline {
		if h.Now != nil && h.Baseline != nil {
			fmt.Fprintf(&b, " %s=%.3g/%.3g", h.Signal, *h.Now, *h.Baseline)
		}
	}
	if *verboseCase {
		b.WriteString("\n signals:")
		for _, s := range r.Verdict.Signals {
			if s.Now != nil || s.Baseline != nil {
				fmt.Fprintf(&b, " %s=%s/%s", s.Name, f(s.Now), f(s.Baseline))
			}
		}
		for _, st := range r.Verdict.Steps {
			fmt.Fprintf(&b, "\n  %s: %s", st.Name, st.Outcome)
		}
	}
	return b.String()
}
