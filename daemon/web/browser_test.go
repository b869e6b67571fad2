package web_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/whyslow/whyslow/daemon"
)

// chromiumBins are where Debian's chromium package (make test-deps) and
// other distributions put the browser.
var chromiumBins = []string{"chromium", "chromium-browser", "google-chrome-stable", "google-chrome"}

// skipUnlessChromium skips the test under -short or without a Chromium, and
// returns its path.
func skipUnlessChromium(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping the browser test in -short mode")
	}
	for _, name := range chromiumBins {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skipf("skipping: no Chromium on PATH (tried %s; apt-get install chromium, or make test-deps)", strings.Join(chromiumBins, ", "))
	return ""
}

// artifactDir is where the screenshots go: $WHYSLOW_ARTIFACTS/pages when
// set (CI keeps it), else the test's temporary directory.
func artifactDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("WHYSLOW_ARTIFACTS")
	if dir == "" {
		return t.TempDir()
	}
	dir = filepath.Join(dir, "pages")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// browserLog collects what the pages must not do: console errors,
// exceptions, failed loads, and requests to anywhere but the daemon.
type browserLog struct {
	mu       sync.Mutex
	host     string
	errors   []string
	requests []string
	foreign  []string
}

func (b *browserLog) listen(ev any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch e := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeWarning || e.Type == runtime.ConsoleAPICalledTypeAssert {
			b.errors = append(b.errors, fmt.Sprintf("console.%s: %v", e.Type, e.Args))
		}
	case *runtime.EventExceptionThrown:
		b.errors = append(b.errors, "exception: "+e.ExceptionDetails.Text)
	case *cdplog.EventEntryAdded:
		if e.Entry.Level == cdplog.EntryLevelError || e.Entry.Level == cdplog.EntryLevelWarning {
			b.errors = append(b.errors, fmt.Sprintf("log %s: %s (%s)", e.Entry.Level, e.Entry.Text, e.Entry.URL))
		}
	case *network.EventLoadingFailed:
		b.errors = append(b.errors, "loading failed: "+e.ErrorText)
	case *network.EventRequestWillBeSent:
		b.requests = append(b.requests, e.Request.URL)
		if u, err := url.Parse(e.Request.URL); err != nil || (u.Scheme != "data" && u.Host != b.host) {
			b.foreign = append(b.foreign, e.Request.URL)
		}
	}
}

// takeErrors returns the errors so far and forgets them.
func (b *browserLog) takeErrors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	errs := b.errors
	b.errors = nil
	return errs
}

func (b *browserLog) check(t *testing.T) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.errors {
		t.Errorf("browser: %s", e)
	}
	for _, u := range b.foreign {
		t.Errorf("a page requested %s, beyond the daemon on 127.0.0.1", u)
	}
	if len(b.requests) == 0 {
		t.Error("no request seen: the listener is not attached")
	}
	t.Logf("%d requests, all to %s", len(b.requests), b.host)
}

// TestPagesInChromium drives the pages in a real headless Chromium against
// a daemon watching the engine model through a KV-cache-pressure incident,
// with a token and an external URL with a path: without the token the page
// is refused; signed in, the index lists the open incident with its top
// cause, the incident page shows the ranked causes, the attribution and
// six charts with curves in them, and the link the webhook carried opens
// the verdict page; no page logs an error or requests anything but the
// daemon. Screenshots (light and dark) go to the artifact directory.
func TestPagesInChromium(t *testing.T) {
	chromium := skipUnlessChromium(t)
	shots := artifactDir(t)
	const token = "browser-test-token"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	hk := newHook(t)
	cfg := daemon.Config{ScrapeInterval: 15 * time.Second}
	cfg.API.Token = token
	cfg.API.ExternalURL = base + "/whyslow"
	env, in := playIncident(t, "kv_pressure", 0, cfg, hk)
	in = ageIncident(t, env, in) // windows long enough for the predictions
	srv, bounded := env.Stack.HTTPServer(ln)
	go func() { _ = srv.Serve(bounded) }()
	t.Cleanup(func() { _ = srv.Close() })
	topCause := in.Verdict.Causes[0].Title
	t.Logf("incident %s open, top cause %q (%s)", in.ID, topCause, in.Verdict.Causes[0].ID)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.WindowSize(1280, 900),
		// Any name but the daemon's address fails to resolve: a page that
		// tried to reach the internet would fail loudly, not hang.
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"),
		chromedp.Flag("no-proxy-server", true))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // CI runs as root, where Chromium's sandbox cannot start
	}
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancel()
	blog := &browserLog{host: ln.Addr().String()}
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithListener(blog.listen))
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, 120*time.Second)
	defer cancel()
	for _, err := range []error{
		chromedp.Do(ctx),
		callEmpty(ctx, network.Enable, network.EnableParams{}),
		callEmpty(ctx, cdplog.Enable, cdp.Empty{}),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	shootAction := func(name string, a chromedp.Action[[]byte]) {
		t.Helper()
		png, err := chromedp.Run(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(shots, name)
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot %s (%d KiB)", path, len(png)>>10)
	}
	shoot := func(name string) { t.Helper(); shootAction(name, chromedp.FullScreenshot(100)) }
	text := func(sel string) string {
		t.Helper()
		// Bounded: a missing element fails in seconds, not at the deadline.
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		s, err := chromedp.Run(tctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return s
	}

	// Without the token: refused, with the sign-in form and nothing else.
	incidentPage := base + "/whyslow/incidents/" + url.PathEscape(in.ID)
	resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(incidentPage))
	if err != nil {
		t.Fatal(err)
	}
	if body := text("main"); resp.Status != 401 || strings.Contains(body, topCause) || !strings.Contains(body, "Sign in") {
		t.Fatalf("incident page without the token: %d\n%s", resp.Status, body)
	}
	shoot("1-sign-in.png")
	// The refusal is the one error the browser may log.
	if errs := blog.takeErrors(); len(errs) != 1 || !strings.Contains(errs[0], "status of 401") {
		t.Errorf("browser errors on the refused page: %q", errs)
	}

	// Sign in: back to the page asked for.
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS(`input[name=token]`), token)); err != nil {
		t.Fatal(err)
	}
	resp, err = chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(`form.login button`)))
	if err != nil || resp.Status != 200 {
		t.Fatalf("sign in: %v, %+v", err, resp)
	}

	// The index: the open incident with its top cause.
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/whyslow/")); err != nil {
		t.Fatal(err)
	}
	rows := text("section[aria-labelledby=open-h] table.incidents tbody")
	if !strings.Contains(rows, topCause) || !strings.Contains(rows, in.Scope.Selector) {
		t.Errorf("index does not list the incident with its top cause %q:\n%s", topCause, rows)
	}
	shoot("2-index.png")

	// The incident page, by its link on the index.
	resp, err = chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(`table.incidents a`)))
	if err != nil || resp.Status != 200 {
		t.Fatalf("open the incident: %v, %+v", err, resp)
	}
	// The answer is on the first screen (issue 25: it was ~2,400 px down).
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1400, 900)); err != nil {
		t.Fatal(err)
	}
	topY, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`document.getElementById("top-cause").getBoundingClientRect().top + window.scrollY`))
	if err != nil || topY >= 900 || !strings.Contains(text("#top-cause"), topCause) {
		t.Errorf("top cause at y=%.0f px (%v), want inside the first 900 px at 1400 px wide", topY, err)
	}
	t.Logf("incident page: top cause at y=%.0f px", topY)
	if title, err := chromedp.Run(ctx, chromedp.Title()); err != nil || !strings.HasPrefix(title, topCause) {
		t.Errorf("incident page title %q (%v), want it to open with %q", title, err, topCause)
	}
	causes, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("li.cause h4")].map(h => h.textContent.trim())`))
	if err != nil || len(causes) == 0 || !strings.Contains(causes[0], topCause) {
		t.Errorf("ranked causes %q (%v), want %q first", causes, err, topCause)
	}
	if attr := text("section.attribution"); !strings.Contains(attr, "Where the time went") || !strings.Contains(attr, "TTFT") {
		t.Errorf("attribution section:\n%s", attr)
	}
	if tl := text("ol.timeline"); !strings.Contains(tl, "Incident opened") || !strings.Contains(tl, "hook") || !strings.Contains(tl, "delivered") {
		t.Errorf("timeline:\n%s", tl)
	}
	// Every chart is drawn, and the incident curves have extent.
	widths, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](
		`[...document.querySelectorAll("svg.chart-svg")].map(s => Math.max(0, ...[...s.querySelectorAll("path.line-incident")].map(p => p.getBBox().width)))`))
	// Nine panels: the sim's vLLM counts finish reasons and its GPUs
	// export the NVML counters, so the failed-requests and GPU panels are
	// there.
	if err != nil || len(widths) != 9 {
		t.Fatalf("chart widths %v, %v", widths, err)
	}
	for i, w := range widths {
		if w < 100 {
			t.Errorf("chart %d: incident curve %.0f units wide, want a curve across the window", i, w)
		}
	}
	if alt, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS("#chart-0-desc"))); err != nil || !strings.Contains(alt, "incident mean") {
		t.Errorf("chart text alternative %q (%v)", alt, err)
	}
	shoot("3-incident.png")
	shootAction("3-incident-curves.png", chromedp.Screenshot(chromedp.CSS("section.charts")))

	// The predictions: the first view started them; the page shows them
	// once computed (it reloads itself; here, reloaded until then).
	if p := text("section.predictions"); !strings.Contains(p, "Computing the predictions") && !strings.Contains(p, "replicas") {
		t.Errorf("predictions section on the first view:\n%s", p)
	}
	fixRows := 0
	for i := 0; i < 200 && fixRows == 0; i++ {
		if err := chromedp.Do(ctx, chromedp.Reload()); err != nil {
			t.Fatal(err)
		}
		if fixRows, err = chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("table.whatif tr.fix-row").length`)); err != nil {
			t.Fatal(err)
		}
		if fixRows == 0 {
			time.Sleep(250 * time.Millisecond)
		}
	}
	if fixRows == 0 {
		t.Fatalf("no prediction fixRows on the incident page:\n%s", text("section.predictions"))
	}
	// Each row: two bars (TTFT, inter-token), each drawn with a before and
	// an after bar of extent (a fix predicted to take a p95 to nothing
	// would have an empty after bar: none here).
	bars, err := chromedp.Run(ctx, chromedp.Evaluate[[][]float64](
		`[...document.querySelectorAll("svg.whatif-bar")].map(s => [s.getBoundingClientRect().width, s.querySelector("rect.wb-before").getBBox().width, s.querySelector("rect.wb-after").getBBox().width])`))
	if err != nil || len(bars) != 2*fixRows {
		t.Fatalf("predicted bars %v (%v), want 2 per row of %d", bars, err, fixRows)
	}
	for i, b := range bars {
		if b[0] < 100 || b[1] <= 0 || b[2] <= 0 {
			t.Errorf("predicted bar %d: %.0f px wide, before %.1f, after %.1f units: want both drawn", i, b[0], b[1], b[2])
		}
	}
	t.Logf("%d fixes predicted on the page", fixRows)
	shootAction("3-incident-predictions.png", chromedp.Screenshot(chromedp.CSS("section.predictions")))
	if err := callEmpty(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
		Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}}}); err != nil {
		t.Fatal(err)
	}
	shoot("4-incident-dark.png")

	// The link the notification carried opens the verdict page.
	var link string
	for _, p := range hk.payloads() {
		if p.Kind == "open" {
			link = p.VerdictURL
		}
	}
	if !strings.HasPrefix(link, base+"/whyslow/verdict?scope=") {
		t.Fatalf("webhook verdict_url %q, want the verdict page", link)
	}
	resp, err = chromedp.Run(ctx, chromedp.NavigateResponse(link))
	if err != nil || resp.Status != 200 {
		t.Fatalf("open the notification's link: %v, %+v", err, resp)
	}
	if v := text("section.verdict"); !strings.Contains(v, topCause) || !strings.Contains(v, "Curves") {
		t.Errorf("verdict page:\n%s", v)
	}
	shoot("5-verdict-dark.png")
	blog.check(t)
}

// callEmpty runs a protocol command whose result is empty.
func callEmpty[P any](ctx context.Context, cmd cdp.Command[P, cdp.Empty], params P) error {
	_, err := chromedp.Call(ctx, cmd, params)
	return err
}
