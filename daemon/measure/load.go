package main

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"

	"github.com/whyslow/whyslow/testbed/sim"
	"github.com/whyslow/whyslow/testbed/simtrace"
	"github.com/whyslow/whyslow/testbed/simtrace/sdkexport"
)

// spansPerRequest is what simtrace emits per request with a gateway:
// gateway.request, gateway.request_orchestration, the prefix-cache scorer
// and the engine's llm_request.
const spansPerRequest = 4

// spanLoad sends spans at a fixed rate until stopped: every 100 ms one
// export of rate/10 spans through the SDK's OTLP/HTTP exporter, so the
// load is bounded by the rate and by the run's duration.
type spanLoad struct {
	cancel       context.CancelFunc
	done         sync.WaitGroup
	sent, failed atomic.Int64
}

func startSpanLoad(ctx context.Context, endpoint string, rate int) (*spanLoad, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, err
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(u.Host), otlptracehttp.WithInsecure(),
		otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: false}))
	if err != nil {
		return nil, fmt.Errorf("otlp exporter: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	l := &spanLoad{cancel: cancel}
	perTick := max(rate/10/spansPerRequest, 1)
	l.done.Add(1)
	go func() {
		defer l.done.Done()
		defer exp.Shutdown(context.Background())
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		var seq int
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-tick.C:
				b := simtrace.New(simtrace.Options{Gateway: true, Seed: 1})
				for range perTick {
					seq++
					b.Add(request(seq, now))
				}
				if err := sdkexport.Export(ctx, b, exp); err != nil {
					l.failed.Add(int64(perTick * spansPerRequest))
					continue
				}
				l.sent.Add(int64(perTick * spansPerRequest))
			}
		}
	}()
	return l, nil
}

// request is one healthy-looking request that finished at now.
func request(seq int, now time.Time) sim.RequestRecord {
	arrival := now.Add(-time.Duration(800+seq%400) * time.Millisecond)
	return sim.RequestRecord{
		ID: "req-" + strconv.Itoa(seq), Pod: "vllm-" + strconv.Itoa(seq%4), Model: "meta-llama/Llama-3.1-8B-Instruct",
		Arrival: arrival, Queued: arrival.Add(2 * time.Millisecond), Scheduled: arrival.Add(20 * time.Millisecond),
		FirstToken: arrival.Add(120 * time.Millisecond), Finished: now,
		PromptTokens: 400 + seq%1600, OutputTokens: 100 + seq%300, MaxTokens: 512, FinishedReason: "stop",
	}
}

// stop ends the load and returns the spans sent and those whose export failed.
func (l *spanLoad) stop() (sent, failed int64) {
	l.cancel()
	l.done.Wait()
	return l.sent.Load(), l.failed.Load()
}
