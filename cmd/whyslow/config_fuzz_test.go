package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParseConfig: any daemon config either loads into a configuration
// that validates, or fails with errors that name the file; it never
// panics and never runs away on aliases.
func FuzzParseConfig(f *testing.F) {
	if b, err := os.ReadFile(filepath.Join("..", "..", "whyslow.example.yml")); err == nil {
		f.Add(b)
	}
	f.Add([]byte("engine: vllm\nscrape_interval: 5s\n"))
	f.Add([]byte("receivers:\n  - name: a\n    webhook: &h {url: \"https://h/x\"}\n  - name: b\n    webhook: *h\n"))
	f.Add([]byte("api: {token: ${TOKEN:-}, insecure: true}\notlp: {require_token: true}\n"))
	f.Add([]byte("a: &a [x, x]\nb: &b [*a, *a]\nreceivers: [*b]\n"))
	env := envMap(map[string]string{"TOKEN": "t0k3n-value", "WHYSLOW_WEBHOOK_URL": "https://hooks.example.com/x"})
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := parseConfig("f.yml", data, env)
		if err != nil {
			for _, e := range splitJoined(err) {
				if !strings.HasPrefix(e.Error(), "f.yml") {
					t.Fatalf("error without the file name: %v", e)
				}
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("accepted a config that does not validate: %v", err)
		}
	})
}
