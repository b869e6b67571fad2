package fleettest

import (
	"encoding/json"
	"net/http/httptest"
	"net/url"
	"testing"
)

// A count without grouping is one series without labels, as Prometheus
// answers it; anything else holds every scope's series.
func TestManySeriesCounts(t *testing.T) {
	m := &ManySeries{N: 1000}
	for _, c := range []struct {
		query  string
		series int
		value  string
	}{
		{`count(vllm:time_to_first_token_seconds_count{})`, 1, "1000"},
		{`count(a{x="("}) or count(last_over_time(b[5m]))`, 1, "1000"},
		{`count(a{model_name="m-000007"})`, 1, "1"},
		{`count by (model_name) (a)`, 1000, "0.5"},
		{`count(a) by (model_name)`, 1000, "0.5"},
		{`sum(a)`, 1000, "0.5"},
		{`1 - count(a)`, 1000, "0.5"},
		{`count(a) or sum(b)`, 1000, "0.5"},
		{`a{model_name="m-000007"}`, 1, "0.5"},
	} {
		rec := httptest.NewRecorder()
		m.ServeHTTP(rec, httptest.NewRequest("GET", "/api/v1/query?time=100&query="+url.QueryEscape(c.query), nil))
		var ans struct {
			Data struct {
				Result []struct {
					Metric map[string]string `json:"metric"`
					Value  [2]any            `json:"value"`
				} `json:"result"`
			} `json:"data"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &ans); err != nil {
			t.Fatalf("%s: %v: %s", c.query, err, rec.Body.String())
		}
		res := ans.Data.Result
		if len(res) != c.series || res[0].Value[1] != c.value {
			t.Errorf("%s: %d series, first %v; want %d valued %s", c.query, len(res), res[0], c.series, c.value)
		}
		if c.series == 1 && c.value != "0.5" && len(res[0].Metric) != 0 {
			t.Errorf("%s: a count has labels %v", c.query, res[0].Metric)
		}
	}
}
