package notifiers

import (
	"sort"
	"strings"
)

// Secret is a configuration string that must never be shown: it prints,
// and marshals to YAML and JSON, as "<secret>". Use string(s) to read it.
type Secret string

const redacted = "<secret>"

// String implements fmt.Stringer with the redacted form.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return redacted
}

// GoString redacts under %#v too.
func (s Secret) GoString() string { return s.String() }

// MarshalYAML redacts the secret when a configuration is written back.
func (s Secret) MarshalYAML() (any, error) { return s.String(), nil }

// MarshalJSON redacts the secret when a configuration is shown as JSON.
func (s Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + s.String() + `"`), nil }

// Scrub replaces every occurrence of the non-empty secrets in text with
// "<secret>"; use it on text from outside (response bodies) that might echo
// a secret back. Secrets shorter than 4 characters are left alone (they
// would blank out ordinary words); longer ones are replaced first.
func Scrub(text string, secrets ...string) string {
	sorted := append([]string(nil), secrets...)
	sort.Slice(sorted, func(i, j int) bool { return len(sorted[i]) > len(sorted[j]) })
	for _, s := range sorted {
		if len(s) >= 4 {
			text = strings.ReplaceAll(text, s, redacted)
		}
	}
	return text
}
