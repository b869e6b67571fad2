package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/common/model"

	"github.com/whyslow/whyslow/verdict"
)

// AlertmanagerPayload is the body of an Alertmanager webhook (version 4).
type AlertmanagerPayload struct {
	Version           string            `json:"version"`
	GroupKey          string            `json:"groupKey"`
	TruncatedAlerts   int               `json:"truncatedAlerts"`
	Status            string            `json:"status"`
	Receiver          string            `json:"receiver"`
	GroupLabels       map[string]string `json:"groupLabels"`
	CommonLabels      map[string]string `json:"commonLabels"`
	CommonAnnotations map[string]string `json:"commonAnnotations"`
	ExternalURL       string            `json:"externalURL"`
	Alerts            []Alert           `json:"alerts"`
}

// Alert is one alert of an Alertmanager webhook.
type Alert struct {
	Status       string            `json:"status"`
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations"`
	StartsAt     time.Time         `json:"startsAt"`
	EndsAt       time.Time         `json:"endsAt"`
	GeneratorURL string            `json:"generatorURL"`
	Fingerprint  string            `json:"fingerprint"`
}

// Alert statuses.
const (
	alertFiring   = "firing"
	alertResolved = "resolved"
)

// ParseAlertmanager decodes and validates a webhook body. Every problem is
// reported, each naming the field (e.g. `alerts[1].fingerprint: missing`);
// a payload with any problem is rejected whole.
func ParseAlertmanager(body []byte) (*AlertmanagerPayload, error) {
	var p AlertmanagerPayload
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("decode alertmanager webhook: %w", jsonErrorWithOffset(body, err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("decode alertmanager webhook: trailing data after the JSON object")
	}
	var errs []error
	if p.Version != "4" {
		errs = append(errs, fmt.Errorf("version: %q is not supported (want \"4\")", p.Version))
	}
	if p.Status != alertFiring && p.Status != alertResolved {
		errs = append(errs, fmt.Errorf("status: %q (want firing or resolved)", p.Status))
	}
	if len(p.Alerts) == 0 {
		errs = append(errs, errors.New("alerts: empty"))
	}
	for i, a := range p.Alerts {
		where := fmt.Sprintf("alerts[%d]", i)
		if a.Status != alertFiring && a.Status != alertResolved {
			errs = append(errs, fmt.Errorf("%s.status: %q (want firing or resolved)", where, a.Status))
		}
		if a.Fingerprint == "" {
			errs = append(errs, fmt.Errorf("%s.fingerprint: missing", where))
		}
		if a.StartsAt.IsZero() {
			errs = append(errs, fmt.Errorf("%s.startsAt: missing", where))
		}
		if len(a.Labels) == 0 {
			errs = append(errs, fmt.Errorf("%s.labels: empty", where))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("invalid alertmanager webhook: %w", err)
	}
	return &p, nil
}

// jsonErrorWithOffset adds the byte offset to a JSON syntax or type error.
func jsonErrorWithOffset(body []byte, err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("offset %d: %w", se.Offset, err)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Errorf("field %s at offset %d: want %s, got %s", te.Field, te.Offset, te.Type, te.Value)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return errors.New("empty body")
	}
	return err
}

// AlertScope maps an alert's labels to a triage scope: each alert label
// named in mapping becomes a selector matcher on the mapped label, combined
// with base (the detector's selector). The key is canonical (sorted), so the
// same labels always give the same incident.
func AlertScope(labels map[string]string, mapping map[string]string, base string) (string, verdict.Scope) {
	pairs := map[string]string{}
	for from, to := range mapping {
		if v := labels[from]; v != "" {
			pairs[to] = v
		}
	}
	names := make([]string, 0, len(pairs))
	for n := range pairs {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names)+1)
	if base != "" {
		parts = append(parts, base)
	}
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s=%q", n, pairs[n]))
	}
	key := strings.Join(parts, ",")
	s := verdict.Scope{Selector: key}
	if len(pairs) > 0 {
		s.Labels = pairs
	}
	return key, s
}

// alertSeverity reads the conventional severity label.
func alertSeverity(labels map[string]string) verdict.Severity {
	switch strings.ToLower(labels["severity"]) {
	case "critical", "page", "error":
		return verdict.SeverityCritical
	case "":
		return verdict.SeverityNone
	}
	return verdict.SeverityWarning
}

// canonicalSelector normalises a selector given by an API caller (equality
// matchers only, any order, optional braces) to the key form incidents use.
func canonicalSelector(sel string) string {
	sel = strings.TrimSpace(sel)
	sel = strings.TrimSuffix(strings.TrimPrefix(sel, "{"), "}")
	if sel == "" {
		return ""
	}
	ms, err := parseMatchers(sel)
	if err != nil {
		return sel
	}
	sort.Strings(ms)
	return strings.Join(ms, ",")
}

// parseMatchers splits a selector into canonical `name<op>"value"` strings.
func parseMatchers(sel string) ([]string, error) {
	p, err := promqlParser().ParseMetricSelector("{" + sel + "}")
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(p))
	for _, m := range p {
		if !model.LabelName(m.Name).IsValidLegacy() {
			return nil, fmt.Errorf("invalid label name %q", m.Name)
		}
		if m.Name == model.MetricNameLabel {
			// The scope narrows every rule's query by labels; each query
			// names its own metric, and a second name is a query error.
			return nil, errors.New("__name__ cannot be part of a scope: give label matchers such as model_name=\"llama\"")
		}
		out = append(out, fmt.Sprintf("%s%s%q", m.Name, m.Type, m.Value))
	}
	return out, nil
}
