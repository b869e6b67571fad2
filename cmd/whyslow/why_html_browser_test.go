package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// pageWidth and pageHeight are the first screen the answer must be on.
const pageWidth, pageHeight = 1400, 900

// TestWhyHTMLAnswerFirstScreen opens the --html page of several bundles in
// a real headless Chromium at 1400×900 and measures where the top cause
// is: inside the first screen (top < 900 px), with its first fix, and the
// page's <title> names it. Skipped under -short or without Chromium.
// Screenshots go to $WHYSLOW_ARTIFACTS/pages when set.
func TestWhyHTMLAnswerFirstScreen(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the browser test in -short mode")
	}
	var chromium string
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome-stable", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			chromium = p
			break
		}
	}
	if chromium == "" {
		t.Skip("skipping: no Chromium on PATH (apt-get install chromium, or make test-deps)")
	}
	shots := os.Getenv("WHYSLOW_ARTIFACTS")
	if shots != "" {
		shots = filepath.Join(shots, "pages")
		if err := os.MkdirAll(shots, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.WindowSize(pageWidth, pageHeight),
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND"), chromedp.Flag("no-proxy-server", true))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium's sandbox cannot start as root
	}
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, 2*time.Minute) // a hang guard, not a timing
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(pageWidth, pageHeight)); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"kv_pressure", "prompt_shift", "arrival_surge", "sglang_kv_pressure", "trtllm_long_prompt_burst"} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), name+".html")
			r := runCLI(t, "why", "--bundle", filepath.Join(incidentsDir, name), "--html", path, "--output", "json")
			if r.code != exitCause {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			v := decodeVerdict(t, r.stdout)
			top := v.Causes[0]
			if err := chromedp.Do(ctx, chromedp.Navigate("file://"+path)); err != nil {
				t.Fatal(err)
			}
			y, err := chromedp.Run(ctx, chromedp.Evaluate[float64](
				`document.getElementById("top-cause").getBoundingClientRect().top + window.scrollY`))
			if err != nil {
				t.Fatalf("top cause element: %v", err)
			}
			fixY, err := chromedp.Run(ctx, chromedp.Evaluate[float64](
				`(document.querySelector(".answer .first-fix") || document.getElementById("top-cause")).getBoundingClientRect().bottom + window.scrollY`))
			if err != nil {
				t.Fatal(err)
			}
			text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#top-cause")))
			if err != nil {
				t.Fatal(err)
			}
			title, err := chromedp.Run(ctx, chromedp.Title())
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: top cause %s at y=%.0f px, first fix ends at y=%.0f px; title %q", name, top.ID, y, fixY, title)
			if y >= pageHeight || fixY >= pageHeight {
				t.Errorf("top cause at %.0f px, its fix ends at %.0f px: not on the first screen (%d px)", y, fixY, pageHeight)
			}
			if !strings.Contains(text, top.Title) || !strings.Contains(text, top.ID) {
				t.Errorf("top-cause element %q does not name %s", text, top.ID)
			}
			if !strings.HasPrefix(title, top.Title) {
				t.Errorf("<title> %q does not open with the top cause %q", title, top.Title)
			}
			if shots != "" {
				png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(shots, "why-html-"+name+".png"), png, 0o644); err != nil {
					t.Fatal(err)
				}
				curves, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS("section.charts")))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(shots, "why-html-"+name+"-curves.png"), curves, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
