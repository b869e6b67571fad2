package notifiers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Clock is the time source of the retry stage and the outbox; tests pass a
// fake one to simulate minutes of downtime without sleeping.
type Clock interface {
	Now() time.Time
	// Sleep waits d or until ctx is done, returning ctx.Err() in that case.
	Sleep(ctx context.Context, d time.Duration) error
}

// RealClock is the wall clock.
var RealClock Clock = realClock{}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Results of a delivery round, the `result` label of
// whyslow_notifications_total.
const (
	ResultSuccess = "success"
	// ResultFailure is a permanent failure: the notification is dropped.
	ResultFailure = "failure"
	// ResultRetryLater is a retryable failure after the last attempt of a
	// round: the outbox keeps the notification and tries again later.
	ResultRetryLater = "retry_later"
)

// Metrics are the delivery metrics shared by every receiver.
type Metrics struct {
	notifications *prometheus.CounterVec
	failures      *prometheus.CounterVec
	latency       *prometheus.HistogramVec
}

// NewMetrics creates the delivery metrics and registers them with reg (nil:
// not registered). Registering twice with the same registry reuses the
// collectors already there.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		notifications: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "whyslow_notifications_total",
			Help: "Notification delivery rounds by receiver and result (success, failure, retry_later).",
		}, []string{"receiver", "result"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "whyslow_notification_failures_total",
			Help: "Failed notification delivery attempts by receiver and reason.",
		}, []string{"receiver", "reason"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "whyslow_notification_latency_seconds",
			Help:    "Duration of one notification delivery attempt.",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"receiver"}),
	}
	var err error
	if m.notifications, err = Register(reg, m.notifications); err != nil {
		return nil, err
	}
	if m.failures, err = Register(reg, m.failures); err != nil {
		return nil, err
	}
	if m.latency, err = Register(reg, m.latency); err != nil {
		return nil, err
	}
	return m, nil
}

// Register registers c with reg and returns it, or the equal collector that
// is already registered. A nil reg registers nothing.
func Register[T prometheus.Collector](reg prometheus.Registerer, c T) (T, error) {
	if reg == nil {
		return c, nil
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(T); ok {
				return existing, nil
			}
		}
		return c, fmt.Errorf("register metrics: %w", err)
	}
	return c, nil
}

// RetryOptions configure the retry stage. Zero values get defaults.
type RetryOptions struct {
	// MaxAttempts per delivery round (default 5); a notifier implementing
	// MaxAttempter overrides it.
	MaxAttempts int
	// InitialBackoff is the wait after the first failed attempt (default 1s).
	InitialBackoff time.Duration
	// MaxBackoff caps the exponential backoff (default 1m).
	MaxBackoff time.Duration
	// Multiplier grows the backoff per attempt (default 2).
	Multiplier float64
	// Jitter in [0,1] randomises each wait down by up to that fraction
	// (default 0.2: a wait of 10s becomes 8–10s). Negative disables jitter.
	Jitter float64
	// MaxRetryAfter caps a receiver's Retry-After hint (default 10m).
	MaxRetryAfter time.Duration
	// Clock is the time source (default RealClock).
	Clock Clock
	// Rand returns a number in [0,1) for jitter (default math/rand/v2).
	Rand func() float64
	// Logger logs attempts (default slog.Default()).
	Logger *slog.Logger
	// Metrics counts deliveries (default: unregistered metrics).
	Metrics *Metrics
}

// Retrier is the shared retry stage: it calls a notifier until it succeeds,
// fails permanently, or runs out of attempts, backing off exponentially with
// jitter and honouring the receiver's Retry-After hint.
type Retrier struct {
	o RetryOptions
}

// NewRetrier returns a retry stage with o's defaults filled in.
func NewRetrier(o RetryOptions) *Retrier {
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 5
	}
	if o.InitialBackoff <= 0 {
		o.InitialBackoff = time.Second
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = time.Minute
	}
	if o.MaxBackoff < o.InitialBackoff {
		o.MaxBackoff = o.InitialBackoff
	}
	if o.Multiplier < 1 {
		o.Multiplier = 2
	}
	if o.Jitter == 0 {
		o.Jitter = 0.2
	}
	if o.Jitter < 0 {
		o.Jitter = 0
	}
	if o.Jitter > 1 {
		o.Jitter = 1
	}
	if o.MaxRetryAfter <= 0 {
		o.MaxRetryAfter = 10 * time.Minute
	}
	if o.Clock == nil {
		o.Clock = RealClock
	}
	if o.Rand == nil {
		o.Rand = rand.Float64
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Metrics == nil {
		o.Metrics, _ = NewMetrics(nil)
	}
	return &Retrier{o: o}
}

// Clock returns the retrier's time source.
func (r *Retrier) Clock() Clock { return r.o.Clock }

// Backoff is the wait after failed attempt number attempt (1-based), before
// jitter: InitialBackoff·Multiplier^(attempt-1), capped at MaxBackoff.
func (r *Retrier) Backoff(attempt int) time.Duration {
	d := float64(r.o.InitialBackoff) * math.Pow(r.o.Multiplier, float64(attempt-1))
	if d > float64(r.o.MaxBackoff) || math.IsInf(d, 0) || math.IsNaN(d) {
		return r.o.MaxBackoff
	}
	return time.Duration(d)
}

// wait is the jittered backoff, raised to the retry-after hint (capped).
func (r *Retrier) wait(attempt int, err error) time.Duration {
	d := r.Backoff(attempt)
	d -= time.Duration(float64(d) * r.o.Jitter * r.o.Rand())
	if ra := RetryAfterOf(err); ra > 0 {
		d = max(d, min(ra, r.o.MaxRetryAfter))
	}
	return d
}

// Deliver runs one delivery round of n through notifier. It returns nil on
// success; otherwise the last error and whether the notification is still
// worth retrying later (a retryable failure after the last attempt, or a
// cancelled context, which is never a permanent failure). Every attempt is logged and counted.
func (r *Retrier) Deliver(ctx context.Context, notifier Notifier, n *Notification) (retry bool, err error) {
	log := r.o.Logger.With("notifier", n.Receiver, "notification", n.ID)
	maxAttempts := r.o.MaxAttempts
	if ma, ok := notifier.(MaxAttempter); ok && ma.MaxAttempts() > 0 {
		maxAttempts = ma.MaxAttempts()
	}
	m := r.o.Metrics
	for attempt := 1; ; attempt++ {
		start := r.o.Clock.Now()
		retry, err = notifier.Notify(ctx, n)
		m.latency.WithLabelValues(n.Receiver).Observe(r.o.Clock.Now().Sub(start).Seconds())
		if err == nil {
			m.notifications.WithLabelValues(n.Receiver, ResultSuccess).Inc()
			log.Debug("Notification delivered", "attempt", attempt, "kind", n.Kind)
			return false, nil
		}
		reason := ReasonOf(err)
		m.failures.WithLabelValues(n.Receiver, reason.String()).Inc()
		if !retry && ctx.Err() == nil {
			m.notifications.WithLabelValues(n.Receiver, ResultFailure).Inc()
			log.Error("Notification failed, not retrying", "attempt", attempt, "reason", reason, "err", err)
			return false, err
		}
		if attempt >= maxAttempts || ctx.Err() != nil {
			m.notifications.WithLabelValues(n.Receiver, ResultRetryLater).Inc()
			log.Warn("Notification failed, will retry later", "attempts", attempt, "reason", reason, "err", err)
			return true, err
		}
		d := r.wait(attempt, err)
		log.Warn("Notification attempt failed, retrying", "attempt", attempt, "reason", reason, "backoff", d, "err", err)
		if serr := r.o.Clock.Sleep(ctx, d); serr != nil {
			m.notifications.WithLabelValues(n.Receiver, ResultRetryLater).Inc()
			return true, err
		}
	}
}
