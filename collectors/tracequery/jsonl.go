package tracequery

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/whyslow/whyslow/collectors/otlp"
	"github.com/whyslow/whyslow/collectors/spanstore"
	"github.com/whyslow/whyslow/internal/decompress"
	"github.com/whyslow/whyslow/span"
)

// File is a bundle's traces.jsonl loaded into memory. It serves
// diagnose.Traces through the embedded store.
type File struct {
	*spanstore.Store
	// Spans is how many spans were loaded; Rejected how many were skipped
	// as invalid (zero ids, end before start), with the first reason.
	Spans    int
	Rejected int64
	Reason   string
}

// File bounds: bundles are small, but a bad one must not exhaust memory.
const (
	fileMaxSpans = 5_000_000
	fileMaxBytes = 2 << 30
)

// OpenJSONL loads a traces.jsonl file, or its gzip (a name ending in .gz,
// e.g. traces.jsonl.gz, as bundles keep it small).
func OpenJSONL(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if !strings.HasSuffix(path, ".gz") {
		return ReadJSONL(f, path)
	}
	// Bounded in size and in ratio (see internal/decompress): a small
	// gzip bomb must not inflate to gigabytes.
	zr, err := decompress.NewGzip(f, decompress.Limits{MaxBytes: fileMaxBytes})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	defer zr.Close()
	return ReadJSONL(zr, path)
}

// BundleTraces returns the traces file of a bundle directory:
// traces.jsonl, or traces.jsonl.gz, or "" when it has neither. Both present
// is an error.
func BundleTraces(dir string) (string, error) {
	plain, gz := filepath.Join(dir, "traces.jsonl"), filepath.Join(dir, "traces.jsonl.gz")
	hasPlain, hasGz := isFile(plain), isFile(gz)
	switch {
	case hasPlain && hasGz:
		return "", fmt.Errorf("bundle %s: both traces.jsonl and traces.jsonl.gz present; keep one", dir)
	case hasPlain:
		return plain, nil
	case hasGz:
		return gz, nil
	}
	return "", nil
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

var offsetRe = regexp.MustCompile(`at offset (\d+)`)

// ReadJSONL loads OTLP/JSON ExportTraceServiceRequest lines (hex ids; blank
// lines skipped). Errors name the file, line and, for JSON errors, column.
func ReadJSONL(r io.Reader, name string) (*File, error) {
	store, err := spanstore.New(spanstore.Options{MaxSpans: fileMaxSpans, MaxBytes: fileMaxBytes, MaxQuerySpans: fileMaxSpans})
	if err != nil {
		return nil, err
	}
	f := &File{Store: store}
	br := bufio.NewReaderSize(r, 1<<20)
	var spans []span.Span
	for line := 1; ; line++ {
		b, rerr := br.ReadBytes('\n')
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			return nil, fmt.Errorf("%s:%d: %w", name, line, rerr)
		}
		if t := bytes.TrimSpace(b); len(t) > 0 {
			req, err := otlp.DecodeJSON(t, otlp.IDHex)
			var fe *otlp.FieldError
			if errors.As(err, &fe) {
				return nil, fmt.Errorf("%s:%d: %w", name, line, err)
			}
			if err != nil {
				col := 1
				if m := offsetRe.FindStringSubmatch(err.Error()); m != nil {
					col, _ = strconv.Atoi(m[1])
					col = max(col, 1)
				}
				return nil, fmt.Errorf("%s:%d:%d: %w", name, line, col, err)
			}
			var rej otlp.Rejected
			spans, rej, err = otlp.Convert(spans[:0], req.ResourceSpans)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %w", name, line, err)
			}
			if rej.Spans > 0 && f.Rejected == 0 {
				f.Reason = fmt.Sprintf("%s:%d: %s", name, line, rej.Message)
			}
			f.Rejected += rej.Spans
			f.Spans += len(spans)
			store.Append(spans)
			clear(spans)
		}
		if rerr != nil {
			return f, nil
		}
	}
}
