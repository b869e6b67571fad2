package sim

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"
)

// Bundle is a recorded incident: metrics, the incident description and the
// injected truth.
type Bundle struct {
	Metrics  []byte // OpenMetrics text with timestamps, ending "# EOF\n"
	Incident Incident
	Truth    Truth
}

// Incident is incident.yaml (DESIGN.md bundle format).
type Incident struct {
	At        time.Time     // end of the incident window
	Window    time.Duration // incident window length
	Baseline  time.Duration // offset back from At to the baseline window's end
	Engine    string        // vllm, sglang or trtllm
	Selector  string        // PromQL label matchers without braces
	GPU       string        // GPU class, e.g. "H100"
	Scheduler Scheduler
	Notes     string
}

// Scheduler is the engine's scheduler configuration.
type Scheduler struct {
	ChunkedPrefill      bool `yaml:"chunked_prefill"`
	MaxNumBatchedTokens int  `yaml:"max_num_batched_tokens"`
	MaxNumSeqs          int  `yaml:"max_num_seqs"`
}

// Truth is truth.yaml: what was injected (plan/models.md).
type Truth struct {
	Scenario string
	Seed     int64
	Causes   []string // cause ids; empty for healthy; two for a compound, the larger magnitude first
	Onset    time.Time
	// Magnitude is the fault's magnitude in [0, 1] (a compound's larger
	// one; 0 for healthy), Magnitudes a compound's per cause, in Causes
	// order.
	Magnitude  float64
	Magnitudes []float64
	Band       string // subtle, moderate, severe, or none for healthy
	Params     map[string]any
	// Observed is what the model saw in the baseline and incident windows.
	Observed Observed
	// ITLAttribution splits the change of the step cost over its drivers.
	ITLAttribution ITLAttribution
}

// Band names the magnitude band of m: subtle below 1/3, moderate below 2/3,
// severe otherwise.
func Band(m float64) string {
	switch {
	case m < 1.0/3:
		return "subtle"
	case m < 2.0/3:
		return "moderate"
	}
	return "severe"
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
	Scenario       string          `yaml:"scenario"`
	Seed           int64           `yaml:"seed"`
	Causes         []string        `yaml:"causes"`
	Onset          string          `yaml:"onset"`
	Magnitude      float64         `yaml:"magnitude"`
	Magnitudes     []float64       `yaml:"magnitudes,omitempty"`
	Band           string          `yaml:"band,omitempty"`
	Params         map[string]any  `yaml:"params,omitempty"`
	Observed       *Observed       `yaml:"observed,omitempty"`
	ITLAttribution *ITLAttribution `yaml:"itl_attribution,omitempty"`
}

// MarshalYAML writes times as RFC 3339 and durations as Prometheus
// durations ("5m", "1h").
func (i Incident) MarshalYAML() (any, error) {
	return incidentYAML{At: i.At.UTC().Format(time.RFC3339), Window: model.Duration(i.Window).String(),
		Baseline: model.Duration(i.Baseline).String(), Engine: i.Engine, Selector: i.Selector, GPU: i.GPU,
		Scheduler: i.Scheduler, Notes: i.Notes}, nil
}

// UnmarshalYAML reads what MarshalYAML writes.
func (i *Incident) UnmarshalYAML(n *yaml.Node) error {
	var y incidentYAML
	if err := n.Decode(&y); err != nil {
		return err
	}
	at, err := time.Parse(time.RFC3339, y.At)
	if err != nil {
		return fmt.Errorf("line %d: at: %w", n.Line, err)
	}
	win, err := model.ParseDuration(y.Window)
	if err != nil {
		return fmt.Errorf("line %d: window: %w", n.Line, err)
	}
	base, err := model.ParseDuration(y.Baseline)
	if err != nil {
		return fmt.Errorf("line %d: baseline: %w", n.Line, err)
	}
	*i = Incident{At: at, Window: time.Duration(win), Baseline: time.Duration(base), Engine: y.Engine,
		Selector: y.Selector, GPU: y.GPU, Scheduler: y.Scheduler, Notes: y.Notes}
	return nil
}

// MarshalYAML writes the onset as RFC 3339 and causes as a list (never null).
func (t Truth) MarshalYAML() (any, error) {
	c := t.Causes
	if c == nil {
		c = []string{}
	}
	obs, attr := t.Observed, t.ITLAttribution
	return truthYAML{Scenario: t.Scenario, Seed: t.Seed, Causes: c, Onset: t.Onset.UTC().Format(time.RFC3339),
		Magnitude: t.Magnitude, Magnitudes: t.Magnitudes, Band: t.Band, Params: t.Params, Observed: &obs,
		ITLAttribution: &attr}, nil
}

// UnmarshalYAML reads what MarshalYAML writes.
func (t *Truth) UnmarshalYAML(n *yaml.Node) error {
	var y truthYAML
	if err := n.Decode(&y); err != nil {
		return err
	}
	on, err := time.Parse(time.RFC3339, y.Onset)
	if err != nil {
		return fmt.Errorf("line %d: onset: %w", n.Line, err)
	}
	*t = Truth{Scenario: y.Scenario, Seed: y.Seed, Causes: y.Causes, Onset: on, Magnitude: y.Magnitude,
		Magnitudes: y.Magnitudes, Band: y.Band, Params: y.Params}
	if y.Observed != nil {
		t.Observed = *y.Observed
	}
	if y.ITLAttribution != nil {
		t.ITLAttribution = *y.ITLAttribution
	}
	return nil
}

const (
	defaultWindow   = 5 * time.Minute
	defaultBaseline = time.Hour
	// trimMargin is kept before each window so that rate()/increase() over
	// a window-long range has samples at every point of the window.
	trimMargin = 5 * time.Minute
)

func (w *world) bundle() (*Bundle, error) {
	p := w.plan
	at := sinceStart(w.opt.Start, p.at)
	// The selector is what a user of that shape would scope by: TensorRT-LLM
	// 1.1 and older label every series model_name="undefined", so the
	// scrape job it is.
	sel := fmt.Sprintf("model_name=%q", p.cfg.model.name)
	if w.tele == PolicyTRTLLM && w.opt.Names == "unprefixed" {
		sel = `job="trtllm"`
	}
	inc := Incident{At: at, Window: defaultWindow, Baseline: defaultBaseline, Engine: w.tele.String(),
		Selector: sel, GPU: p.cfg.gpu.class, Scheduler: p.cfg.sched, Notes: p.notes}
	if p.cfg.policy != w.tele {
		inc.Notes += fmt.Sprintf("; scheduler policy %s (telemetry uses %s names)", p.cfg.policy, w.tele)
	} else if w.tele != PolicyVLLM {
		inc.Notes += fmt.Sprintf("; %s scheduler and telemetry", w.tele)
	}
	causes := p.causes
	params := map[string]any{}
	for k, v := range p.params {
		params[k] = v
	}
	params["names"] = w.opt.Names
	params["gpu_series"] = w.opt.GPUSeries
	params["policy"] = p.cfg.policy.String()
	params["telemetry"] = w.tele.String()
	if w.opt.DCGMLayout != "" {
		params["dcgm_layout"] = w.opt.DCGMLayout
	}
	if w.opt.DCGMCounters != "" {
		params["dcgm_counters"] = w.opt.DCGMCounters
	}
	obs := w.obs.observed()
	truth := Truth{Scenario: p.name, Seed: p.seed, Causes: causes, Onset: sinceStart(w.opt.Start, p.onset),
		Magnitude: p.magnitude, Magnitudes: p.magnitudes, Band: "none", Params: params, Observed: obs,
		ITLAttribution: attributeITL(&p.cfg, obs.Baseline, obs.Incident)}
	if len(causes) > 0 {
		truth.Band = Band(p.magnitude)
	}
	var keep func(ms int64) bool
	if w.opt.Trim {
		a := at.UnixMilli()
		lo1 := at.Add(-defaultWindow - trimMargin).UnixMilli()
		b := at.Add(-defaultBaseline).UnixMilli()
		lo2 := at.Add(-defaultBaseline - defaultWindow - trimMargin).UnixMilli()
		keep = func(ms int64) bool { return (ms >= lo1 && ms <= a) || (ms >= lo2 && ms <= b) }
	}
	var buf bytes.Buffer
	buf.Grow(w.reg.sizeOpenMetrics(keep))
	if err := w.reg.writeOpenMetrics(&buf, keep); err != nil {
		return nil, fmt.Errorf("write metrics: %w", err)
	}
	return &Bundle{Metrics: buf.Bytes(), Incident: inc, Truth: truth}, nil
}

// WriteDir writes metrics.om (or metrics.om.gz), incident.yaml and
// truth.yaml into dir, creating it.
func (b *Bundle) WriteDir(dir string, gz bool) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write bundle: %w", err)
	}
	name, data := "metrics.om", b.Metrics
	if gz {
		var buf bytes.Buffer
		zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		if err != nil {
			return fmt.Errorf("write bundle: %w", err)
		}
		zw.ModTime = time.Unix(0, 0)
		if _, err := zw.Write(b.Metrics); err != nil {
			return fmt.Errorf("write bundle: gzip: %w", err)
		}
		if err := zw.Close(); err != nil {
			return fmt.Errorf("write bundle: gzip: %w", err)
		}
		name, data = "metrics.om.gz", buf.Bytes()
	}
	// Remove the other variant so a directory never holds both.
	other := "metrics.om.gz"
	if gz {
		other = "metrics.om"
	}
	if err := os.Remove(filepath.Join(dir, other)); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("write bundle: %w", err)
	}
	inc, err := yaml.Marshal(b.Incident)
	if err != nil {
		return fmt.Errorf("write bundle: incident.yaml: %w", err)
	}
	tr, err := yaml.Marshal(b.Truth)
	if err != nil {
		return fmt.Errorf("write bundle: truth.yaml: %w", err)
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
