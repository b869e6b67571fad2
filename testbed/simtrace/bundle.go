package simtrace

import (
	"compress/gzip"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/whyslow/whyslow/collectors/otlp"
	"github.com/whyslow/whyslow/span"
	"github.com/whyslow/whyslow/testbed/sim"
)

// Window is a time range [Start, End) of request arrivals.
type Window struct{ Start, End time.Time }

// BundleWindows returns the incident and baseline windows of a recorded
// bundle: the spans a triage of it reads.
func BundleWindows(inc sim.Incident) []Window {
	return []Window{
		{inc.At.Add(-inc.Baseline - inc.Window), inc.At.Add(-inc.Baseline)},
		{inc.At.Add(-inc.Window), inc.At},
	}
}

// Sample keeps the records that were in flight during one of the windows
// (arrived before its end, finished after its start: what the window's
// metrics and a trace search over it see), at most perWindow of each (0:
// all), chosen by a hash of the request id so the choice is stable and
// unbiased in time. The result is sorted by arrival.
func Sample(recs []sim.RequestRecord, windows []Window, perWindow int) []sim.RequestRecord {
	var out []sim.RequestRecord
	seen := map[string]bool{}
	for _, w := range windows {
		var in []sim.RequestRecord
		for _, r := range recs {
			if r.Arrival.Before(w.End) && !r.Finished.Before(w.Start) && !seen[r.ID] {
				in = append(in, r)
			}
		}
		if perWindow > 0 && len(in) > perWindow {
			// Keep the perWindow records with the smallest id hashes.
			slices.SortFunc(in, func(a, b sim.RequestRecord) int {
				ha, hb := idHash(a.ID), idHash(b.ID)
				switch {
				case ha < hb:
					return -1
				case ha > hb:
					return 1
				}
				return strings.Compare(a.ID, b.ID)
			})
			in = in[:perWindow]
		}
		for _, r := range in {
			seen[r.ID] = true
		}
		out = append(out, in...)
	}
	slices.SortStableFunc(out, func(a, b sim.RequestRecord) int { return a.Arrival.Compare(b.Arrival) })
	return out
}

func idHash(id string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	return h.Sum64()
}

// Spans returns the batch's spans in triage's form, as a trace source
// would deliver them.
func (b *Batch) Spans() ([]span.Span, error) {
	spans, rej, err := otlp.Convert(nil, b.Request().ResourceSpans)
	if err != nil {
		return nil, err
	}
	if rej.Spans > 0 {
		return nil, fmt.Errorf("simtrace: %d spans rejected: %s", rej.Spans, rej.Message)
	}
	return spans, nil
}

// BundlePerWindow is how many requests per window the committed bundles
// under testdata/incidents keep in their traces (testbed/sim/gen).
const BundlePerWindow = 600

// WriteBundleTraces writes the traces of a recorded bundle into dir: the
// requests of its incident and baseline windows (Sample, at most perWindow
// of each; 0: all), as an llm-d gateway in front of the engine traces them,
// with ids derived from seed. It returns the file written and how many
// requests it holds.
func WriteBundleTraces(dir string, b *sim.Bundle, recs []sim.RequestRecord, seed int64, perWindow int, gz bool) (string, int, error) {
	if perWindow < 0 {
		return "", 0, fmt.Errorf("write traces: %d requests per window: want 0 or more", perWindow)
	}
	kept := Sample(recs, BundleWindows(b.Incident), perWindow)
	batch := New(Options{Seed: seed, Gateway: true})
	for _, r := range kept {
		batch.Add(r)
	}
	path, err := batch.WriteBundleFile(dir, gz)
	if err != nil {
		return "", 0, err
	}
	return path, len(kept), nil
}

// TracesFile and TracesGzFile are the bundle's trace file names.
const (
	TracesFile   = "traces.jsonl"
	TracesGzFile = "traces.jsonl.gz"
)

// WriteBundleFile writes the spans into a bundle directory as traces.jsonl,
// or gzipped as traces.jsonl.gz, and returns the path. The other form is
// removed so that the bundle holds one.
func (b *Batch) WriteBundleFile(dir string, gz bool) (string, error) {
	name, other := TracesFile, TracesGzFile
	if gz {
		name, other = other, name
	}
	path := filepath.Join(dir, name)
	f, err := os.Create(path)
	if err != nil {
		return "", fmt.Errorf("write traces: %w", err)
	}
	if gz {
		zw, _ := gzip.NewWriterLevel(f, gzip.BestCompression)
		err = b.WriteJSONL(zw, 0)
		if cerr := zw.Close(); err == nil {
			err = cerr
		}
	} else {
		err = b.WriteJSONL(f, 0)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("write traces %s: %w", path, err)
	}
	if err := os.Remove(filepath.Join(dir, other)); err != nil && !os.IsNotExist(err) {
		return "", fmt.Errorf("write traces: %w", err)
	}
	return path, nil
}
