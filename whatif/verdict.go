package whatif

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/whyslow/whyslow/rules"
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
// TTFT p95, the fixes the data cannot support declined with the reason,
// and NoneHelps said when no fix is predicted to help.
func (m *Model) Verdict() *verdict.Predicted {
	out, _ := m.VerdictWithin(context.Background())
	return out
}

// VerdictWithin is Verdict ending at ctx's end, checked before each fix
// (a fix's replays are bounded themselves): nil and ctx's error then.
func (m *Model) VerdictWithin(ctx context.Context) (*verdict.Predicted, error) {
	out := &verdict.Predicted{Fit: m.Fit.String(), Calibration: m.Quality(), PoorFit: m.Poor(),
		Incident: &verdict.PredictedValues{TTFTP95: Round4(m.Incident.TTFTP95), ITLP95: Round4(m.Incident.ITLP95),
			Throughput: Round4(m.Incident.Throughput)}}
	s := m.In.Scheduler
	var predicted []*Prediction
	for _, f := range Catalogue(Fix{MaxNumBatchedTokens: s.MaxNumBatchedTokens, MaxNumSeqs: s.MaxNumSeqs}) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		p, err := m.Predict(f)
		if err != nil {
			out.Declined = append(out.Declined, verdict.DeclinedFix{Fix: f.String(), Reason: err.Error()})
			continue
		}
		predicted = append(predicted, p)
		rg := func(r Range) verdict.PredictedRange {
			return verdict.PredictedRange{Median: Round4(r.Median), Low: Round4(r.Low), High: Round4(r.High)}
		}
		out.Fixes = append(out.Fixes, verdict.FixPrediction{Fix: f.String(), TTFTP95: rg(p.TTFTP95), ITLP95: rg(p.ITLP95),
			Throughput: rg(p.Throughput), Trade: p.Trade})
	}
	sort.SliceStable(out.Fixes, func(i, j int) bool { return out.Fixes[i].TTFTP95.Median < out.Fixes[j].TTFTP95.Median })
	out.NoneHelps = m.NoneHelps(predicted)
	return out, nil
}

// Helps says the prediction p lowers the TTFT or the inter-token p95 of
// the model's incident by more than Unchanged with every replay seed
// agreeing (the incident's value above the seeds' whole range): a smaller
// change, or one the seeds disagree on, cannot be told from the replay's
// own noise, and ranking fixes on it would rank noise.
func (m *Model) Helps(p *Prediction) bool {
	better := func(r Range, incident float64) bool {
		return incident > 0 && r.Median < incident*(1-Unchanged) && r.High < incident
	}
	return better(p.TTFTP95, m.Incident.TTFTP95) || better(p.ITLP95, m.Incident.ITLP95)
}

// NoneHelps is the sentence a verdict or whatif says when none of the
// catalogue's predictions ps helps ("" when one helps or nothing was
// predicted): no fix is then first.
func (m *Model) NoneHelps(ps []*Prediction) string {
	if len(ps) == 0 || slices.ContainsFunc(ps, m.Helps) {
		return ""
	}
	return fmt.Sprintf("no catalogued fix is predicted to help: none lowers the model's TTFT p95 (%s) or inter-token p95 (%s) "+
		"by more than %.0f%% beyond the replay seeds' range", rules.FormatSeconds(m.Incident.TTFTP95), rules.FormatSeconds(m.Incident.ITLP95), 100*Unchanged)
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
