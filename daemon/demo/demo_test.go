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
	// Each status line comes before the notification it introduces.
	text := out.String()
	for _, p := range []struct{ status, body string }{
		{"opened (", "== whyslow open: incident"},
		{"incident resolved:", "== whyslow resolve: incident"},
	} {
		si, bi := strings.Index(text, p.status), strings.Index(text, p.body)
		switch {
		case si < 0 || bi < 0:
			t.Errorf("demo output lacks %q or %q", p.status, p.body)
		case bi < si:
			t.Errorf("%q printed before its status line %q", p.body, p.status)
		}
	}
}

func TestHeldWriter(t *testing.T) {
	var h heldWriter
	var out bytes.Buffer
	if _, err := h.Write([]byte("body\n")); err != nil {
		t.Fatal(err)
	}
	out.WriteString("status\n")
	if err := h.flushTo(&out); err != nil {
		t.Fatal(err)
	}
	if err := h.flushTo(&out); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "status\nbody\n" {
		t.Errorf("output %q", got)
	}
}
