package alertmanager

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/whyslow/whyslow/internal/redact"
	"github.com/whyslow/whyslow/notifiers"
	"github.com/whyslow/whyslow/testbed/secrettest"
)

func TestConfigYAML(t *testing.T) {
	src := `
url: http://127.0.0.1:9093/am
bearer_token: tok-abcdef
headers: {X-Scope-OrgID: tenant-a}
timeout: 5s
resend_interval: 30s
resolved_retention: 1h
labels: {cluster: prod}
`
	var c Config
	dec := yaml.NewDecoder(strings.NewReader(src))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		t.Fatal(err)
	}
	if err := c.WithDefaults().Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Timeout != 5*time.Second || c.ResendInterval != 30*time.Second || c.ResolvedRetention != time.Hour ||
		c.Labels["cluster"] != "prod" || string(c.BearerToken) != "tok-abcdef" {
		t.Errorf("decoded %+v", c)
	}
	if ep, _ := c.endpoint(); ep != "http://127.0.0.1:9093/am/api/v2/alerts" {
		t.Errorf("endpoint = %q", ep)
	}
	d := Config{URL: "http://am"}.WithDefaults()
	if d.Timeout != 10*time.Second || d.ResendInterval != time.Minute || d.ResolvedRetention != 15*time.Minute {
		t.Errorf("defaults = %+v", d)
	}
}

// Shown as JSON or YAML (the config API, a dump), the secrets stay hidden.
func TestConfigHidesSecrets(t *testing.T) {
	tok, pw, hdr := secrettest.Secret("bearer"), secrettest.Secret("basicpw"), secrettest.Secret("hdr")
	check := secrettest.New(t, tok, pw, hdr)
	c := Config{URL: "http://am", BearerToken: notifiers.Secret(tok), BasicAuth: &BasicAuth{Username: "u", Password: notifiers.Secret(pw)},
		Headers: map[string]notifiers.Secret{"X-Token": notifiers.Secret(hdr)}}
	j, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	check.Bytes("json", j)
	y, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	check.Bytes("yaml", y)

	s := redact.NewSecrets()
	c.AddSecrets(s)
	var b bytes.Buffer
	b.WriteString(s.Scrub("Authorization: Bearer " + tok + " " + pw + " " + hdr))
	check.Bytes("scrubbed", b.Bytes())
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want []string // every one must appear
	}{
		{"ok", Config{URL: "https://am.example:9093/prefix", Labels: map[string]string{"cluster": "prod"}}, nil},
		{"no url", Config{}, []string{"url is required"}},
		{"bad scheme", Config{URL: "ftp://am"}, []string{`url scheme must be http or https, not "ftp"`}},
		{"no host", Config{URL: "http:///x"}, []string{"has no host"}},
		{"unparsable", Config{URL: "http://am:port"}, []string{"url", "not a valid URL"}},
		{"query", Config{URL: "http://am?x=1"}, []string{"must not have a query"}},
		{"negative durations", Config{URL: "http://am", Timeout: -1, ResendInterval: -time.Second, ResolvedRetention: -time.Minute},
			[]string{"timeout must not be negative", "resend_interval must not be negative", "resolved_retention must not be negative"}},
		{"reserved labels", Config{URL: "http://am", Labels: map[string]string{"alertname": "x", "severity": "page"}},
			[]string{`labels: "alertname" is set by whyslow`, `labels: "severity" is set by whyslow`}},
		{"invalid labels", Config{URL: "http://am", Labels: map[string]string{"a-b": "x", "__meta": "y", "empty": "", "bad": "\xff"}},
			[]string{`labels: "a-b" is not a valid label name`, `labels: "__meta": names starting with __ are reserved`,
				`labels: "empty" has an empty value`, `labels: "bad" value is not valid UTF-8`}},
		{"two auths", Config{URL: "http://am", BearerToken: "t", BasicAuth: &BasicAuth{Username: "u"}},
			[]string{"bearer_token and basic_auth are both set"}},
		{"basic without user", Config{URL: "http://am", BasicAuth: &BasicAuth{Password: "p"}}, []string{"basic_auth.username is required"}},
		{"headers", Config{URL: "http://am", BearerToken: "t", Headers: map[string]notifiers.Secret{
			"Content-Type": "x", "Authorization": "y", "Bad Name": "z", "X-Ok": "a\nb"}},
			[]string{`headers: "Content-Type" is set by whyslow`, "headers: Authorization conflicts", `headers: name "Bad Name" is invalid`,
				`headers: "X-Ok" value contains a line break`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.want == nil {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nlacks %q", err, w)
				}
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, "alertmanager: ") {
					t.Errorf("error line %q does not name the receiver kind", line)
				}
			}
		})
	}
}

func TestValidateHidesURLPassword(t *testing.T) {
	pw := secrettest.Secret("pw")
	check := secrettest.New(t, pw)
	check.Error("validate", Config{URL: "http://u:" + pw + "@:bad"}.Validate())
	check.Error("validate", Config{URL: "ftp://u:" + pw + "@am"}.Validate())
}
