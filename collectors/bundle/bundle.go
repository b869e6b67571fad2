// Package bundle reads incident bundles: a directory holding metrics.om (or
// metrics.om.gz), an optional traces.jsonl (or traces.jsonl.gz) and an
// optional incident.yaml (see DESIGN.md). Files it does not know are ignored.
//
// metrics.om is parsed with Prometheus's own model/textparse. The format is
// detected from the content (DetectFormat): OpenMetrics when the text ends
// with "# EOF" (timestamps in seconds), classic Prometheus text otherwise
// (timestamps in milliseconds). Every sample must carry a timestamp. Errors
// name the place: "metrics.om:12:7: message", "incident.yaml:3:9: message".
package bundle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/prometheus/prometheus/storage"

	"github.com/whyslow/whyslow/internal/decompress"
)

// File names inside a bundle.
const (
	MetricsFile   = "metrics.om"
	MetricsGzFile = "metrics.om.gz"
	TracesFile    = "traces.jsonl"
	TracesGzFile  = "traces.jsonl.gz"
	IncidentFile  = "incident.yaml"
)

// maxMetricsSize bounds how much (uncompressed) metrics text is read.
const maxMetricsSize = 4 << 30

// Bundle is an incident bundle on disk.
type Bundle struct {
	// Dir is the bundle directory.
	Dir string
	// MetricsPath is the metrics file (metrics.om or metrics.om.gz).
	MetricsPath string
	// TracesPath is traces.jsonl or traces.jsonl.gz, or empty when the
	// bundle has neither.
	TracesPath string
	// Incident is the parsed incident.yaml, or nil when the bundle has none.
	Incident *Incident
}

// Load opens the bundle in dir: it finds the metrics file, notes the traces
// file and parses incident.yaml. Metrics are read by LoadMetrics.
func Load(dir string) (*Bundle, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("bundle %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("bundle %s: not a directory", dir)
	}
	b := &Bundle{Dir: dir}

	plain, gz := filepath.Join(dir, MetricsFile), filepath.Join(dir, MetricsGzFile)
	hasPlain, hasGz := isFile(plain), isFile(gz)
	switch {
	case hasPlain && hasGz:
		return nil, fmt.Errorf("bundle %s: both %s and %s present; keep one", dir, MetricsFile, MetricsGzFile)
	case hasPlain:
		b.MetricsPath = plain
	case hasGz:
		b.MetricsPath = gz
	default:
		return nil, fmt.Errorf("bundle %s: no %s (or %s)", dir, MetricsFile, MetricsGzFile)
	}

	plain, gz = filepath.Join(dir, TracesFile), filepath.Join(dir, TracesGzFile)
	hasPlain, hasGz = isFile(plain), isFile(gz)
	switch {
	case hasPlain && hasGz:
		return nil, fmt.Errorf("bundle %s: both %s and %s present; keep one", dir, TracesFile, TracesGzFile)
	case hasPlain:
		b.TracesPath = plain
	case hasGz:
		b.TracesPath = gz
	}

	p := filepath.Join(dir, IncidentFile)
	data, err := os.ReadFile(p)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("bundle %s: %w", dir, err)
	default:
		inc, err := ParseIncident(p, data)
		if err != nil {
			return nil, err
		}
		b.Incident = inc
	}
	return b, nil
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// ReadMetricsFile returns the uncompressed metrics text of the bundle.
func (b *Bundle) ReadMetricsFile() ([]byte, error) {
	f, err := os.Open(b.MetricsPath)
	if err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	defer f.Close()
	var r io.Reader = f
	if filepath.Ext(b.MetricsPath) == ".gz" {
		// Bounded in size and in ratio (internal/decompress): a 1 MB gzip
		// of zeros must not become gigabytes.
		zr, err := decompress.NewGzip(f, decompress.Limits{MaxBytes: maxMetricsSize})
		if err != nil {
			return nil, fmt.Errorf("read %s: not valid gzip: %w", b.MetricsPath, err)
		}
		defer zr.Close()
		r = zr
	}
	var buf bytes.Buffer
	if fi, err := f.Stat(); err == nil && r == io.Reader(f) {
		buf.Grow(int(fi.Size()) + 1)
	}
	n, err := buf.ReadFrom(io.LimitReader(r, maxMetricsSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", b.MetricsPath, err)
	}
	if n > maxMetricsSize {
		return nil, fmt.Errorf("read %s: larger than %d bytes", b.MetricsPath, int64(maxMetricsSize))
	}
	return buf.Bytes(), nil
}

// LoadMetrics reads the bundle's metrics into app (the embedded store) and
// reports the samples, series and time range loaded. Errors name the file
// with line and column.
func (b *Bundle) LoadMetrics(ctx context.Context, app storage.Appendable) (LoadStats, error) {
	data, err := b.ReadMetricsFile()
	if err != nil {
		return LoadStats{}, err
	}
	name := filepath.Join(b.Dir, MetricsFile)
	if b.MetricsPath != "" {
		name = b.MetricsPath
	}
	st, err := ReadMetrics(ctx, name, data, app)
	if err != nil {
		return st, err
	}
	if st.Samples == 0 {
		return st, fmt.Errorf("%s: no samples", name)
	}
	return st, nil
}
