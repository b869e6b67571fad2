package bundle

import (
	"bytes"
	"context"
	"errors"
	"testing"
)

// FuzzParseMetrics checks that any input either loads or fails with a
// positioned error inside the input, and never panics.
func FuzzParseMetrics(f *testing.F) {
	f.Add([]byte("a 1 1\n# EOF\n"))
	f.Add([]byte("# TYPE a_total counter\na_total{x=\"y\"} 1 1700000000000\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := ReadMetrics(context.Background(), "metrics.om", data, &countingAppendable{})
		if err == nil {
			return
		}
		var pe *PosError
		if !errors.As(err, &pe) {
			return // e.g. commit errors carry no position
		}
		lines := bytes.Count(data, []byte{'\n'}) + 2
		if pe.Line < 1 || pe.Line > lines || pe.Col < 1 {
			t.Fatalf("bad position %d:%d (input has %d lines): %v", pe.Line, pe.Col, lines, err)
		}
	})
}

// FuzzParseIncident checks that incident.yaml parsing never panics and that
// its errors carry positions.
func FuzzParseIncident(f *testing.F) {
	f.Add([]byte("at: 2024-05-01T12:00:00Z\nwindow: 5m\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, err := ParseIncident("incident.yaml", data)
		if err == nil {
			return
		}
		var pe *PosError
		if !errors.As(err, &pe) || pe.Line < 1 || pe.Col < 1 {
			t.Fatalf("error without a position: %v", err)
		}
	})
}
