package sim

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"testing"
)

// trimmedRecording is what the tests check of one trimmed narrow recording
// (Record with Trim): TestNarrowDrawsUnchanged its metrics' hash,
// TestScenarioSignals its windows' signals. Both read every scenario at seed
// 1; Record is deterministic (TestRecordDeterministic), so one recording per
// package run serves both. Only these facts are kept, not the bundle (tens
// of MiB each).
type trimmedRecording struct {
	// metricsSHA256 is the hex SHA-256 of the metrics less the API server's
	// http_requests family (see withoutFamily).
	metricsSHA256 string
	base, now     windowSignals // bundleSignals of the recording
	truth         Truth
}

// trimmedRecordings holds one func() (*trimmedRecording, error) per trimmedKey.
var trimmedRecordings sync.Map

type trimmedKey struct {
	scenario string
	seed     int64
}

// recordTrimmed records scenario at seed with Trim, once per package run.
func recordTrimmed(t *testing.T, scenario string, seed int64) *trimmedRecording {
	t.Helper()
	once, _ := trimmedRecordings.LoadOrStore(trimmedKey{scenario, seed}, sync.OnceValues(func() (*trimmedRecording, error) {
		// Not the test's context: a later test reuses the result.
		b, err := Record(context.Background(), Options{Scenario: scenario, Seed: seed, Trim: true})
		if err != nil {
			return nil, err
		}
		base, now, err := incidentSignals(b.Metrics, b.Incident)
		if err != nil {
			return nil, err
		}
		return &trimmedRecording{
			metricsSHA256: fmt.Sprintf("%x", sha256.Sum256(withoutFamily(b.Metrics, "http_requests"))),
			base:          base,
			now:           now,
			truth:         b.Truth,
		}, nil
	}))
	r, err := once.(func() (*trimmedRecording, error))()
	if err != nil {
		t.Fatal(err)
	}
	return r
}
