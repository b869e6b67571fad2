package triage

import (
	"context"
	"time"

	"github.com/prometheus/common/model"
)

// Metrics answers PromQL. The embedded store and a remote Prometheus both
// implement it, so a ruleset behaves the same on a bundle and in production.
type Metrics interface {
	// Query runs an instant query at the given time. Warnings are returned
	// alongside a result and surface in the verdict.
	Query(ctx context.Context, expr string, at time.Time) (model.Vector, []string, error)
	// QueryRange runs a range query over [start, end] at the given step.
	QueryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) (model.Matrix, []string, error)
}
