package notifiers

import "github.com/whyslow/whyslow/internal/redact"

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

// Scrub replaces every occurrence of the non-empty secrets in text, in the
// forms they travel in (escaped, base64), and anything that looks like a
// credential, with "<redacted>" (internal/redact, the one redaction layer);
// use it on text from outside (response bodies) that might echo a secret
// back. Secrets shorter than 4 characters are left alone (they would blank
// out ordinary words).
func Scrub(text string, secrets ...string) string {
	return redact.NewSecrets(secrets...).Scrub(text)
}
