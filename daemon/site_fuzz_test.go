package daemon

import (
	"net"
	"net/http"
	"testing"
)

// FuzzParseProxy: an api.trusted_proxies entry is an IP or a CIDR whose
// network contains its own address, or refused; never a panic.
func FuzzParseProxy(f *testing.F) {
	for _, s := range []string{"10.0.0.7", "10.0.0.0/8", "::1", "fd00::/8", "proxy.local", "10.0.0.300", "", "1.2.3.4/33"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, ok := parseProxy(s)
		if !ok {
			return
		}
		if n == nil || !n.Contains(n.IP) {
			t.Fatalf("%q: network %v does not contain its address", s, n)
		}
		if ip := net.ParseIP(s); ip != nil && !n.Contains(ip) {
			t.Fatalf("%q: the address is not in its own network %v", s, n)
		}
	})
}

// FuzzSiteHeaders: any Host and Origin are judged without a panic, and a
// foreign name is never taken as this daemon's without a token.
func FuzzSiteHeaders(f *testing.F) {
	for _, s := range [][2]string{{"127.0.0.1:9109", "http://127.0.0.1:9109"}, {"evil.example", "null"}, {"[::1]:9109", "http://[::1]:9109"},
		{"LOCALHOST.", ""}, {"a.localhost:1", "https://whyslow.example.com"}, {"", "%zz"}} {
		f.Add(s[0], s[1])
	}
	cfg := testConfig()
	cfg.API.ExternalURL = "https://whyslow.example.com/ops"
	f.Fuzz(func(t *testing.T, host, origin string) {
		ok := hostAllowed(cfg, host)
		name := hostName(host)
		if ok && net.ParseIP(name) == nil && name != "localhost" && !hasSuffix(name, ".localhost") && name != "whyslow.example.com" && name != "127.0.0.1" {
			t.Fatalf("host %q (%q) taken as this daemon's", host, name)
		}
		r := &http.Request{Host: host, Header: http.Header{"Origin": {origin}}}
		originAllowed(cfg, r)
	})
}

func hasSuffix(s, suffix string) bool {
	return len(s) >= len(suffix) && s[len(s)-len(suffix):] == suffix
}
