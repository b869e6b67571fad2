// Package fleettest builds a fleet in a real Prometheus for integration
// tests and benchmarks: engine-model incidents (testbed/sim), one per
// scope, each series labelled with the scope's namespace, backfilled with
// `promtool tsdb create-blocks-from openmetrics` into one TSDB.
package fleettest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/whyslow/whyslow/testbed/promtest"
	"github.com/whyslow/whyslow/testbed/sim"
	"github.com/whyslow/whyslow/testbed/testgc"
)

// Promtool is where Debian's prometheus package installs promtool.
const Promtool = "/usr/bin/promtool"

// Scope is one deployment of the fleet: an engine-model scenario recorded
// under its own namespace.
type Scope struct {
	Namespace string
	Options   sim.Options
	// StatefulSet, when set, names the pods as a StatefulSet of that
	// name does (NAME-0, NAME-1, …), so two scopes can share pod names
	// as two namespaces' StatefulSets do.
	StatefulSet string
}

// Recorded is a scope after recording: its bundle's truth and incident.
type Recorded struct {
	Scope
	Truth    sim.Truth
	Incident sim.Incident
}

// Fleet is a backfilled fleet.
type Fleet struct {
	// DataDir is the TSDB holding every scope's series.
	DataDir string
	Scopes  []Recorded
}

// SkipUnlessAvailable skips under -short or without prometheus and promtool.
func SkipUnlessAvailable(t testing.TB) {
	t.Helper()
	promtest.SkipUnlessAvailable(t)
	if _, err := os.Stat(Promtool); err != nil {
		t.Skipf("skipping: %s not installed (apt-get install prometheus, or make test-deps)", Promtool)
	}
}

// Build records every scope and backfills them into one TSDB under dir.
func Build(ctx context.Context, dir string, scopes []Scope) (*Fleet, error) {
	f := &Fleet{DataDir: filepath.Join(dir, "data")}
	for i, sc := range scopes {
		b, err := sim.Record(ctx, sc.Options)
		if err != nil {
			return nil, fmt.Errorf("scope %s: %w", sc.Namespace, err)
		}
		om := filepath.Join(dir, fmt.Sprintf("scope-%d.om", i))
		metrics := b.Metrics
		if sc.StatefulSet != "" {
			metrics = podOrdinal.ReplaceAll(metrics, []byte(`pod="`+sc.StatefulSet+`-$1"`))
		}
		if err := os.WriteFile(om, WithLabel(metrics, "namespace", sc.Namespace), 0o644); err != nil {
			return nil, err
		}
		if err := Backfill(ctx, om, f.DataDir); err != nil {
			return nil, fmt.Errorf("scope %s: %w", sc.Namespace, err)
		}
		_ = os.Remove(om)
		f.Scopes = append(f.Scopes, Recorded{Scope: sc, Truth: b.Truth, Incident: b.Incident})
	}
	return f, nil
}

// Backfill writes the OpenMetrics file om into the TSDB at dataDir with
// promtool (new blocks next to those already there).
func Backfill(ctx context.Context, om, dataDir string) error {
	cmd := exec.CommandContext(ctx, Promtool, "tsdb", "create-blocks-from", "openmetrics", om, dataDir)
	cmd.Env = testgc.ChildEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("promtool: %v\n%s", err, out)
	}
	return nil
}

// podOrdinal matches a pod label whose value ends in a replica ordinal.
var podOrdinal = regexp.MustCompile(`pod="[^"]*-([0-9]+)"`)

// WithLabel adds name="value" to every sample line of OpenMetrics text.
// It relies on what the engine model writes: no spaces or braces inside
// label values.
func WithLabel(om []byte, name, value string) []byte {
	var out bytes.Buffer
	out.Grow(len(om) + len(om)/8)
	lbl := name + `="` + value + `"`
	for line := range bytes.Lines(om) {
		if len(line) == 0 || line[0] == '#' {
			out.Write(line)
			continue
		}
		end := bytes.IndexAny(line, "{ ")
		switch {
		case end < 0:
			out.Write(line)
		case line[end] == '{':
			out.Write(line[:end+1])
			out.WriteString(lbl)
			if line[end+1] != '}' {
				out.WriteByte(',')
			}
			out.Write(line[end+1:])
		default:
			out.Write(line[:end])
			out.WriteString("{" + lbl + "}")
			out.Write(line[end:])
		}
	}
	return out.Bytes()
}
