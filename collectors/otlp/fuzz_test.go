package otlp

import (
	"net/http"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/whyslow/whyslow/span"
)

type discard struct{}

func (discard) Append([]span.Span) {}

func fuzzHandler(t testing.TB) http.Handler {
	r, err := New(Options{Sink: discard{}, MaxRequestBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	return r.Handler()
}

// FuzzHTTPProtobuf feeds arbitrary bodies to the OTLP/HTTP protobuf path: it
// must answer 200 or 400, never panic or fail otherwise.
func FuzzHTTPProtobuf(f *testing.F) {
	b, _ := proto.Marshal(testRequest(1, 2))
	f.Add(b)
	f.Add(protoWithIDs([]byte{1}, []byte{2}))
	h := fuzzHandler(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		w := post(t, h, contentProtobuf, "", body)
		if w.Code != http.StatusOK && w.Code != http.StatusBadRequest && w.Code != http.StatusRequestEntityTooLarge {
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
	})
}

// FuzzHTTPJSON feeds arbitrary bodies to the OTLP/JSON path; whatever decodes
// must re-encode and decode again.
func FuzzHTTPJSON(f *testing.F) {
	b, _ := EncodeJSON(testRequest(1, 2))
	f.Add(b)
	f.Add([]byte(jsonBody(jsonTraceID, "eee19b7ec3c1b174", "eee19b7ec3c1b173")))
	h := fuzzHandler(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		w := post(t, h, contentJSON, "", body)
		if w.Code != http.StatusOK && w.Code != http.StatusBadRequest && w.Code != http.StatusRequestEntityTooLarge {
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
		req, err := DecodeJSON(body, IDHexOrBase64)
		if err != nil {
			return
		}
		again, err := EncodeJSON(req)
		if err != nil {
			t.Fatalf("encode decoded request: %v", err)
		}
		if _, err := DecodeJSON(again, IDHex); err != nil {
			t.Fatalf("decode re-encoded request: %v\n%s", err, again)
		}
	})
}
