package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/whyslow/whyslow/daemon/web"
	"github.com/whyslow/whyslow/query"
	"github.com/whyslow/whyslow/rulesets"
	"github.com/whyslow/whyslow/verdict"
)

// htmlFile is `whyslow why --html FILE`: the verdict page the daemon serves
// at /verdict, with its curves, as one self-contained file (no script,
// nothing fetched) for an incident review or a ticket.
type htmlFile struct{ path string }

// String returns the file's path.
func (h *htmlFile) String() string { return h.path }

// Set takes the path, failing before any query when its directory does not
// exist.
func (h *htmlFile) Set(path string) error {
	if dir := filepath.Dir(path); !isDir(dir) {
		return fmt.Errorf("directory %s does not exist", dir)
	}
	h.path = path
	return nil
}

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// write renders v, with its curves from m (nil: none, as for --server)
// over the maps' series, to the file, atomically; nothing without --html.
func (h *htmlFile) write(ctx context.Context, m query.Metrics, v *verdict.Verdict, maps *rulesets.Maps) error {
	if h.path == "" {
		return nil
	}
	section := web.Section(ctx, m, v, time.Time{}, maps)
	if m == nil {
		section.ChartNote = "No curves: --server answers with the verdict, not the metrics behind it; the daemon's /verdict page has them."
	}
	var b bytes.Buffer
	if err := web.Render(&b, web.VerdictPage{Site: web.Site{Standalone: true, Now: time.Now()}, Verdict: section}); err != nil {
		return err
	}
	return writeAtomic("page", h.path, ".verdict-*.html", b.Bytes())
}
