package gpu

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/whyslow/whyslow/collectors"
)

// ProbeResult is what `whyslow gpu probe` reports: every counter the
// collector reads on this machine, and every one it cannot, with why.
type ProbeResult struct {
	// NVML is false when NVML could not be initialised; Reason says why.
	NVML bool `json:"nvml"`
	// BuiltWithNVML is false in builds without cgo (the stub).
	BuiltWithNVML bool         `json:"built_with_nvml"`
	Reason        string       `json:"reason,omitempty"`
	Driver        string       `json:"driver,omitempty"`
	GPUs          []ProbeGPU   `json:"gpus"`
	Skipped       []SkippedGPU `json:"skipped,omitempty"`
	Notes         []string     `json:"notes,omitempty"`
}

// ProbeGPU is one GPU in a ProbeResult.
type ProbeGPU struct {
	Index          int            `json:"index"`
	UUID           string         `json:"uuid"`
	Model          string         `json:"model"`
	ClockEventMask string         `json:"clock_event_mask,omitempty"`
	Counters       []ProbeCounter `json:"counters"`
	Unsupported    []ProbeGap     `json:"unsupported"`
}

// ProbeCounter is one value read.
type ProbeCounter struct {
	Series string  `json:"series"`
	Reason string  `json:"reason,omitempty"`
	Value  float64 `json:"value"`
	Source string  `json:"source,omitempty"`
}

// ProbeGap is one counter not read.
type ProbeGap struct {
	Series string `json:"series"`
	Kind   string `json:"kind"`
	Detail string `json:"detail"`
}

// Probe runs one collection cycle with opts and reports it. A machine
// without NVML is a result (NVML false, Reason set), not an error; so is a
// machine where NVML sees no GPU. Errors are reserved for failures of the
// probe itself (bad options, NVML failing after Init).
func Probe(ctx context.Context, opts Options) (ProbeResult, error) {
	res := ProbeResult{BuiltWithNVML: NVMLBuilt, GPUs: []ProbeGPU{}}
	c, err := New(opts)
	if err != nil {
		return res, err
	}
	defer c.Close()
	rep, err := c.Read(ctx)
	var nn *NoNVMLError
	switch {
	case errors.As(err, &nn):
		res.Reason = InitFailureReason(nn.Err)
		return res, nil
	case errors.Is(err, collectors.ErrNoData):
		res.NVML = true
		res.Reason = err.Error()
	case err != nil:
		return res, fmt.Errorf("gpu probe: %w", err)
	default:
		res.NVML = true
	}
	res.Driver, res.Skipped, res.Notes = rep.Driver, rep.Skipped, rep.Notes
	for _, g := range rep.GPUs {
		pg := ProbeGPU{Index: g.Index, UUID: g.UUID, Model: g.Model, Counters: []ProbeCounter{}, Unsupported: []ProbeGap{}}
		if _, read := g.Value(CounterThrottle, ReasonSWPowerCap); read {
			pg.ClockEventMask = fmt.Sprintf("%#x", g.ClockEventMask)
		}
		for _, r := range g.Readings {
			pc := ProbeCounter{Series: r.Counter.Metric(), Value: r.Value, Source: r.Source}
			if r.Counter == CounterThrottle {
				pc.Reason = r.Reason.String()
			}
			pg.Counters = append(pg.Counters, pc)
		}
		for _, gp := range g.Gaps {
			pg.Unsupported = append(pg.Unsupported, ProbeGap{Series: gp.Counter.Metric(), Kind: gp.Kind.String(), Detail: gp.Detail})
		}
		res.GPUs = append(res.GPUs, pg)
	}
	return res, nil
}

// WriteJSON writes r as indented JSON.
func (r ProbeResult) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes r for a terminal.
func (r ProbeResult) WriteText(w io.Writer) error {
	var buf bytes.Buffer
	r.writeText(&buf)
	// tabwriter pads empty last cells; trim that.
	for _, line := range strings.SplitAfter(buf.String(), "\n") {
		trimmed := strings.TrimRight(line, " \n")
		if strings.HasSuffix(line, "\n") {
			trimmed += "\n"
		}
		if _, err := io.WriteString(w, trimmed); err != nil {
			return err
		}
	}
	return nil
}

func (r ProbeResult) writeText(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	defer tw.Flush()
	if !r.NVML {
		fmt.Fprintf(tw, "no NVML: %s\n", r.Reason)
		fmt.Fprintln(tw, `GPU counters: none. whyslow runs without them; verdicts list "no GPU counters" as a data gap.`)
		return
	}
	driver := r.Driver
	if driver == "" {
		driver = "unknown"
	}
	fmt.Fprintf(tw, "NVML: driver %s, %d GPU(s) read\n", driver, len(r.GPUs))
	if r.Reason != "" {
		fmt.Fprintf(tw, "no GPU counters: %s\n", r.Reason)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(tw, "note: %s\n", n)
	}
	for _, s := range r.Skipped {
		fmt.Fprintf(tw, "skipped: GPU %d %s: %s\n", s.Index, s.UUID, s.Why)
	}
	for _, g := range r.GPUs {
		fmt.Fprintf(tw, "\nGPU %d  %s  %s\n", g.Index, g.Model, g.UUID)
		for _, c := range g.Counters {
			name := c.Series
			if c.Reason != "" {
				name += `{reason="` + c.Reason + `"}`
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", name, formatValue(c.Value), c.Source)
		}
		if g.ClockEventMask != "" {
			fmt.Fprintf(tw, "  clock event reason mask\t%s\t\n", g.ClockEventMask)
		}
		if len(g.Unsupported) == 0 {
			fmt.Fprintln(tw, "  unsupported: none")
			continue
		}
		fmt.Fprintln(tw, "  unsupported:")
		for _, u := range g.Unsupported {
			fmt.Fprintf(tw, "    %s\t%s\t%s\n", u.Series, u.Kind, u.Detail)
		}
	}
}

// formatValue prints whole numbers in full and others to 4 significant
// digits.
func formatValue(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}
