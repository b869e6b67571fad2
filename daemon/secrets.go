package daemon

import "github.com/whyslow/whyslow/internal/redact"

// ConfigSecrets returns every secret value of cfg, for the redaction layer:
// the API token, engine URL passwords and query values, webhook URLs
// (whole), headers and HMAC secrets, Slack tokens and webhook URLs, the
// slash command's signing secret.
func ConfigSecrets(cfg Config) *redact.Secrets {
	s := redact.NewSecrets(cfg.API.Token)
	for _, u := range cfg.EngineURLs {
		s.AddURL(u, false)
	}
	if p := cfg.Source.Prometheus; p != nil {
		s.AddURL(p.URL, false)
		s.Add(p.BearerToken)
		if p.BasicAuth != nil {
			s.Add(p.BasicAuth.Password)
		}
		for _, v := range p.Headers {
			s.AddHeader(v)
		}
	}
	for _, r := range cfg.Receivers {
		switch {
		case r.Webhook != nil:
			s.AddURL(string(r.Webhook.URL), true)
			s.Add(string(r.Webhook.HMACSecret))
			for _, v := range r.Webhook.Headers {
				s.AddHeader(string(v))
			}
		case r.Alertmanager != nil:
			r.Alertmanager.AddSecrets(s)
		case r.Slack != nil:
			s.Add(string(r.Slack.Token))
			s.AddURL(string(r.Slack.WebhookURL), true)
			for _, rt := range r.Slack.Routes {
				s.AddURL(string(rt.WebhookURL), true)
			}
		}
	}
	if cfg.SlackCommand != nil {
		s.Add(string(cfg.SlackCommand.SigningSecret))
	}
	return s
}
