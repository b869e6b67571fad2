package render

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/whyslow/whyslow/triage"
)

// Normalize returns a shallow copy of v ready for the JSON contract:
// schema_version set when it is zero, and the always-present lists
// (headline, causes, ruled_out, steps, data_gaps, evidence, remediation)
// made empty instead of null so that consumers never see null for a list.
func Normalize(v *triage.Verdict) *triage.Verdict {
	c := *v
	if c.SchemaVersion == 0 {
		c.SchemaVersion = triage.SchemaVersion
	}
	if c.Headline == nil {
		c.Headline = []triage.Comparison{}
	}
	if c.RuledOut == nil {
		c.RuledOut = []triage.RuledOut{}
	}
	if c.Steps == nil {
		c.Steps = []triage.Step{}
	}
	if c.DataGaps == nil {
		c.DataGaps = []triage.DataGap{}
	}
	c.Causes = make([]triage.Cause, len(v.Causes))
	copy(c.Causes, v.Causes)
	for i := range c.Causes {
		if c.Causes[i].Evidence == nil {
			c.Causes[i].Evidence = []triage.Evidence{}
		}
		if c.Causes[i].Remediation == nil {
			c.Causes[i].Remediation = []string{}
		}
	}
	return &c
}

// JSON writes v as the versioned JSON contract (see SCHEMA.md), followed by a
// newline. Indent pretty-prints it.
func JSON(w io.Writer, v *triage.Verdict, opts Options) error {
	if v == nil {
		return errors.New("render json: nil verdict")
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	if opts.Indent {
		enc.SetIndent("", "  ")
	}
	if err := enc.Encode(Normalize(v)); err != nil {
		return fmt.Errorf("render json: %w", err)
	}
	return nil
}
