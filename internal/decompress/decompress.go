// Package decompress reads gzip with a bound on what it may expand to, so
// that a small file or request cannot make whyslow hold gigabytes (a gzip
// bomb: 1 MiB of gzip can hold 1 GiB of zeros).
//
// Two bounds apply to every gzip stream whyslow reads (bundles'
// metrics.om.gz and traces.jsonl.gz, OTLP/HTTP request bodies, gzip scrape
// responses):
//
//   - size: at most Limits.MaxBytes decompressed bytes (each caller's own
//     limit: 4 GiB for bundle metrics, 2 GiB for bundle traces, the request
//     size limit for OTLP, the body limit for scrapes);
//   - ratio: at most MaxRatio (default 100) decompressed bytes per
//     compressed byte read, after the first FreeBytes (1 MiB), which are
//     always allowed. Real data stays far below: OpenMetrics text compresses
//     about 40×, OTLP/JSON about 12×, protobuf about 5×; gzip's own ceiling
//     is about 1030×.
//
// Passing either is an error that wraps ErrTooLarge.
package decompress

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
)

// DefaultMaxRatio is the default bound on decompressed/compressed bytes.
const DefaultMaxRatio = 100

// FreeBytes are decompressed bytes allowed whatever the ratio, so that small
// and very repetitive inputs still read.
const FreeBytes = 1 << 20

// ErrTooLarge is wrapped by every bound error.
var ErrTooLarge = errors.New("decompressed data too large")

// Limits bound one stream. Zero values get defaults: no size bound (the
// ratio still applies) and DefaultMaxRatio.
type Limits struct {
	MaxBytes int64
	MaxRatio int64
}

// LimitError says which bound a stream passed.
type LimitError struct {
	// Ratio is set when the ratio bound was passed, else the size bound.
	Ratio bool
	Limit int64
}

// Error implements error.
func (e *LimitError) Error() string {
	if e.Ratio {
		return fmt.Sprintf("gzip data expands more than %d× its compressed size (a gzip bomb?)", e.Limit)
	}
	return fmt.Sprintf("gzip data expands to more than %d bytes", e.Limit)
}

// Is makes errors.Is(err, ErrTooLarge) true.
func (e *LimitError) Is(target error) bool { return target == ErrTooLarge }

// Reader is a bounded gzip reader.
type Reader struct {
	zr  *gzip.Reader
	in  counter
	l   Limits
	out int64
	err error
}

// NewGzip starts reading gzip from r within l.
func NewGzip(r io.Reader, l Limits) (*Reader, error) {
	z := &Reader{}
	if err := z.Reset(r, l); err != nil {
		return nil, err
	}
	return z, nil
}

// Reset reuses z for a new stream (as gzip.Reader.Reset).
func (z *Reader) Reset(r io.Reader, l Limits) error {
	if l.MaxRatio <= 0 {
		l.MaxRatio = DefaultMaxRatio
	}
	z.in = counter{r: r}
	z.l, z.out, z.err = l, 0, nil
	if z.zr == nil {
		zr, err := gzip.NewReader(&z.in)
		if err != nil {
			return err
		}
		z.zr = zr
		return nil
	}
	return z.zr.Reset(&z.in)
}

// Read implements io.Reader.
func (z *Reader) Read(p []byte) (int, error) {
	if z.err != nil {
		return 0, z.err
	}
	n, err := z.zr.Read(p)
	z.out += int64(n)
	switch {
	case z.l.MaxBytes > 0 && z.out > z.l.MaxBytes:
		z.err = &LimitError{Limit: z.l.MaxBytes}
	case z.out > FreeBytes && z.out > z.l.MaxRatio*z.in.n:
		z.err = &LimitError{Ratio: true, Limit: z.l.MaxRatio}
	}
	if z.err != nil {
		return n, z.err
	}
	return n, err
}

// Close closes the gzip stream (not the underlying reader).
func (z *Reader) Close() error { return z.zr.Close() }

// counter counts the compressed bytes read.
type counter struct {
	r io.Reader
	n int64
}

func (c *counter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
