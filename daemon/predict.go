package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/whyslow/whyslow/daemon/web"
	"github.com/whyslow/whyslow/incident"
	"github.com/whyslow/whyslow/rules"
	"github.com/whyslow/whyslow/verdict"
	"github.com/whyslow/whyslow/whatif"
)

// Predictions on the incident page (issue 28): what each catalogued fix
// would do, from the engine model fitted to the incident (whatif). They
// cost a second triage (with every signal value) and some two dozen
// bounded replays, a few CPU-seconds, so the cycle never computes them:
// the first view of an incident's page (or GET /api/v1/predicted) starts
// one computation in the background and the page says so; the page
// reloads itself and shows the result, kept per incident and verdict.
//
// Bounded: one computation at a time in the whole daemon, each within
// predictTimeout; an open incident's verdict changes every cycle, so a
// newer verdict is predicted again only once the kept prediction is
// predictEvery old (until then the kept one is shown, with its verdict's
// time); a resolved incident's verdict is final and predicted once.

const (
	predictTimeout = 2 * time.Minute
	predictEvery   = 5 * time.Minute
)

// PredictFunc predicts the catalogue's fixes for v (whatif.ForVerdict over
// the daemon's metrics in production; tests pass their own).
type PredictFunc func(ctx context.Context, v *verdict.Verdict) (*verdict.Predicted, error)

// predictor holds the incidents' predictions and the one computation.
type predictor struct {
	ctx    context.Context // ended by Shutdown
	cancel context.CancelFunc

	mu      sync.Mutex
	kept    map[string]*keptPrediction // by incident id
	running string                     // the incident being predicted ("": none)
	since   time.Time                  // when it started
	done    chan struct{}              // closed when no computation runs
}

// keptPrediction is an incident's last finished prediction.
type keptPrediction struct {
	revision  string // predictionRevision of the verdict it is for
	verdictAt time.Time
	at        time.Time // when it finished
	// predicted is the prediction, or why there is none (Missing).
	predicted *verdict.Predicted
	// failed says the computation failed (not a missing series): it is
	// tried again after predictEvery, even for a resolved incident.
	failed bool
}

func newPredictor() *predictor {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	close(done)
	return &predictor{ctx: ctx, cancel: cancel, kept: map[string]*keptPrediction{}, done: done}
}

// stop ends a running computation and waits for it (Shutdown).
func (p *predictor) stop() {
	p.cancel()
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	<-done
}

// predictionRevision tells an incident's verdicts apart: its time, and
// what a prediction of it reads (the windows, the scope, the engine and
// GPU). A verdict kept from an earlier cycle keeps its time (retriage.go),
// so it keeps its prediction.
func predictionRevision(v *verdict.Verdict) string {
	gpu := ""
	if v.GPU != nil {
		gpu = v.GPU.Class
	}
	return fmt.Sprintf("%d|%s|%s|%d|%d|%d|%s", v.At.UnixNano(), v.Scope.Selector, v.Engine,
		v.Incident.Start.UnixNano(), v.Incident.End.UnixNano(), v.Baseline.End.UnixNano(), gpu)
}

// predictState is an incident's prediction as the page and the API show
// it: the kept one (nil: none yet), whether it is the current verdict's,
// and whether a computation runs for the incident.
type predictState struct {
	kept      *keptPrediction
	current   bool
	computing bool
	since     time.Time
	// waiting says another incident's prediction holds the one slot.
	waiting bool
}

// predictionFor returns in's prediction state and starts a computation
// when one is due and none runs (see the package comment above).
func (d *Daemon) predictionFor(in incident.Incident) predictState {
	p := d.predictor
	v := in.Verdict
	rev := predictionRevision(v)
	now := d.opts.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	d.prunePredictions()
	k := p.kept[in.ID]
	st := predictState{kept: k, current: k != nil && k.revision == rev}
	if p.running == in.ID {
		st.computing, st.since = true, p.since
		return st
	}
	again := k != nil && now.Sub(k.at) >= predictEvery
	due := k == nil || (!st.current && (in.Status == incident.IncidentResolved || again)) || (k.failed && again)
	if !due {
		return st
	}
	if p.running != "" {
		st.waiting = true
		return st
	}
	if p.ctx.Err() != nil {
		return st // shutting down
	}
	p.running, p.since, p.done = in.ID, now, make(chan struct{})
	st.computing, st.since = true, now
	vc := *v
	go d.computePrediction(in.ID, rev, &vc, p.done)
	return st
}

// prunePredictions forgets the predictions of incidents the daemon no
// longer holds (p.mu held).
func (d *Daemon) prunePredictions() {
	p := d.predictor
	if len(p.kept) == 0 {
		return
	}
	held := map[string]bool{}
	for _, in := range d.Incidents() {
		held[in.ID] = true
	}
	for id := range p.kept {
		if !held[id] {
			delete(p.kept, id)
		}
	}
}

// computePrediction runs one prediction and keeps it.
func (d *Daemon) computePrediction(id, rev string, v *verdict.Verdict, done chan struct{}) {
	p := d.predictor
	defer close(done)
	ctx, cancel := context.WithTimeout(p.ctx, predictTimeout)
	defer cancel()
	start := time.Now()
	out, err := d.predict(ctx, v)
	k := &keptPrediction{revision: rev, verdictAt: v.At, at: d.opts.Now(), predicted: out, failed: err != nil}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		k.predicted = &verdict.Predicted{Missing: fmt.Sprintf("no prediction: not done within %s", predictTimeout)}
	case err != nil:
		k.predicted = &verdict.Predicted{Missing: "no prediction: " + d.secrets.Scrub(err.Error())}
	}
	if err != nil {
		d.log.Warn("Predicting the fixes failed", "incident", id, "err", k.predicted.Missing)
	} else {
		d.log.Info("Predicted the fixes", "incident", id, "took", time.Since(start).Round(time.Millisecond))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx.Err() == nil {
		p.kept[id] = k
	}
	p.running = ""
}

// currentPrediction is in's kept prediction when it is for in's current
// verdict (nil otherwise); it starts nothing.
func (d *Daemon) currentPrediction(in incident.Incident) *verdict.Predicted {
	if in.Verdict == nil {
		return nil
	}
	p := d.predictor
	p.mu.Lock()
	defer p.mu.Unlock()
	if k := p.kept[in.ID]; k != nil && k.revision == predictionRevision(in.Verdict) {
		return k.predicted
	}
	return nil
}

// predict is Options.Predict, else whatif over the daemon's metrics with
// the rulesets of v's engine and the configured scheduler.
func (d *Daemon) predict(ctx context.Context, v *verdict.Verdict) (*verdict.Predicted, error) {
	if d.opts.Predict != nil {
		return d.opts.Predict(ctx, v)
	}
	var rss []*rules.Ruleset
	if v.Status != verdict.StatusInsufficientData && v.Engine != "" {
		var err error
		if rss, err = d.opts.Maps.For(v.Engine); err != nil {
			return nil, err
		}
	}
	return whatif.ForVerdict(ctx, d.opts.Metrics, rss, v, d.Config().Scheduler.Rules())
}

// predictionsView is the page's predictions section for the state st.
func predictionsView(st predictState) *web.PredictionsView {
	out := &web.PredictionsView{}
	if st.kept != nil {
		out = web.Predictions(st.kept.predicted)
		if !st.current {
			out.Stale = "For the verdict triaged at " + timeUTC(st.kept.verdictAt) + ". An open incident's verdict changes every cycle; " +
				"its predictions are computed again at most every " + predictEvery.String() + "."
		}
	}
	switch {
	case st.computing && st.kept == nil:
		out.Computing = true
		out.Message = "Computing the predictions (the engine fitted to this incident, replayed with each fix) since " +
			timeUTC(st.since) + ": this page reloads itself and shows them when they are done."
	case st.waiting && st.kept == nil:
		out.Computing = true
		out.Message = "Waiting: another incident's predictions are being computed (one at a time); this page reloads itself."
	}
	return out
}

func timeUTC(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") }

// PredictedAnswer is the body of GET /api/v1/predicted.
type PredictedAnswer struct {
	Incident string `json:"incident"`
	// State is "ready" (Predicted is the current verdict's), "computing"
	// (a computation runs for the incident), "waiting" (another
	// incident's holds the one slot) or "kept" (Predicted is an earlier
	// verdict's; the next is due later).
	State string `json:"state"`
	// VerdictAt is the time of the verdict Predicted is for.
	VerdictAt time.Time          `json:"verdict_at,omitzero"`
	Predicted *verdict.Predicted `json:"predicted,omitempty"`
}

// handlePredicted is GET /api/v1/predicted?incident=ID: the incident's
// predictions, the computation started when one is due. 200 with a
// prediction (its verdict's time; state "ready" when it is the current
// verdict's), 202 with Retry-After while the first is computed.
func (d *Daemon) handlePredicted(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("incident")
	if id == "" {
		d.writeError(w, http.StatusBadRequest, errors.New("incident: give the incident's id (GET /api/v1/incidents lists them)"))
		return
	}
	in, ok := d.incidentByID(id)
	if !ok {
		d.writeError(w, http.StatusNotFound, fmt.Errorf("no incident %q", id))
		return
	}
	if in.Verdict == nil {
		d.retryLater(w, http.StatusConflict, 5*time.Second, errors.New("the incident has no verdict yet"))
		return
	}
	st := d.predictionFor(in)
	a := PredictedAnswer{Incident: in.ID, State: "kept"}
	switch {
	case st.current:
		a.State = "ready"
	case st.computing:
		a.State = "computing"
	case st.waiting:
		a.State = "waiting"
	}
	if st.kept == nil {
		w.Header().Set("Retry-After", "5")
		writeJSON(w, http.StatusAccepted, a)
		return
	}
	a.VerdictAt, a.Predicted = st.kept.verdictAt, st.kept.predicted
	writeJSON(w, http.StatusOK, a)
}
