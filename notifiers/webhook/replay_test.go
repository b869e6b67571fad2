package webhook

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/whyslow/whyslow/notifiers"
	"github.com/whyslow/whyslow/notifiers/notifytest"
	"github.com/whyslow/whyslow/testbed/secrettest"
)

// TestSignatureCoversTimestamp is finding 12 of issue 14 (its last part):
// the HMAC covered only the body, so a captured delivery verified forever.
// The signature now covers a timestamp the receiver checks.
func TestSignatureCoversTimestamp(t *testing.T) {
	const secret = "hmac-secret-value"
	var body []byte
	var hdr http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ = io.ReadAll(r.Body)
		hdr = r.Header.Clone()
	}))
	defer srv.Close()
	clock := notifytest.NewFakeClock(notifytest.T0)
	w, err := New(Config{URL: notifiers.Secret(srv.URL), HMACSecret: secret}, Options{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Notify(context.Background(), notification()); err != nil {
		t.Fatal(err)
	}
	ts, sig := hdr.Get(TimestampHeader), hdr.Get(SignatureHeader)
	if ts != strconv.FormatInt(notifytest.T0.Unix(), 10) {
		t.Fatalf("%s = %q, want the attempt's time", TimestampHeader, ts)
	}
	now := notifytest.T0.Add(time.Minute)
	if err := Verify([]byte(secret), body, ts, sig, now, 0); err != nil {
		t.Fatalf("fresh delivery refused: %v", err)
	}
	// The hex may be spelled in either case: it is compared as bytes.
	if err := Verify([]byte(secret), body, ts, "V1="+strings.ToUpper(strings.TrimPrefix(sig, "v1=")), now, 0); err != nil {
		t.Errorf("upper-case signature refused: %v", err)
	}
	// The same capture replayed later is refused...
	if err := Verify([]byte(secret), body, ts, sig, notifytest.T0.Add(6*time.Minute), 0); !errors.Is(err, ErrStale) {
		t.Errorf("replay after 6 minutes: %v", err)
	}
	// ...and so is a fresh timestamp on the old signature.
	fresh := strconv.FormatInt(notifytest.T0.Add(6*time.Minute).Unix(), 10)
	if err := Verify([]byte(secret), body, fresh, sig, notifytest.T0.Add(6*time.Minute), 0); !errors.Is(err, ErrBadSignature) {
		t.Errorf("re-stamped replay: %v", err)
	}
	if err := Verify([]byte(secret), append(body, ' '), ts, sig, now, 0); !errors.Is(err, ErrBadSignature) {
		t.Errorf("changed body: %v", err)
	}
	for _, bad := range []string{"", "sha256=" + strings.TrimPrefix(sig, "v1="), "v1=zz"} {
		if err := Verify([]byte(secret), body, ts, bad, now, 0); !errors.Is(err, ErrBadSignature) {
			t.Errorf("signature %q: %v", bad, err)
		}
	}
}

// TestEchoedBasicAuthIsScrubbed is finding 6 of issue 14 (the webhook
// part): a receiver that echoes the request's headers in its error page put
// the Basic credentials of the URL (base64) into the error the retry stage
// logs.
func TestEchoedBasicAuthIsScrubbed(t *testing.T) {
	pw, hk, hm := secrettest.Secret("pw"), secrettest.Secret("hdr"), secrettest.Secret("hmac")
	sc := secrettest.New(t, "bob:"+pw, hk, hm)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		for k, v := range r.Header {
			io.WriteString(w, k+": "+strings.Join(v, ",")+"\n")
		}
	}))
	defer srv.Close()
	u := strings.Replace(srv.URL, "http://", "http://bob:"+pw+"@", 1) + "/hooks/T0/B0"
	w, err := New(Config{URL: notifiers.Secret(u), HMACSecret: notifiers.Secret(hm),
		Headers: map[string]notifiers.Secret{"X-Api-Key": notifiers.Secret(hk)}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.Notify(context.Background(), notification())
	if err == nil || !strings.Contains(err.Error(), "400") {
		t.Fatalf("err = %v", err)
	}
	sc.Error("notify", err)
}
