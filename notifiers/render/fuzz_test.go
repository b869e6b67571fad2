package render

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/whyslow/whyslow/verdict"
)

// FuzzText renders arbitrary verdict JSON: it must never panic and text must
// fit the width.
func FuzzText(f *testing.F) {
	for _, name := range []string{"anomaly", "healthy", "insufficient"} {
		if b, err := os.ReadFile("testdata/" + name + ".json.golden"); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"status":"anomaly","causes":[{"title":"` + strings.Repeat("x", 300) + `"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var v verdict.Verdict
		if json.Unmarshal(b, &v) != nil {
			return
		}
		var buf bytes.Buffer
		if err := Text(&buf, &v, Options{Explain: true}); err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(buf.String(), "\n") {
			if utf8.RuneCountInString(l) > DefaultWidth {
				t.Fatalf("line of %d columns: %q", utf8.RuneCountInString(l), l)
			}
		}
		if err := Markdown(&buf, &v, Options{Explain: true}); err != nil {
			t.Fatal(err)
		}
		if err := JSON(&buf, &v, Options{}); err != nil {
			t.Fatal(err)
		}
	})
}
