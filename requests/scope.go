package requests

import (
	"fmt"
	"slices"
	"strings"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// ScopeFilter keeps the traced requests of a scope. A scope label maps to
// what the spans say about a request: model_name (and model) to the model
// that served it (Model: gen_ai.response.model, else gen_ai.request.model),
// pod (and the scope's first target label, unless it is instance) to its
// pods (Pod, PrefillPod: k8s.pod.name, service.instance.id, host.name),
// namespace to k8s.namespace.name. As in PromQL, a request whose spans do
// not say is the empty value: it is kept only when the scope's matcher
// accepts "" (does not constrain the label). Labels without a mapping (job,
// instance, ...) do not filter.
type ScopeFilter []scopeMatcher

type scopeMatcher struct {
	m      *labels.Matcher
	values func(*RequestBreakdown) []string
}

// requestLabels are the scope labels with a span mapping.
var requestLabels = map[string]func(*RequestBreakdown) []string{
	"model_name": requestModel,
	"model":      requestModel,
	"pod":        requestPods,
	"namespace":  func(r *RequestBreakdown) []string { return []string{r.Namespace} },
}

func requestModel(r *RequestBreakdown) []string { return []string{r.Model} }

func requestPods(r *RequestBreakdown) []string {
	if r.PrefillPod != "" && r.PrefillPod != r.Pod {
		return []string{r.Pod, r.PrefillPod}
	}
	return []string{r.Pod}
}

// NewScopeFilter parses the scope's selector (PromQL label matchers
// without braces) into the matchers that apply to
func NewScopeFilter(selector string, targetLabels []string) (ScopeFilter, error) {
	if strings.TrimSpace(selector) == "" {
		return nil, nil
	}
	ms, err := parser.NewParser(parser.Options{}).ParseMetricSelector("{" + selector + "}")
	if err != nil {
		return nil, fmt.Errorf("selector %q: %w", selector, err)
	}
	var sc ScopeFilter
	for _, m := range ms {
		values, ok := requestLabels[m.Name]
		if !ok && len(targetLabels) > 0 && m.Name == targetLabels[0] && m.Name != "instance" {
			values, ok = requestPods, true
		}
		if ok {
			sc = append(sc, scopeMatcher{m: m, values: values})
		}
	}
	return sc, nil
}

// matches reports whether the request belongs to the scope: every mapped
// matcher accepts one of the request's values for its label.
func (sc ScopeFilter) matches(r *RequestBreakdown) bool {
	for _, c := range sc {
		if !slices.ContainsFunc(c.values(r), c.m.Matches) {
			return false
		}
	}
	return true
}

// Keep returns the requests of the scope.
func (sc ScopeFilter) Keep(reqs []RequestBreakdown) []RequestBreakdown {
	if len(sc) == 0 {
		return reqs
	}
	var out []RequestBreakdown
	for i := range reqs {
		if sc.matches(&reqs[i]) {
			out = append(out, reqs[i])
		}
	}
	return out
}
