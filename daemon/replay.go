package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/whyslow/whyslow/diagnose"
	"github.com/whyslow/whyslow/incident"
	"github.com/whyslow/whyslow/notifiers"
	"github.com/whyslow/whyslow/query"
	"github.com/whyslow/whyslow/rules"
	"github.com/whyslow/whyslow/rulesets"
	"github.com/whyslow/whyslow/verdict"
)

// ReplayOptions configure Replay.
type ReplayOptions struct {
	// Config supplies detect, incidents, triage and the engine facts; its
	// source, receivers, data dir and listeners are not used.
	Config Config
	// Metrics hold the past: a Prometheus (remote) or a bundle's store.
	Metrics query.Metrics
	// Traces, when set, add the per-request step to the triages.
	Traces diagnose.Traces
	// HistoryStart is where the metrics start (a bundle's first sample);
	// zero for a Prometheus (its history is taken as long enough).
	HistoryStart time.Time
	// From and To bound the cycles; Step is their spacing (default the
	// config's interval).
	From, To time.Time
	Step     time.Duration
	// OnNotification is called for every notification as the cycle that
	// sends it ends (optional; Result lists them all too).
	OnNotification func(*notifiers.Notification)
	Logger         *slog.Logger
}

// ReplayResult is what a replay would have done.
type ReplayResult struct {
	Notifications []*notifiers.Notification
	// Incidents are the incidents at the end, open first.
	Incidents []incident.Incident
	Cycles    int
	Queries   int64
	// Failed counts the cycles whose detection failed (the replay goes
	// on); LastError is the last such failure.
	Failed    int
	LastError error
	// NoData, when set, says the interval holds no series of a known
	// engine, with the reason `whyslow why` gives for it: the replay
	// proved nothing (its "0 notifications" would read as "all quiet").
	NoData *verdict.InsufficientReason
}

// ReplayReceiver is the one receiver a replay's notifications go to.
const ReplayReceiver = "replay"

// Replay runs the daemon's detect → incident → notify loop over a past
// interval on simulated time: every Step from From to To, with the same
// detector, tracker and triage a live daemon runs, and returns every
// notification it would have sent.
func Replay(ctx context.Context, o ReplayOptions) (*ReplayResult, error) {
	// Defaults first, so a fleet config keeps a fleet's (interval, engine
	// auto); then off with what a replay does not run.
	cfg := o.Config.WithDefaults()
	cfg.Source, cfg.EngineURLs, cfg.Receivers, cfg.DataDir, cfg.SlackCommand = SourceConfig{}, nil, nil, "", nil
	cfg.OTLP, cfg.GPU.Enabled = OTLPDisabled(), new(bool)
	// Every open incident is triaged every cycle: on simulated time a
	// wall-clock budget would make the result depend on the machine.
	cfg.Triage.CycleBudget = 24 * time.Hour
	if o.Step <= 0 {
		o.Step = cfg.ScrapeInterval
	}
	if !o.To.After(o.From) {
		return nil, fmt.Errorf("replay: --to %s is not after --from %s", o.To.Format(time.RFC3339), o.From.Format(time.RFC3339))
	}
	if n := o.To.Sub(o.From) / o.Step; n > maxReplayCycles {
		return nil, fmt.Errorf("replay: %s at a step of %s is %d cycles (at most %d): shorten the interval or raise --step", o.To.Sub(o.From), o.Step, n, maxReplayCycles)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	maps, err := cfg.Maps()
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	counted := CountQueries(o.Metrics)
	tri, err := TriageWith(counted, o.Traces, maps, cfg.Engine)
	if err != nil {
		return nil, err
	}
	now := o.From
	out := &replayOutbox{}
	d, err := New(Options{
		Config: cfg, Maps: maps, Metrics: counted, Scraper: replayScraper{}, Triage: tri, Outbox: out,
		Receivers: []string{ReplayReceiver}, OwnHistory: true, HistoryStart: o.HistoryStart,
		Now: func() time.Time { return now }, Logger: o.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	res := &ReplayResult{}
	var lastErr error
	for at := o.From; !at.After(o.To); at = at.Add(o.Step) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		now = at
		before := len(out.sent)
		if err := d.Tick(ctx, at); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			res.Failed++
			lastErr = err
		}
		res.Cycles++
		if o.OnNotification != nil {
			for _, n := range out.sent[before:] {
				o.OnNotification(n)
			}
		}
	}
	res.Notifications, res.LastError = out.sent, lastErr
	res.Incidents = d.Incidents()
	if !d.engineSeen && res.Failed < res.Cycles {
		// The engine as configured; none named: every known engine, as why has it.
		engine := o.Config.Engine
		if engine == "" {
			engine = "auto"
		}
		res.NoData = noDataReason(ctx, o.Metrics, maps, engine, cfg.Triage.Baseline, o.From, o.To)
	}
	res.Queries = counted.Queries()
	if res.Failed == res.Cycles {
		return res, fmt.Errorf("replay: every cycle's detection failed, the last with: %w", lastErr)
	}
	return res, nil
}

// noDataReason is why a triage of the whole interval, as `whyslow why`
// runs it, has nothing to judge.
func noDataReason(ctx context.Context, m query.Metrics, maps *rulesets.Maps, engine string, baseline time.Duration, from, to time.Time) *verdict.InsufficientReason {
	generic := &verdict.InsufficientReason{Code: verdict.InsufficientNoEngine, Message: fmt.Sprintf(
		"no series of a known engine (%s) between %s and %s", strings.Join(maps.Engines(), ", "), from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339))}
	rss, err := maps.For(engine)
	if err != nil {
		return generic
	}
	var others func() []*rules.Ruleset
	if engine != "auto" {
		others = func() []*rules.Ruleset { return maps.Others(engine) }
	}
	window := max(to.Sub(from), time.Minute)
	v, err := diagnose.Run(ctx, diagnose.Options{Metrics: m, Rulesets: rss, OtherEngines: others, Engine: engine,
		At: to, Window: window, Baseline: max(window, baseline)})
	if err != nil || v.InsufficientReason == nil {
		return generic
	}
	return v.InsufficientReason
}

// maxReplayCycles bounds one replay (a week at 15 s is 40320).
const maxReplayCycles = 50000

// replayScraper stands for the scrape a replay does not do: the data is
// already there.
type replayScraper struct{}

func (replayScraper) Scrape(context.Context, time.Time) []ScrapeResult {
	return []ScrapeResult{{Target: "replay"}}
}

// replayOutbox keeps every notification in memory, in order.
type replayOutbox struct {
	mu   sync.Mutex
	seen map[string]bool
	sent []*notifiers.Notification
}

func (r *replayOutbox) Enqueue(n *notifiers.Notification) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[string]bool{}
	}
	if r.seen[n.ID] {
		return false, nil
	}
	r.seen[n.ID] = true
	r.sent = append(r.sent, n)
	return true, nil
}

func (r *replayOutbox) Depth() int { return 0 }
