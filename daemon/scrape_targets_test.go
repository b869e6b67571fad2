package daemon

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/whyslow/whyslow/collectors/store"
)

// TestEngineScraperReplicasShareHostPort: serve with two engine_urls on one
// host:port (replicas on /replica/N/metrics) keeps two series sets, one per
// target, instead of merging (or refusing) the second replica's samples.
func TestEngineScraperReplicasShareHostPort(t *testing.T) {
	mux := http.NewServeMux()
	for n := 1; n <= 2; n++ {
		mux.HandleFunc(fmt.Sprintf("/replica/%d/metrics", n), func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprintf(w, "vllm:num_requests_running %d\n", n)
		})
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	st, err := store.Open(store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	es, err := NewEngineScraper(st, ScraperOptions{Targets: []string{srv.URL + "/replica/1/metrics", srv.URL + "/replica/2/metrics"}})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1700000000, 0)
	for round := range 3 {
		for _, r := range es.Scrape(context.Background(), at.Add(time.Duration(round)*time.Second)) {
			if r.Err != nil {
				t.Fatalf("round %d: %s: %v", round, r.Target, r.Err)
			}
		}
	}
	v, _, err := st.Query(context.Background(), `vllm:num_requests_running`, at.Add(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, s := range v {
		got[string(s.Metric["target"])] = float64(s.Value)
	}
	if len(got) != 2 || got["/replica/1/metrics"] != 1 || got["/replica/2/metrics"] != 2 {
		t.Errorf("series by target %v, want /replica/1/metrics 1 and /replica/2/metrics 2", got)
	}
}
