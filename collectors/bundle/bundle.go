// Package bundle reads incident bundles: a directory holding metrics.om (or
// metrics.om.gz), an optional traces.jsonl (or traces.jsonl.gz) and an
// optional incident.yaml (see DESIGN.md). Files it does not know are ignored.
//
// metrics.om is parsed with Prometheus's own model/textparse. The format is
// detected from the content (DetectFormat): OpenMetrics when the text ends
// with "# EOF" (timestamps in seconds), classic Prometheus text otherwise
// (timestamps in milliseconds). Every sample must carry a timestamp. Errors
// name the place: "metrics.om:12:7: message", "incident.yaml:3:9: message".
//
// LoadMetrics reads metrics.om as a stream, a block of lines at a time
// (NewStreamParser), and can leave out the samples outside the windows a
// triage reads (LoadOptions.Keep) before they are parsed, so memory grows
// with the series and the kept samples, not with the file. Only the first
// line of each series goes through textparse: later lines of a series it
// has read are read from their end (blockReader.sampleLine).
package bundle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

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
	if err := insideBundle(dir); err != nil {
		return nil, err
	}

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

// insideBundle refuses a bundle whose files are symlinks that leave its
// directory: a bundle from a ticket or a colleague must not make why read
// (and quote, in a parse error) ~/.ssh/id_rsa or /etc/shadow. A link to
// another file of the bundle is fine.
func insideBundle(dir string) error {
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return fmt.Errorf("bundle %s: %w", dir, err)
	}
	for _, name := range []string{MetricsFile, MetricsGzFile, TracesFile, TracesGzFile, IncidentFile} {
		p := filepath.Join(dir, name)
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			continue
		}
		target, err := filepath.EvalSymlinks(p)
		if err != nil {
			return fmt.Errorf("bundle %s: %s is a symlink that does not resolve", dir, name)
		}
		if rel, err := filepath.Rel(root, target); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return fmt.Errorf("bundle %s: %s is a symlink to outside the bundle directory; copy the file into the bundle instead", dir, name)
		}
	}
	return nil
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// ReadMetricsFile returns the uncompressed metrics text of the bundle, all
// of it in memory. LoadMetrics reads the file as a stream instead.
func (b *Bundle) ReadMetricsFile() ([]byte, error) {
	r, closeFn, err := b.openMetrics()
	if err != nil {
		return nil, err
	}
	defer closeFn()
	var buf bytes.Buffer
	if f, ok := r.(*os.File); ok {
		if fi, err := f.Stat(); err == nil {
			buf.Grow(int(fi.Size()) + 1)
		}
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

// openMetrics opens the metrics file, decompressing metrics.om.gz as it is
// read.
func (b *Bundle) openMetrics() (io.Reader, func(), error) {
	f, err := os.Open(b.MetricsPath)
	if err != nil {
		return nil, nil, fmt.Errorf("read metrics: %w", err)
	}
	if filepath.Ext(b.MetricsPath) != ".gz" {
		return f, func() { f.Close() }, nil
	}
	// Bounded in size and in ratio (internal/decompress): a 1 MB gzip of
	// zeros must not become gigabytes.
	zr, err := decompress.NewGzip(f, decompress.Limits{MaxBytes: maxMetricsSize})
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("read %s: not valid gzip: %w", b.MetricsPath, err)
	}
	return zr, func() { zr.Close(); f.Close() }, nil
}

// LoadMetrics reads the bundle's metrics into app (the embedded store) and
// reports the samples, series and time range loaded. Errors name the file
// with line and column.
func (b *Bundle) LoadMetrics(ctx context.Context, app storage.Appendable) (LoadStats, error) {
	return b.LoadMetricsWith(ctx, app, LoadOptions{})
}

// LoadMetricsWith is LoadMetrics with options: o.Keep loads only the
// samples inside its windows. The file is read as a stream (gzip
// decompressed as it is read), so memory grows with what is kept, not with
// the file. For metrics.om.gz whose format is not given, the file is
// decompressed twice: once to find how it ends (DetectFormat), once to
// load it.
func (b *Bundle) LoadMetricsWith(ctx context.Context, app storage.Appendable, o LoadOptions) (LoadStats, error) {
	name := filepath.Join(b.Dir, MetricsFile)
	if b.MetricsPath != "" {
		name = b.MetricsPath
	}
	if o.Format == FormatAuto && filepath.Ext(b.MetricsPath) == ".gz" {
		f, err := b.detectStream()
		if err != nil {
			return LoadStats{}, err
		}
		o.Format = f
	}
	r, closeFn, err := b.openMetrics()
	if err != nil {
		return LoadStats{}, err
	}
	defer closeFn()
	st, err := ReadMetricsFrom(ctx, name, r, app, o)
	if err != nil {
		return st, err
	}
	if st.Samples == 0 && st.Skipped == 0 {
		return st, fmt.Errorf("%s: no samples", name)
	}
	return st, nil
}

// detectStream reads the whole (decompressed) metrics stream once to tell
// its format as DetectFormat does from its start and its end.
func (b *Bundle) detectStream() (Format, error) {
	r, closeFn, err := b.openMetrics()
	if err != nil {
		return 0, err
	}
	defer closeFn()
	var (
		head  []byte // first bytes
		last  []byte // last bytes before the trailing blanks
		raw   []byte // last bytes read
		total int64
		at    int64 // offset just past last
		mid   bool  // saw "\n# EOF\n"
	)
	midEOF := []byte("\n# EOF\n")
	buf := make([]byte, 256<<10)
	for {
		n, err := r.Read(buf)
		c := buf[:n]
		if len(head) < len(eofMarker) {
			head = append(head, c[:min(len(c), len(eofMarker)-len(head))]...)
		}
		if t := bytes.TrimRight(c, " \t\r\n"); len(t) > 0 {
			joined := append(append([]byte(nil), raw...), t...)
			last = joined[max(0, len(joined)-8):]
			at = total + int64(len(t))
		}
		if !mid && len(c) > 0 {
			// "\n# EOF\n" anywhere (DetectFormat), across reads too.
			seam := append(append([]byte(nil), raw...), c[:min(len(c), 8)]...)
			mid = bytes.Contains(seam, midEOF) || bytes.Contains(c, midEOF)
		}
		joined := append(raw, c...)
		raw = append([]byte(nil), joined[max(0, len(joined)-8):]...)
		total += int64(n)
		if total > maxMetricsSize {
			return 0, fmt.Errorf("read %s: larger than %d bytes", b.MetricsPath, int64(maxMetricsSize))
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("read %s: %w", b.MetricsPath, err)
		}
	}
	if mid || bytes.Equal(head, eofMarker) {
		return FormatOpenMetrics, nil
	}
	if bytes.HasSuffix(last, eofMarker) {
		i := len(last) - len(eofMarker)
		if (i == 0 && at == int64(len(eofMarker))) || (i > 0 && last[i-1] == '\n') {
			return FormatOpenMetrics, nil
		}
	}
	return FormatPrometheusText, nil
}
