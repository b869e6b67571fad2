package yamlpos

import "testing"

func TestString(t *testing.T) {
	for _, c := range []struct {
		p    Pos
		want string
	}{
		{Pos{File: "a.yaml"}, "a.yaml"},
		{Pos{File: "a.yaml", Line: 3}, "a.yaml:3"},
		{Pos{File: "a.yaml", Line: 3, Col: 7}, "a.yaml:3:7"},
	} {
		if got := c.p.String(); got != c.want {
			t.Errorf("%#v: got %q, want %q", c.p, got, c.want)
		}
	}
}

func TestErrorLine(t *testing.T) {
	for _, c := range []struct {
		msg  string
		line int
		rest string
		ok   bool
	}{
		{"yaml: line 3: did not find expected key", 3, "did not find expected key", true},
		{"line 12: cannot unmarshal !!str `x` into int", 12, "cannot unmarshal !!str `x` into int", true},
		{"yaml: did not find expected node content", 0, "", false},
	} {
		line, rest, ok := ErrorLine(c.msg)
		if line != c.line || rest != c.rest || ok != c.ok {
			t.Errorf("%q: got %d %q %v, want %d %q %v", c.msg, line, rest, ok, c.line, c.rest, c.ok)
		}
	}
}
