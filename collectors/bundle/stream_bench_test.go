package bundle

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"

	"github.com/whyslow/whyslow/testbed/sim"
)

var (
	simOnce    sync.Once
	simMetrics []byte
	simAt      time.Time
	simErr     error
)

// simBundle is the engine model's kv_pressure bundle with 4 replicas
// (OpenMetrics, about 83 minutes), recorded once per test binary.
func simBundle(b *testing.B) ([]byte, time.Time) {
	simOnce.Do(func() {
		sb, err := sim.Record(context.Background(), sim.Options{Scenario: "kv_pressure", Seed: 1, Replicas: 4})
		if err != nil {
			simErr = err
			return
		}
		simMetrics, simAt = sb.Metrics, sb.Incident.At
	})
	if simErr != nil {
		b.Fatal(simErr)
	}
	return simMetrics, simAt
}

// BenchmarkParserVsTextparse times, in one run, Prometheus's own
// model/textparse alone over the sim bundle (Next and Series for every
// entry: the least any textparse user does), this package's stream parser
// over the same text (positions, blocks, timestamps checked), and the
// stream parser keeping only a triage's windows (as `why --bundle` does).
// It reports each as a ratio to textparse.
func BenchmarkParserVsTextparse(b *testing.B) {
	data, at := simBundle(b)
	keep := []Window{
		{From: at.Add(-30 * time.Minute), To: at},
		{From: at.Add(-90 * time.Minute), To: at.Add(-time.Hour)},
	}
	var tTextparse, tStream, tKeep time.Duration
	var n, nStream, nKeep int
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		start := time.Now()
		p, err := textparse.New(data, FormatOpenMetrics.ContentType(), labels.NewSymbolTable(), textparse.ParserOptions{})
		if err != nil {
			b.Fatal(err)
		}
		n = 0
		for {
			et, err := p.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			if et == textparse.EntrySeries {
				p.Series()
				n++
			}
		}
		tTextparse += time.Since(start)

		for _, c := range []struct {
			keep []Window
			d    *time.Duration
			n    *int
		}{{nil, &tStream, &nStream}, {keep, &tKeep, &nKeep}} {
			start = time.Now()
			sp, err := NewStreamParser("metrics.om", bytes.NewReader(data), LoadOptions{Keep: c.keep})
			if err != nil {
				b.Fatal(err)
			}
			*c.n = 0
			for {
				ok, err := sp.Next()
				if err != nil {
					b.Fatal(err)
				}
				if !ok {
					break
				}
				*c.n++
			}
			*c.d += time.Since(start)
		}
	}
	if nStream != n {
		b.Fatalf("stream parser read %d samples, textparse %d", nStream, n)
	}
	b.ReportMetric(float64(n), "samples")
	b.ReportMetric(float64(nKeep), "kept")
	b.ReportMetric(float64(tStream)/float64(tTextparse), "stream/textparse")
	b.ReportMetric(float64(tKeep)/float64(tTextparse), "keep/textparse")
	b.ReportMetric(float64(len(data))*float64(b.N)/tTextparse.Seconds()/1e6, "textparse-MB/s")
}
