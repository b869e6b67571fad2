package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/whyslow/whyslow/daemon"
)

func envMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestExampleConfigPassesCheck(t *testing.T) {
	t.Setenv("WHYSLOW_WEBHOOK_URL", "https://hooks.example.com/T0/B0/secret")
	path := filepath.Join("..", "..", "whyslow.example.yml")
	var stdout, stderr bytes.Buffer
	if code := dispatch(context.Background(), []string{"check", "config", path}, &stdout, &stderr); code != exitOK {
		t.Fatalf("check config %s: exit %d\n%s", path, code, stderr.String())
	}
	if !strings.Contains(stdout.String(), ": ok") {
		t.Errorf("stdout %q", stdout.String())
	}
	cfg, err := loadConfigFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Receivers) != 2 || string(cfg.Receivers[0].Webhook.URL) != "https://hooks.example.com/T0/B0/secret" {
		t.Errorf("receivers = %+v", cfg.Receivers)
	}
	if cfg.ScrapeInterval != 5*time.Second || cfg.Detect.LongWindow != 2*time.Minute || len(cfg.Detect.Triggers) != 4 {
		t.Errorf("config = %+v", cfg)
	}
	// The example shows the defaults.
	def := daemon.Config{}.WithDefaults()
	got := cfg.WithDefaults()
	if !reflect.DeepEqual(got.Detect, def.Detect) {
		t.Errorf("example detect section differs from the defaults:\n%+v\n%+v", got.Detect, def.Detect)
	}
	if !reflect.DeepEqual(got.Incidents, def.Incidents) || !reflect.DeepEqual(got.OTLP, def.OTLP) || !reflect.DeepEqual(got.Triage, def.Triage) {
		t.Errorf("example incidents/otlp/triage differ from the defaults")
	}
	if !got.GPU.On() {
		t.Error("example disables the GPU collector")
	}
	// Scheduler and GPU class stay unknown: the engine defaults for the
	// detected GPU apply.
	if got.Scheduler.Known() || got.GPU.Class != def.GPU.Class || got.Scheduler.Rules() != def.Scheduler.Rules() {
		t.Errorf("example scheduler %+v / gpu class %q differ from the defaults", got.Scheduler, got.GPU.Class)
	}
}

func TestParseConfigSlackGPUOTLP(t *testing.T) {
	env := map[string]string{"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "sig", "POD_NAME": "vllm-0"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	src := `receivers:
  - name: oncall
    slack:
      token: ${SLACK_BOT_TOKEN}
      channel: "#llm-oncall"
slack_command:
  signing_secret: ${SLACK_SIGNING_SECRET}
gpu:
  enabled: false
  labels: {pod: "${POD_NAME}"}
otlp:
  http: ""
  grpc: 127.0.0.1:4317
`
	cfg, err := parseConfig("w.yml", []byte(src), lookup)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Receivers[0].Slack == nil || string(cfg.Receivers[0].Slack.Token) != "xoxb-1" || cfg.SlackCommand == nil {
		t.Errorf("slack = %+v %+v", cfg.Receivers[0].Slack, cfg.SlackCommand)
	}
	if cfg.GPU.On() || cfg.GPU.Labels["pod"] != "vllm-0" {
		t.Errorf("gpu = %+v", cfg.GPU)
	}
	if *cfg.OTLP.HTTP != "" || *cfg.OTLP.GRPC != "127.0.0.1:4317" {
		t.Errorf("otlp = %q %q", *cfg.OTLP.HTTP, *cfg.OTLP.GRPC)
	}
	_, err = parseConfig("w.yml", []byte("gpu:\n  visible: 0\notlp:\n  htp: x\n"), lookup)
	for _, want := range []string{`w.yml:2:3: unknown key "visible" in gpu`, `w.yml:4:3: unknown key "htp" in otlp`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	_, err = parseConfig("w.yml", []byte("gpu:\n  labels: {\"bad-name\": x}\n"), lookup)
	if err == nil || !strings.Contains(err.Error(), "w.yml:2:3: gpu.labels") {
		t.Errorf("bad label name: %v", err)
	}
}

func TestParseConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		env  map[string]string
		want []string // substrings, each in the error
	}{
		{"unknown top-level key", "engine: vllm\nscrape_intervall: 5s\n", nil,
			[]string{`cfg.yml:2:1: unknown key "scrape_intervall" in the top level`}},
		{"unknown nested keys, all listed", "detect:\n  short_window: 1m\n  triggers:\n    - name: x\n      signal: ttft_p95\n      ratoi: 2\nincidents:\n  resolve_afer: 1m\n", nil,
			[]string{`cfg.yml:6:7: unknown key "ratoi" in detect.triggers[0]`, `cfg.yml:8:3: unknown key "resolve_afer" in incidents`}},
		{"missing env", "api:\n  token: ${NOPE}\n", nil,
			[]string{"cfg.yml:2:10: environment variable NOPE is not set"}},
		{"type error", "scrape_interval: soon\n", nil,
			[]string{"cfg.yml:1:18: scrape_interval: want a duration such as 30s or 5m, not a string"}},
		{"syntax error", "engine: [vllm\n", nil,
			[]string{"cfg.yml:"}},
		{"validation with position", "engine: lmdeploy\nengine_urls:\n  - ftp://x\n", nil,
			[]string{`cfg.yml:1:1: engine: unknown engine "lmdeploy"`, `cfg.yml:3:5: engine_urls[0]: "ftp://x" is not an http(s) URL`}},
		{"detect validation", "detect:\n  triggers:\n    - name: x\n      signal: ttft_p99\n      ratio: 2\n", nil,
			[]string{`cfg.yml:1:1: detect: trigger 1 (x): unknown signal "ttft_p99"`}},
		{"slo validation", "triage:\n  slo:\n    - ttft_p95 > 2s\n    - ttft_p95 >> 2s\n", nil,
			[]string{`cfg.yml:4:7: triage.slo[1]: slo "ttft_p95 >> 2s": want SIGNAL > BOUND`}},
		{"receiver validation never prints the url", "receivers:\n  - name: r\n    webhook:\n      url: ${URL}\n", map[string]string{"URL": "gopher://secret-token@x"},
			[]string{`receivers[0].webhook`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseConfig("cfg.yml", []byte(tc.yaml), envMap(tc.env))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n%v\nwant it to contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "secret-token") {
				t.Errorf("error leaks a secret: %v", err)
			}
		})
	}
}

func TestParseConfigEnvAndDefaults(t *testing.T) {
	cfg, err := parseConfig("c.yml", []byte("api:\n  token: ${TOK}\n  external_url: ${EXT:-http://whyslow:9109}\n"), envMap(map[string]string{"TOK": "s3cret"}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.API.Token != "s3cret" || cfg.API.ExternalURL != "http://whyslow:9109" {
		t.Fatalf("api = %+v", cfg.API)
	}
}

func TestCheckConfigExitCodes(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yml")
	if err := os.WriteFile(bad, []byte("listen: :9109\nbogus: 1\nincidents:\n  nope: 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := dispatch(context.Background(), []string{"check", "config", bad}, &stdout, &stderr); code != exitFailed {
		t.Fatalf("exit %d, want %d", code, exitFailed)
	}
	out := stderr.String()
	for _, w := range []string{"bad.yml:2:1: unknown key \"bogus\"", "bad.yml:4:3: unknown key \"nope\"", "2 problem(s)"} {
		if !strings.Contains(out, w) {
			t.Errorf("stderr %q lacks %q", out, w)
		}
	}
	if code := dispatch(context.Background(), []string{"check", "config", filepath.Join(dir, "missing.yml")}, &stdout, &stderr); code != exitFailed {
		t.Errorf("missing file: exit %d", code)
	}
	if code := dispatch(context.Background(), []string{"check"}, &stdout, &stderr); code != exitFailed {
		t.Errorf("no args: exit %d", code)
	}
}

// TestKubernetesExampleConfig checks the whyslow.yml embedded in each
// deploy/ ConfigMap: the sidecar's and the fleet daemon's.
func TestKubernetesExampleConfig(t *testing.T) {
	env := envMap(map[string]string{"WHYSLOW_API_TOKEN": "t", "WHYSLOW_WEBHOOK_URL": "https://hooks.example.com/x", "POD_NAME": "llama-0", "POD_IP": "10.0.0.7"})
	for _, file := range []string{"vllm-whyslow.yaml", "whyslow-fleet.yaml"} {
		t.Run(file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "kubernetes", file))
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, doc := range strings.Split(string(b), "\n---\n") {
				var cm struct {
					Kind string            `yaml:"kind"`
					Data map[string]string `yaml:"data"`
				}
				if err := yaml.Unmarshal([]byte(doc), &cm); err != nil {
					t.Fatalf("deploy yaml: %v", err)
				}
				if cm.Kind != "ConfigMap" {
					continue
				}
				found = true
				cfg, err := parseConfig("configmap whyslow.yml", []byte(cm.Data["whyslow.yml"]), env)
				if err != nil {
					t.Fatal(err)
				}
				if fleet := file == "whyslow-fleet.yaml"; cfg.Fleet() != fleet {
					t.Errorf("fleet mode %v, want %v", cfg.Fleet(), fleet)
				}
			}
			if !found {
				t.Fatal("no ConfigMap in the deploy example")
			}
		})
	}
}

func TestParseConfigSchedulerAndGPUClass(t *testing.T) {
	src := "engine: vllm\nscheduler:\n  chunked_prefill: true\n  max_num_batched_tokens: 2048\n  max_num_seqs: 128\ngpu:\n  class: H100\n"
	cfg, err := parseConfig("w.yml", []byte(src), envMap(nil))
	if err != nil {
		t.Fatal(err)
	}
	got := cfg.Scheduler.Rules()
	if !got.Known || !got.ChunkedPrefill || got.MaxNumBatchedTokens != 2048 || got.MaxNumSeqs != 128 || got.Source != "config" {
		t.Errorf("scheduler = %+v", got)
	}
	if cfg.GPU.Class != "H100" || !cfg.GPU.On() {
		t.Errorf("gpu = %+v", cfg.GPU)
	}
	tests := []struct{ name, src, want string }{
		{"unknown key", "scheduler:\n  chunked: true\n", `w.yml:2:3: unknown key "chunked" in scheduler`},
		{"negative budget", "scheduler:\n  max_num_batched_tokens: -1\n", "w.yml:2:3: scheduler.max_num_batched_tokens: must not be negative"},
		{"unknown class", "gpu:\n  class: Z9000\n", `w.yml:2:3: gpu.class: unknown GPU class "Z9000"`},
		{"type error", "scheduler:\n  chunked_prefill: maybe\n", "w.yml:2:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseConfig("w.yml", []byte(tt.src), envMap(nil))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v lacks %q", err, tt.want)
			}
		})
	}
}

// TestExampleConfigRunsAsShipped: without WHYSLOW_WEBHOOK_URL the example
// validates (exit 0) and runs with its webhook receiver left out, and check
// config says so as a warning at the variable's position.
func TestExampleConfigRunsAsShipped(t *testing.T) {
	t.Setenv("WHYSLOW_WEBHOOK_URL", "")
	path := filepath.Join("..", "..", "whyslow.example.yml")
	var stdout, stderr bytes.Buffer
	if code := dispatch(context.Background(), []string{"check", "config", path}, &stdout, &stderr); code != exitOK {
		t.Fatalf("check config %s: exit %d\n%s", path, code, stderr.String())
	}
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	line := 1 + strings.Count(string(src[:strings.Index(string(src), "url: ${WHYSLOW_WEBHOOK_URL}")]), "\n")
	want := fmt.Sprintf(`whyslow.example.yml:%d:12: warning: receivers[0] "oncall-webhook" skipped: environment variable WHYSLOW_WEBHOOK_URL is not set (set it to enable the receiver)`, line)
	if !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
	}
	if !strings.Contains(stdout.String(), path+": ok") {
		t.Errorf("stdout %q", stdout.String())
	}
	cfg, err := loadConfigFile(path) // what serve loads
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Receivers) != 1 || cfg.Receivers[0].Name != "log" || cfg.Receivers[0].Log == nil {
		t.Errorf("receivers = %+v, want only the log receiver", cfg.Receivers)
	}
}

// TestParseConfigSkipsReceiversWithUnsetEnv: a receiver using an unset
// ${ENV} is left out with a warning (one per receiver, naming every unset
// variable); the others are validated as usual and their errors keep the
// receiver's index in the file; keys and types of a skipped receiver are
// still checked; an unset ${ENV} outside receivers stays an error.
func TestParseConfigSkipsReceiversWithUnsetEnv(t *testing.T) {
	src := `receivers:
  - name: hook
    webhook:
      url: ${HOOK_URL}
      hmac_secret: ${HOOK_SECRET}
  - name: bad
    webhook:
      url: http://x
      timeout: -1s
  - name: slack
    slack:
      token: ${SLACK_BOT_TOKEN}
      channel: "#x"
  - name: log
    log: {}
`
	cfg, warnings, err := parseConfigWarnings("w.yml", []byte(src), envMap(nil))
	if err == nil || !strings.Contains(err.Error(), "w.yml:7:5: receivers[1].webhook") || strings.Contains(err.Error(), "environment variable") {
		t.Errorf("error %v: want only receivers[1]'s timeout, at its file index", err)
	}
	for i, want := range []string{
		`w.yml:4:12: warning: receivers[0] "hook" skipped: environment variables HOOK_URL, HOOK_SECRET are not set (set them to enable the receiver)`,
		`w.yml:12:14: warning: receivers[2] "slack" skipped: environment variable SLACK_BOT_TOKEN is not set (set it to enable the receiver)`,
	} {
		if i >= len(warnings) || warnings[i].Error() != want {
			t.Errorf("warning %d: %v, want %q", i, warnings, want)
		}
	}

	fixed := strings.Replace(src, "timeout: -1s", "timeout: 1s", 1)
	cfg, warnings, err = parseConfigWarnings("w.yml", []byte(fixed), envMap(map[string]string{"HOOK_URL": "https://h.example/x"}))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range cfg.Receivers {
		names = append(names, r.Name)
	}
	if strings.Join(names, ",") != "bad,log" || len(warnings) != 2 {
		t.Errorf("receivers %v, warnings %v; want bad,log and two warnings", names, warnings)
	}

	_, _, err = parseConfigWarnings("w.yml", []byte("receivers:\n  - name: h\n    webhook:\n      url: ${HOOK_URL}\n      timout: 1s\n      max_attempts: lots\n"), envMap(nil))
	for _, want := range []string{`w.yml:5:7: unknown key "timout"`, "w.yml:6:21: receivers[0].webhook.max_attempts: want an integer"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("skipped receiver: error %v lacks %q", err, want)
		}
	}
	_, _, err = parseConfigWarnings("w.yml", []byte("api:\n  token: ${NOPE}\n"), envMap(nil))
	if err == nil || !strings.Contains(err.Error(), "w.yml:2:10: environment variable NOPE is not set") {
		t.Errorf("unset env outside receivers: %v", err)
	}
}

// TestParseConfigEmptyIsDefaults: an empty file (or only comments) is the
// defaults, and check config accepts it.
func TestParseConfigEmptyIsDefaults(t *testing.T) {
	for _, src := range []string{"", "\n", "# nothing set yet\n", "---\n"} {
		cfg, err := parseConfig("e.yml", []byte(src), envMap(nil))
		if err != nil {
			t.Errorf("%q: %v", src, err)
			continue
		}
		if !reflect.DeepEqual(cfg.WithDefaults(), daemon.Config{}.WithDefaults()) {
			t.Errorf("%q: config %+v, want the defaults", src, cfg)
		}
	}
	path := filepath.Join(t.TempDir(), "empty.yml")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := dispatch(context.Background(), []string{"check", "config", path}, &stdout, &stderr); code != exitOK || !strings.Contains(stdout.String(), ": ok") {
		t.Errorf("check config of an empty file: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
}

// TestParseConfigEveryTypeError: every type error is reported at its
// line:col, also past a receiver (whose own decoder stopped at its first
// error), a slash-command block and an unknown key; no value is quoted.
func TestParseConfigEveryTypeError(t *testing.T) {
	src := `receivers:
  - name: s
    slack:
      token: xoxb-secret-token
      channel: "#a"
      timeout: soon
      max_attempts: lots
slack_command:
  signing_secret: s
  default_window: never
bogus: 1
scrape_interval: abc
api:
  max_body_bytes: [1]
  insecure: maybe
gpu:
  labels: none
engine_urls: http://x/metrics
`
	_, err := parseConfig("w.yml", []byte(src), envMap(nil))
	if err == nil {
		t.Fatal("no error")
	}
	want := []string{
		"w.yml:6:16: receivers[0].slack.timeout: want a duration such as 30s or 5m, not a string",
		"w.yml:7:21: receivers[0].slack.max_attempts: want an integer, not a string",
		"w.yml:10:19: slack_command.default_window: want a duration such as 30s or 5m, not a string",
		`w.yml:11:1: unknown key "bogus" in the top level`,
		"w.yml:12:18: scrape_interval: want a duration such as 30s or 5m, not a string",
		"w.yml:14:19: api.max_body_bytes: want an integer, not a list",
		"w.yml:15:13: api.insecure: want true or false, not a string",
		"w.yml:17:11: gpu.labels: want a mapping, not a string",
		"w.yml:18:14: engine_urls: want a list, not a string",
	}
	got := splitJoined(err)
	if len(got) != len(want) {
		t.Errorf("%d errors, want %d:\n%v", len(got), len(want), err)
	}
	for i, w := range want {
		if i < len(got) && !strings.HasPrefix(got[i].Error(), w) {
			t.Errorf("error %d = %q, want %q", i, got[i], w)
		}
	}
	if strings.Contains(err.Error(), "secret") {
		t.Errorf("error quotes a value: %v", err)
	}
}

// TestParseConfigListenAddrs: listen and the OTLP addresses must be
// host:port with a numeric port.
func TestParseConfigListenAddrs(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"listen: nonsense\n", `w.yml:1:1: listen: "nonsense" is not host:port (e.g. ":9109" or "127.0.0.1:9109")`},
		{"listen: \":http\"\n", `w.yml:1:1: listen: port "http" of ":http" is not a number from 0 to 65535`},
		{"listen: 127.0.0.1:70000\n", `w.yml:1:1: listen: port "70000" of "127.0.0.1:70000" is not a number from 0 to 65535`},
		{"otlp:\n  http: localhost\n", `w.yml:2:3: otlp.http: "localhost" is not host:port`},
		{"otlp:\n  grpc: \"[::1]:x\"\n", `w.yml:2:3: otlp.grpc: port "x" of "[::1]:x" is not a number`},
	} {
		_, err := parseConfig("w.yml", []byte(tc.src), envMap(nil))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.src, err, tc.want)
		}
	}
	for _, ok := range []string{"listen: \":9109\"\n", "listen: 127.0.0.1:0\n", "listen: \"[::1]:9109\"\n", "listen: whyslow.local:9109\notlp:\n  http: \"\"\n  grpc: 127.0.0.1:4317\n"} {
		if _, err := parseConfig("w.yml", []byte(ok), envMap(nil)); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
}

// TestCheckHelp: check's usage on stdout, exit 0, however help is asked for.
func TestCheckHelp(t *testing.T) {
	for _, args := range [][]string{{"check", "--help"}, {"check", "-h"}, {"check", "help"}, {"check", "config", "--help"}, {"check", "config", "-h"}} {
		var stdout, stderr bytes.Buffer
		code := dispatch(context.Background(), args, &stdout, &stderr)
		if code != exitOK || !strings.HasPrefix(stdout.String(), "usage: whyslow check config FILE...") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, stdout.String(), stderr.String())
		}
	}
}

// TestParseConfigTrustedProxies: api.trusted_proxies holds IPs or CIDRs,
// each error at its item.
func TestParseConfigTrustedProxies(t *testing.T) {
	src := "api:\n  trusted_proxies:\n    - 10.0.0.0/8\n    - proxy.local\n    - 10.0.0.300\n    - \"::1\"\n"
	_, err := parseConfig("w.yml", []byte(src), envMap(nil))
	for _, want := range []string{
		`w.yml:4:7: api.trusted_proxies[1]: "proxy.local" is not an IP address or CIDR`,
		`w.yml:5:7: api.trusted_proxies[2]: "10.0.0.300" is not an IP address or CIDR`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want %q", err, want)
		}
	}
	if _, err := parseConfig("w.yml", []byte("api:\n  trusted_proxies: [10.0.0.7, \"fd00::/8\"]\n"), envMap(nil)); err != nil {
		t.Errorf("valid proxies: %v", err)
	}
}

// TestConfigRulesets: a config's engine maps are read from its own
// directory, and a bad one is reported at the config's rulesets entry
// and at the problem's place in the map.
func TestConfigRulesets(t *testing.T) {
	path := filepath.Join("..", "..", "testdata", "engines", "whyslow.yml")
	cfg, err := loadConfigFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join("..", "..", "testdata", "engines", "myengine.yaml"); cfg.Engine != "myengine" || len(cfg.Rulesets) != 1 || cfg.Rulesets[0] != want {
		t.Errorf("engine %q, rulesets %q; want myengine, [%s]", cfg.Engine, cfg.Rulesets, want)
	}

	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	conf := filepath.Join(dir, "whyslow.yml")
	// A signal the rulebook does not declare, on line 3.
	err = errors.Join(os.WriteFile(bad, []byte("engine: badengine\nsignals:\n  ttft_p95x: 'sum(x)'\n"), 0o644),
		os.WriteFile(conf, []byte("engine: badengine\nrulesets:\n  - bad.yaml\n"), 0o644))
	if err != nil {
		t.Fatal(err)
	}
	_, err = loadConfigFile(conf)
	for _, want := range []string{conf + ":3:5: rulesets[0]: " + bad + ":3:3: ", "ttft_p95x", conf + `:1:1: engine: unknown engine "badengine"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("bad map: %v; want %q", err, want)
		}
	}
}
