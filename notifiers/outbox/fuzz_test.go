package outbox

import (
	"encoding/json"
	"testing"
)

// FuzzDecodeRecord checks that no pending-file content makes the outbox
// panic, and that what decodes is a valid notification.
func FuzzDecodeRecord(f *testing.F) {
	good, _ := json.Marshal(record{Version: 1, Seq: 1, Notification: notification("hook", 1, 1, "open")})
	f.Add(good)
	f.Add([]byte(`{"version":1,"seq":2,"notification":{"id":"x"}}`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, err := decodeRecord(b)
		if err != nil {
			return
		}
		if rec.Version != entryVersion || rec.Notification.Validate() != nil {
			t.Fatalf("decodeRecord accepted an invalid record: %s", b)
		}
	})
}
