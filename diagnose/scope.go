package diagnose

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/whyslow/whyslow/query"
	"github.com/whyslow/whyslow/rules"
	"github.com/whyslow/whyslow/verdict"
)

// ModelLabel is the label engines put the served model's name in (vLLM,
// SGLang and TensorRT-LLM all call it model_name).
const ModelLabel = "model_name"

// engineSeries matches the series of the known engines (their maps'
// series.names).
func engineSeries(known []rules.EngineSeries) string {
	var names []string
	for _, e := range known {
		if e.Names != "" {
			names = append(names, e.Names)
		}
	}
	return `__name__=~"` + strings.Join(names, "|") + `"`
}

// ScopeModels returns the distinct model names (ModelLabel values) of the
// known engines' series (rulesets.Series) under selector (PromQL label matchers without braces; may
// be empty) at time at, sorted. Series without a model name are not
// counted. It is one cheap query, for the daemon and `why` to tell whether
// a scope mixes several models.
func ScopeModels(ctx context.Context, m query.Metrics, known []rules.EngineSeries, selector string, at time.Time) ([]string, error) {
	sel := engineSeries(known) + `, ` + ModelLabel + `!=""`
	if s := strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(selector), "{"), "}")); s != "" {
		sel = s + ", " + sel
	}
	vec, _, err := m.Query(ctx, "count by ("+ModelLabel+") ({"+sel+"})", at)
	if err != nil {
		return nil, fmt.Errorf("scope models: %w", err)
	}
	seen := map[string]bool{}
	var out []string
	for _, s := range vec {
		name := string(s.Metric[ModelLabel])
		if name != "" && !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out, nil
}

// MixedModelsWarning is the verdict warning for a scope that holds several
// models, or "" for one model or none. Causes that compare targets (load
// imbalance, router skew) are then comparing different models.
func MixedModelsWarning(selector string, models []string) string {
	if len(models) < 2 {
		return ""
	}
	shown := models
	if len(shown) > 5 {
		shown = shown[:5]
	}
	list := strings.Join(shown, ", ")
	if len(models) > len(shown) {
		list += fmt.Sprintf(" and %d more", len(models)-len(shown))
	}
	sel := selector
	if strings.TrimSpace(sel) == "" {
		sel = "(no selector)"
	}
	return fmt.Sprintf("scope %s mixes %d models (%s): the ranking compares different models as if they were one; "+
		"triage one model at a time, e.g. %s=%q", sel, len(models), list, ModelLabel, models[0])
}

// CheckMixedModels adds MixedModelsWarning to v when the scope of v mixes
// several models at v.At (in the known engines' series). A failing query
// is no evidence either way and adds nothing.
func CheckMixedModels(ctx context.Context, m query.Metrics, known []rules.EngineSeries, v *verdict.Verdict) {
	if v == nil || m == nil {
		return
	}
	models, err := ScopeModels(ctx, m, known, v.Scope.Selector, v.At)
	if err != nil {
		return
	}
	if w := MixedModelsWarning(v.Scope.Selector, models); w != "" {
		v.Warnings = appendWarnings(v.Warnings, w)
	}
}

// NewestSamplesExpr is the PromQL for the newest sample time (unix
// seconds) by the groupBy labels of the series that say an engine is there
// (the vector selectors of the rulesets' detect expressions, with selector
// added): a scope whose value stays put has had no sample since.
func NewestSamplesExpr(rss []*rules.Ruleset, selector string, groupBy []string) string {
	sels := engineSelectors(rss, selector)
	parts := make([]string, len(sels))
	for i, s := range sels {
		parts[i] = "timestamp(" + s + ")"
	}
	return "max by (" + strings.Join(groupBy, ", ") + ") (" + strings.Join(parts, " or ") + ")"
}
