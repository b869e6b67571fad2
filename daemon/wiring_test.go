package daemon

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/whyslow/whyslow/collectors/gpu"
	"github.com/whyslow/whyslow/notifiers"
	"github.com/whyslow/whyslow/notifiers/slack"
	"github.com/whyslow/whyslow/span"
)

// fakeEngine serves a vLLM-like /metrics whose counters advance on every
// scrape: 10 requests, fast (<= 0.1 s TTFT) or slow ((0.25, 1]).
type fakeEngine struct {
	srv  *httptest.Server
	mu   sync.Mutex
	slow bool
	pod  string
	fast float64
	late float64
}

func newFakeEngine(t *testing.T, pod string) *fakeEngine {
	e := &fakeEngine{pod: pod}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.slow {
			e.late += 10
		} else {
			e.fast += 10
		}
		podLabel := ""
		if e.pod != "" {
			podLabel = fmt.Sprintf(",pod=%q", e.pod)
		}
		all := e.fast + e.late
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprintf(w, "# TYPE vllm:time_to_first_token_seconds histogram\n")
		for _, b := range []struct {
			le string
			v  float64
		}{{"0.1", e.fast}, {"0.25", e.fast}, {"1.0", all}, {"+Inf", all}} {
			fmt.Fprintf(w, "vllm:time_to_first_token_seconds_bucket{model_name=\"m\"%s,le=%q} %g\n", podLabel, b.le, b.v)
		}
		fmt.Fprintf(w, "vllm:time_to_first_token_seconds_sum{model_name=\"m\"%s} %g\n", podLabel, 0.05*e.fast+0.5*e.late)
		fmt.Fprintf(w, "vllm:time_to_first_token_seconds_count{model_name=\"m\"%s} %g\n", podLabel, all)
		fmt.Fprintf(w, "# TYPE vllm:request_success_total counter\n")
		fmt.Fprintf(w, "vllm:request_success_total{model_name=\"m\"%s,finished_reason=\"stop\"} %g\n", podLabel, all)
		fmt.Fprintf(w, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"%s} 4\n", podLabel)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *fakeEngine) setSlow(v bool) { e.mu.Lock(); e.slow = v; e.mu.Unlock() }

func (e *fakeEngine) url() string { return e.srv.URL + "/metrics" }

// noNVML is an NVML whose Init fails as on a machine without a driver. Any
// other call fails the test: none may follow a failed Init.
type noNVML struct{ t *testing.T }

func (l noNVML) Init() error {
	return &gpu.Error{Op: "Init", Message: "libnvidia-ml.so.1: cannot open shared object file", Kind: gpu.KindLibraryNotFound}
}
func (l noNVML) Shutdown() error { return nil }
func (l noNVML) DriverVersion() (string, error) {
	l.t.Error("NVML call after a failed Init")
	return "", nil
}
func (l noNVML) DeviceCount() (int, error) { l.t.Error("NVML call after a failed Init"); return 0, nil }
func (l noNVML) DeviceByIndex(int) (gpu.Device, error) {
	l.t.Error("NVML call after a failed Init")
	return nil, nil
}
func (l noNVML) GPMSampleAlloc() (gpu.GPMSample, error) {
	l.t.Error("NVML call after a failed Init")
	return nil, nil
}
func (l noNVML) GPMMetrics(gpu.GPMSample, gpu.GPMSample, []gpu.GPMMetric) ([]gpu.GPMResult, error) {
	l.t.Error("NVML call after a failed Init")
	return nil, nil
}

// oneGPU is an NVML with one pre-Hopper GPU (no GPM) whose clocks and
// temperature read; everything else is unsupported.
type oneGPU struct{}

func (oneGPU) Init() error                            { return nil }
func (oneGPU) Shutdown() error                        { return nil }
func (oneGPU) DriverVersion() (string, error)         { return "570.124.06", nil }
func (oneGPU) DeviceCount() (int, error)              { return 1, nil }
func (oneGPU) DeviceByIndex(int) (gpu.Device, error)  { return fakeDevice{}, nil }
func (oneGPU) GPMSampleAlloc() (gpu.GPMSample, error) { return nil, unsupported("GpmSampleAlloc") }
func (oneGPU) GPMMetrics(gpu.GPMSample, gpu.GPMSample, []gpu.GPMMetric) ([]gpu.GPMResult, error) {
	return nil, unsupported("GpmMetricsGet")
}

func unsupported(op string) error {
	return &gpu.Error{Op: op, Message: "Not Supported", Kind: gpu.KindNotSupported}
}

type fakeDevice struct{}

func (fakeDevice) Name() (string, error) { return "NVIDIA A100-SXM4-80GB", nil }
func (fakeDevice) UUID() (string, error) { return "GPU-11111111-2222-3333-4444-555555555555", nil }
func (fakeDevice) MemoryInfo() (gpu.Memory, error) {
	return gpu.Memory{Total: 80 << 30, Used: 70 << 30}, nil
}
func (fakeDevice) UtilizationRates() (gpu.Utilization, error) {
	return gpu.Utilization{GPU: 90, Memory: 60}, nil
}
func (fakeDevice) ClockMHz(c gpu.Clock) (uint32, error) {
	if c == gpu.ClockSM {
		return 1200, nil
	}
	return 1593, nil
}
func (fakeDevice) MaxClockMHz(c gpu.Clock) (uint32, error) {
	if c == gpu.ClockSM {
		return 1410, nil
	}
	return 1593, nil
}
func (fakeDevice) ClockEvents() (gpu.ClockEvents, error)            { return gpu.ClockEvents{}, nil }
func (fakeDevice) PowerUsageMilliwatts() (uint32, error)            { return 350000, nil }
func (fakeDevice) PowerLimitMilliwatts() (uint32, error)            { return 400000, nil }
func (fakeDevice) TemperatureCelsius() (uint32, error)              { return 71, nil }
func (fakeDevice) PCIeThroughputKBps(gpu.Direction) (uint32, error) { return 0, unsupported("PCIe") }
func (fakeDevice) ComputeProcessPIDs() ([]uint32, error)            { return nil, nil }
func (fakeDevice) GPMSupported() (bool, error)                      { return false, nil }
func (fakeDevice) GPMSampleGet(gpu.GPMSample) error                 { return unsupported("GpmSampleGet") }

// stackConfig is a daemon config for tests: one engine, a short baseline,
// no OTLP ports unless the test asks.
func stackConfig(engineURL string) Config {
	cfg := testConfig()
	cfg.EngineURLs = []string{engineURL}
	cfg.OTLP = OTLPDisabled()
	return cfg
}

func newTestStack(t *testing.T, o StackOptions) *Stack {
	t.Helper()
	if o.Logger == nil {
		o.Logger = quietLogger()
	}
	if o.Clock == nil {
		o.Clock = NewSimClock(t0)
	}
	s, err := NewStack(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return s
}

func tickStack(t *testing.T, s *Stack, clock *SimClock, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		clock.Advance(5 * time.Second)
		if err := s.Daemon.Tick(context.Background(), clock.Now()); err != nil {
			t.Fatal(err)
		}
	}
}

func getBody(t *testing.T, h http.Handler, path string) string {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.Host = "127.0.0.1" // not example.com: the daemon answers its own names (guardSite)
	h.ServeHTTP(rec, req)
	return rec.Body.String()
}

// TestStackEngineScrape checks the collectors/scrape wiring: target labels
// job and instance, up, and the per-target whyslow_scrape_* metrics.
func TestStackEngineScrape(t *testing.T) {
	eng := newFakeEngine(t, "")
	clock := NewSimClock(t0)
	enabled := false
	cfg := stackConfig(eng.url())
	cfg.GPU.Enabled = &enabled
	s := newTestStack(t, StackOptions{Config: cfg, Clock: clock})
	tickStack(t, s, clock, 2)
	inst := strings.TrimPrefix(eng.srv.URL, "http://")
	v, _, err := s.Store.Query(context.Background(), fmt.Sprintf(`up{job="engine",instance=%q}`, inst), clock.Now())
	if err != nil || len(v) != 1 || v[0].Value != 1 {
		t.Fatalf("up = %v, %v", v, err)
	}
	v, _, err = s.Store.Query(context.Background(), `count(vllm:request_success_total{job="engine"})`, clock.Now())
	if err != nil || len(v) != 1 || v[0].Value != 1 {
		t.Fatalf("engine series = %v, %v", v, err)
	}
	body := getBody(t, s.Handler(), "/metrics")
	for _, want := range []string{
		fmt.Sprintf(`whyslow_scrape_success{target=%q} 1`, eng.url()),
		`whyslow_scrape_samples{target=`, `whyslow_scrape_duration_seconds{target=`,
		`whyslow_scrapes_total{result="success"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(body, "whyslow_collector_success") {
		t.Error("GPU collector ran although disabled")
	}
}

// TestStackNoNVMLIsADataGap: without an NVIDIA driver the GPU collector
// makes no NVML call after Init, the daemon keeps running, /metrics says the
// collector has no data, and verdicts list "no GPU counters".
func TestStackNoNVMLIsADataGap(t *testing.T) {
	eng := newFakeEngine(t, "")
	clock := NewSimClock(t0)
	s := newTestStack(t, StackOptions{Config: stackConfig(eng.url()), Clock: clock, GPULib: noNVML{t}})
	tickStack(t, s, clock, 3)
	v, err := s.Daemon.TriageNow(context.Background(), "api", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, g := range v.DataGaps {
		if g.Signal == "gpu" && strings.HasPrefix(g.Reason, "no GPU counters") && strings.Contains(g.Reason, "libnvidia-ml.so.1") {
			found = true
		}
	}
	if !found {
		t.Errorf("verdict data gaps lack the GPU: %+v", v.DataGaps)
	}
	if body := getBody(t, s.Handler(), "/metrics"); !strings.Contains(body, `whyslow_collector_success{collector="gpu"} 0`) {
		t.Errorf("/metrics lacks the GPU collector's failure:\n%s", body)
	}
}

// TestStackGPUSeriesJoinTheEngine: GPU samples land in the store each cycle
// with the engine target's instance and pod (as the rulesets join on them)
// and are served on /metrics.
func TestStackGPUSeriesJoinTheEngine(t *testing.T) {
	eng := newFakeEngine(t, "vllm-0")
	clock := NewSimClock(t0)
	s := newTestStack(t, StackOptions{Config: stackConfig(eng.url()), Clock: clock, GPULib: oneGPU{}})
	tickStack(t, s, clock, 3)
	inst := strings.TrimPrefix(eng.srv.URL, "http://")
	ctx := context.Background()
	v, _, err := s.Store.Query(ctx, fmt.Sprintf(`whyslow_gpu_sm_clock_mhz{gpu="0",pod="vllm-0",instance=%q}`, inst), clock.Now())
	if err != nil || len(v) != 1 || v[0].Value != 1200 {
		t.Fatalf("GPU series = %v, %v", v, err)
	}
	// The join the rulesets render with {{.Join}}.
	v, _, err = s.Store.Query(ctx, `max(avg_over_time(whyslow_gpu_sm_clock_mhz[1m]) and on(pod) vllm:num_requests_running{model_name="m"})`, clock.Now())
	if err != nil || len(v) != 1 {
		t.Fatalf("pod join = %v, %v", v, err)
	}
	body := getBody(t, s.Handler(), "/metrics")
	if !strings.Contains(body, `whyslow_gpu_temperature_celsius{gpu="0",instance="`+inst+`",model="NVIDIA A100-SXM4-80GB",pod="vllm-0",uuid=`) {
		t.Errorf("/metrics lacks the labelled GPU series:\n%s", body)
	}
	verdict, err := s.Daemon.TriageNow(ctx, "api", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range verdict.DataGaps {
		if g.Signal == "gpu" {
			t.Errorf("GPU data gap with a GPU: %+v", g)
		}
	}
}

// TestStackOTLPReachesTheSpanStore posts an OTLP/HTTP export to the
// daemon's receiver and finds the span in the span store triage reads.
func TestStackOTLPReachesTheSpanStore(t *testing.T) {
	eng := newFakeEngine(t, "")
	cfg := stackConfig(eng.url())
	addr, off := "127.0.0.1:0", ""
	cfg.OTLP = OTLPConfig{HTTP: &addr, GRPC: &off}
	s := newTestStack(t, StackOptions{Config: cfg, GPULib: noNVML{t}})
	if s.OTLP == nil || s.Spans == nil {
		t.Fatal("no OTLP receiver or span store")
	}
	start := time.Unix(1700000000, 0)
	req := &coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{
		ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{{
			TraceId: bytes.Repeat([]byte{0xab}, 16), SpanId: bytes.Repeat([]byte{0xcd}, 8), Name: "llm_request",
			StartTimeUnixNano: uint64(start.UnixNano()), EndTimeUnixNano: uint64(start.Add(2 * time.Second).UnixNano()),
		}}}},
	}}}
	body, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post("http://"+s.OTLP.HTTPAddr()+"/v1/traces", "application/x-protobuf", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("export: %s", resp.Status)
	}
	if n := s.Spans.Len(); n != 1 {
		t.Fatalf("span store holds %d spans", n)
	}
	var id span.TraceID
	copy(id[:], bytes.Repeat([]byte{0xab}, 16))
	spans, err := s.Spans.Trace(context.Background(), id)
	if err != nil || len(spans) != 1 || spans[0].Name != "llm_request" {
		t.Fatalf("trace = %+v, %v", spans, err)
	}
	if body := getBody(t, s.Handler(), "/metrics"); !strings.Contains(body, `whyslow_otlp_spans_received_total{transport="http"} 1`) {
		t.Error("/metrics lacks the received span")
	}
	// The Tempo-compatible trace API serves it back (why --traces whyslow:URL).
	if body := getBody(t, s.Handler(), "/api/traces/"+id.String()); !strings.Contains(body, "llm_request") {
		t.Errorf("/api/traces/%s lacks the span: %s", id, body)
	}
}

// fakeSlack is a Slack-compatible Web API and response_url endpoint that
// records every call.
type fakeSlack struct {
	srv   *httptest.Server
	mu    sync.Mutex
	calls []slackCall
}

type slackCall struct {
	Path string
	Form url.Values
	Body string
}

func newFakeSlack(t *testing.T) *fakeSlack {
	f := &fakeSlack{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		c := slackCall{Path: r.URL.Path, Body: string(b)}
		if strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
			c.Form, _ = url.ParseQuery(string(b))
		}
		f.mu.Lock()
		f.calls = append(f.calls, c)
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true,"channel":"C0123","ts":"1700000000.000100"}`)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeSlack) paths() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		out = append(out, c.Path)
	}
	return out
}

func (f *fakeSlack) find(path string) (slackCall, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.calls {
		if c.Path == path {
			return c, true
		}
	}
	return slackCall{}, false
}

// TestStackSlackOpenMessage: an incident the daemon opens reaches a
// Slack-compatible server as a chat.postMessage with blocks, linking the
// daemon's verdict API.
func TestStackSlackOpenMessage(t *testing.T) {
	eng := newFakeEngine(t, "")
	sl := newFakeSlack(t)
	cfg := stackConfig(eng.url())
	cfg.API.ExternalURL = "https://whyslow.example.com"
	noChart := false
	cfg.Receivers = []ReceiverConfig{{Name: "oncall", Slack: &slack.Config{
		Token: "xoxb-test-token", Channel: "#llm-oncall", APIURL: sl.srv.URL + "/api/", SendChart: &noChart,
	}}}
	clock := NewSimClock(t0)
	s := newTestStack(t, StackOptions{Config: cfg, Clock: clock, GPULib: noNVML{t}, Retry: notifiers.RetryOptions{Jitter: -1}})
	tickStack(t, s, clock, 15*12)
	eng.setSlow(true)
	for i := 0; i < 40; i++ {
		tickStack(t, s, clock, 1)
		if _, ok := sl.find("/api/chat.postMessage"); ok {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	for i := 0; i < 200; i++ {
		if _, ok := sl.find("/api/chat.postMessage"); ok {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	c, ok := sl.find("/api/chat.postMessage")
	if !ok {
		t.Fatalf("Slack got no post (calls %v, incidents %+v)", sl.paths(), s.Daemon.Incidents())
	}
	if got := c.Form.Get("channel"); got != "#llm-oncall" {
		t.Errorf("channel %q", got)
	}
	blocks := c.Form.Get("blocks")
	if !json.Valid([]byte(blocks)) || !strings.Contains(blocks, `"header"`) {
		t.Errorf("blocks %s", blocks)
	}
	if !strings.Contains(blocks, "https://whyslow.example.com/verdict?scope=") {
		t.Errorf("blocks do not link the verdict page: %s", blocks)
	}
	if strings.Contains(c.Body, "xoxb-test-token") && c.Form.Get("token") == "" {
		t.Error("token in the message body")
	}
}

// slackSign signs a slash-command body as Slack does.
func slackSign(secret, ts, body string) string {
	m := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(m, "v0:%s:%s", ts, body)
	return "v0=" + hex.EncodeToString(m.Sum(nil))
}

// TestStackSlashCommand: POST /slack/commands through the daemon's
// handler: a bad signature gets 401, a good one is acknowledged and the
// verdict is posted to the response_url.
func TestStackSlashCommand(t *testing.T) {
	eng := newFakeEngine(t, "")
	sl := newFakeSlack(t)
	cfg := stackConfig(eng.url())
	cfg.SlackCommand = &slack.CommandConfig{SigningSecret: "s3cret"}
	clock := NewSimClock(time.Now().Truncate(time.Second))
	s := newTestStack(t, StackOptions{Config: cfg, Clock: clock, GPULib: noNVML{t},
		SlackResponseURL: func(u *url.URL) bool { return strings.HasPrefix(u.String(), sl.srv.URL) }})
	tickStack(t, s, clock, 3)
	h := s.Handler()
	form := url.Values{"command": {"/whyslow"}, "text": {"model_name=m 1m"}, "response_url": {sl.srv.URL + "/respond"},
		"team_id": {"T1"}, "channel_id": {"C1"}, "user_id": {"U1"}, "trigger_id": {"1.2.3"}}
	body := form.Encode()
	ts := strconv.FormatInt(clock.Now().Unix(), 10)
	post := func(sig string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, SlackCommandPath, strings.NewReader(body))
		req.Host = "127.0.0.1"
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-Slack-Request-Timestamp", ts)
		req.Header.Set("X-Slack-Signature", sig)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	if rec := post(slackSign("wrong", ts, body)); rec.Code != http.StatusUnauthorized {
		t.Fatalf("bad signature: %d %s", rec.Code, rec.Body)
	}
	if rec := post(slackSign("s3cret", ts, body)); rec.Code != http.StatusOK {
		t.Fatalf("good signature: %d %s", rec.Code, rec.Body)
	}
	var got slackCall
	for i := 0; i < 500; i++ {
		var ok bool
		if got, ok = sl.find("/respond"); ok {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got.Path == "" {
		t.Fatal("no response posted to response_url")
	}
	if !strings.Contains(got.Body, "blocks") {
		t.Errorf("response %s", got.Body)
	}
}

// TestStackReplaceScraper: a reload that changes the engine targets swaps
// the scraper and its per-target metrics without a duplicate registration.
func TestStackReplaceScraper(t *testing.T) {
	a, b := newFakeEngine(t, ""), newFakeEngine(t, "")
	clock := NewSimClock(t0)
	cfg := stackConfig(a.url())
	s := newTestStack(t, StackOptions{Config: cfg, Clock: clock, GPULib: noNVML{t}})
	tickStack(t, s, clock, 1)
	cfg.EngineURLs = []string{b.url()}
	es, err := s.ReplaceScraper(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Daemon.Reload(cfg, es, nil); err != nil {
		t.Fatal(err)
	}
	tickStack(t, s, clock, 1)
	body := getBody(t, s.Handler(), "/metrics")
	if !strings.Contains(body, fmt.Sprintf(`whyslow_scrape_success{target=%q} 1`, b.url())) {
		t.Errorf("/metrics lacks the new target:\n%s", body)
	}
	if strings.Contains(body, fmt.Sprintf(`whyslow_scrape_success{target=%q}`, a.url())) {
		t.Error("/metrics still shows the old target")
	}
}
