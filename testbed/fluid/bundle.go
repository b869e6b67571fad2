package fluid

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"
)

// Bundle is one recorded incident: the exposition, incident.yaml and the
// truth.
type Bundle struct {
	// Metrics is OpenMetrics text: every sample timestamped (milliseconds
	// precision, in seconds as OpenMetrics counts them), ending "# EOF\n".
	Metrics []byte
	// Incident is what incident.yaml says.
	Incident Incident
	// Truth is what was injected and what the model measured.
	Truth Truth

	in *internals // for this package's tests
}

// Incident is incident.yaml.
type Incident struct {
	// At is the end of the incident window.
	At time.Time
	// Window is the incident window's length (5m).
	Window time.Duration
	// Baseline is the offset back from At to the baseline window (1h).
	Baseline time.Duration
	// Engine is "vllm".
	Engine string
	// Selector is the scope's PromQL matchers, model_name="...".
	Selector string
	// GPU is the GPU class (H100, A100, H200).
	GPU string
	// Scheduler holds the engine's scheduler settings.
	Scheduler Scheduler
	// Notes is free text.
	Notes string
}

// Scheduler is incident.yaml's scheduler block.
type Scheduler struct {
	// ChunkedPrefill says whether chunked prefill is on (always, in V1).
	ChunkedPrefill bool `yaml:"chunked_prefill"`
	// MaxNumBatchedTokens is the per-step token budget.
	MaxNumBatchedTokens int `yaml:"max_num_batched_tokens"`
	// MaxNumSeqs is the most sequences running at once.
	MaxNumSeqs int `yaml:"max_num_seqs"`
}

// Truth is truth.yaml.
type Truth struct {
	// Scenario is the catalogue name (or "a+b").
	Scenario string
	// Seed is Options.Seed.
	Seed int64
	// Causes are the cause ids, empty for a healthy instance, the larger
	// symptom first for a compound.
	Causes []string
	// Onset is when the faults start ramping in.
	Onset time.Time
	// Magnitude is the drawn magnitude in [0, 1] (0 for hard negatives).
	Magnitude float64
	// Band is subtle, moderate, severe, or none for hard negatives.
	Band string
	// Params are the drawn parameters, free-form.
	Params map[string]any
	// Observed are the model's own means over the two windows.
	Observed Observed
	// ITLAttribution splits the step cost's change over its drivers.
	ITLAttribution ITLAttribution
}

type incidentYAML struct {
	At        string    `yaml:"at"`
	Window    string    `yaml:"window"`
	Baseline  string    `yaml:"baseline"`
	Engine    string    `yaml:"engine"`
	Selector  string    `yaml:"selector"`
	GPU       string    `yaml:"gpu,omitempty"`
	Scheduler Scheduler `yaml:"scheduler"`
	Notes     string    `yaml:"notes,omitempty"`
}

type truthYAML struct {
	Scenario       string         `yaml:"scenario"`
	Seed           int64          `yaml:"seed"`
	Causes         []string       `yaml:"causes"`
	Onset          string         `yaml:"onset"`
	Magnitude      float64        `yaml:"magnitude"`
	Band           string         `yaml:"band"`
	Params         map[string]any `yaml:"params,omitempty"`
	Observed       observedYAML   `yaml:"observed"`
	ITLAttribution ITLAttribution `yaml:"itl_attribution"`
}

type observedYAML struct {
	Baseline Window       `yaml:"baseline"`
	Incident Window       `yaml:"incident"`
	Recent   recentWindow `yaml:"recent"`
}

// recentWindow is what the recent window has: the two means that say
// whether a slowdown still holds.
type recentWindow struct {
	TTFTMean float64 `yaml:"ttft_mean"`
	ITLMean  float64 `yaml:"itl_mean"`
}

// duration writes a duration the way incident.yaml spells it (5m, 1h).
func duration(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return d.String()
}

// IncidentYAML renders incident.yaml.
func (b *Bundle) IncidentYAML() ([]byte, error) {
	i := b.Incident
	return marshal(incidentYAML{
		At: i.At.UTC().Format(time.RFC3339), Window: duration(i.Window), Baseline: duration(i.Baseline),
		Engine: i.Engine, Selector: i.Selector, GPU: i.GPU, Scheduler: i.Scheduler, Notes: i.Notes,
	})
}

// TruthYAML renders truth.yaml.
func (b *Bundle) TruthYAML() ([]byte, error) {
	t := b.Truth
	causes := t.Causes
	if causes == nil {
		causes = []string{}
	}
	return marshal(truthYAML{
		Scenario: t.Scenario, Seed: t.Seed, Causes: causes, Onset: t.Onset.UTC().Format(time.RFC3339),
		Magnitude: t.Magnitude, Band: t.Band, Params: t.Params,
		Observed: observedYAML{Baseline: roundWindow(t.Observed.Baseline), Incident: roundWindow(t.Observed.Incident),
			Recent: recentWindow{TTFTMean: roundWindow(t.Observed.Recent).TTFTMean, ITLMean: roundWindow(t.Observed.Recent).ITLMean}},
		ITLAttribution: roundAttribution(t.ITLAttribution),
	})
}

func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(4)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// sig keeps six significant digits, for readable YAML.
func sig(x float64) float64 {
	v, err := strconv.ParseFloat(strconv.FormatFloat(x, 'g', 6, 64), 64)
	if err != nil {
		return x
	}
	return v
}

func roundWindow(w Window) Window {
	return Window{sig(w.TTFTMean), sig(w.QueueMean), sig(w.PrefillMean), sig(w.OutsideMean), sig(w.ITLMean),
		sig(w.E2EMean), sig(w.ArrivalRate), sig(w.RunningMean), sig(w.KVTokensPerRunning),
		sig(w.PrefillTokensPerStep), sig(w.StepTimeMean), sig(w.ClockFactor), sig(w.ErrorRate), sig(w.PreemptionRate)}
}

func roundAttribution(a ITLAttribution) ITLAttribution {
	return ITLAttribution{sig(a.Batch), sig(a.Context), sig(a.Prefill), sig(a.Clock), sig(a.Total)}
}

// WriteDir writes the bundle into dir (created if missing): metrics.om (or
// metrics.om.gz), incident.yaml and truth.yaml.
func (b *Bundle) WriteDir(dir string, gz bool) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write bundle: %w", err)
	}
	inc, err := b.IncidentYAML()
	if err != nil {
		return fmt.Errorf("write bundle: incident.yaml: %w", err)
	}
	tr, err := b.TruthYAML()
	if err != nil {
		return fmt.Errorf("write bundle: truth.yaml: %w", err)
	}
	name, data := "metrics.om", b.Metrics
	if gz {
		var buf bytes.Buffer
		w, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
		if _, err := w.Write(b.Metrics); err != nil {
			return fmt.Errorf("write bundle: compress: %w", err)
		}
		if err := w.Close(); err != nil {
			return fmt.Errorf("write bundle: compress: %w", err)
		}
		name, data = "metrics.om.gz", buf.Bytes()
	}
	// the other spelling from an earlier write would shadow this one
	other := "metrics.om.gz"
	if gz {
		other = "metrics.om"
	}
	if err := os.Remove(filepath.Join(dir, other)); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("write bundle: %w", err)
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{name, data}, {"incident.yaml", inc}, {"truth.yaml", tr}} {
		if err := os.WriteFile(filepath.Join(dir, f.name), f.data, 0o644); err != nil {
			return fmt.Errorf("write bundle: %w", err)
		}
	}
	return nil
}
