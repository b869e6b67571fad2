package collectors

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// gaugeCollector sends one gauge and returns err.
func gaugeCollector(name string, v float64, err error) Collector {
	desc := prometheus.NewDesc(name, "test gauge", nil, nil)
	return CollectorFunc(func(_ context.Context, ch chan<- prometheus.Metric) error {
		if err != nil {
			return err
		}
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v)
		return nil
	})
}

// gather registers r with a fresh prometheus registry and returns the
// families by name.
func gather(t *testing.T, r *Registry) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(r); err != nil {
		t.Fatalf("register: %v", err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// byCollector returns the gauge values of family keyed by the collector label.
func byCollector(mf *dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	if mf == nil {
		return out
	}
	for _, m := range mf.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "collector" {
				out[l.GetValue()] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

func TestRegistryCycle(t *testing.T) {
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r := NewRegistry(RegistryOptions{Logger: logger})
	for name, c := range map[string]Collector{
		"ok":     gaugeCollector("test_ok", 42, nil),
		"nodata": gaugeCollector("test_nodata", 0, fmt.Errorf("%w: no GPU", ErrNoData)),
		"broken": gaugeCollector("test_broken", 0, errors.New("connection refused")),
		"panics": CollectorFunc(func(context.Context, chan<- prometheus.Metric) error { panic("boom") }),
	} {
		if err := r.Register(name, c); err != nil {
			t.Fatal(err)
		}
	}

	mfs := gather(t, r)
	if got := mfs["test_ok"].GetMetric()[0].GetGauge().GetValue(); got != 42 {
		t.Errorf("test_ok = %v, want 42", got)
	}
	success := byCollector(mfs["whyslow_collector_success"])
	want := map[string]float64{"ok": 1, "nodata": 0, "broken": 0, "panics": 0}
	for name, w := range want {
		if got, ok := success[name]; !ok || got != w {
			t.Errorf("success{collector=%q} = %v (present %v), want %v", name, got, ok, w)
		}
	}
	if got := len(byCollector(mfs["whyslow_collector_duration_seconds"])); got != 4 {
		t.Errorf("duration series = %d, want 4", got)
	}

	out := logs.String()
	for _, tc := range []struct {
		name, want string
	}{
		{"no data at debug", `level=DEBUG msg="Collector returned no data" collector=nodata`},
		{"failure at error", `level=ERROR msg="Collector failed" collector=broken`},
		{"panic reported", `collector=panics`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(out, tc.want) {
				t.Errorf("log lacks %q:\n%s", tc.want, out)
			}
		})
	}
}

func TestRegistryResults(t *testing.T) {
	var mu sync.Mutex
	tick := time.Unix(1700000000, 0)
	now := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		tick = tick.Add(250 * time.Millisecond)
		return tick
	}
	r := NewRegistry(RegistryOptions{Now: now, Logger: slog.New(slog.DiscardHandler)})
	if err := r.Register("gpu", gaugeCollector("g", 1, fmt.Errorf("%w: no NVML", ErrNoData))); err != nil {
		t.Fatal(err)
	}
	if err := r.Register("scrape", gaugeCollector("s", 1, nil)); err != nil {
		t.Fatal(err)
	}
	ch := make(chan prometheus.Metric, 16)
	res := r.Cycle(context.Background(), ch)
	close(ch)
	if len(res) != 2 || res[0].Name != "gpu" || res[1].Name != "scrape" {
		t.Fatalf("results = %+v, want gpu then scrape", res)
	}
	if !res[0].NoData() || res[1].Err != nil {
		t.Errorf("results = %+v, want gpu no data and scrape ok", res)
	}
	n := 0
	for range ch {
		n++
	}
	if n != 5 { // one sample from scrape, duration+success for both
		t.Errorf("sent %d metrics, want 5", n)
	}
}

func TestRegistryDuration(t *testing.T) {
	tick := time.Unix(1700000000, 0)
	r := NewRegistry(RegistryOptions{Now: func() time.Time {
		tick = tick.Add(1500 * time.Millisecond)
		return tick
	}})
	if err := r.Register("one", gaugeCollector("x", 1, nil)); err != nil {
		t.Fatal(err)
	}
	mfs := gather(t, r)
	if got := byCollector(mfs["whyslow_collector_duration_seconds"])["one"]; got != 1.5 {
		t.Errorf("duration = %v, want 1.5", got)
	}
}

func TestRegistryTimeout(t *testing.T) {
	r := NewRegistry(RegistryOptions{Timeout: time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	err := r.Register("slow", CollectorFunc(func(ctx context.Context, _ chan<- prometheus.Metric) error {
		<-ctx.Done() // returns once the registry's timeout fires
		return fmt.Errorf("wait: %w", ctx.Err())
	}))
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan prometheus.Metric, 4)
	res := r.Cycle(context.Background(), ch)
	if !errors.Is(res[0].Err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want deadline exceeded", res[0].Err)
	}
}

func TestRegisterErrors(t *testing.T) {
	r := NewRegistry(RegistryOptions{})
	if err := r.Register("a", gaugeCollector("a", 1, nil)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		regName string
		c       Collector
		want    string
	}{
		{"duplicate", "a", gaugeCollector("a", 1, nil), `register collector "a": already registered`},
		{"empty name", "", gaugeCollector("a", 1, nil), "register collector: empty name"},
		{"nil collector", "b", nil, `register collector "b": nil collector`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := r.Register(tc.regName, tc.c)
			if err == nil || err.Error() != tc.want {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
	if got := strings.Join(r.Names(), ","); got != "a" {
		t.Errorf("names = %q, want a", got)
	}
}
