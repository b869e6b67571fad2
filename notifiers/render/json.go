package render

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/whyslow/whyslow/verdict"
)

// Normalize returns a shallow copy of v ready for the JSON contract:
// schema_version set when it is zero, and the always-present lists
// (headline, causes, ruled_out, steps, data_gaps, evidence, remediation)
// made empty instead of null so that consumers never see null for a list.
func Normalize(v *verdict.Verdict) *verdict.Verdict {
	c := *v
	if c.SchemaVersion == 0 {
		c.SchemaVersion = verdict.SchemaVersion
	}
	if c.Headline == nil {
		c.Headline = []verdict.Comparison{}
	}
	if c.RuledOut == nil {
		c.RuledOut = []verdict.RuledOut{}
	}
	if c.Steps == nil {
		c.Steps = []verdict.Step{}
	}
	if c.DataGaps == nil {
		c.DataGaps = []verdict.DataGap{}
	}
	c.Causes = make([]verdict.Cause, len(v.Causes))
	copy(c.Causes, v.Causes)
	for i := range c.Causes {
		if c.Causes[i].Evidence == nil {
			c.Causes[i].Evidence = []verdict.Evidence{}
		}
		if c.Causes[i].Remediation == nil {
			c.Causes[i].Remediation = []string{}
		}
	}
	return &c
}

// JSON writes v as the versioned JSON contract (see SCHEMA.md), followed by a
// newline. Indent pretty-prints it.
func JSON(w io.Writer, v *verdict.Verdict, opts Options) error {
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
