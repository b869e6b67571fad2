package render

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/whyslow/whyslow/triage"
)

func FuzzZZ(f *testing.F) {
	f.Add([]byte(`{"status":"anomaly","causes":[{"title":"x y"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var v triage.Verdict
		if json.Unmarshal(b, &v) != nil {
			return
		}
		done := make(chan struct{})
		go func() {
			var buf bytes.Buffer
			Text(&buf, &v, Options{Explain: true})
			Markdown(&buf, &v, Options{Explain: true})
			JSON(&buf, &v, Options{})
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			t.Fatalf("hang: %q", b)
		}
	})
}
