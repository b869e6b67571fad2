package rulesets

import (
	"bytes"
	"testing"
)

// Shipped maps read their files from the embedded FS when asked rather
// than hold a heap copy of each (~70 KB a sidecar kept for its life, issue
// 27); what Files yields is still each file's bytes.
func TestShippedMapsHoldNoFileCopy(t *testing.T) {
	m := Shipped()
	for _, em := range m.list {
		if em.file.Data != nil {
			t.Errorf("shipped map %s holds %d bytes of its file", em.engine, len(em.file.Data))
		}
	}
	n := 0
	for engine, data := range m.Files() {
		want, err := FS.ReadFile(engine + ".yaml")
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(data, want) {
			t.Errorf("Files yields %d bytes for %s, want its file's %d", len(data), engine, len(want))
		}
		n++
	}
	if n != len(Engines) {
		t.Errorf("Files yielded %d maps, want %d", n, len(Engines))
	}
}
