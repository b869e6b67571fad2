package bundle

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
)

// batchSize is how many samples go into one appender commit.
const batchSize = 20_000

// LoadStats reports what a metrics load appended.
type LoadStats struct {
	// Format is the exposition format that was read.
	Format Format
	// Samples and Series count what was appended.
	Samples, Series int
	// MinTime and MaxTime bound the appended samples' timestamps.
	MinTime, MaxTime time.Time
	// Skipped counts the samples left out for lying outside every
	// LoadOptions.Keep window.
	Skipped int
	// FileMinTime and FileMaxTime bound the timestamps of every sample
	// read, kept or skipped: the span of the file.
	FileMinTime, FileMaxTime time.Time
}

// LoadOptions says how metrics are read. The zero value reads everything
// and detects the format.
type LoadOptions struct {
	// Keep lists the time ranges whose samples are loaded; samples outside
	// all of them are dropped before they reach the store (counted in
	// LoadStats.Skipped). Empty keeps everything. A dropped line is only
	// checked as far as its timestamp (see sampleTime): lines the quick
	// check cannot read go through the full parser and its errors.
	Keep []Window
	// Format is the exposition format; FormatAuto detects it.
	Format Format
	// MaxSeries bounds the distinct series loaded (kept samples' series):
	// 0 is DefaultMaxSeries, a negative value no bound. Past it the load
	// fails with a *SeriesLimitError.
	MaxSeries int
}

// DefaultMaxSeries is the series a bundle may load by default. A series
// holds about 1 KiB of heap before its samples (TestSeriesLimitMemory) and
// about 4 KiB with hours of them (the million-series bundle of issue 26
// took 4.1 GB), so 200k series stay under about 800 MiB. A vLLM replica
// exports about 360 series (testdata/incidents): 200k is over 500 replicas.
const DefaultMaxSeries = 200_000

// SeriesLimitError is a bundle with more series than LoadOptions.MaxSeries.
type SeriesLimitError struct {
	// Pos is where the first series past the limit starts.
	Pos error
	// Limit is the bound that was reached.
	Limit int
}

func (e *SeriesLimitError) Error() string {
	return fmt.Sprintf("%v: more than %d series, the most a bundle loads", e.Pos, e.Limit)
}

// ReadMetrics parses an exposition (format detected by DetectFormat) in
// which every sample carries a timestamp, and appends its samples to app in
// batches. name prefixes errors ("metrics.om:12:1: ..."). Samples may come in
// any order across series (series by series, as bundles are written, or time
// slice by time slice); the embedded store accepts both. On error, the
// samples of the failing batch are rolled back; earlier batches stay.
func ReadMetrics(ctx context.Context, name string, data []byte, app storage.Appendable) (LoadStats, error) {
	return ReadMetricsFrom(ctx, name, bytes.NewReader(data), app, LoadOptions{Format: DetectFormat(data)})
}

// ReadMetricsFrom is ReadMetrics reading r as a stream, a block of lines at
// a time (NewStreamParser): memory grows with the series and the kept
// samples, not with the input. o.Keep drops the samples outside its
// windows before they are parsed.
func ReadMetricsFrom(ctx context.Context, name string, r io.Reader, app storage.Appendable, o LoadOptions) (st LoadStats, err error) {
	if rs, ok := r.(io.ReadSeeker); ok {
		r = ctxReadSeeker{ctx, rs}
	} else {
		r = ctxReader{ctx, r}
	}
	p, err := NewStreamParser(name, r, o)
	if err != nil {
		return LoadStats{}, err
	}
	keep := spans(o.Keep)
	maxSeries := o.MaxSeries
	if maxSeries == 0 {
		maxSeries = DefaultMaxSeries
	}
	st = LoadStats{Format: p.Format()}
	minT, maxT := int64(math.MaxInt64), int64(math.MinInt64)
	skipMin, skipMax := int64(math.MaxInt64), int64(math.MinInt64)
	defer func() {
		n, lo, hi := p.Skipped()
		st.Skipped += n
		skipMin, skipMax = min(skipMin, lo), max(skipMax, hi)
		if st.Samples > 0 {
			st.MinTime, st.MaxTime = time.UnixMilli(minT).UTC(), time.UnixMilli(maxT).UTC()
		}
		if lo, hi := min(skipMin, minT), max(skipMax, maxT); lo <= hi {
			st.FileMinTime, st.FileMaxTime = time.UnixMilli(lo).UTC(), time.UnixMilli(hi).UTC()
		}
	}()
	type entry struct {
		ref  storage.SeriesRef
		lset labels.Labels
	}
	cache := make(map[string]*entry, 1024)

	a := app.Appender(ctx)
	pending := 0
	commit := func() error {
		if err := a.Commit(); err != nil {
			return fmt.Errorf("%s: commit samples: %w", name, err)
		}
		a = app.Appender(ctx)
		pending = 0
		return nil
	}
	fail := func(err error) (LoadStats, error) {
		_ = a.Rollback()
		return st, err
	}

	var lset labels.Labels
	for {
		ok, err := p.Next()
		if err != nil {
			return fail(err)
		}
		if !ok {
			break
		}
		t, hasT := p.Timestamp()
		if !hasT {
			return fail(p.Errorf("sample %s has no timestamp (every sample in a bundle needs one)", p.Series()))
		}
		if !keeps(keep, t) {
			// A line the quick check left to the parser (sampleTime).
			st.Skipped++
			skipMin, skipMax = min(skipMin, t), max(skipMax, t)
			continue
		}
		e := cache[string(p.Series())]
		if e == nil {
			if maxSeries > 0 && len(cache) >= maxSeries {
				// Refused before the store holds more: memory follows the
				// series, and a small gzip can hold a million of them.
				return fail(&SeriesLimitError{Pos: p.Errorf("series %s", truncateSeries(p.Series())), Limit: maxSeries})
			}
			p.Labels(&lset)
			if n, dup := lset.HasDuplicateLabelNames(); dup {
				return fail(p.Errorf("series %s has label %q twice", p.Series(), n))
			}
			e = &entry{lset: dropEmpty(lset)}
			cache[string(p.Series())] = e
		}
		ref, err := a.Append(e.ref, e.lset, t, p.Value())
		if err != nil {
			return fail(p.Errorf("append %s at %s: %v", p.Series(), time.UnixMilli(t).UTC().Format(time.RFC3339Nano), err))
		}
		e.ref = ref
		st.Samples++
		minT, maxT = min(minT, t), max(maxT, t)
		if pending++; pending >= batchSize {
			if err := ctx.Err(); err != nil {
				return fail(fmt.Errorf("%s: %w", name, err))
			}
			if err := commit(); err != nil {
				return st, err
			}
		}
	}
	if err := commit(); err != nil {
		return st, err
	}
	_ = a.Rollback() // release the unused appender opened by commit
	st.Series = len(cache)
	return st, nil
}

// truncateSeries shortens a series' text for an error.
func truncateSeries(s []byte) string {
	if len(s) > 200 {
		return string(s[:200]) + "…"
	}
	return string(s)
}

// ctxReader stops reading once ctx is done: most lines of a bundle may be
// skipped without reaching the batch commits that check ctx.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// ctxReadSeeker is ctxReader for an io.ReadSeeker (format detection reads
// the end first).
type ctxReadSeeker struct {
	ctx context.Context
	io.ReadSeeker
}

func (c ctxReadSeeker) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.ReadSeeker.Read(p)
}

// dropEmpty removes labels with empty values, which Prometheus treats as
// absent.
func dropEmpty(ls labels.Labels) labels.Labels {
	empty := false
	ls.Range(func(l labels.Label) {
		if l.Value == "" {
			empty = true
		}
	})
	if !empty {
		return ls
	}
	b := labels.NewBuilder(ls)
	ls.Range(func(l labels.Label) {
		if l.Value == "" {
			b.Del(l.Name)
		}
	})
	return b.Labels()
}
