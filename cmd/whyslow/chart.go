package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/whyslow/whyslow/notifiers/chart"
	"github.com/whyslow/whyslow/query"
	"github.com/whyslow/whyslow/rulesets"
	"github.com/whyslow/whyslow/verdict"
)

// writeChart renders the chart of v (TTFT p95, ITL/TPOT p95, KV-cache usage
// and queue depth over the incident and baseline windows) from m and writes
// it as PNG to path, atomically: `whyslow why --chart FILE`. m must still be
// open (for a bundle, before the embedded store is closed).
func writeChart(ctx context.Context, m query.Metrics, v *verdict.Verdict, path string, maps *rulesets.Maps) error {
	d, err := chart.ForVerdict(ctx, m, v, chart.Options{Maps: maps})
	if err != nil {
		return err
	}
	png, err := chart.PNG(d)
	if err != nil {
		return err
	}
	return writeAtomic("chart", path, ".chart-*.png", png)
}

// outputMode is the mode of the files whyslow writes for people to open
// and share (pages, charts): what a shell redirect makes under umask 022.
const outputMode = 0o644

// writeAtomic writes b (a chart, a page: what) to path through a temporary
// file in its directory (named by pattern), so a reader never sees half a
// file. The file gets outputMode, not CreateTemp's private 0600.
func writeAtomic(what, path, pattern string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), pattern)
	if err != nil {
		return fmt.Errorf("write %s %s: %w", what, path, osCause(err))
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(outputMode); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s %s: %w", what, path, osCause(err))
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s %s: %w", what, path, osCause(err))
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s %s: %w", what, path, osCause(err))
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s %s: %w", what, path, osCause(err))
	}
	return nil
}

// osCause drops the file name from an os error (*os.PathError,
// *os.LinkError): files are written through a temporary file whose name
// means nothing to the user, so errors name the requested path instead.
func osCause(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}
