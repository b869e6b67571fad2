package demo

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestRunDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("plays 1.5 simulated hours")
	}
	var out bytes.Buffer
	if err := Run(context.Background(), &out, Options{Seed: 1}); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log(out.String())
	for _, want := range []string{"opened", "resolved"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
}
