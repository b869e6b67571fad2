package demo

import (
	"bytes"
	"testing"
)

// Play's whole run (status lines before the notifications they introduce,
// open and resolve) is checked once, through the command that uses it:
// TestDemoLive in cmd/whyslow.

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
