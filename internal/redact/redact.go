// Package redact is whyslow's one redaction layer: what a log line, an
// error or a response body may show of a URL, a header or a configured
// secret. Every path that prints something that came from configuration or
// from a remote server goes through it:
//
//   - URL hides the password and every query value of a URL;
//   - Header hides the value of credential headers;
//   - Text hides credentials that look like credentials (an Authorization
//     header, "Bearer …", "Basic …", a URL's user:password, token=…) in free
//     text such as an echoed response body;
//   - Secrets holds the secret values of a configuration and scrubs them,
//     and the forms they travel in (base64 for basic auth, URL-escaped),
//     from any text; its Handler does that to every slog record.
package redact

import (
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync"
)

// Mask replaces what is hidden.
const Mask = "<redacted>"

// placeholder stands for Mask while a URL is re-encoded.
const placeholder = "WHYSLOWREDACTEDVALUE"

// MinSecretLen is the shortest configured value Secrets scrubs: shorter ones
// would blank out ordinary words (and are no secret worth the name).
const MinSecretLen = 4

// URL returns raw with the user's password replaced by "xxxxx" (as
// url.URL.Redacted does) and every query value by Mask. The scheme, host,
// path and query keys stay, so the URL is still recognisable. A URL that does not parse is masked whole, except for a
// host-looking part after the last '@'.
func URL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		// Keep what helps the reader fix it (host:port), hide what may be a
		// credential: user info and the query.
		out := raw
		if i := strings.LastIndexByte(raw, '@'); i >= 0 {
			out = Mask + raw[i:]
		}
		if q := strings.IndexAny(out, "?#"); q >= 0 {
			out = out[:q+1] + Mask
		}
		return out
	}
	return redactParsed(u)
}

func redactParsed(u *url.URL) string {
	c := *u
	if c.User != nil {
		if _, ok := c.User.Password(); ok {
			c.User = url.UserPassword(c.User.Username(), "xxxxx")
		}
	}
	if c.RawQuery != "" {
		c.RawQuery = maskQuery(c.RawQuery)
	}
	if c.Fragment != "" {
		c.Fragment, c.RawFragment = "", ""
	}
	s := c.String()
	// url.URL would escape the mask's angle brackets: put it in after.
	return strings.ReplaceAll(s, placeholder, Mask)
}

// maskQuery keeps the keys of a raw query and masks every value.
func maskQuery(q string) string {
	parts := strings.Split(q, "&")
	for i, p := range parts {
		k, _, hasV := strings.Cut(p, "=")
		if hasV {
			parts[i] = k + "=" + placeholder
		}
	}
	return strings.Join(parts, "&")
}

// credentialHeaders are headers whose value is a credential.
var credentialHeaders = map[string]bool{
	"Authorization": true, "Proxy-Authorization": true, "Cookie": true, "Set-Cookie": true,
	"X-Api-Key": true, "X-Auth-Token": true, "X-Slack-Signature": true, "X-Whyslow-Signature": true,
}

// Header returns value, or Mask when name is a credential header
// (Authorization, Cookie, X-Api-Key, signatures...). For Authorization the
// scheme stays visible ("Bearer <redacted>").
func Header(name, value string) string {
	canon := http.CanonicalHeaderKey(name)
	if !credentialHeaders[canon] && !strings.Contains(strings.ToLower(canon), "token") && !strings.Contains(strings.ToLower(canon), "secret") {
		return value
	}
	if canon == "Authorization" || canon == "Proxy-Authorization" {
		if scheme, _, ok := strings.Cut(strings.TrimSpace(value), " "); ok {
			return scheme + " " + Mask
		}
	}
	return Mask
}

// Headers returns a copy of h with credential header values masked.
func Headers(h http.Header) http.Header {
	out := make(http.Header, len(h))
	for k, vs := range h {
		for _, v := range vs {
			out.Add(k, Header(k, v))
		}
	}
	return out
}

var (
	// An Authorization-style header echoed back in a body: its whole value.
	authHeaderRE = regexp.MustCompile(`(?i)((?:proxy-)?authorization|x-api-key|x-auth-token|cookie)(["']?\s*[:=]\s*["']?)([^"'\r\n,}]+)`)
	// "Bearer xyz" / "Basic eHl6" anywhere.
	schemeRE = regexp.MustCompile(`(?i)\b(bearer|basic)(\s+)([A-Za-z0-9._~+/=-]{8,})`)
	// A word of lower-case letters after "basic" is prose, not base64.
	proseRE = regexp.MustCompile(`^[a-z]+$`)
	// user:password@ in a URL.
	userinfoRE = regexp.MustCompile(`(://[^/\s:@]+):[^/\s@]+@`)
	// Query parameters that name a credential.
	queryRE = regexp.MustCompile(`(?i)([?&](?:access_token|token|api_key|apikey|key|password|pass|secret|sig|signature|auth)=)[^&\s"']+`)
)

// Text hides credentials that look like credentials in free text: the value
// of an echoed Authorization (or Cookie, X-Api-Key) header, "Bearer …" and
// "Basic …" tokens, a URL's password and credential-named query values. It
// cannot know an arbitrary secret; Secrets.Scrub adds the configured ones.
func Text(s string) string {
	if s == "" {
		return s
	}
	s = authHeaderRE.ReplaceAllString(s, "${1}${2}"+Mask)
	s = schemeRE.ReplaceAllStringFunc(s, func(m string) string {
		sub := schemeRE.FindStringSubmatch(m)
		if strings.EqualFold(sub[1], "basic") && proseRE.MatchString(sub[3]) {
			return m
		}
		return sub[1] + sub[2] + Mask
	})
	s = userinfoRE.ReplaceAllStringFunc(s, func(m string) string {
		if strings.HasSuffix(m, ":xxxxx@") { // already redacted by URL
			return m
		}
		return userinfoRE.ReplaceAllString(m, "${1}:"+Mask+"@")
	})
	s = queryRE.ReplaceAllString(s, "${1}"+Mask)
	return s
}

// Secrets is the set of secret values of a configuration. The zero value
// is empty and ready; it is safe for concurrent use, and Replace swaps the
// whole set (on reload) while loggers keep using the same *Secrets.
type Secrets struct {
	mu     sync.RWMutex
	values []string // longest first
}

// NewSecrets returns a set holding values (see Add).
func NewSecrets(values ...string) *Secrets {
	s := &Secrets{}
	s.Add(values...)
	return s
}

// Add adds secret values and the forms they are sent in: URL-escaped,
// base64 and JSON-escaped. Values shorter than MinSecretLen are ignored.
func (s *Secrets) Add(values ...string) {
	var add []string
	for _, v := range values {
		add = append(add, forms(v)...)
	}
	s.mu.Lock()
	s.values = merge(s.values, add)
	s.mu.Unlock()
}

// AddBasic adds HTTP basic credentials: the password and the base64 of
// "user:password" that an Authorization header carries.
func (s *Secrets) AddBasic(user, password string) {
	if password == "" {
		return
	}
	s.Add(password)
	s.Add(base64.StdEncoding.EncodeToString([]byte(user + ":" + password)))
}

// AddURL adds what may be secret in a URL: its password (and the basic
// credentials it makes) and its query values. With whole set, the URL as a
// whole and its path are secret too (webhook URLs that are the credential).
func (s *Secrets) AddURL(raw string, whole bool) {
	u, err := url.Parse(raw)
	if err != nil {
		s.Add(raw)
		return
	}
	if u.User != nil {
		if pw, ok := u.User.Password(); ok {
			s.AddBasic(u.User.Username(), pw)
		}
	}
	for _, vs := range u.Query() {
		s.Add(vs...)
	}
	if whole {
		s.Add(raw)
		if len(u.Path) > 1 {
			s.Add(u.Path)
			for _, seg := range strings.Split(u.Path, "/") {
				if len(seg) >= 8 {
					s.Add(seg)
				}
			}
		}
	}
}

// AddHeader adds a header value that is a credential: the whole value and,
// for "Scheme token" values, the token.
func (s *Secrets) AddHeader(value string) {
	s.Add(value)
	if _, tok, ok := strings.Cut(strings.TrimSpace(value), " "); ok {
		s.Add(strings.TrimSpace(tok))
	}
}

// Merge adds other's values (already in every form) to s.
func (s *Secrets) Merge(other *Secrets) {
	vals := other.Values()
	s.mu.Lock()
	s.values = merge(s.values, vals)
	s.mu.Unlock()
}

// Replace swaps the whole set for other's values.
func (s *Secrets) Replace(other *Secrets) {
	vals := other.Values()
	s.mu.Lock()
	s.values = vals
	s.mu.Unlock()
}

// Values returns the values scrubbed (every form), longest first.
func (s *Secrets) Values() []string {
	if s == nil {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return append([]string(nil), s.values...)
}

// Scrub replaces every secret value (in any of its forms) with Mask and then
// applies Text. A nil *Secrets only applies Text.
func (s *Secrets) Scrub(text string) string {
	if text == "" {
		return text
	}
	if s != nil {
		s.mu.RLock()
		for _, v := range s.values {
			if strings.Contains(text, v) {
				text = strings.ReplaceAll(text, v, Mask)
			}
		}
		s.mu.RUnlock()
	}
	return Text(text)
}

// Error returns err with its message scrubbed. errors.Is still sees err's
// chain (sentinels such as context.Canceled keep working), errors.As does
// not: the wrapped errors hold the unscrubbed text. nil stays nil.
func (s *Secrets) Error(err error) error {
	if err == nil {
		return nil
	}
	msg := s.Scrub(err.Error())
	if msg == err.Error() {
		return err
	}
	return &scrubbed{msg: msg, err: err}
}

type scrubbed struct {
	msg string
	err error
}

func (e *scrubbed) Error() string { return e.msg }

// Is matches what err's chain matches, without exposing it to errors.As.
func (e *scrubbed) Is(target error) bool { return errors.Is(e.err, target) }

// Is reports whether err is a scrubbed error (for tests).
func Is(err error) bool {
	var s *scrubbed
	return errors.As(err, &s)
}

// forms returns v and the encodings it is commonly sent or echoed in.
func forms(v string) []string {
	if len(v) < MinSecretLen {
		return nil
	}
	out := []string{v}
	if e := url.QueryEscape(v); e != v {
		out = append(out, e)
	}
	if e := url.PathEscape(v); e != v {
		out = append(out, e)
	}
	if e := jsonEscape(v); e != v {
		out = append(out, e)
	}
	out = append(out, base64.StdEncoding.EncodeToString([]byte(v)))
	return out
}

// jsonEscape escapes v as inside a JSON string (without quotes).
func jsonEscape(v string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "/", `\/`, "<", `\u003c`, ">", `\u003e`, "&", `\u0026`)
	return r.Replace(v)
}

// merge adds values to a set kept longest first, so that a secret that
// contains another is replaced whole.
func merge(cur, add []string) []string {
	seen := make(map[string]bool, len(cur)+len(add))
	out := make([]string, 0, len(cur)+len(add))
	for _, v := range append(cur, add...) {
		if len(v) < MinSecretLen || seen[v] {
			continue
		}
		seen[v] = true
		out = append(out, v)
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// SecretURL returns only the scheme and host of a URL that is itself a
// credential (a webhook URL whose path or query is the token):
// "https://hooks.example.com/<redacted>". An unparsable URL is masked whole.
func SecretURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return Mask
	}
	s := u.Scheme + "://" + u.Host
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		s += "/" + Mask
	}
	return s
}
