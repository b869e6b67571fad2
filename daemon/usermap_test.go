package daemon

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/whyslow/whyslow/collectors/bundle"
	"github.com/whyslow/whyslow/collectors/store"
	"github.com/whyslow/whyslow/daemon/web"
	"github.com/whyslow/whyslow/incident"
	"github.com/whyslow/whyslow/notifiers"
	"github.com/whyslow/whyslow/query"
	"github.com/whyslow/whyslow/rulesets"
	"github.com/whyslow/whyslow/verdict"
)

// myEngineMap is vllm.yaml over made-up myengine_* names: an engine no Go
// code names (cmd/whyslow's TestUnknownEngineFromMap reads it too).
const myEngineMap = "../testdata/engines/myengine.yaml"

// TestDaemonEngineFromMap: a daemon given a map of the user's under
// `rulesets:` watches an engine the code has never heard of. Over a
// recorded surge renamed to myengine_* names, the detector opens an
// incident and the triage names the engine, whether the config names the
// engine (a sidecar) or leaves it to auto-detection (a fleet daemon's
// default). Without the key the engine is refused, and auto finds nothing.
func TestDaemonEngineFromMap(t *testing.T) {
	ctx := context.Background()
	st := renamedIncident(t, "arrival_surge", "vllm:", "myengine_")
	// The surge begins at 01:15 (truth.yaml); the baseline hour lies before.
	from, to := time.Date(2026, 1, 1, 1, 14, 0, 0, time.UTC), time.Date(2026, 1, 1, 1, 20, 0, 0, time.UTC)
	replay := func(cfg Config) (*ReplayResult, error) {
		cfg.Listen, cfg.OTLP = "127.0.0.1:0", OTLPDisabled()
		return Replay(ctx, ReplayOptions{Config: cfg, Metrics: st, From: from, To: to, Step: 15 * time.Second, Logger: quietLogger()})
	}
	for _, engine := range []string{"myengine", "auto"} {
		res, err := replay(Config{Engine: engine, Rulesets: []string{myEngineMap}})
		if err != nil {
			t.Fatalf("engine %s with the map: %v", engine, err)
		}
		opened := firstOpen(res.Notifications)
		if opened == nil {
			t.Fatalf("engine %s with the map: no incident opened in %d cycles (%d notifications)", engine, res.Cycles, len(res.Notifications))
		}
		v := opened.Verdict
		if v.Engine != "myengine" || v.Status != verdict.StatusAnomaly || len(v.Causes) == 0 {
			t.Errorf("engine %s with the map: verdict engine %q, status %s, %d causes; want myengine, anomaly, a cause",
				engine, v.Engine, v.Status, len(v.Causes))
		}
	}

	if _, err := replay(Config{Engine: "myengine"}); err == nil || !strings.Contains(err.Error(), `unknown engine "myengine"`) || !strings.Contains(err.Error(), "rulesets:") {
		t.Errorf("engine myengine without the map: %v; want unknown engine, pointing at rulesets:", err)
	}
	res, err := replay(Config{Engine: "auto"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Notifications) != 0 || res.NoData == nil {
		t.Errorf("auto without the map: %d notifications, no-data %v; want none, and no engine data", len(res.Notifications), res.NoData)
	}
}

// TestFleetDaemonEngineFromMap: a fleet daemon (NewStack over a
// Prometheus) given the map under `rulesets:` opens an incident on the
// engine's series, its verdict names the engine, and the verdict page
// draws the map's curves; without the key it sees no engine at all.
func TestFleetDaemonEngineFromMap(t *testing.T) {
	ctx := context.Background()
	prom := httptest.NewServer(promAPI{renamedIncident(t, "arrival_surge", "vllm:", "myengine_")})
	defer prom.Close()
	// The verdict page's curves with data, drawn from the daemon's maps
	// and, for contrast, from the shipped ones alone.
	var charts, shippedCharts int
	drawn := func(s web.VerdictSection) int {
		n := 0
		for _, c := range s.Charts {
			if !c.Empty {
				n++
			}
		}
		return n
	}
	run := func(maps ...string) []incident.Incident {
		t.Helper()
		cfg := Config{Source: SourceConfig{Prometheus: &PrometheusSource{URL: prom.URL}}, Listen: "127.0.0.1:0",
			OTLP: OTLPDisabled(), Rulesets: maps}
		stack, err := NewStack(StackOptions{Config: cfg, Logger: quietLogger(), LogWriter: io.Discard})
		if err != nil {
			t.Fatal(err)
		}
		defer stack.Close(ctx)
		for at := time.Date(2026, 1, 1, 1, 14, 0, 0, time.UTC); !at.After(time.Date(2026, 1, 1, 1, 19, 0, 0, time.UTC)); at = at.Add(15 * time.Second) {
			if err := stack.Daemon.Tick(ctx, at); err != nil {
				t.Fatal(err)
			}
		}
		in := stack.Daemon.Incidents()
		if len(in) == 1 && in[0].Verdict != nil {
			d := stack.Daemon
			charts = drawn(d.verdictSection(ctx, d.Config(), in[0].Verdict, time.Time{}))
			shippedCharts = drawn(web.Section(ctx, d.opts.Metrics, in[0].Verdict, time.Time{}, rulesets.Shipped()))
		}
		return in
	}
	in := run(myEngineMap)
	if len(in) != 1 || in[0].Verdict == nil || in[0].Verdict.Engine != "myengine" || in[0].Verdict.Status != verdict.StatusAnomaly {
		t.Fatalf("with the map: incidents %+v; want one, triaged as myengine", in)
	}
	if charts < 4 || shippedCharts != 0 {
		t.Errorf("verdict page: %d curves from the daemon's maps, %d from the shipped ones; want the map's latency, KV, queue and request curves, and none", charts, shippedCharts)
	}
	if in := run(); len(in) != 0 {
		t.Errorf("without the map: %d incidents, want none", len(in))
	}
}

// promAPI answers the Prometheus query API (/api/v1/query and
// /api/v1/query_range, all a fleet daemon asks) from a store.
type promAPI struct{ m query.Metrics }

func (p promAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	at := func(key string) time.Time {
		f, _ := strconv.ParseFloat(r.Form.Get(key), 64)
		return time.Unix(0, int64(f*1e9)).UTC()
	}
	var (
		kind   string
		result any
		err    error
	)
	switch r.URL.Path {
	case "/api/v1/query":
		kind = "vector"
		result, _, err = p.m.Query(r.Context(), r.Form.Get("query"), at("time"))
	case "/api/v1/query_range":
		step, _ := strconv.ParseFloat(r.Form.Get("step"), 64)
		kind = "matrix"
		result, _, err = p.m.QueryRange(r.Context(), r.Form.Get("query"), at("start"), at("end"), time.Duration(step*float64(time.Second)))
	default:
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]string{"status": "error", "errorType": "bad_data", "error": err.Error()})
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": map[string]any{"resultType": kind, "result": result}})
}

// TestUserMapErrors: a map that does not load is refused with its entry
// and its place in the file; two maps of one engine, and a file that is
// no map, are refused too.
func TestUserMapErrors(t *testing.T) {
	dir := t.TempDir()
	good, err := os.ReadFile(myEngineMap)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, data string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	// A signal the rulebook does not declare, on line 4.
	bad := write("bad.yaml", "engine: badengine\n\nsignals:\n  ttft_p95x: 'sum(x)'\n")
	copyOf := write("copy.yaml", string(good))
	extra := write("extra.yaml", "signals:\n  mine: {title: Mine, unit: count, expr: 'sum(x)'}\n")
	for _, tc := range []struct {
		paths []string
		want  []string
	}{
		{[]string{bad}, []string{"rulesets[0]: " + bad + ":4:3: ", "ttft_p95x"}},
		{[]string{myEngineMap, copyOf}, []string{"rulesets[1]: ", `maps engine "myengine" as rulesets[0]`}},
		{[]string{extra}, []string{"rulesets[0]: ", "not an engine map"}},
		{[]string{filepath.Join(dir, "missing.yaml")}, []string{"rulesets[0]: ", "missing.yaml"}},
	} {
		err := Config{Rulesets: tc.paths}.Validate()
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("rulesets %v: %v; want %q", tc.paths, err, w)
			}
		}
	}
	if err := (Config{Engine: "myengine", Rulesets: []string{myEngineMap}}).Validate(); err != nil {
		t.Errorf("engine myengine with its map: %v", err)
	}
}

// renamedIncident loads a recorded incident's metrics into a store with
// every from in them replaced by to.
func renamedIncident(t *testing.T, incident, from, to string) *store.Store {
	t.Helper()
	gz, err := os.ReadFile(filepath.Join("..", "testdata", "incidents", incident, "metrics.om.gz"))
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	om, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := bundle.ReadMetrics(context.Background(), "metrics.om", bytes.ReplaceAll(om, []byte(from), []byte(to)), st); err != nil {
		t.Fatal(err)
	}
	return st
}

// firstOpen is the first notification that opens an incident, nil for none.
func firstOpen(ns []*notifiers.Notification) *notifiers.Notification {
	for _, n := range ns {
		if n.Kind == notifiers.TransitionOpen && n.Verdict != nil {
			return n
		}
	}
	return nil
}
