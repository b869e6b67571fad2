package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/whyslow/whyslow/notifiers/webhook"
	"github.com/whyslow/whyslow/testbed/promtest"
)

// Load test bounds: what TestLoad asserts.
const (
	loadDuration    = 60 * time.Second
	loadStalled     = 200 // concurrent slow or stalled OTLP uploads
	loadExporters   = 4   // exporters of valid spans, 50 every 500 ms each
	loadInterval    = time.Second
	loadMaxHWMBytes = 256 << 20 // the deploy example's memory limit
)

// TestLoad runs `whyslow serve` as its own process and, for a minute, holds
// 200 OTLP uploads open that send a few bytes and stall or trickle, while
// valid exports keep coming, Alertmanager sends oversized webhooks (a 300
// kB label, 500 alerts) and ordinary ones that open and resolve incidents.
// It checks that every valid export gets 200, that scrapes keep their
// interval (within one interval), that the daemon's peak memory (VmHWM)
// stays under 256 MiB, and that every notification the incidents produced
// is delivered exactly once. Opt in with WHYSLOW_LOADTEST=1 (make loadtest):
// it takes about 90 s.
func TestLoad(t *testing.T) {
	if os.Getenv("WHYSLOW_LOADTEST") == "" {
		t.Skip("set WHYSLOW_LOADTEST=1 to run the 60 s load test (make loadtest)")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "whyslow")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/whyslow/whyslow/cmd/whyslow").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}

	eng := newLoadEngine(t)
	hook := newLoadReceiver(t, "load-hmac-secret")
	apiAddr, otlpAddr := promtest.FreeLoopbackAddr(t), promtest.FreeLoopbackAddr(t)
	const token = "load-api-token"
	cfgPath := filepath.Join(dir, "whyslow.yml")
	cfg := fmt.Sprintf(`engine_urls: [%s]
scrape_interval: %s
data_dir: %s
listen: %q
api: {token: %s}
gpu: {enabled: false}
otlp: {http: %q, grpc: ""}
incidents: {open_wait: 1s, resolve_after: 5s}
receivers:
  - name: hook
    webhook: {url: %q, hmac_secret: load-hmac-secret, max_attempts: 10}
`, eng.srv.URL+"/metrics", loadInterval, filepath.Join(dir, "data"), apiAddr, token, otlpAddr, hook.srv.URL)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cmd := exec.Command(bin, "serve", "--config", cfgPath, "--log-level", "warn")
	cmd.Stderr, cmd.Stdout = &lockedBuf{b: &logs}, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()
	api := "http://" + apiAddr
	waitUntil(t, 30*time.Second, func() bool {
		resp, err := http.Get(api + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	ctx, stop := context.WithTimeout(context.Background(), loadDuration)
	defer stop()
	var wg sync.WaitGroup
	var stalls, stallRefused atomic.Int64
	for i := 0; i < loadStalled; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); stallUploads(ctx, otlpAddr, i%2 == 1, &stalls, &stallRefused) }()
	}
	exports := map[int]int{}
	var exportsMu sync.Mutex
	var exportLat []time.Duration
	for i := 0; i < loadExporters; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := loadSpans(i)
			c := &http.Client{Timeout: 10 * time.Second}
			for ctx.Err() == nil {
				start := time.Now()
				code := 0
				resp, err := c.Post("http://"+otlpAddr+"/v1/traces", "application/x-protobuf", bytes.NewReader(body))
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					code = resp.StatusCode
				}
				exportsMu.Lock()
				exports[code]++
				exportLat = append(exportLat, time.Since(start))
				exportsMu.Unlock()
				// A busy engine's exporter: 100 spans/s each.
				sleepCtx(ctx, 500*time.Millisecond)
			}
		}()
	}
	am := &amClient{url: api + "/api/v1/alerts", token: token, codes: map[string]map[int]int{}}
	wg.Add(2)
	go func() {
		defer wg.Done()
		huge := strings.Repeat("x", 300<<10)
		for i := 0; ctx.Err() == nil; i++ {
			if i%2 == 0 {
				am.post("huge_label", amPayload("firing", []string{huge}))
			} else {
				am.post("500_alerts", amPayload("firing", manyScopes(500)))
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	var scopes []string
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			scope := fmt.Sprintf("load-%02d", i)
			scopes = append(scopes, scope)
			am.post("valid", amPayload("firing", []string{scope}))
			sleepCtx(ctx, 3*time.Second)
			if i >= 2 {
				am.post("valid", amPayload("resolved", []string{fmt.Sprintf("load-%02d", i-2)}))
			}
		}
	}()
	wg.Wait()
	loadEnd := time.Now()

	// Resolve what is still open, then let the outbox drain.
	for _, s := range scopes {
		am.post("valid", amPayload("resolved", []string{s}))
	}
	var enqueued, depth, pending float64
	waitUntil(t, 90*time.Second, func() bool {
		m := scrapeMetrics(t, api+"/metrics")
		enqueued, depth, pending = m["whyslow_outbox_enqueued_total"], m["whyslow_outbox_depth"], m["whyslow_notifications_pending"]
		return depth == 0 && pending == 0 && enqueued > 0 && float64(hook.distinct()) >= enqueued
	})
	hwm := vmHWM(t, cmd.Process.Pid)
	cmd.Process.Signal(os.Interrupt)
	cmd.Wait()

	// Exports: every valid one answered 200.
	exportsMu.Lock()
	sort.Slice(exportLat, func(i, j int) bool { return exportLat[i] < exportLat[j] })
	p99 := exportLat[len(exportLat)*99/100]
	t.Logf("valid exports: %v (p99 latency %s)", exports, p99)
	if len(exports) != 1 || exports[200] == 0 {
		t.Errorf("valid exports got other answers than 200: %v", exports)
	}
	exportsMu.Unlock()
	t.Logf("stalled/slow uploads: %d connections opened, %d closed on accept", stalls.Load(), stallRefused.Load())
	t.Logf("alertmanager answers: %v", am.snapshot())
	for kind, want := range map[string]int{"huge_label": 422, "500_alerts": 413} {
		if got := am.snapshot()[kind]; len(got) != 1 || got[want] == 0 {
			t.Errorf("%s webhooks: %v, want only %d", kind, got, want)
		}
	}
	if got := am.snapshot()["valid"]; len(got) != 1 || got[200] == 0 {
		t.Errorf("valid webhooks: %v", got)
	}

	// Scrapes kept their interval (±1 interval) while the load ran.
	ts := eng.times(loadEnd)
	var gaps []time.Duration
	for i := 1; i < len(ts); i++ {
		gaps = append(gaps, ts[i].Sub(ts[i-1]))
	}
	sort.Slice(gaps, func(i, j int) bool { return gaps[i] < gaps[j] })
	if len(gaps) < int(loadDuration/loadInterval)-5 {
		t.Errorf("only %d scrapes in %s", len(gaps)+1, loadDuration)
	} else {
		var sum time.Duration
		for _, g := range gaps {
			sum += g
		}
		t.Logf("scrape intervals: %d scrapes, min %s, median %s, max %s, mean %s",
			len(ts), gaps[0].Round(time.Millisecond), gaps[len(gaps)/2].Round(time.Millisecond),
			gaps[len(gaps)-1].Round(time.Millisecond), (sum / time.Duration(len(gaps))).Round(time.Millisecond))
		if gaps[0] < 0 || gaps[len(gaps)-1] > 2*loadInterval {
			t.Errorf("a scrape interval left %s ± %s: min %s max %s", loadInterval, loadInterval, gaps[0], gaps[len(gaps)-1])
		}
	}

	// Memory.
	t.Logf("daemon VmHWM: %.1f MiB (bound %d MiB)", float64(hwm)/(1<<20), loadMaxHWMBytes>>20)
	if hwm > loadMaxHWMBytes {
		t.Errorf("VmHWM %d MiB over %d MiB", hwm>>20, loadMaxHWMBytes>>20)
	}

	// Every notification delivered once.
	counts, bad := hook.snapshot()
	dups := 0
	for _, n := range counts {
		if n > 1 {
			dups++
		}
	}
	t.Logf("notifications: %.0f enqueued, %d delivered (distinct), %d delivered twice, %d bad signatures", enqueued, len(counts), dups, bad)
	if float64(len(counts)) != enqueued || dups > 0 || bad > 0 {
		t.Errorf("deliveries: %d distinct for %.0f enqueued, %d duplicates, %d bad signatures", len(counts), enqueued, dups, bad)
	}
	if len(counts) < 20 {
		t.Errorf("only %d notifications: the incidents did not run", len(counts))
	}
	if t.Failed() {
		t.Logf("daemon log:\n%s", logs.String())
	}
}

// loadEngine serves a vLLM-like /metrics and records when it was scraped.
type loadEngine struct {
	srv *httptest.Server
	mu  sync.Mutex
	at  []time.Time
	n   float64
}

func newLoadEngine(t *testing.T) *loadEngine {
	e := &loadEngine{}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		e.mu.Lock()
		e.at = append(e.at, time.Now())
		e.n += 10
		n := e.n
		e.mu.Unlock()
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		for i := 0; i < 4; i++ {
			fmt.Fprintf(w, "vllm:time_to_first_token_seconds_bucket{model_name=\"load-%02d\",le=\"0.1\"} %g\n", i, n)
			fmt.Fprintf(w, "vllm:time_to_first_token_seconds_bucket{model_name=\"load-%02d\",le=\"+Inf\"} %g\n", i, n)
			fmt.Fprintf(w, "vllm:time_to_first_token_seconds_sum{model_name=\"load-%02d\"} %g\n", i, n*0.05)
			fmt.Fprintf(w, "vllm:time_to_first_token_seconds_count{model_name=\"load-%02d\"} %g\n", i, n)
			fmt.Fprintf(w, "vllm:request_success_total{model_name=\"load-%02d\",finished_reason=\"stop\"} %g\n", i, n)
			fmt.Fprintf(w, "vllm:num_requests_running{model_name=\"load-%02d\"} 4\n", i)
		}
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *loadEngine) times(until time.Time) []time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []time.Time
	for _, at := range e.at {
		if !at.After(until) && !at.Before(until.Add(-loadDuration)) {
			out = append(out, at)
		}
	}
	return out
}

// loadReceiver is the webhook receiver: it verifies signatures and counts
// deliveries per notification id.
type loadReceiver struct {
	srv    *httptest.Server
	secret string
	mu     sync.Mutex
	counts map[string]int
	bad    int
}

func newLoadReceiver(t *testing.T, secret string) *loadReceiver {
	r := &loadReceiver{secret: secret, counts: map[string]int{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		defer r.mu.Unlock()
		if webhook.Verify([]byte(r.secret), body, req.Header.Get(webhook.TimestampHeader), req.Header.Get(webhook.SignatureHeader), time.Now(), 0) != nil {
			r.bad++
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		r.counts[req.Header.Get(webhook.IDHeader)]++
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *loadReceiver) distinct() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.counts)
}

func (r *loadReceiver) snapshot() (map[string]int, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for k, v := range r.counts {
		out[k] = v
	}
	return out, r.bad
}

// stallUploads keeps one upload open at a time that declares 100 kB, sends
// 10 bytes and then nothing (stall) or a byte a second (trickle), until
// the server drops it; then it opens the next.
func stallUploads(ctx context.Context, addr string, trickle bool, opened, refused *atomic.Int64) {
	for ctx.Err() == nil {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			sleepCtx(ctx, 100*time.Millisecond)
			continue
		}
		opened.Add(1)
		fmt.Fprintf(c, "POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\nContent-Length: 100000\r\n\r\n0123456789")
		closed := make(chan struct{})
		got := make(chan int, 1)
		go func() {
			n, _ := io.Copy(io.Discard, c)
			got <- int(n)
			close(closed)
		}()
		tick := time.NewTicker(time.Second)
	wait:
		for {
			select {
			case <-ctx.Done():
				break wait
			case <-closed:
				if <-got == 0 {
					refused.Add(1)
				}
				break wait
			case <-tick.C:
				if trickle {
					c.Write([]byte{'x'})
				}
			}
		}
		tick.Stop()
		c.Close()
	}
}

// loadSpans is an export of 50 llm_request spans.
func loadSpans(seed int) []byte {
	ss := &tracepb.ScopeSpans{}
	now := time.Now()
	for i := 0; i < 50; i++ {
		tid := make([]byte, 16)
		sid := make([]byte, 8)
		tid[0], tid[1], sid[0], sid[1] = byte(seed+1), byte(i+1), byte(seed+1), byte(i+1)
		ss.Spans = append(ss.Spans, &tracepb.Span{TraceId: tid, SpanId: sid, Name: "llm_request",
			StartTimeUnixNano: uint64(now.UnixNano()), EndTimeUnixNano: uint64(now.Add(time.Second).UnixNano())})
	}
	b, _ := proto.Marshal(&coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{ss}}}})
	return b
}

type amClient struct {
	url, token string
	mu         sync.Mutex
	codes      map[string]map[int]int
}

func (a *amClient) post(kind string, body []byte) {
	req, _ := http.NewRequest(http.MethodPost, a.url, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+a.token)
	req.Header.Set("Content-Type", "application/json")
	code := 0
	c := &http.Client{Timeout: 30 * time.Second}
	if resp, err := c.Do(req); err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		code = resp.StatusCode
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.codes[kind] == nil {
		a.codes[kind] = map[int]int{}
	}
	a.codes[kind][code]++
}

func (a *amClient) snapshot() map[string]map[int]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]map[int]int{}
	for k, v := range a.codes {
		out[k] = map[int]int{}
		for c, n := range v {
			out[k][c] = n
		}
	}
	return out
}

func amPayload(status string, models []string) []byte {
	var alerts []map[string]any
	for _, m := range models {
		fp := m
		if len(fp) > 40 {
			fp = "huge"
		}
		alerts = append(alerts, map[string]any{
			"status": status, "labels": map[string]string{"alertname": "HighTTFT", "model_name": m, "severity": "warning"},
			"startsAt": "2023-11-14T22:13:20Z", "fingerprint": "fp-" + fp,
		})
	}
	b, _ := json.Marshal(map[string]any{"version": "4", "status": status, "receiver": "whyslow", "alerts": alerts})
	return b
}

func manyScopes(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("flood-%d", i)
	}
	return out
}

func waitUntil(t *testing.T, d time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("not done after %s", d)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// scrapeMetrics reads the unlabelled series of a /metrics page.
func scrapeMetrics(t *testing.T, url string) map[string]float64 {
	resp, err := http.Get(url)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") || strings.Contains(name, "{") {
			continue
		}
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			out[name] = f
		}
	}
	return out
}

// vmHWM returns a process's peak resident memory (VmHWM) in bytes.
func vmHWM(t *testing.T, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("read VmHWM: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc status")
	return 0
}

type lockedBuf struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
