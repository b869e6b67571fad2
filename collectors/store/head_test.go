package store

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
)

// TestAppendWhileQuerying runs a scraper-like writer against queries (the
// daemon's detector) on a live store; under -race it checks that a query
// reads the open chunk only through its copy.
func TestAppendWhileQuerying(t *testing.T) {
	s, err := Open(Options{Live: true, Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	series := []labels.Labels{
		labels.FromStrings("__name__", "requests_total", "pod", "a"),
		labels.FromStrings("__name__", "requests_total", "pod", "b"),
	}
	const scrapes = 400
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range scrapes {
			app := s.Appender(context.Background())
			for _, ls := range series {
				if _, err := app.Append(0, ls, t0.Add(time.Duration(i)*5*time.Second).UnixMilli(), float64(i)); err != nil {
					t.Error(err)
					return
				}
			}
			if err := app.Commit(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for i := 0; i < 200; i++ {
		if _, _, err := s.Query(context.Background(), `sum(rate(requests_total[1m]))`, t0.Add(time.Duration(i)*10*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	v, _, err := s.Query(context.Background(), `count_over_time(requests_total[1h])`, t0.Add(scrapes*5*time.Second))
	if err != nil || len(v) != 2 || v[0].Value != scrapes {
		t.Errorf("count_over_time = %v %v, want every scrape of each series", v, err)
	}
}
