package bundle

import (
	"context"
	"fmt"
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
}

// ReadMetrics parses an exposition (format detected by DetectFormat) in
// which every sample carries a timestamp, and appends its samples to app in
// batches. name prefixes errors ("metrics.om:12:1: ..."). Samples may come in
// any order across series (series by series, as bundles are written, or time
// slice by time slice); the embedded store accepts both. On error, the
// samples of the failing batch are rolled back; earlier batches stay.
func ReadMetrics(ctx context.Context, name string, data []byte, app storage.Appendable) (LoadStats, error) {
	p, err := NewTextParser(name, data, FormatAuto)
	if err != nil {
		return LoadStats{}, err
	}
	st := LoadStats{Format: p.Format()}
	type entry struct {
		ref  storage.SeriesRef
		lset labels.Labels
	}
	cache := make(map[string]*entry, 1024)
	minT, maxT := int64(math.MaxInt64), int64(math.MinInt64)

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
		e := cache[string(p.Series())]
		if e == nil {
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
	if st.Samples > 0 {
		st.MinTime, st.MaxTime = time.UnixMilli(minT).UTC(), time.UnixMilli(maxT).UTC()
	}
	return st, nil
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
