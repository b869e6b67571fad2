package whatif

import (
	"math"
	"sort"

	"github.com/whyslow/whyslow/verdict"
)

// Catalogue is the verdicts' usual remedies as input changes of the
// incident's scheduler s: replicas ×2, the KV pool ×1.5, the token budget
// ×2, half the running bound, prefix hits, clocks, even routing.
func Catalogue(s Fix) []Fix {
	out := []Fix{{ReplicasFactor: 2}, {KVFactor: 1.5}}
	if s.MaxNumBatchedTokens > 0 {
		out = append(out, Fix{MaxNumBatchedTokens: 2 * s.MaxNumBatchedTokens})
	}
	if s.MaxNumSeqs >= 2 {
		out = append(out, Fix{MaxNumSeqs: s.MaxNumSeqs / 2})
	}
	return append(out, Fix{RestorePrefix: true}, Fix{RestoreClock: true}, Fix{Rebalance: true})
}

// Verdict predicts the catalogue for the verdict: ordered by predicted
// TTFT p95, the fixes the data cannot support declined with the reason.
func (m *Model) Verdict() *verdict.Predicted {
	out := &verdict.Predicted{Fit: m.Fit.String(), Calibration: m.Quality(), PoorFit: m.Poor(),
		Incident: &verdict.PredictedValues{TTFTP95: Round4(m.Incident.TTFTP95), ITLP95: Round4(m.Incident.ITLP95),
			Throughput: Round4(m.Incident.Throughput)}}
	s := m.In.Scheduler
	for _, f := range Catalogue(Fix{MaxNumBatchedTokens: s.MaxNumBatchedTokens, MaxNumSeqs: s.MaxNumSeqs}) {
		p, err := m.Predict(f)
		if err != nil {
			out.Declined = append(out.Declined, verdict.DeclinedFix{Fix: f.String(), Reason: err.Error()})
			continue
		}
		rg := func(r Range) verdict.PredictedRange {
			return verdict.PredictedRange{Median: Round4(r.Median), Low: Round4(r.Low), High: Round4(r.High)}
		}
		out.Fixes = append(out.Fixes, verdict.FixPrediction{Fix: f.String(), TTFTP95: rg(p.TTFTP95), ITLP95: rg(p.ITLP95),
			Throughput: rg(p.Throughput), Trade: p.Trade})
	}
	sort.SliceStable(out.Fixes, func(i, j int) bool { return out.Fixes[i].TTFTP95.Median < out.Fixes[j].TTFTP95.Median })
	return out
}

// Round4 keeps four significant digits (0 for a value that is not finite):
// what predictions print and store.
func Round4(x float64) float64 {
	if x == 0 || math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	mag := math.Pow(10, 3-math.Floor(math.Log10(math.Abs(x))))
	return math.Round(x*mag) / mag
}
