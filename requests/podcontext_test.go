package requests

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
)

// failingMetrics fails every query.
type failingMetrics struct{}

func (failingMetrics) Query(context.Context, string, time.Time) (model.Vector, []string, error) {
	return nil, nil, errors.New("not used")
}

func (failingMetrics) QueryRange(context.Context, string, time.Time, time.Time, time.Duration) (model.Matrix, []string, error) {
	return nil, nil, errors.New("not used")
}

func TestPodContextErrors(t *testing.T) {
	m := failingMetrics{}
	_, _, err := PodContext(context.Background(), m, PodContextQuery{Start: rqT0, End: rqT0.Add(time.Minute)})
	if err == nil || !strings.Contains(err.Error(), "pod context") {
		t.Errorf("err = %v", err)
	}
}
