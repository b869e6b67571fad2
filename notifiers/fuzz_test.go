package notifiers

import (
	"testing"
	"time"
)

// FuzzParseRetryAfter checks that any header value yields a non-negative,
// bounded wait and never panics.
func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"", "0", "30", "1.5", "-4", "1e300", "NaN", "Wed, 21 Oct 2015 07:28:00 GMT", "soon"} {
		f.Add(s)
	}
	now := time.Unix(1700000000, 0)
	f.Fuzz(func(t *testing.T, v string) {
		d := ParseRetryAfter(v, now)
		if d < 0 {
			t.Fatalf("ParseRetryAfter(%q) = %v", v, d)
		}
	})
}
