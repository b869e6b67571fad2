package store

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
)

// TestReopenKeepsData checks that an on-disk store answers the same query
// after Close and Open, and keeps accepting samples after the snapshot's.
func TestReopenKeepsData(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, Retention: 3 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	fill(t, s)
	// One series out of order, so the snapshot holds both kinds of chunk.
	app := s.Appender(context.Background())
	ls := labels.FromStrings("__name__", "late", "pod", "a")
	for _, m := range []int{50, 10, 20} {
		if _, err := app.Append(0, ls, t0.Add(time.Duration(m)*time.Minute).UnixMilli(), float64(m)); err != nil {
			t.Fatal(err)
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	const expr = `sum(rate(requests_total[5m])) + scalar(count_over_time(late[2h]))`
	at := t0.Add(90 * time.Minute)
	before, _, err := s.Query(context.Background(), expr, at)
	if err != nil || len(before) != 1 || math.Abs(float64(before[0].Value)-3.6) > 1e-9 {
		t.Fatalf("before reopen: %v %v, want 3.6", before, err)
	}
	wantStats := s.Stats()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = Open(Options{Dir: dir, Retention: 3 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	after, _, err := s.Query(context.Background(), expr, at)
	if err != nil || len(after) != 1 || after[0].Value != before[0].Value {
		t.Errorf("after reopen: %v %v, want %v", after, err, before)
	}
	if st := s.Stats(); st != wantStats {
		t.Errorf("stats after reopen %+v, want %+v", st, wantStats)
	}
	app = s.Appender(context.Background())
	next := t0.Add(2*time.Hour + 15*time.Second).UnixMilli()
	if _, err := app.Append(0, labels.FromStrings("__name__", "queue", "job", "vllm", "instance", "a:8000", "pod", "a"), next, 4); err != nil {
		t.Errorf("append after the snapshot's newest sample: %v", err)
	}
	_ = app.Rollback()
}

// TestDuplicateSample checks TSDB's answers for a repeated timestamp: the
// same value is accepted (and kept once), a new one is refused.
func TestDuplicateSample(t *testing.T) {
	s := openMem(t)
	ls := labels.FromStrings("__name__", "g")
	app := s.Appender(context.Background())
	if _, err := app.Append(0, ls, t0.UnixMilli(), 1); err != nil {
		t.Fatal(err)
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := app.Append(0, ls, t0.UnixMilli(), 1); err != nil {
		t.Errorf("same sample again: %v", err)
	}
	if _, err := app.Append(0, ls, t0.UnixMilli(), 2); !errors.Is(err, storage.ErrDuplicateSampleForTimestamp) {
		t.Errorf("new value at the same timestamp: got %v, want a duplicate error", err)
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	v, _, err := s.Query(context.Background(), `count_over_time(g[1m])`, t0)
	if err != nil || len(v) != 1 || v[0].Value != 1 {
		t.Errorf("count_over_time = %v %v, want 1", v, err)
	}
}

// TestCorruptSnapshot checks that Open refuses a damaged snapshot with a
// message naming the file, rather than starting with part of it.
func TestCorruptSnapshot(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	fill(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, snapshotFile)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string][]byte{
		"truncated": data[:len(data)/2],
		"flipped":   append(append([]byte{}, data[:100]...), append([]byte{data[100] ^ 1}, data[101:]...)...),
		"foreign":   []byte("some other file"),
	} {
		if err := os.WriteFile(path, bad, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(Options{Dir: dir}); err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: got %v, want an error naming %s", name, err, path)
		}
	}
}

// FuzzReadSnapshot feeds arbitrary bytes to the snapshot reader: it must
// return an error or a head whose every series queries without fault.
func FuzzReadSnapshot(f *testing.F) {
	h := newHead(InMemoryWindow.Milliseconds(), 0)
	app := &appender{h: h}
	for i, m := range []int{0, 1, 2, 5, 3} {
		if _, err := app.Append(0, labels.FromStrings("__name__", "g", "i", string(rune('a'+i%2))), int64(m)*1000, float64(m)); err != nil {
			f.Fatal(err)
		}
	}
	_ = app.Commit()
	f.Add(h.encodeSnapshot())
	f.Add([]byte(snapshotMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		h := newHead(InMemoryWindow.Milliseconds(), 0)
		if h.readSnapshot(data) != nil {
			return
		}
		q := &querier{h: h, mint: math.MinInt64, maxt: math.MaxInt64}
		set := q.Select(context.Background(), true, nil, labels.MustNewMatcher(labels.MatchRegexp, "__name__", ".*"))
		for set.Next() {
			it := set.At().Iterator(nil)
			for it.Next() != 0 {
			}
			if err := it.Err(); err != nil {
				t.Fatalf("series %s: %v", set.At().Labels(), err)
			}
		}
	})
}
